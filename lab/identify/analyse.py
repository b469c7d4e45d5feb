#!/usr/bin/env python3
"""Where genuine queries fail: reads `patina identify --format json -k K --threshold 0` output (stdin or a
file) and the sets' manifest/groups, and prints per genuine miss the query's feature count, the distortion,
and the true item's best rank, matches and inliers among the listed candidates; then a summary by cause.
   lab/identify/analyse.py SETS RESULT.jsonl"""
import csv, json, sys, collections

sets, path = sys.argv[1], sys.argv[2]
man = {r["query"]: r for r in csv.DictReader(open(f"{sets}/manifest.csv"))}
item_of = {}
for r in csv.DictReader(open(f"{sets}/groups.csv")):
    item_of["refs/" + r["file"]] = r["item"]
causes = collections.Counter()
rows = []
for line in open(path):
    o = json.loads(line)
    m = man.get(o["query"])
    if not m or m["set"] != "genuine":
        continue
    hits = o["hits"]
    true = [h for h in hits if item_of.get(h["key"]) == m["item"]]
    ok = hits and item_of.get(hits[0]["key"]) == m["item"]
    if ok:
        continue
    if o["features"] == 0:
        c = "no query features"
    elif not true:
        c = "true item not listed (0 matches or beyond k)"
    elif not true[0]["verified"]:
        c = "true item listed, not verified (rank > verify_top)"
    else:
        c = "true item verified, outranked"
    causes[c] += 1
    t = true[0] if true else None
    rows.append((o["query"], m["kinds"], o["features"], t["rank"] if t else "-", t["matches"] if t else 0,
                 t["inliers"] if t else 0, hits[0]["matches"] if hits else 0, hits[0]["inliers"] if hits else 0, c))
for r in rows:
    print(*r, sep="\t")
print()
for c, n in causes.most_common():
    print(f"{n:4d}  {c}")
