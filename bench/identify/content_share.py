#!/usr/bin/env python3
"""Content shared between two ORIGINAL textures, decided by pixels (bench/identify's hygiene, issue 30).

Proposals come from any matcher (CSV files of the `patina identify --format csv` / peer contract:
query,rank,key,...; every (query, key) pair listed is a proposal); the decision does not use their scores.
For each proposed pair (A = the query's original, B = the registered original):

1. Homography. Both originals are read in grey, area-averaged to a longer side <= SIDE (512), and
   described with OpenCV SIFT (all features, contrast threshold 0.02) + RootSIFT; 2-NN matches at
   ratio 0.85 in both directions, kept when mutual; cv2.findHomography (RANSAC, 4 px, 5000 iterations,
   confidence 0.999, OpenCV's RNG seeded 0). No model (fewer than 8 inliers) = not shared.
2. Pixel test. B's grey is warped into A's frame with the model. Both are band-passed (Gaussian
   sigma 1 minus Gaussian sigma 4: the texture's structure, not its colour or shading) and compared in
   TILE x TILE (24 px) tiles of A that the warped B covers completely: a tile VERIFIES when both sides
   have structure (band-pass standard deviation >= 1.5 grey levels) and their normalised
   cross-correlation is >= NCC_MIN (0.7). The pair shares content when the verified tiles cover
   >= MIN_AREA (2%) of the smaller image's area (measured at SIDE) and at least MIN_TILES (4) tiles.
   Tiles (not the whole overlap) because a composite shares a window or a panel, not its whole area.

Writes CSV texture,registered,proposers,inliers,tiles,area,ncc,shared (area: the verified tiles'
fraction of the smaller image; ncc: the median over the verified tiles; shared: 0/1), one row per
distinct pair, and --sheet PNG: a contact sheet of the shared pairs with the highest and the lowest
verified area (A | B warped into A's frame | the verified tiles outlined), to check by eye.

  content_share.py --refs DIR --queries DIR --proposals NAME=CSV [...] --out CSV [--sheet PNG] [-j N]
  content_share.py --self-test     # synthetic pairs: a rotated, rescaled crop and a pasted patch share
                                   # content; an unrelated texture and a recoloured one of another does not

A pair whose query and key are the same file is skipped (a registered original finds itself).
"""
import argparse
import collections
import csv
import multiprocessing as mp
import os
import sys

import cv2
import numpy as np

SIDE = 512
RATIO = 0.85
RANSAC_PX = 4.0
MIN_INLIERS = 8
TILE = 24
STD_MIN = 1.5
NCC_MIN = 0.7
MIN_AREA = 0.02
MIN_TILES = 4

_cache = {}


def load(path):
    """(grey float32 at longer side <= SIDE, keypoints (k, 2), RootSIFT (k, 128)), cached per process."""
    if path in _cache:
        return _cache[path]
    im = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
    if im is None:
        raise SystemExit("content_share: cannot read %s" % path)
    s = SIDE / max(im.shape)
    if s < 1:
        im = cv2.resize(im, (max(1, round(im.shape[1] * s)), max(1, round(im.shape[0] * s))),
                        interpolation=cv2.INTER_AREA)
    im = cv2.equalizeHist(im)  # low-contrast textures (grass, stucco) get features and tile structure
    sift = cv2.SIFT_create(nfeatures=0, contrastThreshold=0.02)
    kp, d = sift.detectAndCompute(im, None)
    if d is None or len(kp) < 2:
        pts, d = np.zeros((0, 2), np.float32), np.zeros((0, 128), np.float32)
    else:
        pts = np.float32([k.pt for k in kp])
        d = np.sqrt(d / np.maximum(d.sum(1, keepdims=True), 1e-12)).astype(np.float32)
    if len(_cache) > 160:
        _cache.clear()
    _cache[path] = (im.astype(np.float32), pts, d)
    return _cache[path]


def nn2(a, b):
    """Per row of a: index of its nearest row of b and whether it passes the ratio test."""
    s = a @ b.T
    d2 = np.maximum(0, 2 - 2 * s)
    r = np.arange(len(a))
    best = np.argmin(d2, axis=1)  # ties: the lower index
    d1 = d2[r, best]
    d2[r, best] = np.inf
    d2b = d2.min(axis=1)  # the second nearest (a tie with the best is the second)
    return best, d1 < RATIO * RATIO * d2b


def bandpass(g):
    return cv2.GaussianBlur(g, (0, 0), 1.0) - cv2.GaussianBlur(g, (0, 0), 4.0)


def pair(a_path, b_path, want_images=False):
    """(inliers, verified tiles, area fraction, median ncc, shared, images or None)."""
    ga, pa, da = load(a_path)
    gb, pb, db = load(b_path)
    none = (0, 0, 0.0, 0.0, 0, None)
    if len(da) < MIN_INLIERS or len(db) < MIN_INLIERS:
        return none
    ab, oka = nn2(da, db)
    ba, okb = nn2(db, da)
    i = np.nonzero(oka & okb[ab] & (ba[ab] == np.arange(len(da))))[0]
    if len(i) < MIN_INLIERS:
        return none
    cv2.setRNGSeed(0)
    h, mask = cv2.findHomography(pb[ab[i]], pa[i], cv2.RANSAC, RANSAC_PX, maxIters=5000, confidence=0.999)
    if h is None or mask is None or int(mask.sum()) < MIN_INLIERS:
        return none
    inl = int(mask.sum())
    H, W = ga.shape
    wb = cv2.warpPerspective(gb, h, (W, H), flags=cv2.INTER_LINEAR, borderValue=0)
    cover = cv2.warpPerspective(np.ones_like(gb), h, (W, H), flags=cv2.INTER_NEAREST, borderValue=0)
    fa, fb = bandpass(ga), bandpass(wb)
    tiles, nccs = [], []
    for y in range(0, H - TILE + 1, TILE):
        for x in range(0, W - TILE + 1, TILE):
            if cover[y:y + TILE, x:x + TILE].min() < 1:
                continue
            ta = fa[y:y + TILE, x:x + TILE].ravel()
            tb = fb[y:y + TILE, x:x + TILE].ravel()
            ta = ta - ta.mean()
            tb = tb - tb.mean()
            sa, sb = ta.std(), tb.std()
            if sa < STD_MIN or sb < STD_MIN:
                continue
            c = float((ta * tb).mean() / (sa * sb))
            if c >= NCC_MIN:
                tiles.append((x, y))
                nccs.append(c)
    smaller = min(ga.size, gb.size)
    area = len(tiles) * TILE * TILE / smaller
    shared = int(len(tiles) >= MIN_TILES and area >= MIN_AREA)
    img = (ga, wb, tiles) if want_images else None
    return inl, len(tiles), area, float(np.median(nccs)) if nccs else 0.0, shared, img


def work(args):
    a, b = args
    r = pair(a, b)
    return r[:5]


def sheet(path, rows, qdir, rdir, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.patches as patches
    fig, axes = plt.subplots(len(rows), 2, figsize=(8, 3.4 * len(rows)), squeeze=False)
    for ax, r in zip(axes, rows):
        ga, wb, tiles = pair(os.path.join(qdir, r["texture"]), os.path.join(rdir, r["registered"]), True)[5]
        ax[0].imshow(ga, cmap="gray")
        ax[0].set_title("%s" % r["texture"], fontsize=8)
        ax[1].imshow(wb, cmap="gray")
        ax[1].set_title("%s warped (area %.1f%%, ncc %.2f)" % (r["registered"], 100 * float(r["area"]),
                                                              float(r["ncc"])), fontsize=8)
        for x, y in tiles:
            for a_ in ax:
                a_.add_patch(patches.Rectangle((x, y), TILE, TILE, fill=False, ec="lime", lw=0.6))
        for a_ in ax:
            a_.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=55)


def self_test():
    """Exit status 0 when the rule says what it should on synthetic textures (blurred noise, 400 x 300)."""
    import tempfile
    rng = np.random.default_rng(30)

    def tex():
        g = cv2.GaussianBlur(rng.normal(128, 60, (300, 400)).astype(np.float32), (0, 0), 1.5)
        return np.clip(g, 0, 255).astype(np.uint8)
    a, other = tex(), tex()
    rot = cv2.getRotationMatrix2D((200, 150), 25, 1.3)
    crop = cv2.warpAffine(a, rot, (400, 300))[60:240, 80:320]           # rotated, enlarged crop of a
    patch = other.copy()
    patch[20:140, 30:190] = a[100:220, 200:360]                          # a composite: a's panel in another
    cases = [("crop", crop, 1), ("patch", patch, 1), ("unrelated", other, 0),
             ("recoloured other", 255 - cv2.equalizeHist(other), 0)]
    bad = 0
    with tempfile.TemporaryDirectory() as d:
        cv2.imwrite(os.path.join(d, "a.png"), a)
        for name, im, want in cases:
            f = os.path.join(d, name.replace(" ", "_") + ".png")
            cv2.imwrite(f, im)
            r = pair(os.path.join(d, "a.png"), f)
            ok = r[4] == want
            bad += not ok
            print("%s %s: inliers %d, tiles %d, area %.3f, ncc %.2f, shared %d (want %d)" % (
                "ok  " if ok else "FAIL", name, r[0], r[1], r[2], r[3], r[4], want))
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--refs", required=True, help="the registered originals")
    ap.add_argument("--queries", required=True, help="the originals whose pairs are proposed (heldout or refs)")
    ap.add_argument("--proposals", action="append", required=True, help="NAME=CSV (query,rank,key,...)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--sheet")
    ap.add_argument("-j", type=int, default=os.cpu_count())
    a = ap.parse_args()
    props = collections.OrderedDict()
    for p in a.proposals:
        name, _, path = p.partition("=")
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                q, k = os.path.basename(r["query"]), os.path.basename(r["key"])
                if not k or q == k or r.get("rank") == "0":
                    continue
                key = tuple(sorted((q, k))) if a.queries == a.refs else (q, k)
                props.setdefault(key, set()).add(name)
    pairs = list(props)
    jobs = [(os.path.join(a.queries, q), os.path.join(a.refs, k)) for q, k in pairs]
    with mp.Pool(a.j) as pool:
        res = pool.map(work, jobs, chunksize=8)
    rows = []
    for (q, k), r in zip(pairs, res):
        rows.append({"texture": q, "registered": k, "proposers": "+".join(sorted(props[(q, k)])),
                     "inliers": r[0], "tiles": r[1], "area": "%.4f" % r[2], "ncc": "%.3f" % r[3], "shared": r[4]})
    rows.sort(key=lambda r: (r["texture"], r["registered"]))
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["texture", "registered", "shared"],
                           lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    by = collections.Counter()
    for r in rows:
        for p in r["proposers"].split("+"):
            by[(p, r["shared"])] += 1
    names = sorted({p for p, _ in by})
    print("content_share: %d pairs, %d shared; %s" % (
        len(rows), sum(r["shared"] for r in rows),
        ", ".join("%s proposed %d (%d shared)" % (p, by[(p, 0)] + by[(p, 1)], by[(p, 1)]) for p in names)),
        file=sys.stderr)
    if a.sheet:
        sh = sorted((r for r in rows if r["shared"]), key=lambda r: float(r["area"]))
        pick = sh[:3] + sh[-3:] if len(sh) > 6 else sh
        near = sorted((r for r in rows if not r["shared"] and r["tiles"]), key=lambda r: -r["tiles"])[:2]
        if pick or near:
            sheet(a.sheet, pick + near, a.queries, a.refs,
                  "shared pairs (the 3 smallest and 3 largest verified areas), then the 2 unshared pairs with the "
                  "most verified tiles; green: tiles with NCC >= %.2f" % NCC_MIN)


if __name__ == "__main__":
    main()
