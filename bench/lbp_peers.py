#!/usr/bin/env python3
"""Peers for bench_lbp (bench/lbp.c calls this; it can also run alone).

  lbp_peers.py skimage --image F.pgm --config P,R,METHOD [--config ...]
      scikit-image's local_binary_pattern on the image: prints
      "skimage P,R,METHOD <ms>" (best of 3, CPU time of this process, one
      thread: scikit-image's Cython loop is single-threaded).
  lbp_peers.py torch --image F.pgm [--batch N] [--check KIND=F.pgm ...]
      PyTorch implementations on the GPU (tensor shifts over a batch of N
      copies of the image): lbp8, tlbap (th=0.9), lanadp and circular LBP
      P=8, R=1 (scikit-image's coordinates, binary64 bilinear), with and
      without per-image histograms (torch.bincount). Prints a table of
      kernel times from CUDA events (median of 20). --check compares the
      first image's codes with Patina's ((H-2) x (W-2) PGM files).
Exit 0 even when a peer is unavailable (it says so).
"""
import argparse
import statistics
import sys
import time

import numpy as np


def read_pgm(path):
    with open(path, "rb") as f:
        data = f.read()
    assert data[:2] == b"P5", "%s: not a binary PGM" % path
    parts, pos = [], 2
    while len(parts) < 3:
        while data[pos:pos + 1].isspace():
            pos += 1
        start = pos
        while not data[pos:pos + 1].isspace():
            pos += 1
        parts.append(int(data[start:pos]))
    w, h, _ = parts
    return np.frombuffer(data, np.uint8, w * h, pos + 1).reshape(h, w)


def run_skimage(a):
    try:
        import skimage
        from skimage.feature import local_binary_pattern
    except ImportError as e:
        print("skimage: unavailable (%s)" % e)
        return
    img = read_pgm(a.image)
    print("# scikit-image %s, numpy %s, image %dx%d" % (skimage.__version__, np.__version__,
                                                      img.shape[1], img.shape[0]))
    for c in a.config:
        P, R, method = c.split(",")
        best = float("inf")
        for _ in range(3):
            t = time.process_time()
            local_binary_pattern(img, int(P), float(R), method)
            best = min(best, time.process_time() - t)
        print("skimage %s %.3f" % (c, best * 1e3))
        sys.stdout.flush()


def run_torch(a):
    try:
        import torch
    except ImportError as e:
        print("torch: unavailable (%s)" % e)
        return
    if not torch.cuda.is_available():
        print("torch: no CUDA device")
        return
    dev = torch.device("cuda")
    img = read_pgm(a.image)
    H, W = img.shape
    x = torch.from_numpy(img.copy()).to(dev).unsqueeze(0).repeat(a.batch, 1, 1)  # (N, H, W) u8
    N = a.batch

    def neighbours(t):
        # bit order: right, top-right, top, top-left, left, bottom-left, bottom, bottom-right
        c = t[:, 1:-1, 1:-1]
        n = [t[:, 1:-1, 2:], t[:, :-2, 2:], t[:, :-2, 1:-1], t[:, :-2, :-2],
             t[:, 1:-1, :-2], t[:, 2:, :-2], t[:, 2:, 1:-1], t[:, 2:, 2:]]
        return c, n

    def lbp8(t):
        c, n = neighbours(t)
        code = torch.zeros_like(c)
        for k in range(8):
            code |= (n[k] >= c).to(torch.uint8) << k
        return code

    def tlbap(t, th=0.9):
        c, n = neighbours(t)
        mx = c.clone()
        for v in n:
            mx = torch.maximum(mx, v)
        th2 = th * mx.double()
        code = torch.zeros_like(c)
        for k in range(8):
            code |= ((n[k] > c) & (n[k].double() > th2)).to(torch.uint8) << k
        return code

    def lanadp(t):
        _, n = neighbours(t.to(torch.int16))
        code = torch.zeros(n[0].shape, dtype=torch.uint8, device=dev)
        for k in range(8):
            v2 = 2 * n[k]
            s1 = n[(k + 1) % 8] + n[(k + 2) % 8]
            s2 = n[(k - 1) % 8] + n[(k - 2) % 8]
            b = ((s1 >= v2) & (s2 >= v2)) | ((s1 <= v2) & (s2 <= v2))
            code |= b.to(torch.uint8) << k
        return code

    # circular LBP, P=8, R=1, scikit-image's sample points and bilinear rule
    P, R = 8, float(np.float32(1.0))
    rp = np.round(-R * np.sin(2 * np.pi * np.arange(P, dtype=np.double) / P), 5)
    cp = np.round(R * np.cos(2 * np.pi * np.arange(P, dtype=np.double) / P), 5)
    rows = torch.arange(H, device=dev, dtype=torch.float64)
    cols = torch.arange(W, device=dev, dtype=torch.float64)
    pad = 2
    samples = []
    for k in range(P):
        yy, xx = rows + float(rp[k]), cols + float(cp[k])
        minr, minc = torch.floor(yy), torch.floor(xx)
        samples.append((minr.long() + pad, torch.ceil(yy).long() + pad, minc.long() + pad,
                        torch.ceil(xx).long() + pad, (yy - minr)[:, None], (xx - minc)[None, :]))

    def lbp_circ(t):
        f = torch.nn.functional.pad(t.double(), (pad, pad, pad, pad))  # zeros outside: mode 'C'
        c = t.double()
        code = torch.zeros(t.shape, dtype=torch.int32, device=dev)
        for k, (r0, r1, c0, c1, dr, dc) in enumerate(samples):
            top = (1 - dc) * f[:, r0][:, :, c0] + dc * f[:, r0][:, :, c1]
            bottom = (1 - dc) * f[:, r1][:, :, c0] + dc * f[:, r1][:, :, c1]
            v = (1 - dr) * top + dr * bottom
            code |= (v - c >= 0).to(torch.int32) << k
        return code

    def hist(codes, nb):
        off = torch.arange(N, device=dev).view(N, 1, 1) * nb
        return torch.bincount((codes.long() + off).flatten(), minlength=N * nb).view(N, nb)

    def timeit(fn, reps=20):
        fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            torch.cuda.synchronize()
            ts.append(e0.elapsed_time(e1))
        return statistics.median(ts)

    print("# torch %s on %s; %d images of %dx%d per call" % (torch.__version__,
                                                           torch.cuda.get_device_name(0), N, W, H))
    print("| peer (PyTorch) | output | ms per call | us per image | images/s | input GB/s |")
    print("|---|---|---|---|---|---|")
    kinds = [("lbp8", lbp8, 256, N), ("tlbap:th=0.9", tlbap, 256, N), ("lanadp", lanadp, 256, N),
             ("lbp P=8,R=1 default", lbp_circ, 256, min(N, 8))]
    for name, fn, nb, n in kinds:
        xs = x[:n]
        for what, call in (("codes", lambda: fn(xs)),
                           ("codes + histograms", lambda: hist(fn(xs), nb) if n == N else None)):
            if n != N and what != "codes":
                continue
            try:
                ms = timeit(call)
            except RuntimeError as e:  # out of memory for large batches
                print("| %s | %s | error: %s |" % (name, what, str(e).split("\n")[0][:80]))
                torch.cuda.empty_cache()
                continue
            print("| %s | %s | %.3f | %.2f | %.0f | %.0f |" % (name, what, ms, ms * 1e3 / n,
                                                              n / (ms * 1e-3),
                                                              H * W * n / (ms * 1e-3) / 1e9))
            sys.stdout.flush()
    fns = {"lbp8": lbp8, "tlbap": tlbap, "lanadp": lanadp}
    for chk in a.check or []:
        kind, path = chk.split("=", 1)
        ours = read_pgm(path)
        theirs = fns[kind](x[:1])[0].cpu().numpy()
        same = theirs.shape == ours.shape and bool((theirs == ours).all())
        print("check %s: PyTorch codes %s Patina's" % (kind, "identical to" if same else "DIFFER FROM"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("peer", choices=["skimage", "torch"])
    ap.add_argument("--image", required=True)
    ap.add_argument("--config", action="append", default=[])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--check", action="append")
    a = ap.parse_args()
    (run_skimage if a.peer == "skimage" else run_torch)(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
