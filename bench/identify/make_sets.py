#!/usr/bin/env python3
"""Builds the identification benchmark's image sets (issue 15) under a scratch folder, with a fixed seed.

  make_sets.py [--out DIR] [--seed 15] [--genuine 400] [--impostor-textures 200]
               [--impostor-photos 200] [--holdout 0.1] [--refs N] [--link 0.5]

Sources (real images from Debian packages, never committed; /work/shared/data's recipes, or
PATINA_DATA pointing at a copy of that folder):
  textures.sh -> DIR/textures/ufoai/  1022 UFO:AI material textures
  photos.sh   -> DIR/photos/<source>/ general photographs (only when --impostor-photos > 0;
                 the narrow-domain stellarium-astro folder is not used)

Writes into DIR:
  refs/          the registered texture images (hard links to, or copies of, the originals)
  heldout/       the held-out texture images, likewise (run.sh checks them for content shared with
                 registered textures: shares.csv, see score.py)
  queries/       genuine queries: recaptures of registered references (g0001.png|jpg ...)
  impostors/     impostor queries: recaptures of held-out textures and of photographs (i0001...)
  groups.csv     file,item,registered  for every texture (item = group of recolours/edits)
  manifest.csv   query,set,item,source,kinds,params  for every query

Grouping: two textures of the same aspect ratio are linked when the rank correlation of their
high-pass grey images (64x64 area-average, minus a Gaussian blur of sigma 2) is >= --link;
items are the connected components. Recolours and edits of one source (clean/dirty, rust,
colour variants) are pixel-aligned and share their fine structure; distinct textures of one
kind (two concrete walls) do not. Held-out items (--holdout of the items, whole groups) are
never registered: their recaptures are impostors that look like the references.

Distortions (per query, from its own generator seeded by (seed, set, index)): half the queries
have one kind (cycling through the 8 kinds), half 2 to 4 kinds in this order:
  perspective  source quadrilateral: each corner moved inwards by U(0, 0.2) of the side, warped
               onto the full rectangle (no synthetic border)
  rotate       angle U(-180, 180) degrees, then cropped to the largest axis-aligned rectangle
               inside the rotated image (no synthetic border)
  crop         keeps U(0.4, 0.9) of each side (one factor per query), at a random position
  scale        factor exp(U(log 0.5, log 2)): area average down, bicubic up
  photometric  gamma exp(U(log 0.6, log 1.6)), contrast U(0.6, 1.4) about the mean,
               brightness U(-40, 40) grey levels
  blur         Gaussian, sigma U(0.8, 2.5) pixels
  noise        Gaussian, sigma U(3, 15) grey levels, per channel
  jpeg         quality integer U[40, 90]; queries without it are written as PNG
Photographs are area-averaged to a longer side of at most 1024 before being distorted.
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys

try:
    import cv2
    import numpy as np
except ImportError as e:  # pragma: no cover
    print("make_sets: %s (run bench/identify/setup.sh)" % e, file=sys.stderr)
    sys.exit(3)

KINDS = ["perspective", "rotate", "crop", "scale", "photometric", "blur", "noise", "jpeg"]
IMG_EXT = (".jpg", ".jpeg", ".png")
PHOTO_SKIP = {"stellarium-astro"}
DATA = os.environ.get("PATINA_DATA", "/work/shared/data")


def list_images(d):
    out = []
    for root, dirs, files in os.walk(d):
        dirs.sort()
        for f in sorted(files):
            if f.lower().endswith(IMG_EXT):
                out.append(os.path.join(root, f))
    return out


def ensure_source(recipe, out_dir, scratch):
    """Runs /work/shared/data/RECIPE with OUT=out_dir unless out_dir already holds images."""
    if os.path.isdir(out_dir) and list_images(out_dir):
        return
    env = dict(os.environ, OUT=out_dir)
    env.setdefault("W", os.path.join(scratch, "download"))
    print("make_sets: running %s (downloads into %s)" % (recipe, env["W"]), file=sys.stderr)
    subprocess.run(["bash", os.path.join(DATA, recipe)], env=env, check=True)


def highpass_signature(path):
    g = cv2.imread(path, cv2.IMREAD_GRAYSCALE)
    h, w = g.shape
    s = cv2.resize(g.astype(np.float32), (64, 64), interpolation=cv2.INTER_AREA)
    hp = (s - cv2.GaussianBlur(s, (0, 0), 2.0)).ravel()
    r = np.argsort(np.argsort(hp, kind="stable"), kind="stable").astype(np.float64)
    r -= r.mean()
    r /= np.linalg.norm(r)
    return r, round(w / h, 3)


def group_textures(paths, link):
    sig = [highpass_signature(p) for p in paths]
    v = np.array([s[0] for s in sig])
    aspect = np.array([s[1] for s in sig])
    c = v @ v.T
    c[aspect[:, None] != aspect[None, :]] = -1
    parent = list(range(len(paths)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j in zip(*np.where(np.triu(c >= link, 1))):
        a, b = find(i), find(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    roots = sorted({find(i) for i in range(len(paths))})
    label = {r: "t%04d" % k for k, r in enumerate(roots)}
    return [label[find(i)] for i in range(len(paths))]


def largest_rotated_rect(w, h, angle):
    """Width and height of the largest axis-aligned rectangle inside a w x h rectangle rotated by angle (rad)."""
    if w <= 0 or h <= 0:
        return 0, 0
    long_side, short_side = (w, h) if w >= h else (h, w)
    sin_a, cos_a = abs(math.sin(angle)), abs(math.cos(angle))
    if short_side <= 2.0 * sin_a * cos_a * long_side or abs(sin_a - cos_a) < 1e-10:
        x = 0.5 * short_side
        wr, hr = (x / sin_a, x / cos_a) if w >= h else (x / cos_a, x / sin_a)
    else:
        cos_2a = cos_a * cos_a - sin_a * sin_a
        wr, hr = (w * cos_a - h * sin_a) / cos_2a, (h * cos_a - w * sin_a) / cos_2a
    return wr, hr


def distort(img, kinds, rng):
    """Applies kinds (in KINDS order) to a BGR uint8 image; returns (image, jpeg quality or None, params)."""
    params = []
    out = img
    quality = None
    for k in KINDS:
        if k not in kinds:
            continue
        h, w = out.shape[:2]
        if k == "perspective":
            d = rng.uniform(0, 0.2, size=(4, 2)) * [w, h]
            src = np.float32([[d[0, 0], d[0, 1]], [w - 1 - d[1, 0], d[1, 1]],
                              [w - 1 - d[2, 0], h - 1 - d[2, 1]], [d[3, 0], h - 1 - d[3, 1]]])
            dst = np.float32([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]])
            m = cv2.getPerspectiveTransform(src, dst)
            out = cv2.warpPerspective(out, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            params.append("persp=%.3f" % (d.max() / max(w, h)))
        elif k == "rotate":
            a = rng.uniform(-180, 180)
            m = cv2.getRotationMatrix2D(((w - 1) / 2, (h - 1) / 2), a, 1.0)
            cos, sin = abs(m[0, 0]), abs(m[0, 1])
            nw, nh = int(math.ceil(h * sin + w * cos)), int(math.ceil(h * cos + w * sin))
            m[0, 2] += (nw - w) / 2
            m[1, 2] += (nh - h) / 2
            r = cv2.warpAffine(out, m, (nw, nh), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
            cw, ch = largest_rotated_rect(w, h, math.radians(a))
            cw, ch = max(8, int(cw) - 2), max(8, int(ch) - 2)
            x0, y0 = (nw - cw) // 2, (nh - ch) // 2
            out = r[y0:y0 + ch, x0:x0 + cw]
            params.append("rot=%.1f" % a)
        elif k == "crop":
            f = rng.uniform(0.4, 0.9)
            cw, ch = max(8, int(round(w * f))), max(8, int(round(h * f)))
            x0 = int(rng.integers(0, w - cw + 1))
            y0 = int(rng.integers(0, h - ch + 1))
            out = out[y0:y0 + ch, x0:x0 + cw]
            params.append("crop=%.3f" % f)
        elif k == "scale":
            s = math.exp(rng.uniform(math.log(0.5), math.log(2.0)))
            nw, nh = max(8, int(round(w * s))), max(8, int(round(h * s)))
            out = cv2.resize(out, (nw, nh), interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_CUBIC)
            params.append("scale=%.3f" % s)
        elif k == "photometric":
            g = math.exp(rng.uniform(math.log(0.6), math.log(1.6)))
            c = rng.uniform(0.6, 1.4)
            b = rng.uniform(-40, 40)
            x = 255.0 * (out.astype(np.float64) / 255.0) ** g
            x = (x - x.mean()) * c + x.mean() + b
            out = np.clip(np.rint(x), 0, 255).astype(np.uint8)
            params.append("gamma=%.3f;contrast=%.3f;bright=%.1f" % (g, c, b))
        elif k == "blur":
            s = rng.uniform(0.8, 2.5)
            out = cv2.GaussianBlur(out, (0, 0), s)
            params.append("blur=%.2f" % s)
        elif k == "noise":
            s = rng.uniform(3, 15)
            x = out.astype(np.float64) + rng.normal(0, s, size=out.shape)
            out = np.clip(np.rint(x), 0, 255).astype(np.uint8)
            params.append("noise=%.1f" % s)
        elif k == "jpeg":
            quality = int(rng.integers(40, 91))
            params.append("q=%d" % quality)
    return out, quality, ";".join(params)


def choose_kinds(i, rng):
    """Query i: one kind (cycling) for even i, 2..4 random kinds for odd i."""
    if i % 2 == 0:
        return [KINDS[(i // 2) % len(KINDS)]]
    n = int(rng.integers(2, 5))
    return [KINDS[k] for k in sorted(rng.choice(len(KINDS), size=n, replace=False).tolist())]


def load_source(path, maxside):
    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise RuntimeError("%s: cannot be decoded" % path)
    h, w = img.shape[:2]
    if maxside and max(w, h) > maxside:
        f = maxside / max(w, h)
        img = cv2.resize(img, (max(1, round(w * f)), max(1, round(h * f))), interpolation=cv2.INTER_AREA)
    return img


def write_query(dirname, stem, img, quality):
    if quality is not None:
        name = stem + ".jpg"
        ok = cv2.imwrite(os.path.join(dirname, name), img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    else:
        name = stem + ".png"
        ok = cv2.imwrite(os.path.join(dirname, name), img, [cv2.IMWRITE_PNG_COMPRESSION, 6])
    if not ok:
        raise RuntimeError("%s/%s: cannot be written" % (dirname, name))
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "patina-identify"))
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--genuine", type=int, default=400)
    ap.add_argument("--impostor-textures", type=int, default=200)
    ap.add_argument("--impostor-photos", type=int, default=200)
    ap.add_argument("--holdout", type=float, default=0.1, help="fraction of texture images held out (whole items)")
    ap.add_argument("--refs", type=int, default=0, help="register only about this many references (whole items; 0: all)")
    ap.add_argument("--link", type=float, default=0.5, help="high-pass correlation that links two textures")
    a = ap.parse_args()

    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    tex_dir = os.path.join(out, "textures")
    ensure_source("textures.sh", tex_dir, out)
    textures = list_images(tex_dir)
    photos = []
    if a.impostor_photos > 0:
        ph_dir = os.path.join(out, "photos")
        ensure_source("photos.sh", ph_dir, out)
        photos = [p for p in list_images(ph_dir) if os.path.basename(os.path.dirname(p)) not in PHOTO_SKIP]

    names = [os.path.basename(p) for p in textures]
    if len(set(names)) != len(names):
        sys.exit("make_sets: texture file names are not unique")
    items = group_textures(textures, a.link)
    by_item = {}
    for p, it in zip(textures, items):
        by_item.setdefault(it, []).append(p)
    order = sorted(by_item)
    np.random.default_rng([a.seed, 0]).shuffle(order)
    held, held_n = [], 0
    while held_n < a.holdout * len(textures):
        it = order.pop(0)
        held.append(it)
        held_n += len(by_item[it])
    registered, reg_n = [], 0
    for it in order:
        if a.refs and reg_n >= a.refs:
            break
        registered.append(it)
        reg_n += len(by_item[it])
    reg_set, held_set = set(registered), set(held)

    for sub in ("refs", "heldout", "queries", "impostors"):
        d = os.path.join(out, sub)
        if os.path.isdir(d):
            shutil.rmtree(d)
        os.makedirs(d)
    refs = []
    for p, it in zip(textures, items):
        if it in reg_set or it in held_set:
            dst = os.path.join(out, "refs" if it in reg_set else "heldout", os.path.basename(p))
            try:
                os.link(p, dst)
            except OSError:
                shutil.copyfile(p, dst)
            if it in reg_set:
                refs.append((os.path.basename(p), it, p))
    refs.sort()
    with open(os.path.join(out, "groups.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "item", "registered"])
        for p, it in sorted(zip(names, items)):
            w.writerow([p, it, 1 if it in reg_set else (0 if it in held_set else "")])

    rows = []
    gen_src = np.random.default_rng([a.seed, 1]).permutation(len(refs))
    for i in range(a.genuine):
        name, it, path = refs[gen_src[i % len(refs)]]
        rng = np.random.default_rng([a.seed, 2, i])
        kinds = choose_kinds(i, rng)
        img, q, params = distort(load_source(path, 0), kinds, rng)
        qn = write_query(os.path.join(out, "queries"), "g%04d" % (i + 1), img, q)
        rows.append(["queries/" + qn, "genuine", it, name, "+".join(kinds), params])
    held_paths = sorted(p for p, it in zip(textures, items) if it in held_set)
    held_order = np.random.default_rng([a.seed, 3]).permutation(len(held_paths))
    photo_order = np.random.default_rng([a.seed, 4]).permutation(len(photos))
    srcs = [("texture", held_paths[held_order[i % len(held_paths)]]) for i in range(a.impostor_textures)]
    srcs += [("photo", photos[photo_order[i % len(photos)]]) for i in range(a.impostor_photos if photos else 0)]
    for i, (kind, path) in enumerate(srcs):
        rng = np.random.default_rng([a.seed, 5, i])
        kinds = choose_kinds(i, rng)
        img, q, params = distort(load_source(path, 1024 if kind == "photo" else 0), kinds, rng)
        qn = write_query(os.path.join(out, "impostors"), "i%04d" % (i + 1), img, q)
        src = os.path.basename(path) if kind == "texture" else os.path.relpath(path, os.path.join(out, "photos"))
        rows.append(["impostors/" + qn, "impostor-" + kind, "none", src, "+".join(kinds), params])
    with open(os.path.join(out, "manifest.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["query", "set", "item", "source", "kinds", "params"])
        w.writerows(rows)
    n_items = len(by_item)
    print("make_sets: %d textures in %d items (link %.2f); registered %d images / %d items; held out %d / %d; "
          "genuine %d, impostors %d (%d held-out textures, %d photos) -> %s"
          % (len(textures), n_items, a.link, len(refs), len(registered), held_n, len(held), a.genuine,
             len(srcs), min(a.impostor_textures, len(srcs)), len(srcs) - a.impostor_textures, out))


if __name__ == "__main__":
    main()
