#!/usr/bin/env python3
"""Where a run with extra reference views differs from the baseline, query by query (grouped view of
bench/identify/score.py: pixel shares and siblings).

  python3 lab/identify/views_compare.py SETS BASE.csv RUN.csv [RUN.csv ...]

The CSVs as views_map.py writes them (keys = reference file names). Prints, per run against BASE: FAR /
FRR at T = 3..8 and 13 (clean impostors, grouped); how the rank-1 score moved for genuine queries right
at rank 1 in both, for those whose rank-1 answer changed, and for the clean and the content-sharing
impostors; the five best clean impostors; the genuine queries that changed between right and wrong."""
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "identify"))
import score  # noqa: E402  (bench/identify/score.py: the benchmark's own reading of a run)


def setup(sets):
    manifest = {score.qkey(r["query"]): r for r in score.read_csv(os.path.join(sets, "manifest.csv"))}
    item_of = {r["file"]: r["item"] for r in score.read_csv(os.path.join(sets, "groups.csv"))}
    sharing = {r["texture"] for r in score.sharing_pairs(os.path.join(sets, "shares.csv"), 14)}
    for m in manifest.values():
        if m["set"] == "impostor-texture" and m["source"] in sharing:
            m["set"] = "impostor-shared"
    view = score.View(score.content_links(os.path.join(sets, "siblings.csv"), item_of, 14))
    return manifest, item_of, view


def moves(pairs):
    up = sum(b > a for a, b in pairs)
    down = sum(b < a for a, b in pairs)
    return "%d up, %d down, %d same" % (up, down, len(pairs) - up - down)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    sets, base_path, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
    manifest, item_of, view = setup(sets)

    def ev(path):
        run, problems = score.load_run(path, manifest)
        for p in problems:
            print("problem:", p)
        return score.evaluate(run, manifest, item_of)
    base = ev(base_path)
    for path in runs:
        e = ev(path)
        print("## %s against %s" % (path, base_path))
        print("| T | base FAR / FRR | run FAR / FRR |")
        print("|---|---|---|")
        for t in (3, 4, 5, 6, 7, 8, 13):
            b = score.far_frr(base, t, view)
            r = score.far_frr(e, t, view)
            print("| %d | %.1f%% / %.1f%% | %.1f%% / %.1f%% |" % (t, 100 * b[0], 100 * b[1], 100 * r[0], 100 * r[1]))
        gen_same = [(base[q][2], e[q][2]) for q in manifest
                    if base[q][0] == "genuine" and view.top1(base[q]) and view.top1(e[q])]
        print("genuine right at rank 1 in both (%d): rank-1 inliers %s" % (len(gen_same), moves(gen_same)))
        weak = [(base[q][2], e[q][2]) for q in manifest
                if base[q][0] == "genuine" and view.top1(base[q]) and view.top1(e[q]) and base[q][2] < 13]
        print("  of them below 13 in the baseline (%d): %s; %s" % (
            len(weak), moves(weak), ", ".join("%d->%d" % p for p in sorted(weak) if p[0] != p[1])))
        for s in ("impostor-photo", "impostor-texture", "impostor-shared"):
            pairs = [(base[q][2], e[q][2]) for q in manifest if base[q][0] == s]
            print("%s (%d): rank-1 score %s" % (s, len(pairs), moves(pairs)))
        clean = sorted(((e[q][2], q, e[q][3], base[q][2]) for q in manifest
                        if e[q][0] in ("impostor-photo", "impostor-texture")), reverse=True)[:5]
        print("best clean impostors: " + "; ".join("%s %g (base %g) on %s" % (q, s, b, i) for s, q, i, b in clean))
        flips = collections.defaultdict(list)
        for q, m in manifest.items():
            if m["set"] != "genuine":
                continue
            a, b = view.top1(base[q]), view.top1(e[q])
            if a != b:
                flips["right -> wrong" if a else "wrong -> right"].append(
                    "%s (%s; %g->%g)" % (q, m["kinds"], base[q][2], e[q][2]))
        for k, v in sorted(flips.items()):
            print("%s (%d): %s" % (k, len(v), "; ".join(v)))
        print()


if __name__ == "__main__":
    main()
