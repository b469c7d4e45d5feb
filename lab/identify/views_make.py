#!/usr/bin/env python3
"""Synthetic reference views for the "extra reference views at registration" lever of issue 30.

  python3 lab/identify/views_make.py REFS OUT VIEW [VIEW ...]

For every image of REFS (the bench/identify references) writes OUT/<file>@<view>.png, one PNG per view
(lossless, colour kept): the view's key then names its item (views_map.py strips "@<view>.png").

Views (sizes are of the reference's width and height, area-averaged as the benchmark's queries are):
  v1  downscaled to 50%, then a Gaussian blur of sigma 1 px (a farther, slightly soft capture)
  v2  downscaled to 30% (a far, soft capture: the area average is the blur)
  v3  a perspective view: the top edge's corners moved inwards by 15% of the width, warped onto the full
      rectangle (bilinear; no synthetic border), then rotated by 30 degrees and cut to the largest
      axis-aligned rectangle inside (the benchmark's `rotate` kind does the same)
  v4  downscaled to 50%, then bicubic back to the original size and a Gaussian blur of sigma 1.5 px (a
      soft capture at the reference's own resolution: the query kinds `scale` + `blur`)
Deterministic: no random parameter."""
import math
import os
import sys

import cv2
import numpy as np


def area(img, f):
    h, w = img.shape[:2]
    return cv2.resize(img, (max(1, round(w * f)), max(1, round(h * f))), interpolation=cv2.INTER_AREA)


def largest_rotated_rect(w, h, angle):
    """Width and height of the largest axis-aligned rectangle inside a w x h rectangle rotated by angle."""
    if w <= 0 or h <= 0:
        return 0, 0
    long_side, short_side = max(w, h), min(w, h)
    s, c = abs(math.sin(angle)), abs(math.cos(angle))
    if short_side <= 2.0 * s * c * long_side or abs(s - c) < 1e-10:
        x = 0.5 * short_side
        wr, hr = (x / s, x / c) if w >= h else (x / c, x / s)
    else:
        cos2a = c * c - s * s
        wr, hr = (w * c - h * s) / cos2a, (h * c - w * s) / cos2a
    return int(wr), int(hr)


def perspective_rotate(img, inset=0.15, degrees=30.0):
    h, w = img.shape[:2]
    src = np.float32([[inset * w, 0], [(1 - inset) * w, 0], [w, h], [0, h]])
    dst = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    warped = cv2.warpPerspective(img, cv2.getPerspectiveTransform(src, dst), (w, h), flags=cv2.INTER_LINEAR,
                                 borderMode=cv2.BORDER_REPLICATE)
    rot = cv2.getRotationMatrix2D((w / 2.0, h / 2.0), degrees, 1.0)
    cos, sin = abs(rot[0, 0]), abs(rot[0, 1])
    nw, nh = int(h * sin + w * cos), int(h * cos + w * sin)
    rot[0, 2] += nw / 2.0 - w / 2.0
    rot[1, 2] += nh / 2.0 - h / 2.0
    big = cv2.warpAffine(warped, rot, (nw, nh), flags=cv2.INTER_LINEAR)
    cw, ch = largest_rotated_rect(w, h, math.radians(degrees))
    x0, y0 = (nw - cw) // 2, (nh - ch) // 2
    return big[y0:y0 + ch, x0:x0 + cw]


def view(img, name):
    if name == "v1":
        return cv2.GaussianBlur(area(img, 0.5), (0, 0), 1.0)
    if name == "v2":
        return area(img, 0.3)
    if name == "v3":
        return perspective_rotate(img)
    if name == "v4":
        h, w = img.shape[:2]
        up = cv2.resize(area(img, 0.5), (w, h), interpolation=cv2.INTER_CUBIC)
        return cv2.GaussianBlur(up, (0, 0), 1.5)
    raise SystemExit("views_make.py: unknown view %r (v1..v4)" % name)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    refs, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    for n in names:
        view(np.zeros((8, 8, 3), np.uint8), n)  # unknown names fail before any work
    os.makedirs(out, exist_ok=True)
    files = sorted(f for f in os.listdir(refs) if not f.startswith("."))
    for f in files:
        img = cv2.imread(os.path.join(refs, f), cv2.IMREAD_COLOR)
        if img is None:
            raise SystemExit("views_make.py: cannot read %s" % os.path.join(refs, f))
        for n in names:
            cv2.imwrite(os.path.join(out, "%s@%s.png" % (f, n)), view(img, n))
    print("views_make.py: %d references x %d views -> %s" % (len(files), len(names), out))


if __name__ == "__main__":
    main()
