#!/usr/bin/env python3
"""The acceptance threshold for each target false-accept rate, from a run's CSV (threshold 0: raw scores):
the smallest rank-1 score T at which at most FAR of the clean impostor queries (score.py's grouped view)
are accepted, and the FRR there. The table patina_identify_far_threshold holds (src/identify/identify.c)
comes from `bench/identify/run.sh` on the full sets:

  .venv-identify/bin/python bench/identify/calibrate.py --sets SETS --run SETS/results/patina.csv
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import score  # noqa: E402

TARGETS = (0.05, 0.02, 0.01, 0.005, 0.001)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", required=True)
    ap.add_argument("--run", required=True)
    ap.add_argument("--shares", help="default SETS/shares.csv")
    ap.add_argument("--siblings", help="default SETS/siblings.csv")
    ap.add_argument("--shares-min", type=int, default=14)
    a = ap.parse_args()
    manifest, item_of = score.load_sets(a.sets, a.shares, a.shares_min)
    sib = a.siblings or os.path.join(a.sets, "siblings.csv")
    view = score.View(score.content_links(sib, item_of, a.shares_min) if os.path.exists(sib) else {})
    run, problems = score.load_run(a.run, manifest)
    ev = score.evaluate(run, manifest, item_of)
    pts = score.curve(ev, view)
    nimp = sum(1 for v in ev.values() if v[0] not in ("genuine", "impostor-shared"))
    print("clean impostors: %d (FAR steps of %.2f%%)" % (nimp, 100.0 / nimp))
    print("| target FAR | threshold T | FAR(T) | FRR(T) | ambiguous(T) |")
    print("|---|---|---|---|---|")
    for x in TARGETS:
        p = [q for q in pts if q[1] <= x][0]
        print("| %g | %s | %s | %s | %s |" % (x, score.fmt_t(p[0]), score.pct(p[1]), score.pct(p[2]), score.pct(p[4])))
    for p in problems:
        print("calibrate: %s" % p, file=sys.stderr)


if __name__ == "__main__":
    main()
