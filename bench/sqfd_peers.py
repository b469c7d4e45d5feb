#!/usr/bin/env python3
"""Peers of bench_sqfd (bench/sqfd.c calls it once per run; it can also run alone).

  sqfd_peers.py --n N --centroids C --alpha A --queries Q1[,Q2...] [--k K] [--no-opencv]

Signatures like bench_sqfd's synthetic ones (C centroids of 7 features in [0, 1), weights
summing to about 1, a tenth of the centroids dropped, padded with zero weights), the table
already where each peer keeps it:

  torch      PyTorch on the GPU, the natural batched code: the rows' self terms once
             (like ours), per chunk of rows the cross term
             Sqo = einsum(w_q, exp(-alpha cdist(q, o)^2), w_o) in fp32 over the (Q C, chunk C)
             distance matrix, S = Sqq + Soo - 2 Sqo, torch.topk(k) per query; chunks of rows
             sized so the matrix stays within ~1 GiB. Prints "torch <Q> <ms>" (median of 5
             after a warm-up; CUDA-synchronised wall time).
  opencv     OpenCV contrib's PCTSignaturesSQFD.computeQuadraticFormDistance (CPU, one
             thread, the Gaussian similarity) on 200 pairs of the same kind: prints
             "opencv_per_sqfd_ms <ms>"; skipped when cv2.xfeatures2d does not import.

Speed peers, not parity peers (float arithmetic; OpenCV's parity is tests/peers). Exit 0
when torch or CUDA is missing (it says so).
"""
import argparse
import time

from peerutil import cuda_torch, median_ms


def signatures(torch, g, n, c, dev):
    """(n, c, 7) features and (n, c) weights; a tenth of the centroids dropped (weight 0)."""
    f = torch.rand((n, c, 7), generator=g, device=dev)
    w = 0.2 + torch.rand((n, c), generator=g, device=dev)
    w = w * (torch.rand((n, c), generator=g, device=dev) >= 0.1)
    w = w / w.sum(1, keepdim=True).clamp(min=1e-6)
    return f, w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--centroids", type=int, default=40)
    ap.add_argument("--alpha", type=float, default=0.2)
    ap.add_argument("--queries", default="1,64")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--no-opencv", action="store_true")
    a = ap.parse_args()
    if not a.no_opencv:
        opencv(a)
    got = cuda_torch()
    if got is None:
        return 0
    torch, dev = got
    g = torch.Generator(device=dev).manual_seed(1)
    c, alpha = a.centroids, a.alpha
    rf, rw = signatures(torch, g, a.n, c, dev)

    def self_terms(f, w):
        out = []
        for s in range(0, f.shape[0], 4096):
            d2 = torch.cdist(f[s:s + 4096], f[s:s + 4096]).pow(2)
            out.append(torch.einsum("ni,nij,nj->n", w[s:s + 4096], torch.exp(-alpha * d2), w[s:s + 4096]))
        return torch.cat(out)

    soo = self_terms(rf, rw)
    for nq in [int(x) for x in a.queries.split(",")]:
        qf, qw = signatures(torch, g, nq, c, dev)
        sqq = self_terms(qf, qw)
        chunk = max(256, min(a.n, (1 << 28) // (nq * c * c)))

        def run():
            res = []
            for s in range(0, a.n, chunk):
                o, ow = rf[s:s + chunk], rw[s:s + chunk]
                d2 = torch.cdist(qf.reshape(-1, 7), o.reshape(-1, 7)).pow(2).view(nq, c, o.shape[0], c)
                cross = torch.einsum("qi,qirj,rj->qr", qw, torch.exp(-alpha * d2), ow)
                res.append(sqq[:, None] + soo[None, s:s + chunk] - 2.0 * cross)
            s_all = torch.cat(res, 1)
            return torch.topk(s_all, min(a.k, a.n), dim=1, largest=False)

        print("torch %d %.4f" % (nq, median_ms(torch, run, 5)), flush=True)
    return 0


def opencv(a):
    try:
        import cv2
        import numpy as np
        sqfd = cv2.xfeatures2d.PCTSignaturesSQFD_create(3, 1, a.alpha)  # L2 distance, Gaussian similarity
    except Exception as e:  # no opencv-contrib: the column says so
        print("opencv unavailable: %s" % str(e).splitlines()[0] if str(e) else "opencv unavailable", flush=True)
        return
    rng = np.random.default_rng(1)

    def sig():
        m = a.centroids - a.centroids // 10
        s = np.zeros((m, 8), np.float32)
        s[:, 0] = (0.2 + rng.random(m)) / (0.7 * m)  # OpenCV's order: weight, x, y, L, a, b, c, e
        s[:, 1:8] = rng.random((m, 7), dtype=np.float32)
        return s

    pairs = [(sig(), sig()) for _ in range(200)]
    cv2.setNumThreads(1)
    t0 = time.perf_counter()
    for x, y in pairs:
        sqfd.computeQuadraticFormDistance(x, y)
    print("opencv_per_sqfd_ms %.6f" % ((time.perf_counter() - t0) * 1e3 / len(pairs)), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
