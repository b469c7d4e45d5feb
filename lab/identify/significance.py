#!/usr/bin/env python3
"""The a-contrario significance as the acceptance score (docs/lab/identify.md, "2026-11-30: the
a-contrario significance"), on runs' CSVs (`patina identify --threshold 0 -k 5 --format csv`; the
score column is the library's, significance or inliers as its --accept said):

- the whole set: the smallest threshold at FAR <= 1% and <= 0.1% (clean impostors, grouped view:
  score.py's), FRR there;
- cross-validation: 20 item-disjoint 2-fold splits of the genuine items and of the impostors, the
  threshold for FAR <= 1% chosen on one half, FAR / FRR counted on the other (means);
- the calibration as the library holds it: per target FAR the roundest number between the best
  clean impostor below the calibrated threshold and that threshold (it accepts the same queries);
- with --list T: the clean impostors accepted and the genuine queries not accepted at T.

    lab/identify/significance.py --sets SETS [--list T] RUN.csv ...
With --json JSONL (`patina identify --format json -k K --threshold 0` of an older build, whose hits
carry matches and inliers) it first writes the emulated significance (the ORSA formula on the hits'
matches and inliers and the reference file's size) as a CSV to stdout, the first measurement's
route before the library computed it.
"""
import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import csv

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("score", os.path.join(HERE, "..", "..", "bench", "identify", "score.py"))
score = importlib.util.module_from_spec(spec)
spec.loader.exec_module(score)
TARGETS = (0.05, 0.02, 0.01, 0.005, 0.001)


def emulate(sets, path):
    from PIL import Image
    size = {}

    def sig(n, k, w, h):
        n = max(n, k)
        if k <= 2:
            return 0.0
        r = 0.01 * max(w, h)
        lg = math.log10(n - 2) + sum(math.log10((n - i) / (i + 1)) for i in range(k)) + \
            sum(math.log10((k - i) / (i + 1)) for i in range(2))
        return max(0.0, -(lg + (k - 2) * math.log10(math.pi * r * r / (w * h))))
    w = csv.writer(sys.stdout)
    w.writerow(["query", "rank", "key", "score", "inliers", "decision"])
    for line in open(path):
        o = json.loads(line)
        if not o["hits"]:
            w.writerow([o["query"], 0, "", 0, 0, "unknown"])
        for h in o["hits"]:
            b = os.path.basename(h["key"])
            if b not in size:
                size[b] = Image.open(os.path.join(sets, "refs", b)).size
            s = sig(h["matches"], h["inliers"], *size[b]) if h["verified"] else 0
            w.writerow([o["query"], h["rank"], h["key"], s, s if h["verified"] else 0, "-"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", required=True)
    ap.add_argument("--json")
    ap.add_argument("--list", type=float)
    ap.add_argument("--splits", type=int, default=20)
    ap.add_argument("runs", nargs="*")
    a = ap.parse_args()
    if a.json:
        emulate(a.sets, a.json)
        return
    manifest, item_of = score.load_sets(a.sets)
    view = score.View(score.content_links(os.path.join(a.sets, "siblings.csv"), item_of, 14), 0.5)
    for path in a.runs:
        run, _ = score.load_run(path, manifest)
        ev = score.evaluate(run, manifest, item_of)
        gen = [(q, v) for q, v in ev.items() if v[0] == "genuine"]
        imp = [(q, v) for q, v in ev.items() if v[0] not in ("genuine", "impostor-shared")]
        ts = sorted(set(v[2] for _, v in gen + imp)) + [1e18]

        def rates(t, g, i):
            far = sum(view.answer(v, t) != "none" for _, v in i) / len(i)
            ok = sum(view.answer(v, t) == "item" and view.top1(v) for _, v in g)
            return far, 1 - ok / len(g)

        def best(g, i, lim):
            for t in ts:
                far, frr = rates(t, g, i)
                if far <= lim:
                    return t, far, frr
        print(os.path.basename(path))
        for lim in (0.01, 0.001):
            t, far, frr = best(gen, imp, lim)
            print("  whole set, FAR <= %g: T = %.4g: FAR %.2f%%, FRR %.2f%%" % (lim, t, 100 * far, 100 * frr))
        res = [rates(best(gf, i_f, 0.01)[0], gt, it) for gf, i_f, gt, it in score.item_folds(gen, imp, a.splits)]
        print("  cross-validated (%d folds): FAR %.2f%%, FRR %.2f%%" % (
            len(res), 100 * statistics.mean(r[0] for r in res), 100 * statistics.mean(r[1] for r in res)))
        scores = sorted(v[2] for _, v in imp)
        for lim in TARGETS:
            t = best(gen, imp, lim)[0]
            below = max([x for x in scores if x < t] or [0])
            for d in range(6):
                nice = math.floor(t * 10 ** d) / 10 ** d
                if nice > below:
                    break
            far, frr = rates(nice, gen, imp)
            print("  far %g: calibrated %.5g, next impostor below %.5g: table %g (FAR %.2f%%, FRR %.2f%%)" % (
                lim, t, below, nice, 100 * far, 100 * frr))
        if a.list is not None:
            for q, v in sorted(imp):
                if view.answer(v, a.list) != "none":
                    print("  accepted impostor %s (%s): %.4g" % (q, v[0], v[2]))
            for q, v in sorted(gen):
                ans = view.answer(v, a.list)
                if not (ans == "item" and view.top1(v)):
                    print("  genuine not accepted %s: %.4g, %s, %s" % (q, v[2], ans, "right at rank 1" if view.top1(v)
                                                                        else "wrong at rank 1"))


main()
