#!/usr/bin/env python3
"""Item-level distinctness as an acceptance rule, on a scored run's CSV
(docs/lab/identify.md, "2026-11-29: item-level distinctness").

Accept rank 1 only when its inliers reach T and exceed the runner-up's by D
(D = 0: the threshold alone, the library's rule), in two variants of "the
runner-up":
  groups   the runner-up of another content group (the benchmark's pixel
           grouping: what a rule would need to know about siblings);
  library  the runner-up's verified inliers whatever its item (what the
           library knows today);
  overlap  (with --overlap DUMP, lab/identify/overlap.py's dump of the same
           run) the most independent inliers of any verified runner-up:
           those whose query point lies farther than --radius pixels from
           every inlier query point of rank 1 (a sibling of rank 1's content
           matches on the same query points and counts about 0; an
           impostor's second chance draw lands elsewhere). Needs only what
           the library knows;
  geometry (with --overlap, a dump with reference points) a runner-up
           whose similarity from the query, composed with the inverse of
           rank 1's, is near the identity (|log scale| < --geo-scale,
           |rotation| < --geo-angle degrees: a pixel-aligned edit or crop
           of rank 1's photograph) counts 0, any other its inliers.
  refself  (with --refself CSV: `patina identify COLL refs -k 10 --threshold 0
           --format csv`, every registered image identified against the
           collection) a runner-up whose reference and rank 1's are linked
           by that run -- one's image verified against the other's rows
           with at least --refself-min inliers, either way -- counts 0, any
           other its inliers: siblings found by the library among the
           references themselves (by file, as the library keys them; not
           from the benchmark's items or groups), not from the query.
For each: the best (T, D) at FAR <= 1% on the whole set, the FAR / FRR grid
for T = 3..5, and item-disjoint 2-fold cross-validation (--splits random
splits of the genuine items and of the impostors; (T, D) chosen on one half
at FAR <= 1% with the smallest FRR, counted on the other).

With --decided CSV --decided-threshold T (a run of the library with its own
decision: `patina identify ... --threshold T --distinct D --format csv`):
that run's FAR / FRR (accepted = its decision is not unknown; a genuine
query is right when accepted, rank 1 of its group and not ambiguous with
another group at T), and the queries on which it and the refself emulation
at (T, --decided-distinct D) differ.

    distinct.py --sets SETS --run CSV [--ambiguity 0.5] [--splits 20] [--overlap DUMP [--radius R]
                [--geo-scale L --geo-angle A]] [--refself CSV [--refself-min S]]
                [--decided CSV --decided-threshold T --decided-distinct D]
"""
import argparse
import collections
import importlib.util
import json
import math
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("score", os.path.join(HERE, "..", "..", "bench", "identify", "score.py"))
score = importlib.util.module_from_spec(spec)
spec.loader.exec_module(score)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--ambiguity", type=float, default=0.5)
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("--overlap")
    ap.add_argument("--radius", type=float, default=2.0)
    ap.add_argument("--geo-scale", type=float, default=0.2)
    ap.add_argument("--geo-angle", type=float, default=10.0)
    ap.add_argument("--refself")
    ap.add_argument("--refself-min", type=float, default=10.0)
    ap.add_argument("--refself-closure", action="store_true",
                    help="link references through chains of links (union-find), not only pairs")
    ap.add_argument("--decided")
    ap.add_argument("--decided-threshold", type=float, default=4)
    ap.add_argument("--decided-distinct", type=float, default=3)
    a = ap.parse_args()
    indep, geo = {}, {}

    def similarity(h):
        """(a, b) of the least-squares r = [a -b; b a] q + t over h's inliers, as a complex number."""
        q, r = h["q"], h.get("r") or []
        if len(q) < 2 or len(r) != len(q):
            return None
        qx, qy = sum(p[0] for p in q) / len(q), sum(p[1] for p in q) / len(q)
        rx, ry = sum(p[0] for p in r) / len(r), sum(p[1] for p in r) / len(r)
        sa = sb = n = 0.0
        for (x, y), (u, v) in zip(q, r):
            x, y, u, v = x - qx, y - qy, u - rx, v - ry
            sa += x * u + y * v
            sb += x * v - y * u
            n += x * x + y * y
        return complex(sa / n, sb / n) if n > 0 else None
    if a.overlap:
        r2 = a.radius * a.radius
        with open(a.overlap) as f:
            for line in f:
                d = json.loads(line)
                hits = d["hits"]
                p1 = hits[0]["q"] if hits else []
                most = 0
                for h in hits[1:]:
                    if h["verified"]:
                        most = max(most, sum(1 for x, y in h["q"]
                                             if all((x - u) ** 2 + (y - v) ** 2 > r2 for u, v in p1)))
                indep[score.qkey(d["query"])] = most
                z1 = similarity(hits[0]) if hits and hits[0]["verified"] else None
                most = 0
                for h in hits[1:]:
                    if not h["verified"] or not h["inliers"]:
                        continue
                    z2 = similarity(h)
                    z = z2 / z1 if z1 and z2 else 0
                    sibling = abs(z) > 0 and abs(math.log(abs(z))) < a.geo_scale and \
                        abs(math.degrees(math.atan2(z.imag, z.real))) < a.geo_angle
                    most = max(most, 0 if sibling else h["inliers"])
                geo[score.qkey(d["query"])] = most
    manifest, item_of = score.load_sets(a.sets)
    linked = set()
    if a.refself:
        for r in score.read_csv(a.refself):
            i, j = os.path.basename(r["query"]), os.path.basename(r["key"])
            if i != j and int(r["rank"]) >= 1 and float(r.get("inliers") or 0) >= a.refself_min:
                linked.add((i, j))
                linked.add((j, i))
        if a.refself_closure:
            parent = {}

            def find(x):
                while parent.get(x, x) != x:
                    x = parent[x]
                return x
            for i, j in linked:
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
            root = {x: find(x) for x in parent}
            linked = {(i, j) for i in root for j in root if i != j and root[i] == root[j]}
    run, _ = score.load_run(a.run, manifest)
    view = score.View(score.content_links(os.path.join(a.sets, "siblings.csv"), item_of, 14), a.ambiguity)
    ev = score.evaluate(run, manifest, item_of)
    gen = [(q, v) for q, v in ev.items() if v[0] == "genuine"]
    imp = [(q, v) for q, v in ev.items() if v[0] not in ("genuine", "impostor-shared")]

    def runner_up(q, v, variant):
        rows = run[q]
        if len(rows) < 2:
            return 0.0
        if variant == "groups":
            return 0.0 if view.same(v[3], v[4]) else rows[1][2]
        if variant == "overlap":
            return indep.get(q, 0)
        if variant == "geometry":
            return geo.get(q, 0)
        if variant == "refself":
            return 0.0 if (rows[0][1], rows[1][1]) in linked else rows[1][3]
        return rows[1][3]  # verified inliers (0 when not verified)

    def rates(T, D, G, I, variant):
        def accepted(q, v):
            ans = view.answer(v, T)
            if ans != "none" and D and v[2] - runner_up(q, v, variant) < D:
                return "none"
            return ans
        far = sum(accepted(q, v) != "none" for q, v in I) / max(1, len(I))
        ok = sum(accepted(q, v) == "item" and view.top1(v) for q, v in G)
        return far, 1 - ok / max(1, len(G))

    grid = [(T, D) for T in range(2, 12) for D in range(0, 6)]

    if a.decided:
        decided = {}
        for r in score.read_csv(a.decided):
            if int(r["rank"]) <= 1:
                decided[score.qkey(r["query"])] = r["decision"]
        T = a.decided_threshold
        lib_acc = {q: decided.get(q, "unknown") != "unknown" for q, _ in gen + imp}
        far = sum(lib_acc[q] for q, _ in imp) / max(1, len(imp))
        ok = sum(lib_acc[q] and view.answer(v, T) == "item" and view.top1(v) for q, v in gen)
        print("decided run %s: T = %g: FAR %.2f%% (%d of %d impostors), FRR %.2f%% (%d of %d genuine right)" % (
            a.decided, T, 100 * far, sum(lib_acc[q] for q, _ in imp), len(imp), 100 * (1 - ok / max(1, len(gen))),
            ok, len(gen)))
        if a.refself:
            D = a.decided_distinct
            for q, v in gen + imp:
                ans = view.answer(v, T)
                emu = ans != "none" and not (D and v[2] - runner_up(q, v, "refself") < D)
                if emu != lib_acc[q]:
                    print("  differs from the refself emulation (T %g, D %g): %s (%s): library %s, emulation %s" % (
                        T, D, q, v[0], "accepts" if lib_acc[q] else "rejects", "accepts" if emu else "rejects"))

    def best(G, I, variant, ds=True):
        c = [(rates(T, D, G, I, variant), T, D) for T, D in grid if ds or D == 0]
        c = [x for x in c if x[0][0] <= 0.01]
        return min(c, key=lambda x: (x[0][1], -x[1], -x[2]))

    for variant in ("groups", "library") + (("overlap", "geometry") if indep else ()) + (("refself",) if a.refself else ()):
        (far, frr), T, D = best(gen, imp, variant)
        print("%s: whole set, best at FAR <= 1%%: T = %d, D = %d: FAR %.2f%%, FRR %.2f%%" % (variant, T, D, 100 * far,
                                                                                        100 * frr))
        for t in (3, 4, 5):
            print("  T = %d: %s" % (t, ", ".join("D %d: %.1f%% / %.1f%%" % ((d,) + tuple(100 * x for x in rates(
                t, d, gen, imp, variant))) for d in range(0, 5))))
        res = []
        for gf, i_f, gt, it in score.item_folds(gen, imp, a.splits):
            _, T, D = best(gf, i_f, variant)
            _, T0, _ = best(gf, i_f, variant, ds=False)
            res.append((rates(T, D, gt, it, variant), (T, D), rates(T0, 0, gt, it, variant)))
        print("  cross-validated (%d folds): with D: FAR %.2f%%, FRR %.2f%%; threshold alone: FAR %.2f%%, FRR %.2f%%; "
              "chosen %s" % (len(res), 100 * statistics.mean(x[0][0] for x in res),
                             100 * statistics.mean(x[0][1] for x in res), 100 * statistics.mean(x[2][0] for x in res),
                             100 * statistics.mean(x[2][1] for x in res),
                             collections.Counter(x[1] for x in res).most_common(3)))


main()
