#!/usr/bin/env python3
"""`patina identify --format json` lines -> the CSV contract (query,rank,key,score,inliers,decision) that
bench/identify/score.py reads: lab/identify/json2csv.py IN.jsonl OUT.csv"""
import csv, json, sys
w = csv.writer(open(sys.argv[2], "w", newline=""), lineterminator="\n")
w.writerow(["query", "rank", "key", "score", "inliers", "decision"])
for line in open(sys.argv[1]):
    o = json.loads(line)
    if not o["hits"]:
        w.writerow([o["query"], 0, "", 0, 0, "unknown"])
    for h in o["hits"]:
        w.writerow([o["query"], h["rank"], h["key"], h["score"], h["inliers"], o["decision"] if h["rank"] == 1 else "-"])
