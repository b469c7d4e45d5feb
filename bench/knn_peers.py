#!/usr/bin/env python3
"""Peers of bench_knn (bench/knn.c calls it once per table size; it can also run alone).

  knn_peers.py --n N --cases Q:K[,Q:K...] [--no-faiss]
  knn_peers.py --n N --cases ... --dist DIST --dim D --kind u32|f32|f64

Brute-force CEDD Tanimoto k-NN, on the same kind of data as bench_knn (random
descriptors, bins 0..7, 70% zero), the table already where each peer keeps it:

  torch_fp16  PyTorch on the GPU: rows normalised (p = b / sum b, as LIRE
              does) in fp16, C1 = q @ p.T (fp16 matmul, fp32 accumulation),
              distance 100 - 100 * C1 / (C2 + C3 - C1), torch.topk.
  torch_int8  PyTorch on the GPU: the exact integer dot D = a . b by
              torch._int_mm (int8 tensor cores, padded to 160 columns and
              17+ query rows as it requires), Tanimoto from D and the
              precomputed sums in float32, torch.topk.
  faiss_cpu   Faiss IndexFlatIP on the CPU (all cores) over the rows
              normalised by their L2 norm: cosine, not Tanimoto -- the
              flat-scan work a Faiss user would run; printed only when the
              faiss module imports.

With --dist (the other families of bench_knn --family: the same kind of
random data -- counts 1..7 with 70% zeros (u32), those L1-normalised (f32),
features of mixed scales (f64)), the natural PyTorch code for the distance:

  torch_fp16  the dot-product forms in fp16 (fp32 accumulation): l2 /
              std_l2 as |q|^2 + |r|^2 - 2 q.r (std_l2 on the sigma-scaled
              values), hellinger as 1 - sqrt(q).sqrt(r) / sqrt(|q| |r|),
              cosine; only where the values fit fp16 (not raw glcm).
  torch_fp32  the same in fp32 for those, and for l1 torch.cdist(p=1), for
              chi2 and intersection the element-wise formula broadcast over
              (query chunk, row chunk, dim) blocks of <= 2^28 elements.
  faiss_cpu   IndexFlatL2 (l2 family) / IndexFlatIP (cosine, hellinger on
              the square roots) where the distance reduces to one.

Queries run in chunks of at most 512 (an n x chunk distance matrix of at most
~2 GiB, as a user of these libraries would do for large batches). Speed peers, not parity peers: the
float arithmetic reorders LIRE's sums. Prints "<peer> <Q> <K> <ms>" (median of
5 after a warm-up; CUDA-synchronised wall time). Exit 0 when torch or CUDA is
missing (it says so).
"""
import argparse
import sys
import time

from peerutil import cuda_torch, median_ms

CHUNK = 512


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--no-faiss", action="store_true")
    ap.add_argument("--dist")
    ap.add_argument("--dim", type=int, default=144)
    ap.add_argument("--kind", default="u32")
    a = ap.parse_args()
    cases = [tuple(int(x) for x in c.split(":")) for c in a.cases.split(",")]
    got = cuda_torch()
    if got is None:
        return 0
    torch, dev = got
    if a.dist:
        return family(torch, dev, a, cases)
    g = torch.Generator(device=dev).manual_seed(1)

    def rand_desc(n):
        z = torch.rand((n, 144), generator=g, device=dev) < 0.7
        v = torch.randint(1, 8, (n, 144), generator=g, device=dev, dtype=torch.int32)
        return torch.where(z, torch.zeros_like(v), v)

    # the table in pieces of at most 2^22 rows (one piece of 100 M rows took
    # 54 GiB of int32 temporaries: out of memory); one piece below that, as before
    piece = 1 << 22
    t1 = torch.empty(a.n, device=dev)
    s1 = torch.empty(a.n, device=dev)
    c3 = torch.empty(a.n, device=dev)
    p16 = torch.empty((a.n, 144), dtype=torch.half, device=dev)
    rows8 = torch.zeros((a.n, 160), dtype=torch.int8, device=dev)
    for r0 in range(0, a.n, piece):
        rows = rand_desc(min(piece, a.n - r0))
        r1 = r0 + rows.shape[0]
        t1[r0:r1] = rows.sum(1).float()
        s1[r0:r1] = (rows * rows).sum(1).float()
        p16[r0:r1] = (rows.float() / t1[r0:r1].clamp(min=1)[:, None]).half()
        c3[r0:r1] = (p16[r0:r1].float() ** 2).sum(1)
        rows8[r0:r1, :144] = rows.to(torch.int8)
        del rows
    # queries per chunk: the chunk's n-wide float matrices within ~2 GiB each
    chunk = max(32, min(CHUNK, (1 << 31) // (4 * a.n) // 32 * 32))

    for nq, k in cases:
        qi = rand_desc(nq)
        t2 = qi.sum(1).float()
        s2 = (qi * qi).sum(1).float()
        q16 = (qi.float() / t2.clamp(min=1)[:, None]).half()
        c2 = (q16.float() ** 2).sum(1)
        q8 = torch.zeros((max(nq, 32), 160), dtype=torch.int8, device=dev)
        q8[:nq, :144] = qi.to(torch.int8)

        def fp16():
            out = []
            for s in range(0, nq, chunk):
                c1 = (q16[s:s + chunk] @ p16.T).float()
                d = 100.0 - 100.0 * (c1 / ((c2[s:s + chunk, None] + c3[None, :]) - c1))
                out.append(torch.topk(d, k, dim=1, largest=False))
            return out

        def int8():
            out = []
            for s in range(0, nq, chunk):
                qa = q8[s:s + chunk] if nq >= 32 else q8
                dd = torch._int_mm(qa, rows8.t()).float()[: min(chunk, nq - s)]
                num = dd * (t1[None, :] * t2[s:s + chunk, None])
                den = s2[s:s + chunk, None] * (t1 * t1)[None, :] + s1[None, :] * (t2[s:s + chunk] ** 2)[:, None] - num
                out.append(torch.topk(num / den, k, dim=1, largest=True))
            return out

        print("torch_fp16 %d %d %.4f" % (nq, k, median_ms(torch, fp16, 5)), flush=True)
        try:
            print("torch_int8 %d %d %.4f" % (nq, k, median_ms(torch, int8, 5)), flush=True)
        except RuntimeError as e:  # _int_mm's shape rules differ between versions
            print("torch_int8 failed: %s" % str(e).splitlines()[0], flush=True)

    if a.no_faiss:
        return 0
    try:
        import faiss
        import numpy as np
    except ImportError:
        print("faiss unavailable")
        return 0
    rng = np.random.default_rng(1)

    def np_desc(n):
        v = rng.integers(1, 8, size=(n, 144)).astype(np.float32)
        v[rng.random((n, 144)) < 0.7] = 0
        nrm = np.linalg.norm(v, axis=1, keepdims=True)
        return v / np.maximum(nrm, 1e-12)

    index = faiss.IndexFlatIP(144)
    index.add(np_desc(a.n))
    for nq, k in cases:
        q = np_desc(nq)
        index.search(q, k)
        ts = []
        for _ in range(3 if nq * a.n > 1e9 else 5):
            t0 = time.perf_counter()
            index.search(q, k)
            ts.append((time.perf_counter() - t0) * 1e3)
        ts.sort()
        print("faiss_cpu %d %d %.4f" % (nq, k, ts[len(ts) // 2]), flush=True)
    return 0


def family(torch, dev, a, cases):
    """The peers of another family's distance (see the module's text)."""
    g = torch.Generator(device=dev).manual_seed(1)
    dist, dim, n = a.dist, a.dim, a.n

    def rand(m):
        if a.kind == "f64":
            v = torch.randint(0, 10000, (m, dim), generator=g, device=dev).float()
            scale = torch.tensor([10.0 if k % 3 == 0 else 1e-4 for k in range(dim)], device=dev)
            return v * scale
        z = torch.rand((m, dim), generator=g, device=dev) < 0.7
        v = torch.randint(1, 8, (m, dim), generator=g, device=dev).float()
        v = torch.where(z, torch.zeros_like(v), v)
        if a.kind == "f32":
            v = v / v.sum(1, keepdim=True).clamp(min=1e-30)
        return v

    rows = rand(n)
    sd = rows.std(0, unbiased=False).clamp(min=1e-30) if dist == "std_l2" else None

    def prepared(x):
        """x as the distance's code sees it (scaled by sigma, or its square roots) and its norm:
        the sum of squares (l2 forms), |x| (cosine), sqrt of the sum (hellinger)."""
        if sd is not None:
            x = x / sd
        if dist == "hellinger":
            return x.sqrt(), x.sum(1).sqrt()
        if dist == "cosine":
            return x, x.norm(dim=1)
        return x, (x * x).sum(1)

    rows, rn = prepared(rows)
    dot = dist in ("l2", "std_l2", "hellinger", "cosine")
    fp16_ok = dot and (dist != "l2" or rows.abs().max().item() < 6e4 and rn.max().item() < 6e4)
    rows16 = rows.half() if fp16_ok else None

    def dot_key(q, rr, qn):
        c = (q.to(rr.dtype) @ rr.T).float()
        if dist in ("l2", "std_l2"):
            return qn[:, None] + rn[None, :] - 2.0 * c
        return 1.0 - c / (qn[:, None] * rn[None, :]).clamp(min=1e-30)

    for nq, k in cases:
        if not dot and dist != "l1" and nq * n * dim > (1 << 37):
            print("torch_fp32 %d %d: skipped (%.1e element-wise terms: minutes per batch)" % (nq, k, nq * n * dim),
                  flush=True)
            continue
        q, qn = prepared(rand(nq))
        chunk = max(1, min(CHUNK, (1 << 31) // (4 * n)))

        def run(prec):
            out = []
            for s in range(0, nq, chunk):
                qs = q[s:s + chunk]
                if dot:
                    d = dot_key(qs, rows16 if prec == 16 else rows, qn[s:s + chunk])
                elif dist == "l1":
                    d = torch.cdist(qs, rows, p=1)
                else:  # chi2, intersection: element-wise blocks of <= 2^28 elements
                    rb = max(1, (1 << 28) // (qs.shape[0] * dim))
                    parts = []
                    for r0 in range(0, n, rb):
                        x, y = qs[:, None, :], rows[None, r0:r0 + rb, :]
                        if dist == "chi2":
                            sm = x + y
                            parts.append(torch.where(sm > 0, (x - y) ** 2 / sm.clamp(min=1e-30), 0).sum(-1))
                        else:
                            parts.append(1.0 - torch.minimum(x, y).sum(-1) /
                                         torch.maximum(x.sum(-1), y.sum(-1)).clamp(min=1e-30))
                    d = torch.cat(parts, 1)
                out.append(torch.topk(d, k, dim=1, largest=False))
            return out

        if fp16_ok:
            print("torch_fp16 %d %d %.4f" % (nq, k, median_ms(torch, lambda: run(16), 5)), flush=True)
        reps = 5 if dot or dist == "l1" or nq * n <= 1e8 else 2
        print("torch_fp32 %d %d %.4f" % (nq, k, median_ms(torch, lambda: run(32), reps)), flush=True)

    if a.no_faiss or not dot or n > 2000000:
        return 0
    try:
        import faiss
        import numpy as np
    except ImportError:
        print("faiss unavailable")
        return 0
    xb = rows.cpu().numpy().astype(np.float32)
    if dist in ("hellinger", "cosine"):
        xb = xb / np.maximum(np.linalg.norm(xb, axis=1, keepdims=True), 1e-30)
        index = faiss.IndexFlatIP(dim)
    else:
        index = faiss.IndexFlatL2(dim)
    index.add(xb)
    for nq, k in cases:
        xq = prepared(rand(nq))[0].cpu().numpy().astype(np.float32)
        if dist in ("hellinger", "cosine"):
            xq = xq / np.maximum(np.linalg.norm(xq, axis=1, keepdims=True), 1e-30)
        index.search(xq, k)
        ts = []
        for _ in range(3 if nq * n > 1e9 else 5):
            t0 = time.perf_counter()
            index.search(xq, k)
            ts.append((time.perf_counter() - t0) * 1e3)
        ts.sort()
        print("faiss_cpu %d %d %.4f" % (nq, k, ts[len(ts) // 2]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
