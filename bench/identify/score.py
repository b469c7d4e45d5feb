#!/usr/bin/env python3
"""Scores identification runs (issue 15's benchmark) from their CSVs and the sets' manifest.

  score.py --sets DIR --run NAME=CSV [--run NAME=CSV ...] [--threshold NAME=T ...]
           [--timings CSV ...] [--out FILE.md]

--sets: the folder make_sets.py wrote (manifest.csv, groups.csv). Each run's CSV has the columns of
`patina identify --format csv` (query,rank,key,score,inliers,decision), made with an accepting
threshold so that rank-1 scores are raw. A query is matched to the manifest by its last two path
components (queries/g0001.png); a key to its item by its file name (groups.csv). Prints markdown:

- top-1 / top-5: genuine queries whose rank-1 / any of ranks 1..5 is a reference of the true item
  (any recolour in the item's group counts); per distortion kind (queries with that single kind,
  and all queries with 2..4 kinds together as "combined").
- Open set, accepting when the rank-1 score >= T: FAR(T) = impostor queries accepted / impostors;
  FRR(T) = genuine queries NOT correctly accepted (rejected, or rank-1 of a wrong item) / genuine.
  At the run's threshold (--threshold NAME=T; the system's default): FAR, FRR, and the genuine
  queries accepted with a wrong item (misidentified). ROC over every rank-1 score as T: FRR at
  FAR <= 1% and <= 0.1% (the smallest such T), that T for FAR <= 1%, and the EER (the T where
  |FAR - FRR| is smallest; (FAR + FRR) / 2 there). With N impostors, FAR steps by 1/N.
- Impostors that are not impostors: some held-out textures reuse photographed content of a
  registered one (two composites with the same window, a clean and a "flat" copy of one leather, a
  door with and without windows) although the pixel grouping did not link them. --shares (default
  SETS/shares.csv when present; run.sh makes it with the OpenCV peer: each held-out original
  identified against the registered originals, homography inliers of its best match) names them:
  impostor-texture queries whose source has >= --shares-min (14) inliers against some registered
  texture become the set "impostor-shared". The open-set table is computed over the clean
  impostors (photos and non-sharing textures); a second table gives the same over all impostors.
- --timings: CSVs system,stage,items,seconds -> items/s per stage.
Exit status 0; 1 when a run misses queries of the manifest or has unknown ones (reported).
"""
import argparse
import collections
import csv
import os
import sys

KINDS = ["perspective", "rotate", "crop", "scale", "photometric", "blur", "noise", "jpeg"]


def qkey(path):
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_run(path, manifest):
    """{query: [(rank, key, score)]} sorted by rank; problems as messages."""
    runs = collections.defaultdict(list)
    for r in read_csv(path):
        runs[qkey(r["query"])].append((int(r["rank"]), os.path.basename(r["key"]), float(r["score"])))
    problems = []
    missing = [q for q in manifest if q not in runs]
    extra = [q for q in runs if q not in manifest]
    if missing:
        problems.append("%s: %d manifest queries missing (e.g. %s)" % (path, len(missing), missing[0]))
    if extra:
        problems.append("%s: %d queries not in the manifest (e.g. %s)" % (path, len(extra), extra[0]))
    return {q: sorted(v) for q, v in runs.items()}, problems


def evaluate(run, manifest, item_of):
    """Per query: (set, kinds, rank-1 score, top1 correct, top5 correct)."""
    out = {}
    for q, m in manifest.items():
        rows = [r for r in run.get(q, []) if r[0] >= 1]
        score = rows[0][2] if rows else 0.0
        items = [item_of.get(k) for _, k, _ in rows[:5]]
        genuine = m["set"] == "genuine"
        top1 = genuine and bool(items) and items[0] == m["item"]
        top5 = genuine and m["item"] in items
        out[q] = (m["set"], m["kinds"], score, top1, top5)
    return out


def far_frr(ev, t, shared=False):
    gen = [v for v in ev.values() if v[0] == "genuine"]
    imp = [v for v in ev.values() if v[0] != "genuine" and (shared or v[0] != "impostor-shared")]
    far = sum(v[2] >= t for v in imp) / max(1, len(imp))
    frr = 1 - sum(v[3] and v[2] >= t for v in gen) / max(1, len(gen))
    mis = sum((not v[3]) and v[2] >= t for v in gen) / max(1, len(gen))
    return far, frr, mis


def roc(ev, shared=False):
    ts = sorted({v[2] for v in ev.values()}) + [float("inf")]
    pts = [(t,) + far_frr(ev, t, shared) for t in ts]
    res = {}
    for x in (0.01, 0.001):
        ok = [p for p in pts if p[1] <= x]
        res[x] = ok[0]  # smallest threshold meeting the FAR bound (inf always does)
    eer = min(pts, key=lambda p: (abs(p[1] - p[2]), p[0]))
    res["eer"] = eer
    return res


def pct(x):
    return "%.1f%%" % (100 * x)


def fmt_t(t):
    return "inf" if t == float("inf") else ("%g" % t)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", required=True)
    ap.add_argument("--run", action="append", default=[], required=True)
    ap.add_argument("--threshold", action="append", default=[])
    ap.add_argument("--timings", action="append", default=[])
    ap.add_argument("--shares", help="CSV texture,registered,inliers (default: SETS/shares.csv when present)")
    ap.add_argument("--shares-min", type=int, default=14)
    ap.add_argument("--out")
    a = ap.parse_args()

    manifest = {qkey(r["query"]): r for r in read_csv(os.path.join(a.sets, "manifest.csv"))}
    item_of = {r["file"]: r["item"] for r in read_csv(os.path.join(a.sets, "groups.csv"))}
    shares = a.shares or os.path.join(a.sets, "shares.csv")
    nshared = 0
    if os.path.exists(shares):
        sharing = {r["texture"]: r for r in read_csv(shares) if int(r["inliers"]) >= a.shares_min}
        for m in manifest.values():
            if m["set"] == "impostor-texture" and m["source"] in sharing:
                m["set"] = "impostor-shared"
                nshared += 1
    elif a.shares:
        ap.error("--shares %s does not exist" % a.shares)
    thresholds = {}
    for s in a.threshold:
        name, _, t = s.partition("=")
        thresholds[name] = float(t)
    runs, problems = [], []
    for s in a.run:
        name, _, path = s.partition("=")
        if not path:
            ap.error("--run wants NAME=CSV, got %r" % s)
        run, p = load_run(path, manifest)
        problems += p
        runs.append((name, evaluate(run, manifest, item_of)))

    sets = collections.Counter(m["set"] for m in manifest.values())
    lines = []
    lines.append("Sets: %s; %d references." % (", ".join("%d %s" % (n, s) for s, n in sorted(sets.items())),
                                               sum(1 for f in os.listdir(os.path.join(a.sets, "refs")))))
    lines.append("")
    names = [n for n, _ in runs]
    lines.append("| genuine queries | n | " + " | ".join("%s top-1 / top-5" % n for n in names) + " |")
    lines.append("|---|---|" + "---|" * len(names))
    groups = [("all", lambda k: True)] + [(k, (lambda kk: lambda k: k == kk)(k)) for k in KINDS] \
        + [("combined (2-4 kinds)", lambda k: "+" in k)]
    for label, sel in groups:
        qs = [q for q, m in manifest.items() if m["set"] == "genuine" and sel(m["kinds"])]
        if not qs:
            continue
        cells = []
        for _, ev in runs:
            cells.append("%s / %s" % (pct(sum(ev[q][3] for q in qs) / len(qs)), pct(sum(ev[q][4] for q in qs) / len(qs))))
        lines.append("| %s | %d | %s |" % (label, len(qs), " | ".join(cells)))
    lines.append("")
    lines.append("Open set over the clean impostors (photos and held-out textures sharing no content with a "
                 "registered one)%s:" % (" (%d impostor queries share content: left out here, counted in the next "
                                         "table)" % nshared if nshared else ""))
    lines.append("")
    lines.append("| open set | threshold T | FAR(T) | FRR(T) | misidentified(T) | FAR by impostor source | "
                 "FRR @ FAR<=1% | T for FAR<=1% | FRR @ FAR<=0.1% | EER (T) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    for name, ev in runs:
        r = roc(ev)
        if name in thresholds:
            t = thresholds[name]
            far, frr, mis = far_frr(ev, t)
            src = []
            for s in sorted(x for x in sets if x != "genuine"):
                imp = [v for v in ev.values() if v[0] == s]
                src.append("%s %s" % (s.replace("impostor-", ""), pct(sum(v[2] >= t for v in imp) / len(imp))))
            at = [fmt_t(t), pct(far), pct(frr), pct(mis), ", ".join(src)]
        else:
            at = ["(none given)", "", "", "", ""]
        e = r["eer"]
        lines.append("| %s | %s | %s | %s | %s | %s (T=%s) |" % (
            name, " | ".join(at), pct(r[0.01][2]), fmt_t(r[0.01][0]), pct(r[0.001][2]), pct((e[1] + e[2]) / 2), fmt_t(e[0])))
    if nshared:
        lines.append("")
        lines.append("Open set over all impostors, the %d sharing content included:" % nshared)
        lines.append("")
        lines.append("| open set | FAR(T) | FRR @ FAR<=1% | T for FAR<=1% | FRR @ FAR<=0.1% | EER (T) |")
        lines.append("|---|---|---|---|---|---|")
        for name, ev in runs:
            r = roc(ev, shared=True)
            e = r["eer"]
            far = pct(far_frr(ev, thresholds[name], True)[0]) if name in thresholds else ""
            lines.append("| %s | %s | %s | %s | %s | %s (T=%s) |" % (
                name, far, pct(r[0.01][2]), fmt_t(r[0.01][0]), pct(r[0.001][2]), pct((e[1] + e[2]) / 2), fmt_t(e[0])))
    if a.timings:
        lines.append("")
        lines.append("| timing (wall) | stage | items | seconds | items/s |")
        lines.append("|---|---|---|---|---|")
        for path in a.timings:
            for r in read_csv(path):
                n, s = int(r["items"]), float(r["seconds"])
                lines.append("| %s | %s | %d | %.1f | %.2f |" % (r["system"], r["stage"], n, s, n / s if s > 0 else 0))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    for p in problems:
        print("score: %s" % p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
