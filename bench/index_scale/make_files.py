#!/usr/bin/env python3
"""Writes N distinct JPEGs of SIZE x SIZE (quality 90, 4:2:0) cut from the
photographs of a folder, on every core, for bench/index_scale/run.sh: each
file a crop at its own position, scale and flip, with its own brightness,
so that no two files are the same bytes (the store skips duplicates).

    make_files.py --src DIR --out DIR --n N [--size S] [--seed S]

Needs OpenCV (cv2) and numpy. Prints the files written and their bytes.
"""
import argparse
import os
import sys
from multiprocessing import Pool

import cv2
import numpy as np

SRC = []


def load(src):
    out = []
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if f.lower().endswith((".jpg", ".jpeg", ".png")):
                im = cv2.imread(os.path.join(root, f), cv2.IMREAD_COLOR)
                if im is not None and min(im.shape[:2]) >= 256:
                    out.append(im)
    return out


def init(src):
    SRC.extend(load(src))


def one(args):
    i, out, size, seed = args
    r = np.random.default_rng((seed, i))
    im = SRC[i % len(SRC)]
    h, w = im.shape[:2]
    side = int(min(h, w) * r.uniform(0.45, 1.0))
    y = int(r.integers(0, h - side + 1))
    x = int(r.integers(0, w - side + 1))
    crop = im[y:y + side, x:x + side]
    if r.random() < 0.5:
        crop = crop[:, ::-1]
    img = cv2.resize(crop, (size, size), interpolation=cv2.INTER_AREA if side > size else cv2.INTER_CUBIC)
    img = cv2.convertScaleAbs(img, alpha=float(r.uniform(0.85, 1.15)), beta=float(r.uniform(-12, 12)))
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 90,
                                         cv2.IMWRITE_JPEG_SAMPLING_FACTOR, cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420])
    if not ok:
        return 0
    sub = os.path.join(out, "%03d" % (i // 1000))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "%07d.jpg" % i), "wb") as f:
        f.write(buf.tobytes())
    return len(buf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=29)
    a = ap.parse_args()
    cv2.setNumThreads(1)
    if not load(a.src):
        sys.exit("make_files.py: no photograph of at least 256 pixels under %s" % a.src)
    os.makedirs(a.out, exist_ok=True)
    with Pool(os.cpu_count(), initializer=init, initargs=(a.src,)) as p:
        sizes = p.map(one, [(i, a.out, a.size, a.seed) for i in range(a.n)], chunksize=64)
    print("make_files.py: %d files, %.1f MB" % (sum(1 for s in sizes if s), sum(sizes) / 1e6))


main()
