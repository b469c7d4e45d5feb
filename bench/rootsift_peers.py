#!/usr/bin/env python3
"""Peers for bench_rootsift (bench/rootsift.c calls this; it can also run alone).

  rootsift_peers.py --size WxH --m M [--m M ...] [--threads T] [--count N] FILE ...
      The FILEs decoded (cv2.imread), resized to W x H by nearest neighbour
      as bench_rootsift resizes them (source row y * h // H, column
      x * w // W), N images (the files in turn, as the bench's batch), then
      per budget M:
        opencv: OpenCV's SIFT (cv2.SIFT_create(nfeatures=M)) detectAndCompute
          on every image, the images spread over T threads (one image per
          thread at a time, cv2.setNumThreads(1): all cores busy, as
          bench_rootsift's VLFeat on all cores); after one warm-up image,
          one timed pass over the N images;
        kornia: kornia.feature.SIFTFeature(num_features=M) on the GPU, one
          image per call (it takes no batches), float grey in [0, 1]; after
          one warm-up image, one timed pass, CUDA-synchronised.
      Prints one line per peer and budget:
        "peer opencv WxH m=M <img/s>"  or  "peer opencv WxH m=M unavailable: <why>"
        "peer kornia WxH m=M <img/s>"  or  "peer kornia WxH m=M unavailable: <why>"
Exit 0 even when a peer is unavailable (it says so).
"""
import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def resized(img, w, h):
    import numpy as np
    rows = (np.arange(h, dtype=np.int64) * img.shape[0]) // h
    cols = (np.arange(w, dtype=np.int64) * img.shape[1]) // w
    return np.ascontiguousarray(img[rows][:, cols])


def load(files, w, h, count):
    import cv2
    srcs = []
    for f in files:
        im = cv2.imread(f, cv2.IMREAD_COLOR)
        if im is not None:
            srcs.append(resized(im, w, h))
    return [srcs[i % len(srcs)] for i in range(count)] if srcs else []


def opencv_rate(imgs, m, threads):
    import cv2
    cv2.setNumThreads(1)
    sift = [cv2.SIFT_create(nfeatures=m) for _ in range(threads)]

    def one(k):
        sift[k % threads].detectAndCompute(imgs[k], None)

    one(0)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as ex:
        # worker k takes images k, k + threads, ...: each SIFT object in one thread
        list(ex.map(lambda w: [one(k) for k in range(w, len(imgs), threads)], range(threads)))
    return len(imgs) / (time.perf_counter() - t0)


def kornia_rate(imgs, m):
    import torch
    import kornia.feature as KF
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device for torch")
    dev = torch.device("cuda")
    feat = KF.SIFTFeature(num_features=m, device=dev)
    grey = []
    for im in imgs:  # BGR -> grey in [0, 1], on the device before timing
        t = torch.from_numpy(im).to(dev).float()
        g = (0.299 * t[..., 2] + 0.587 * t[..., 1] + 0.114 * t[..., 0]) / 255.0
        grey.append(g[None, None])
    with torch.inference_mode():
        feat(grey[0])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for g in grey:
            feat(g)
        torch.cuda.synchronize()
    return len(grey) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", required=True)
    ap.add_argument("--m", type=int, action="append", required=True)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--count", type=int, default=0)
    ap.add_argument("--no-kornia", action="store_true")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    w, h = (int(v) for v in a.size.split("x"))
    tag = "%dx%d" % (w, h)
    try:
        imgs = load(a.files, w, h, a.count or len(a.files))
        why = None if imgs else "no image decoded"
    except ImportError as e:
        imgs, why = [], "no images: OpenCV not installed (%s)" % e
    for m in a.m:
        try:
            line = "%.2f" % opencv_rate(imgs, m, max(1, a.threads)) if imgs else "unavailable: " + why
        except Exception as e:  # a peer's failure is reported, never fatal
            line = "unavailable: %s" % e
        print("peer opencv %s m=%d %s" % (tag, m, line), flush=True)
    for m in a.m:
        if a.no_kornia:
            line = "unavailable: not run (--no-kornia)"
        elif not imgs:
            line = "unavailable: " + why
        else:
            try:
                line = "%.2f" % kornia_rate(imgs, m)
            except ImportError as e:
                line = "unavailable: not installed (%s)" % e
            except Exception as e:
                line = "unavailable: %s" % e
        print("peer kornia %s m=%d %s" % (tag, m, line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
