#!/usr/bin/env python3
"""OpenCV peer for `patina identify` (issue 15): SIFT + RootSIFT + 2-NN ratio test + homography.

  identify_opencv.py --refs DIR --out DIR [-j N] [-k 5] [--ratio 0.8] [--m 384] [--n 768]
                     [--verify-top 10] [--reproj 5.0] [--threshold 0] QUERY...

QUERY: image files or folders. References: every image in --refs (sorted); key = file name.
Extraction: cv2.SIFT_create(nfeatures=m) for references, nfeatures=n for queries (the paper's
asymmetric budgets; OpenCV's other defaults: 3 levels, contrast 0.04, edge 10, sigma 1.6, image
doubled), grey input; RootSIFT (L1-normalise, square root: rows are L2-unit).
Matching (what BFMatcher.knnMatch(k=2) per reference gives, vectorised): all references' rows
stacked, padded to m; per block of references one matrix product S = Q . R^T, per query feature
and reference its best and second-best reference feature (a reference with < 2 features matches
nothing), Lowe's test d1 < ratio * d2 with d^2 = 2 - 2s.
Scores (one CSV per variant, the contract's columns query,rank,key,score,inliers,decision):
  opencv_raw            the paper's count of query features passing the ratio test
  opencv_one2one        distinct reference features hit by passing query features
  opencv_raw_verify     top --verify-top by raw count, re-ranked by homography inliers
  opencv_one2one_verify top --verify-top by one-to-one count, re-ranked by homography inliers
Verification: the passing matches, one per reference feature (the closest), into
cv2.findHomography(RANSAC, --reproj pixels in the reference, 2000 iterations, confidence 0.995,
OpenCV's RNG seeded 0 per call: deterministic); score = inliers (0 with < 4 matches). Ties go to
the higher count, then the key. decision: rank-1 row 'match' when score >= --threshold, else
'unknown'; '-' below. A query without features: one row QUERY,0,,0,0,unknown.
Also writes DIR/opencv_timings.csv: system,stage,items,seconds (wall time, -j processes).
Exit status 0, 1 when some query cannot be decoded (it gets the no-feature row), 2 on bad usage, 3 when OpenCV/numpy are missing.
"""
import argparse
import csv
import os
import sys
import time

if "--help" not in sys.argv and "-h" not in sys.argv:
    # one BLAS/OpenCV thread per worker process: the parallelism is over queries
    for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(v, "1")

try:
    import cv2
    import numpy as np
except ImportError as e:  # pragma: no cover
    print("identify_opencv: %s (run bench/identify/setup.sh)" % e, file=sys.stderr)
    sys.exit(3)

IMG_EXT = (".jpg", ".jpeg", ".png")
VARIANTS = ["opencv_raw", "opencv_one2one", "opencv_raw_verify", "opencv_one2one_verify"]
BLOCK = 64  # references per matrix product: n x BLOCK*m floats (75 MB at 768 x 64 x 384)

G = {}  # per-process state: options, stacked references


def walk(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs.sort()
                out += [os.path.join(root, f) for f in sorted(files) if f.lower().endswith(IMG_EXT)]
        else:
            out.append(p)
    return out


def extract(path, budget):
    """RootSIFT rows (count x 128 float32, L2-unit) and keypoint (x, y) of the budget strongest SIFT features."""
    cv2.setNumThreads(1)
    img = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
    if img is None:
        raise RuntimeError("%s: cannot be decoded" % path)
    kps, d = cv2.SIFT_create(nfeatures=budget).detectAndCompute(img, None)
    if d is None or len(kps) == 0:
        return np.zeros((0, 128), np.float32), np.zeros((0, 2), np.float32)
    d = d.astype(np.float64)
    d /= np.maximum(d.sum(axis=1, keepdims=True), 1e-12)
    return np.sqrt(d).astype(np.float32), np.float32([k.pt for k in kps])


def extract_ref(path):
    return extract(path, G["m"])


def init_worker(opts, refs=None):
    G.update(opts)
    if refs is not None:
        G.update(refs)


def stack_refs(feats, m):
    """Padded (R, m, 128) rows, (R, m) bias (0 valid, -4 padding: below any similarity), counts."""
    r = len(feats)
    rows = np.zeros((r, m, 128), np.float32)
    bias = np.full((r, m), -4.0, np.float32)
    count = np.zeros(r, np.int64)
    for i, (d, _) in enumerate(feats):
        c = min(len(d), m)
        rows[i, :c] = d[:c]
        bias[i, :c] = 0
        count[i] = c
    return rows, bias, count


def ratio_matches(q, rows, bias, count, ratio):
    """For references rows (B, m, 128): best index (n, B) and pass mask (n, B) of Lowe's test."""
    b, m, _ = rows.shape
    s = (q @ rows.reshape(b * m, 128).T).reshape(len(q), b, m) + bias[None]
    best = s.argmax(axis=2)
    s1 = np.take_along_axis(s, best[..., None], axis=2)[..., 0]
    np.put_along_axis(s, best[..., None], -8.0, axis=2)
    s2 = s.max(axis=2)
    d1 = np.maximum(2 - 2 * s1, 0)
    d2 = np.maximum(2 - 2 * s2, 0)
    ok = (d1 < ratio * ratio * d2) & (count[None, :] >= 2)
    return best, ok, d1


def verify(qxy, rxy, ref_i, best, ok, d1):
    """Homography inliers between the query (points qxy) and column ref_i of the match arrays (points rxy),
    from its passing matches, one per reference feature."""
    qi = np.nonzero(ok[:, ref_i])[0]
    if len(qi) < 4:
        return 0
    rj = best[qi, ref_i]
    order = np.lexsort((qi, d1[qi, ref_i], rj))  # per reference feature, the closest query feature first
    qi, rj = qi[order], rj[order]
    first = np.ones(len(rj), bool)
    first[1:] = rj[1:] != rj[:-1]
    qi, rj = qi[first], rj[first]
    if len(qi) < 4:
        return 0
    src = qxy[qi].reshape(-1, 1, 2)
    dst = rxy[rj].reshape(-1, 1, 2)
    cv2.setRNGSeed(0)
    h, mask = cv2.findHomography(src, dst, cv2.RANSAC, G["reproj"], maxIters=2000, confidence=0.995)
    return 0 if h is None or mask is None else int(mask.sum())


def identify(path):
    """Rows of every variant for one query: {variant: [(rank, key, score, inliers)]}."""
    try:
        q, qxy = extract(path, G["n"])
    except RuntimeError as e:
        print("identify_opencv: %s" % e, file=sys.stderr)
        return path, None
    if len(q) == 0:
        return path, {v: [] for v in VARIANTS}
    rows, bias, count = G["rows"], G["bias"], G["count"]
    nref = len(rows)
    raw = np.zeros(nref, np.int64)
    one = np.zeros(nref, np.int64)
    m = rows.shape[1]
    for b0 in range(0, nref, BLOCK):
        b1 = min(nref, b0 + BLOCK)
        best, ok, _ = ratio_matches(q, rows[b0:b1], bias[b0:b1], count[b0:b1], G["ratio"])
        raw[b0:b1] = ok.sum(axis=0)
        codes = np.unique((best + m * np.arange(b1 - b0)[None, :])[ok])
        one[b0:b1] = np.bincount(codes // m, minlength=b1 - b0)
    keys = G["keys"]
    out = {}
    for name, sc in (("opencv_raw", raw), ("opencv_one2one", one)):
        order = sorted(range(nref), key=lambda i: (-sc[i], keys[i]))
        out[name] = [(i, int(sc[i]), 0) for i in order[:G["k"]]]
        top = order[:G["verify_top"]]
        tb = np.array(top)
        best, ok, d1 = ratio_matches(q, rows[tb], bias[tb], count[tb], G["ratio"])
        inl = {i: verify(qxy, G["ref_xy"][i], j, best, ok, d1) for j, i in enumerate(top)}
        vorder = sorted(top, key=lambda i: (-inl[i], -sc[i], keys[i]))
        out[name + "_verify"] = [(i, inl[i], inl[i]) for i in vorder[:G["k"]]]
    return path, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--refs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("-j", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-k", type=int, default=5)
    ap.add_argument("--ratio", type=float, default=0.8)
    ap.add_argument("--m", type=int, default=384)
    ap.add_argument("--n", type=int, default=768)
    ap.add_argument("--verify-top", type=int, default=10)
    ap.add_argument("--reproj", type=float, default=5.0)
    ap.add_argument("--threshold", type=float, default=0)
    ap.add_argument("query", nargs="+")
    a = ap.parse_args()
    if a.k < 1 or a.verify_top < a.k or a.j < 1:
        ap.error("need 1 <= k <= --verify-top and -j >= 1")
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    opts = dict(m=a.m, n=a.n, k=a.k, ratio=a.ratio, verify_top=a.verify_top, reproj=a.reproj)
    ref_paths = walk([a.refs])
    queries = walk(a.query)
    os.makedirs(a.out, exist_ok=True)

    t0 = time.monotonic()
    with ctx.Pool(a.j, init_worker, (opts,)) as pool:
        feats = pool.map(extract_ref, ref_paths, chunksize=8)
    t_ref = time.monotonic() - t0
    rows, bias, count = stack_refs(feats, a.m)
    refs = dict(rows=rows, bias=bias, count=count, keys=[os.path.basename(p) for p in ref_paths],
                ref_xy=[xy for _, xy in feats])
    print("identify_opencv: %d references extracted in %.1f s (%.2f images/s, %d processes), mean %.0f features"
          % (len(ref_paths), t_ref, len(ref_paths) / t_ref, a.j, count.mean()), file=sys.stderr)

    t0 = time.monotonic()
    results = {}
    with ctx.Pool(a.j, init_worker, (opts, refs)) as pool:
        for i, (path, out) in enumerate(pool.imap_unordered(identify, queries, chunksize=1)):
            results[path] = out
            if (i + 1) % 50 == 0 or i + 1 == len(queries):
                el = time.monotonic() - t0
                print("identify_opencv: %d/%d queries, %.1f s (%.2f queries/s)" % (i + 1, len(queries), el, (i + 1) / el),
                      file=sys.stderr)
    t_q = time.monotonic() - t0

    failed = [p for p in queries if results[p] is None]
    for p in failed:
        results[p] = {v: [] for v in VARIANTS}
    keys = refs["keys"]
    for v in VARIANTS:
        with open(os.path.join(a.out, v + ".csv"), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["query", "rank", "key", "score", "inliers", "decision"])
            for path in queries:
                cands = results[path][v]
                if not cands:
                    w.writerow([path, 0, "", 0, 0, "unknown"])
                for r, (i, sc, inl) in enumerate(cands):
                    dec = ("match" if sc >= a.threshold else "unknown") if r == 0 else "-"
                    w.writerow([path, r + 1, keys[i], sc, inl, dec])
    with open(os.path.join(a.out, "opencv_timings.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["system", "stage", "items", "seconds"])
        w.writerow(["opencv", "extract_refs", len(ref_paths), "%.3f" % t_ref])
        w.writerow(["opencv", "identify", len(queries), "%.3f" % t_q])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
