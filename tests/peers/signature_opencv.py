#!/usr/bin/env python3
"""OpenCV contrib peer of the `signature` family (issue 18): PCTSignatures and PCTSignaturesSQFD.

  signature_opencv.py --dir DIR [--bits 4] [--radius 3] [--iters 10] [--minsize 2] [--join 0.2]
                      [--drop 0] [--max-clusters 768] [--settings gaussian:3,gaussian:0.2,...]

Inputs, written by tests/test_signature_opencv.c:
  DIR/images.txt   one image path per line (binary PPMs of patina's decoded pixels, so both sides
                   see the same pixels)
  DIR/plan.bin     i32 N, i32 S, N x (f32 x, f32 y) sampling points in [0, 1), S x i32 seed indexes
                   (patina's sampling plan, handed to PCTSignatures.create(points, seedIndexes))
Outputs:
  DIR/cv_sigs.bin  per image: i32 rows, rows x 8 f32 (weight, x, y, L, a, b, contrast, entropy)
  DIR/cv_lab.bin   per image: N x 3 f32, OpenCV's L*a*b* of each sampling point's pixel, computed as its
                   sampler does (the pixel as float * (1/255), cv2.cvtColor BGR2Lab on that 1x1 image)
  DIR/cv_sqfd_<form>_<alpha>.bin  per setting: n x n f32, [i][j] = computeQuadraticFormDistance(
                   sig_i, sig_j) with distance L2 and that similarity (NaN where OpenCV's float sum
                   went negative)
Exit status 0, 2 on bad usage, 3 when OpenCV contrib (cv2.xfeatures2d) or numpy is missing.
"""
import argparse
import os
import struct
import sys

try:
    import numpy as np
    import cv2
    X = cv2.xfeatures2d
    X.PCTSignatures_create, X.PCTSignaturesSQFD_create
except (ImportError, AttributeError) as e:  # pragma: no cover
    print("signature_opencv: %s (run tests/peers/setup-opencv.sh)" % e, file=sys.stderr)
    sys.exit(3)

FORMS = {"minus": 0, "gaussian": 1, "heuristic": 2}  # PCTSignatures.SimilarityFunction


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--radius", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--minsize", type=int, default=2)
    ap.add_argument("--join", type=float, default=0.2)
    ap.add_argument("--drop", type=float, default=0.0)
    ap.add_argument("--max-clusters", type=int, default=768)
    ap.add_argument("--settings", default="gaussian:3,gaussian:0.2,gaussian:0.01,heuristic:1,minus:1")
    a = ap.parse_args()
    d = a.dir
    with open(os.path.join(d, "images.txt")) as f:
        images = [l.rstrip("\n") for l in f if l.strip()]
    with open(os.path.join(d, "plan.bin"), "rb") as f:
        n, s = struct.unpack("<ii", f.read(8))
        pts = np.frombuffer(f.read(8 * n), dtype="<f4").reshape(n, 2)
        seeds = np.frombuffer(f.read(4 * s), dtype="<i4")
    pct = X.PCTSignatures_create([(float(x), float(y)) for x, y in pts], [int(i) for i in seeds])
    pct.setGrayscaleBits(a.bits)
    pct.setWindowRadius(a.radius)
    pct.setIterationCount(a.iters)
    pct.setClusterMinSize(a.minsize)
    pct.setJoiningDistance(a.join)
    pct.setDropThreshold(a.drop)
    pct.setMaxClustersCount(a.max_clusters)
    pct.setDistanceFunction(3)  # L2
    sigs = []
    scale = np.float32(1.0 / 255)
    with open(os.path.join(d, "cv_sigs.bin"), "wb") as out, open(os.path.join(d, "cv_lab.bin"), "wb") as lab:
        for p in images:
            img = cv2.imread(p, cv2.IMREAD_COLOR)
            if img is None:
                print("signature_opencv: cannot read %s" % p, file=sys.stderr)
                return 2
            sig = np.ascontiguousarray(pct.computeSignature(img), dtype=np.float32)
            sigs.append(sig)
            h, w = img.shape[:2]
            xs = np.minimum((pts[:, 0] * np.float32(w)).astype(np.int64), w - 1)
            ys = np.minimum((pts[:, 1] * np.float32(h)).astype(np.int64), h - 1)
            labs = np.empty((n, 3), dtype=np.float32)
            for k in range(n):
                px = img[ys[k]:ys[k] + 1, xs[k]:xs[k] + 1].astype(np.float32) * scale
                labs[k] = cv2.cvtColor(px, cv2.COLOR_BGR2Lab)[0, 0]
            lab.write(labs.astype("<f4").tobytes())
            out.write(struct.pack("<i", sig.shape[0]))
            out.write(sig.astype("<f4").tobytes())
    for setting in a.settings.split(","):
        form, alpha = setting.split(":")
        sq = X.PCTSignaturesSQFD_create(3, FORMS[form], float(alpha))
        m = np.full((len(sigs), len(sigs)), np.nan, dtype=np.float32)
        for i, si in enumerate(sigs):
            for j, sj in enumerate(sigs):
                m[i, j] = sq.computeQuadraticFormDistance(si, sj)
        with open(os.path.join(d, "cv_sqfd_%s_%s.bin" % (form, alpha)), "wb") as f:
            f.write(m.astype("<f4").tobytes())
    print("signature_opencv: OpenCV %s, %d images, %d sampling points, %d seeds, settings %s"
          % (cv2.__version__, len(images), n, s, a.settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
