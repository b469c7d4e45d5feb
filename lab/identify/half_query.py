#!/usr/bin/env python3
"""The half-size query of issue 30 (docs/lab/identify.md, "2026-12-01 (thirteenth session): the half-size
query"): a query photographed closer than its reference (upscaled) meets the registered image at its
scale once halved. Two steps, around a `patina identify` run on the halved sets:

    half_query.py make SETS OUT        writes OUT/queries and OUT/impostors: every query and impostor of
                                       SETS halved (area average, PIL BOX; sizes round up), same names
    half_query.py fuse FULL.csv HALF.csv OFFSET OUT.csv
                                       per query the answer of the full-size run, or the half-size run's
                                       when its rank-1 score less OFFSET beats it (its scores written less
                                       OFFSET: the second query must win by a margin, else every impostor
                                       would get a second chance at the threshold)
"""
import csv
import os
import sys


def make(sets, out):
    from PIL import Image
    n = 0
    for d in ("queries", "impostors"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
        for f in sorted(os.listdir(os.path.join(sets, d))):
            im = Image.open(os.path.join(sets, d, f)).convert("RGB")
            w, h = im.size
            half = im.resize((max(1, (w + 1) // 2), max(1, (h + 1) // 2)), Image.BOX)
            p = os.path.join(out, d, f)
            if f.lower().endswith((".jpg", ".jpeg")):
                half.save(p, quality=97)
            else:
                half.save(p)
            n += 1
    print("half_query.py: %d images halved into %s" % (n, out))


def load(path):
    rows = {}
    with open(path) as fh:
        r = csv.reader(fh)
        hdr = next(r)
        for row in r:
            rows.setdefault(row[0], []).append(row)
    return hdr, rows


def fuse(full, half, offset, out):
    hdr, a = load(full)
    _, b = load(half)
    used = 0
    with open(out, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(hdr)
        for q, ra in a.items():
            rb = b.get(q, [])
            sa = float(ra[0][3]) if ra else -1.0
            sb = max(0.0, float(rb[0][3]) - offset) if rb else -1.0
            if sb > sa:
                used += 1
                for row in rb:
                    row = list(row)
                    row[3] = repr(max(0.0, float(row[3]) - offset))
                    w.writerow(row)
            else:
                for row in ra:
                    w.writerow(row)
    print("half_query.py: %d of %d answers from the half-size query" % (used, len(a)))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "fuse":
        fuse(sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(__doc__)
