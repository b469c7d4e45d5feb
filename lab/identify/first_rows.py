#!/usr/bin/env python3
"""A first pass over two rows of each item emulated (docs/lab/identify.md, "2026-11-30 (eighth
session)"): the image row matched with the query's F1 strongest features, the half-size view row
(views = 1's v1) with its F2 strongest, each item ranked by the larger of the two match counts.

    first_rows.py EVERY.csv IMG.csv [V1.csv] [T]      (SETS: /tmp/acc-full)

EVERY.csv: the views = 3 collection, every row (the answers the view pass keeps when the item is a
candidate); IMG.csv: the views = 0 collection, `--no-verify -k 64 --first-features F1`; V1.csv: the
views = 1 collection, every row, `--no-verify -k 64 --first-features F2` (its image row's matches
with F2 features are a subset of IMG's with F1 >= F2, so the larger count per item is the image
row's F1 count or the view row's F2 count). Prints the genuine queries that EVERY answers right and
accepts at T whose item is not among the best N keys, for N = 16 ... 64.
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sets import load, score  # noqa: E402

manifest, item_of, view = load()
every, _ = score.load_run(sys.argv[1], manifest)
runs = [score.load_run(p, manifest)[0] for p in sys.argv[2:] if p.endswith(".csv")]
T = float(sys.argv[-1]) if not sys.argv[-1].endswith(".csv") else 3.0
ev = score.evaluate(every, manifest, item_of)
gen = [q for q, m in manifest.items() if m["set"] == "genuine"]

def ranked(q):
    best = collections.defaultdict(float)
    for run in runs:
        for r in run.get(q, []):
            if r[0] >= 1:
                best[r[1]] = max(best[r[1]], r[2])
    return sorted(best, key=lambda k: (-best[k], k))

def pos(q):
    for i, key in enumerate(ranked(q)):
        if view.same(item_of.get(key), manifest[q]["item"]):
            return i + 1
    return 10**9

P = {q: pos(q) for q in gen}
for N in (16, 32, 48, 64):
    lost = [q for q in gen if view.answer(ev[q], T) == "item" and view.top1(ev[q]) and P[q] > N]
    top1lost = [q for q in gen if view.top1(ev[q]) and P[q] > N]
    print("N=%d: accepted-genuine lost %d (%s); top-1 lost %d" % (N, len(lost), " ".join(lost), len(top1lost)))
