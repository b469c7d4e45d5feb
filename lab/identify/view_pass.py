#!/usr/bin/env python3
"""The view pass emulated before it was built (docs/lab/identify.md, "2026-11-30: the view pass"): for
each genuine query the `views = 2` run gets right, is its true item (grouped) among the best N items
of the `views = 0` collection's run by first-row matches (`patina identify REFS0 queries --threshold
0 -k 64 --format csv`: verified hits first, then by matches, so rank <= N is the best N by matches
for N >= verify_top)? Those it is not are what matching the first rows first would lose.

    view_pass.py K64.csv VIEWS2.csv T        (SETS: /tmp/acc-full)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sets import load, score  # noqa: E402

manifest, item_of, view = load()
k64, _ = score.load_run(sys.argv[1], manifest)
v2, _ = score.load_run(sys.argv[2], manifest)
T = float(sys.argv[3])
ev2 = score.evaluate(v2, manifest, item_of)
gen = [q for q, m in manifest.items() if m["set"] == "genuine"]
def pos(q):
    for r in k64.get(q, []):
        if r[0] >= 1 and view.same(item_of.get(r[1]), manifest[q]["item"]):
            return r[0]
    return 10**9
for N in (10, 16, 24, 32, 48, 64):
    lost = [q for q in gen if view.answer(ev2[q], T) == "item" and view.top1(ev2[q]) and pos(q) > N]
    top1lost = [q for q in gen if view.top1(ev2[q]) and pos(q) > N]
    print("N=%d: accepted-genuine lost %d (%s); top-1 lost %d" % (N, len(lost), " ".join(lost[:8]), len(top1lost)))
import collections
print(collections.Counter(min(pos(q), 99) for q in gen if view.top1(ev2[q])).most_common(20))
