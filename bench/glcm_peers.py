#!/usr/bin/env python3
"""Peers of bench/glcm.c, on the same images (the same integer hash):

  * scikit-image graycomatrix (CPU, single-threaded Cython loop): ms and ns
    per pixel pair for the paper's configurations, 1024^2 and 4096^2;
  * a PyTorch GLCM on the GPU: two shifted views, idx = a*L + b,
    torch.bincount(idx, minlength=L*L) - kernel time with CUDA events (image
    resident), 1024^2 .. 16384^2, and the 8 offsets of 4 angles x 2
    distances;

and cross-checks that both give the same counts (FNV-1a checksums of the
u32 matrices).

--tsv prints one tab-separated line per measurement instead of tables, for
bench_glcm to put beside its own numbers:
    # <peer> <version> [<device>]
    <peer> <size> <kind> <L> <d> <angle> <ms> <same counts: yes|NO|->
with peer skimage or torch, kind 0 slow / 1 drastic, and d = "1,4", angle =
"8" for the 8 offsets of 4 angles x 2 distances in one call.

Usage: glcm_peers.py [--max-size N] [--quick] [--no-gpu] [--tsv]
"""
import argparse
import math
import sys
import time

try:
    import numpy as np
except ImportError:
    print("numpy not importable: no peers")
    sys.exit(0)

CONFIGS = [(1, 0), (1, 45), (4, 0), (4, 45)]


def generate(n, kind):
    """bench/glcm.c's generate(), in uint32 arithmetic, row block by row block."""
    out = np.empty((n, n), np.uint8)
    x = np.arange(n, dtype=np.uint32)[None, :]
    step = max(1, (1 << 24) // n)
    for y0 in range(0, n, step):
        y = np.arange(y0, min(n, y0 + step), dtype=np.uint32)[:, None]
        with np.errstate(over="ignore"):
            h = (x * np.uint32(0x9E3779B1)) ^ (y * np.uint32(0x85EBCA77))
            h ^= h >> np.uint32(15)
            h *= np.uint32(0x2C1B3C6D)
            h ^= h >> np.uint32(12)
        if kind == 1:
            out[y0:y0 + y.shape[0]] = (h >> np.uint32(24)).astype(np.uint8)
        else:
            ramp = (x.astype(np.uint64) + 2 * y.astype(np.uint64)) * 255 // (3 * n)
            val = ramp.astype(np.int64) + (h >> np.uint32(30)).astype(np.int64) - 1
            out[y0:y0 + y.shape[0]] = np.clip(val, 0, 255).astype(np.uint8)
    return out


def offset(d, angle):
    """scikit-image 0.19's rounding (half away from zero)."""
    t = angle * (math.pi / 180.0)
    def rnd(v):
        return int(v + 0.5) if v > 0 else int(v - 0.5)
    return rnd(math.sin(t) * d), rnd(math.cos(t) * d)


def fnv(counts):
    s = 1469598103934665603
    for v in counts.astype(np.uint64).ravel().tolist():
        s = ((s ^ v) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return s


def kind_name(k):
    return "drastic" if k else "slow"


TSV = False


def bench_skimage(sizes):
    try:
        import skimage
        from skimage.feature import graycomatrix
    except ImportError:
        if not TSV:
            print("\n### scikit-image: not importable")
        return {}
    if TSV:
        print("#\tskimage\t%s" % skimage.__version__)
    else:
        print("\n### scikit-image %s graycomatrix (CPU, one core): ms, ns per pixel pair (best of 3)\n" %
              skimage.__version__)
        print("| size | image | L | d | angle | ms | ns/pair |")
        print("|---|---|---|---|---|---|---|")
    sums = {}
    for n in sizes:
        for kind in (0, 1):
            v = generate(n, kind)
            for L in (8, 32):
                q = (v.astype(np.uint32) * L >> 8).astype(np.uint8)
                for d, a in CONFIGS:
                    best = 1e9
                    for _ in range(3):
                        t0 = time.perf_counter()
                        P = graycomatrix(q, [d], [math.radians(a)], levels=L)
                        best = min(best, time.perf_counter() - t0)
                    dy, dx = offset(d, a)
                    pairs = (n - abs(dy)) * (n - abs(dx))
                    if n <= 1024:
                        sums[(n, kind, L, d, a)] = fnv(P[:, :, 0, 0])
                    if TSV:
                        print("skimage\t%d\t%d\t%d\t%d\t%d\t%.6f\t-" % (n, kind, L, d, a, best * 1e3))
                    else:
                        print("| %d² | %s | %d | %d | %d | %.2f | %.2f |" % (n, kind_name(kind), L, d, a,
                                                                          best * 1e3, best * 1e9 / pairs))
                    sys.stdout.flush()
    return sums


def bench_torch(sizes, sk_sums):
    try:
        import torch
    except ImportError:
        if not TSV:
            print("\n### PyTorch: not importable")
        return
    if not torch.cuda.is_available():
        if not TSV:
            print("\n### PyTorch %s: no CUDA device" % torch.__version__)
        return
    dev = torch.device("cuda")
    if TSV:
        print("#\ttorch\t%s\t%s" % (torch.__version__, torch.cuda.get_device_name(0)))
    else:
        print("\n### PyTorch %s bincount GLCM on %s: kernel ms (median, image resident)\n" %
              (torch.__version__, torch.cuda.get_device_name(0)))
        print("| size | image | L | d | angle | ms | GB/s (pixels / time) | same counts as scikit-image |")
        print("|---|---|---|---|---|---|---|---|")

    def glcm(qt, L, dy, dx):
        H, W = qt.shape
        rs, re_ = max(0, -dy), min(H, H - dy)
        cs, ce = max(0, -dx), min(W, W - dx)
        a = qt[rs:re_, cs:ce].to(torch.int32)
        b = qt[rs + dy:re_ + dy, cs + dx:ce + dx].to(torch.int32)
        return torch.bincount((a * L + b).flatten(), minlength=L * L)

    def timeit(fn, reps):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1))
        ts.sort()
        return ts[len(ts) // 2]

    for n in sizes:
        reps = 20 if n <= 4096 else 5
        for kind in (0, 1):
            v = generate(n, kind)
            for L in (8, 32):
                q = (v.astype(np.uint32) * L >> 8).astype(np.uint8)
                qt = torch.from_numpy(q).to(dev)
                for d, a in CONFIGS:
                    dy, dx = offset(d, a)
                    ms = timeit(lambda: glcm(qt, L, dy, dx), reps)
                    check = ""
                    key = (n, kind, L, d, a)
                    if key in sk_sums:
                        c = glcm(qt, L, dy, dx).cpu().numpy().astype(np.uint32).reshape(L, L)
                        check = "yes" if fnv(c) == sk_sums[key] else "NO"
                    if TSV:
                        print("torch\t%d\t%d\t%d\t%d\t%d\t%.6f\t%s" % (n, kind, L, d, a, ms, check or "-"))
                    else:
                        print("| %d² | %s | %d | %d | %d | %.4f | %.0f | %s |" % (
                            n, kind_name(kind), L, d, a, ms, n * n / (ms * 1e-3) / 1e9, check))
                    sys.stdout.flush()
                if n == sizes[-1]:
                    offs = [offset(d, a) for d in (1, 4) for a in (0, 45, 90, 135)]
                    ms = timeit(lambda: [glcm(qt, L, dy, dx) for dy, dx in offs], reps)
                    if TSV:
                        print("torch\t%d\t%d\t%d\t1,4\t8\t%.6f\t-" % (n, kind, L, ms))
                    else:
                        print("| %d² | %s | %d | 1,4 | 0,45,90,135 (8 offsets) | %.4f | %.0f | |" % (
                            n, kind_name(kind), L, ms, n * n / (ms * 1e-3) / 1e9))
                del qt
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-size", type=int, default=16384)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--tsv", action="store_true")
    args = ap.parse_args()
    global TSV
    TSV = args.tsv
    cpu_sizes = [n for n in (1024, 4096) if n <= args.max_size and (not args.quick or n <= 1024)]
    gpu_sizes = [n for n in (1024, 4096, 8192, 16384)
                 if n <= args.max_size and (not args.quick or n <= 4096)]
    sums = bench_skimage(cpu_sizes)
    if not args.no_gpu:
        bench_torch(gpu_sizes, sums)
    return 0


if __name__ == "__main__":
    sys.exit(main())
