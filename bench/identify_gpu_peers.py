#!/usr/bin/env python3
"""PyTorch peer for bench_identify_gpu (bench/identify_gpu.c calls it; it can also run alone).

  identify_gpu_peers.py --refs N --m M --n N [--queries Q] [--batch B]

The same work as the fused kernel, written the way a PyTorch user would: references (N, m, 128)
and the query (n, 128) as fp16 on the GPU (RootSIFT values, u8 / 512), per batch of B references
one batched matmul S = R Q^T (B, m, n), torch.topk(2) over the reference rows, Lowe's ratio
test on d^2 = 2 - 2 s, and the one-to-one score (distinct reference rows hit, torch.unique). Random
RootSIFT-like rows; the time does not depend on the values. Prints "torch <ms>" (median of 5 after
a warm-up, CUDA-synchronised wall time of scoring every reference for the Q queries, the data
already on the GPU). Exit 0 when torch or CUDA is missing (it says so).
"""
import argparse
import sys

from peerutil import cuda_torch, median_ms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--refs", type=int, required=True)
    ap.add_argument("--m", type=int, default=384)
    ap.add_argument("--n", type=int, default=768)
    ap.add_argument("--queries", type=int, default=1)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--ratio", type=float, default=0.8)
    a = ap.parse_args()
    got = cuda_torch()
    if got is None:
        return 0
    torch, dev = got
    g = torch.Generator(device=dev).manual_seed(1)

    def rows(*shape):
        v = torch.rand(shape, generator=g, device=dev, dtype=torch.float32) ** 3
        v = v / v.norm(dim=-1, keepdim=True)
        return (torch.round(v * 512).clamp(max=255) / 512).to(torch.float16)

    refs = rows(a.refs, a.m, 128)
    queries = rows(a.queries, a.n, 128)
    rr = a.ratio * a.ratio

    def run():
        scores = []
        for qi in range(a.queries):
            q = queries[qi]
            for b0 in range(0, a.refs, a.batch):
                r = refs[b0:b0 + a.batch]                      # (B, m, 128)
                s = torch.matmul(r, q.T).float()               # (B, m, n)
                top = torch.topk(s, 2, dim=1)                  # over reference rows: (B, 2, n)
                d = (2 - 2 * top.values).clamp(min=0)
                ok = d[:, 0, :] < rr * d[:, 1, :]              # (B, n)
                best = top.indices[:, 0, :]
                code = (best + a.m * torch.arange(r.shape[0], device=dev)[:, None])[ok]
                scores.append(torch.bincount(torch.unique(code) // a.m, minlength=r.shape[0]))
        return scores

    print("torch %.4f" % median_ms(torch, run, 5))
    return 0


if __name__ == "__main__":
    sys.exit(main())
