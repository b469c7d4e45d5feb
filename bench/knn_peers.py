#!/usr/bin/env python3
"""PyTorch peer for bench_knn (bench/knn.c calls it; it can also run alone).

  knn_peers.py --n N --queries Q [-k K]

Brute-force CEDD Tanimoto k-NN on the GPU with PyTorch: random descriptors
(bins 0..7, 70% zero) normalised per row (p = b / sum b, as LIRE does), C1 as
a float64 matrix product, C2/C3 as row sums of squares, distance
100 - 100 * C1 / (C2 + C3 - C1), then torch.topk. float64 throughout, but the
sums are reassociated by the matrix product, so distances may differ from
LIRE's in the last bits: a speed peer, not a parity peer. Prints
"torch <ms>" (median of 9 after a warm-up, CUDA-synchronised wall time of the
search, the table already on the GPU). Exit 0 when torch or CUDA is missing
(it says so).
"""
import argparse
import sys

from peerutil import cuda_torch, median_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--queries", type=int, required=True)
    ap.add_argument("-k", type=int, default=10)
    a = ap.parse_args()
    got = cuda_torch()
    if got is None:
        return 0
    torch, dev = got
    g = torch.Generator(device=dev).manual_seed(1)

    def rand_desc(n):
        z = torch.rand((n, 144), generator=g, device=dev) < 0.7
        v = torch.randint(1, 8, (n, 144), generator=g, device=dev)
        return torch.where(z, torch.zeros_like(v), v).to(torch.float64)

    rows = rand_desc(a.n)
    t1 = rows.sum(1, keepdim=True)
    p = torch.where(t1 > 0, rows / t1.clamp(min=1), rows)
    c3 = (p * p).sum(1)
    queries = rand_desc(a.queries)
    t2 = queries.sum(1, keepdim=True)
    q = torch.where(t2 > 0, queries / t2.clamp(min=1), queries)
    c2 = (q * q).sum(1)

    def search():
        c1 = q @ p.T
        d = 100.0 - 100.0 * (c1 / ((c2[:, None] + c3[None, :]) - c1))
        return torch.topk(d, a.k, dim=1, largest=False)

    print("torch %.4f" % median_ms(torch, search, 9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
