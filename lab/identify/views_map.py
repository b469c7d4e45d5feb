#!/usr/bin/env python3
"""Folds the rows of synthetic reference views back into their references, so that score.py scores items.

  python3 lab/identify/views_map.py IN.csv OUT.csv [-k 5]

IN: `patina identify --format csv` (query,rank,key,score,inliers,decision) against an index holding the
references and their views, a view's key being <reference file>@<view>.png (views_make.py). Every key is
reduced to its reference's file name (the view suffix stripped), each query keeps the best-ranked row of
each reference (a view and its reference, or two views of one reference, at ranks 1 and 2 become one
answer: the next reference moves up), ranks are renumbered and the first k kept. The decision column is
written as "-" (score.py decides from the scores; the CLI's decision was taken before folding).
A CSV without views passes unchanged but for the keys (file names). Prints how many rank-1 answers came
from a view, per view."""
import argparse
import collections
import csv
import os
import re

VIEW = re.compile(r"^(?P<ref>.+)@(?P<view>v\d+)\.png$")


def fold(key):
    """(reference file name, view name or None) of a key."""
    base = os.path.basename(key)
    m = VIEW.match(base)
    return (m.group("ref"), m.group("view")) if m else (base, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inp")
    ap.add_argument("out")
    ap.add_argument("-k", type=int, default=5)
    a = ap.parse_args()
    rows = collections.defaultdict(list)
    order = []
    with open(a.inp, newline="") as f:
        for r in csv.DictReader(f):
            if r["query"] not in rows:
                order.append(r["query"])
            rows[r["query"]].append(r)
    top_view = collections.Counter()
    short = 0
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["query", "rank", "key", "score", "inliers", "decision"])
        for q in order:
            seen = set()
            kept = []
            for r in sorted(rows[q], key=lambda r: int(r["rank"])):
                ref, view = fold(r["key"])
                if ref in seen:
                    continue
                seen.add(ref)
                if not kept:
                    top_view[view or "reference"] += 1
                kept.append((ref, r["score"], r["inliers"]))
                if len(kept) == a.k:
                    break
            short += len(kept) < a.k
            for i, (ref, score, inliers) in enumerate(kept, 1):
                w.writerow([q, i, ref, score, inliers, "-"])
    print("views_map.py: %d queries; rank 1 from: %s; %d with fewer than %d references listed"
          % (len(order), ", ".join("%s %d" % kv for kv in sorted(top_view.items())), short, a.k))


if __name__ == "__main__":
    main()
