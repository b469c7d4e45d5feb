#!/usr/bin/env python3
"""scikit-image's local_binary_pattern as a peer for Patina's `lbp` family.

Usage:
  lbp_skimage.py --out DIR --config P,R,METHOD [--config ...] IMAGE...
      For every image (binary 8-bit PGM, or anything skimage.io reads as
      8-bit grey) and every config, writes DIR/<image index>_<config index>.f64:
      the code map as raw little-endian float64, row-major, the image's shape.
  lbp_skimage.py --circle P,R
      Prints scikit-image's sample offsets rp and cp (17 significant digits),
      computed with the expressions of skimage/feature/_texture.pyx.
  lbp_skimage.py --version
      Prints the scikit-image and numpy versions.

Exit status 0 on success, 2 on bad usage, 3 when scikit-image is missing.
"""
import argparse
import os
import sys

try:
    import numpy as np
    import skimage
    from skimage.feature import local_binary_pattern
except ImportError as e:  # pragma: no cover
    print("lbp_skimage: scikit-image is not importable: %s" % e, file=sys.stderr)
    sys.exit(3)


def read_grey(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"P5":
        # header: magic, width, height, maxval, then one whitespace byte
        fields, pos = [], 2
        while len(fields) < 3:
            while data[pos:pos + 1].isspace():
                pos += 1
            if data[pos:pos + 1] == b"#":
                while data[pos:pos + 1] not in (b"\n", b""):
                    pos += 1
                continue
            start = pos
            while not data[pos:pos + 1].isspace():
                pos += 1
            fields.append(int(data[start:pos]))
        w, h, maxval = fields
        if maxval > 255:
            raise ValueError("%s: only 8-bit PGM is supported" % path)
        pos += 1
        return np.frombuffer(data, dtype=np.uint8, count=w * h, offset=pos).reshape(h, w)
    from skimage import io
    img = io.imread(path)
    if img.ndim != 2 or img.dtype != np.uint8:
        raise ValueError("%s: not an 8-bit grey image" % path)
    return img


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--circle")
    ap.add_argument("--version", action="store_true")
    ap.add_argument("images", nargs="*")
    a = ap.parse_args()
    if a.version:
        print("scikit-image %s numpy %s" % (skimage.__version__, np.__version__))
        return 0
    if a.circle:
        P, R = a.circle.split(",")
        P, R = int(P), np.float32(float(R))  # _local_binary_pattern(..., float R)
        # the expressions of _local_binary_pattern (R a C float widened to double)
        rr = -float(R) * np.sin(2 * np.pi * np.arange(P, dtype=np.double) / P)
        cc = float(R) * np.cos(2 * np.pi * np.arange(P, dtype=np.double) / P)
        rp, cp = np.round(rr, 5), np.round(cc, 5)
        print(" ".join("%.17g" % v for v in rp))
        print(" ".join("%.17g" % v for v in cp))
        return 0
    if not a.out or not a.config or not a.images:
        ap.print_usage(sys.stderr)
        return 2
    configs = []
    for c in a.config:
        P, R, method = c.split(",")
        configs.append((int(P), float(R), method))
    for i, path in enumerate(a.images):
        img = read_grey(path)
        for j, (P, R, method) in enumerate(configs):
            out = local_binary_pattern(img, P, R, method)
            out.astype("<f8").tofile(os.path.join(a.out, "%d_%d.f64" % (i, j)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
