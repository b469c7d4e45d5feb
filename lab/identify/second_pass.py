#!/usr/bin/env python3
"""Lever (b) of issue 30, emulated on `patina identify --format csv` outputs: a second pass with a larger
query budget for the queries whose rank-1 inliers fall in a band [LO, HI) of the first pass, keeping the
better answer (the second pass's when its rank-1 inliers exceed the first's).

  python3 lab/identify/second_pass.py FIRST.csv SECOND.csv OUT.csv LO HI [--mode reidentify|reverify]

FIRST: the default run (every query). SECOND: the same queries (or those in the band at least) identified
against an index of the same references whose spec has the larger query budget (`-f rootsift:n=1536`);
extraction and matching are the library's, so the second pass is what the library would compute.
--mode reidentify (default): the second pass's answer as it stands (every reference matched again).
--mode reverify: only the second pass's candidates that were among the first pass's listed candidates
(k of the CSV), re-ranked: what re-verifying the first pass's top candidates at the larger budget gives,
as far as the second pass lists them (a candidate it does not list counts as not improved).
Prints how many queries were in the band and how many took the second answer."""
import csv
import os
import sys
from collections import defaultdict


def load(path):
    rows = defaultdict(list)
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows[r["query"]].append(r)
    for q in rows:
        rows[q].sort(key=lambda r: int(r["rank"]))
    return rows


def rank1(rs):
    return int(float(rs[0]["inliers"])) if rs and rs[0]["rank"] != "0" else 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    mode = "reverify" if "--mode=reverify" in sys.argv or ("--mode" in sys.argv and
                                                         sys.argv[sys.argv.index("--mode") + 1] == "reverify") else "reidentify"
    args = [a for a in args if a not in ("reverify", "reidentify")]
    first, second, out, lo, hi = args[0], args[1], args[2], int(args[3]), int(args[4])
    a, b = load(first), load(second)
    inband = took = 0
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["query", "rank", "key", "score", "inliers", "decision"])
        w.writeheader()
        for q, rs in a.items():
            keep = rs
            if lo <= rank1(rs) < hi:
                inband += 1
                if q not in b:
                    sys.exit("second_pass.py: %s is in the band but not in %s" % (q, second))
                alt = [r for r in b[q] if r["rank"] != "0"]
                if mode == "reverify":
                    listed = {os.path.basename(r["key"]) for r in rs}
                    alt = [r for r in alt if os.path.basename(r["key"]) in listed]
                    alt = [dict(r, rank=str(i + 1)) for i, r in enumerate(alt)]
                if alt and rank1(alt) > rank1(rs):
                    keep, took = alt, took + 1
            for r in keep:
                w.writerow({k: r[k] for k in w.fieldnames})
    print("%s [%d,%d) %s: %d queries in the band, %d took the second answer" % (out, lo, hi, mode, inband, took))


main()
