#!/usr/bin/env python3
"""Generates the synthetic CEDD test images in this directory (tests/data/cedd).

What it is: a deterministic generator (fixed seeds, its own xorshift64*
PRNG) of 76 small PNG files that exercise every PNG colour type and bit
depth, tRNS, Adam7 interlacing, degenerate image sizes, the CEDD block-grid
boundaries, flat colours, the grey levels whose luminance is one ulp below an
integer (cedd.md §2), edge patterns and noise. Pure Python 3 standard library
(zlib + struct): no numpy, no PIL.

What it is not: the source of truth for the tests. The PNG files are committed
and the tests use the committed files; lire_golden.txt holds what LIRE's Java
CEDD computes for them. Re-running this script gives the same pixels, but the
compressed bytes may differ with another zlib build, and the few images drawn
with floating point (discs, the hue wheel) could change by a level with another
libm. The test checks each file's SHA-256 against the one LIRE saw, so a
regenerated file must be followed by a regenerated lire_golden.txt.

The JPEG files (jpg_*.jpg) are not made here: see README.md in this directory.

Usage: python3 make_images.py [OUTDIR]     (default: this script's directory)
"""
import math
import os
import struct
import sys
import zlib

MASK64 = (1 << 64) - 1


class Rng:
    """xorshift64*; the same sequence on every Python version."""

    def __init__(self, seed):
        self.s = (seed * 0x9E3779B97F4A7C15 + 1) & MASK64

    def next(self):
        s = self.s
        s ^= s >> 12
        s ^= (s << 25) & MASK64
        s ^= s >> 27
        self.s = s
        return (s * 2685821657736338717) & MASK64

    def below(self, n):
        return (self.next() >> 32) % n


# ----------------------------------------------------------------- PNG writer

ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2))
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def chunk(tag, data):
    body = tag + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def pack_row(samples, depth):
    """samples: flat list of ints (all channels of all pixels of one row)."""
    if depth == 8:
        return bytes(samples)
    if depth == 16:
        return b"".join(struct.pack(">H", v) for v in samples)
    per = 8 // depth
    out = bytearray()
    for i in range(0, len(samples), per):
        byte = 0
        group = samples[i:i + per]
        for k in range(per):
            byte <<= depth
            if k < len(group):
                byte |= group[k]
        out.append(byte)
    return bytes(out)


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def filter_rows(rows, bpp, adaptive):
    """rows: list of raw row bytes of one (sub)image. Returns filtered bytes:
    the filter with the smallest sum of |signed bytes| per row (libpng's
    heuristic), or filter 0 everywhere for sub-byte and palette images."""
    out = bytearray()
    prev = bytes(len(rows[0])) if rows else b""
    for row in rows:
        if not adaptive:
            out.append(0)
            out += row
            prev = row
            continue
        n = len(row)
        cands = []
        for ft in range(5):
            f = bytearray(n)
            for i in range(n):
                a = row[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                if ft == 0:
                    p = 0
                elif ft == 1:
                    p = a
                elif ft == 2:
                    p = b
                elif ft == 3:
                    p = (a + b) >> 1
                else:
                    p = paeth(a, b, c)
                f[i] = (row[i] - p) & 0xFF
            cands.append((sum(v if v < 128 else 256 - v for v in f), ft, f))
        _, ft, f = min(cands, key=lambda t: (t[0], t[1]))
        out.append(ft)
        out += f
        prev = row
    return bytes(out)


def write_png(path, w, h, ctype, depth, px, plte=None, trns=None, interlace=False):
    """px[y][x]: an int (grey, palette index) or a tuple of channel values."""
    ch = CHANNELS[ctype]
    bpp = max(1, ch * depth // 8)
    adaptive = ctype != 3 and depth >= 8

    def flat(y, xs):
        row = []
        for x in xs:
            v = px[y][x]
            if ch == 1:
                row.append(v if isinstance(v, int) else v[0])
            else:
                row.extend(v)
        return row

    data = bytearray()
    if not interlace:
        data += filter_rows([pack_row(flat(y, range(w)), depth) for y in range(h)], bpp, adaptive)
    else:
        for (x0, y0, dx, dy) in ADAM7:
            xs = list(range(x0, w, dx))
            ys = list(range(y0, h, dy))
            if not xs or not ys:
                continue
            data += filter_rows([pack_row(flat(y, xs), depth) for y in ys], bpp, adaptive)
    png = b"\x89PNG\r\n\x1a\n"
    png += chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 1 if interlace else 0))
    if plte is not None:
        png += chunk(b"PLTE", bytes(c for rgb in plte for c in rgb))
    if trns is not None:
        png += chunk(b"tRNS", trns)
    png += chunk(b"IDAT", zlib.compress(bytes(data), 9))
    png += chunk(b"IEND", b"")
    with open(path, "wb") as f:
        f.write(png)


# ------------------------------------------------------------------- content

def clamp(v, lo=0, hi=255):
    return lo if v < lo else hi if v > hi else v


def hsv_rgb(h, s, v):
    """h in [0,360), s, v in [0,1] -> 8-bit RGB tuple (rounded)."""
    c = v * s
    hp = (h % 360) / 60.0
    x = c * (1 - abs(hp % 2 - 1))
    r, g, b = [(c, x, 0), (x, c, 0), (0, c, x), (0, x, c), (x, 0, c), (c, 0, x)][int(hp) % 6]
    m = v - c
    return tuple(clamp(int((t + m) * 255 + 0.5)) for t in (r, g, b))


def scene(w, h, rng, noise=6, shapes=6):
    """Gradient background, random rectangles and discs, mild noise: photo-ish
    content with both flat areas and edges."""
    base = [rng.below(256) for _ in range(3)]
    gx = [rng.below(7) - 3 for _ in range(3)]
    gy = [rng.below(7) - 3 for _ in range(3)]
    sx, sy = max(1, w // 64), max(1, h // 64)
    px = [[tuple(clamp(base[c] + gx[c] * x // sx + gy[c] * y // sy) for c in range(3))
           for x in range(w)] for y in range(h)]
    for k in range(shapes):
        col = (rng.below(256), rng.below(256), rng.below(256))
        x0, y0 = rng.below(w), rng.below(h)
        rw, rh = 1 + rng.below(max(1, w // 2)), 1 + rng.below(max(1, h // 2))
        disc = k % 2 == 1
        for y in range(y0, min(h, y0 + rh)):
            for x in range(x0, min(w, x0 + rw)):
                if disc:
                    dxn = (2 * (x - x0) - rw) / rw
                    dyn = (2 * (y - y0) - rh) / rh
                    if dxn * dxn + dyn * dyn > 1.0:
                        continue
                px[y][x] = col
    if noise:
        px = [[tuple(clamp(c + rng.below(2 * noise + 1) - noise) for c in p) for p in row]
              for row in px]
    return px


def noise_rgb(w, h, rng):
    return [[(rng.below(256), rng.below(256), rng.below(256)) for _ in range(w)] for _ in range(h)]


def flat(w, h, rgb):
    return [[rgb] * w for _ in range(h)]


def grey_of(px):
    """RGB rows -> grey ints (integer BT.601, rounding)."""
    return [[(299 * p[0] + 587 * p[1] + 114 * p[2] + 500) // 1000 for p in row] for row in px]


def quantise_palette(px, levels):
    """Uniform colour cube palette with `levels` per channel (levels**3
    entries at most 256) and the index image."""
    pal = []
    for r in range(levels):
        for g in range(levels):
            for b in range(levels):
                pal.append(tuple(round(255 * t / (levels - 1)) for t in (r, g, b)))

    def idx(p):
        q = [round(c * (levels - 1) / 255) for c in p]
        return (q[0] * levels + q[1]) * levels + q[2]

    return pal, [[idx(p) for p in row] for row in px]


def small_palette(n, rng):
    return [(rng.below(256), rng.below(256), rng.below(256)) for _ in range(n)]


# One-ulp grey levels (cedd.md §2): (0.114v + 0.587v) + 0.299v < v.
ULP_GREYS = [23, 46, 57, 59, 92, 114, 118, 127, 184, 205, 223, 228, 236, 241, 249, 254]


def ulp_blocks(sx, sy):
    """Rows of blocks of sx x sy pixels, each block two halves (left/right,
    or top/bottom on odd block rows) of grey levels (v-7, v), (v, v+7),
    (v-14, v), (v, v+14) for every one-ulp level v: the truncation of the
    quadrant means to v-1 decides whether the block is an edge block."""
    pairs = []
    for v in ULP_GREYS:
        for d in (7, 14, 3):
            pairs.append((clamp(v - d), v))
            pairs.append((v, clamp(v + d)))
    nbx = 8
    nby = (len(pairs) + nbx - 1) // nbx
    w, h = nbx * sx, nby * sy * 2
    px = [[0] * w for _ in range(h)]
    for k, (a, b) in enumerate(pairs):
        bx, by = k % nbx, k // nbx
        for orient in (0, 1):                  # 0: left|right, 1: top/bottom
            y0 = (2 * by + orient) * sy
            for y in range(sy):
                for x in range(sx):
                    first = x < sx // 2 if orient == 0 else y < sy // 2
                    px[y0 + y][bx * sx + x] = a if first else b
    return w, h, px


def quadrant_blocks(nbx, nby, sx, sy, rng, levels):
    """Every block has four flat quadrants drawn from `levels`: hits all five
    edge categories and their combinations."""
    w, h = nbx * sx, nby * sy
    px = [[None] * w for _ in range(h)]
    for by in range(nby):
        for bx in range(nbx):
            q = [levels[rng.below(len(levels))] for _ in range(4)]
            for y in range(sy):
                for x in range(sx):
                    k = (2 if y >= sy // 2 else 0) + (1 if x >= sx // 2 else 0)
                    px[by * sy + y][bx * sx + x] = q[k]
    return w, h, px


# --------------------------------------------------------------------- images

def make_all(out):
    made = []

    def save(name, w, h, ctype, depth, px, **kw):
        path = os.path.join(out, name + ".png")
        write_png(path, w, h, ctype, depth, px, **kw)
        made.append((name + ".png", os.path.getsize(path)))

    r = Rng(20240601)

    # -- every colour type and depth ---------------------------------------
    px = scene(96, 80, r)
    save("t_rgb8_96x80", 96, 80, 2, 8, px)
    save("t_rgb8_interlaced_96x80", 96, 80, 2, 8, px, interlace=True)

    w, h = 80, 80   # smooth high bytes, random low bytes: round(v/257) != v>>8 often
    hi = scene(w, h, r, noise=0)
    px16 = [[tuple(clamp(c * 256 + r.below(256), 0, 65535) for c in p) for p in row] for row in hi]
    save("t_rgb16_80x80", w, h, 2, 16, px16)

    w, h = 96, 80
    px = scene(w, h, r)
    rgba = [[p + ((x * 255 // (w - 1)) if y < h // 2 else (0, 1, 2, 127, 128, 254, 255)[(x + y) % 7],)
             for x, p in enumerate(row)] for y, row in enumerate(px)]
    save("t_rgba8_96x80", w, h, 6, 8, rgba)
    save("t_rgba8_interlaced_37x29", 37, 29, 6, 8, [row[:37] for row in rgba[:29]], interlace=True)

    w, h = 64, 64
    hi = scene(w, h, r, noise=0)
    rgba16 = [[tuple(clamp(c * 256 + r.below(256), 0, 65535) for c in p)
               + ((x * 1040 + y * 17) % 65536,) for x, p in enumerate(row)] for y, row in enumerate(hi)]
    save("t_rgba16_64x64", w, h, 6, 16, rgba16)

    g = grey_of(scene(97, 83, r, noise=0))
    save("t_grey1_97x83", 97, 83, 0, 1, [[1 if ((x ^ y) & 4) or v > 160 else 0 for x, v in enumerate(row)]
                                         for y, row in enumerate(g)])
    save("t_grey2_97x83", 97, 83, 0, 2, [[v >> 6 for v in row] for row in g])
    save("t_grey4_97x83", 97, 83, 0, 4, [[v >> 4 for v in row] for row in g])
    g = grey_of(scene(100, 90, r))
    save("t_grey8_100x90", 100, 90, 0, 8, g)
    g16 = [[v * 256 + r.below(256) for v in row] for row in grey_of(scene(80, 80, r, noise=0))]
    save("t_grey16_80x80", 80, 80, 0, 16, g16)
    save("t_grey16_interlaced_45x41", 45, 41, 0, 16, [row[:45] for row in g16[:41]], interlace=True)

    w, h = 80, 80   # every (grey, alpha) combination region: grey ramps x, alpha ramps y
    ga = [[((x * 255) // (w - 1), (y * 255) // (h - 1)) for x in range(w)] for y in range(h)]
    ga[0][:16] = [(v, 255) for v in range(16)]          # opaque darks: the sRGB lift table
    save("t_greya8_80x80", w, h, 4, 8, ga)
    ga16 = [[(x * 826 + r.below(256), y * 826 + r.below(256)) for x in range(w)] for y in range(h)]
    save("t_greya16_80x80", w, h, 4, 16, ga16)

    src = scene(88, 72, r, noise=0)
    for depth in (1, 2, 4, 8):
        n = 1 << depth
        pal = small_palette(n, r)
        idx = [[((p[0] + 2 * p[1] + 3 * p[2]) // 7 + x // 9) % n for x, p in enumerate(row)]
               for row in src]
        save("t_pal%d_88x72" % depth, 88, 72, 3, depth, idx, plte=pal)
        # tRNS shorter than the palette: the remaining entries are opaque
        k = max(1, n * 3 // 4)
        alphas = bytes([0, 255, 128, 1, 254, 64, 200][i % 7] for i in range(k))
        save("t_pal%d_trns_88x72" % depth, 88, 72, 3, depth, idx, plte=pal, trns=alphas)
    pal, idx = quantise_palette(scene(90, 70, r), 6)
    save("t_pal8_cube_interlaced_90x70", 90, 70, 3, 8, idx, plte=pal, interlace=True)

    # grey + tRNS at other depths; own generator so the images after these keep their pixels
    r2 = Rng(77)
    g = grey_of(scene(97, 83, r2, noise=0))
    save("t_grey1_trns_97x83", 97, 83, 0, 1, [[1 if ((x ^ y) & 4) or v > 160 else 0 for x, v in enumerate(row)]
                                              for y, row in enumerate(g)], trns=struct.pack(">H", 1))
    g4 = [[v >> 4 for v in row] for row in g]
    g4[3] = [5] * 97                                     # a row of the transparent grey
    save("t_grey4_trns_97x83", 97, 83, 0, 4, g4, trns=struct.pack(">H", 5))
    g16 = [[v * 256 + r2.below(256) for v in row] for row in grey_of(scene(80, 64, r2, noise=0))]
    key = g16[3][3]
    g16[3] = [key] * 80
    save("t_grey16_trns_80x64", 80, 64, 0, 16, g16, trns=struct.pack(">H", key))

    g = grey_of(scene(90, 84, r))
    g[5] = [77] * 90                                     # a row of the transparent grey
    save("t_grey8_trns_90x84", 90, 84, 0, 8, g, trns=struct.pack(">H", 77))
    px = scene(90, 84, r)
    key = px[10][10]
    save("t_rgb8_trns_90x84", 90, 84, 2, 8, px, trns=struct.pack(">HHH", *key))
    px16 = [[tuple(c * 257 for c in p) for p in row] for row in scene(64, 48, r, noise=0)]
    key = px16[0][0]
    save("t_rgb16_trns_64x48", 64, 48, 2, 16, px16, trns=struct.pack(">HHH", *key))

    # -- sizes: degenerate, grid boundaries, odd --------------------------------
    for (w, h) in [(1, 1), (1, 50), (50, 1), (2, 2), (3, 3), (7, 5), (39, 100), (39, 39),
                   (40, 40), (41, 79), (79, 80), (80, 80), (159, 81), (123, 97), (97, 123),
                   (201, 157), (2100, 3), (39, 1000)]:
        px = noise_rgb(w, h, r) if w * h <= 2000 else scene(w, h, r, noise=1)
        save("s_rgb8_%dx%d" % (w, h), w, h, 2, 8, px)

    # -- flat colours ---------------------------------------------------------
    for (name, rgb, w, h) in [("3366cc", (0x33, 0x66, 0xcc), 64, 64),
                              ("3366cc", (0x33, 0x66, 0xcc), 100, 100),
                              ("000000", (0, 0, 0), 50, 50), ("ffffff", (255, 255, 255), 90, 90),
                              ("808080", (128, 128, 128), 41, 41), ("ff0000", (255, 0, 0), 80, 80),
                              ("ffff00", (255, 255, 0), 33, 20)]:
        save("f_%s_%dx%d" % (name, w, h), w, h, 2, 8, flat(w, h, rgb))

    # -- one-ulp grey levels (§2) ---------------------------------------------
    w, h, px = ulp_blocks(2, 2)                  # no grid: 2x2 blocks, one-pixel quadrants
    save("u_grey8_ulp_%dx%d" % (w, h), w, h, 0, 8, px)
    w, h, px = ulp_blocks(2, 2)
    save("u_rgb8_ulp_%dx%d" % (w, h), w, h, 2, 8, [[(v, v, v) for v in row] for row in px])
    # grid, 4x4 blocks (Sx = Sy = 4): 40x40 blocks of 160x160; tile the pattern
    bw, bh, pat = ulp_blocks(4, 4)
    w = h = 160
    save("u_grey8_ulp_160x160", w, h, 0, 8, [[pat[y % bh][x % bw] for x in range(w)] for y in range(h)])
    # flat-block ramp: 2x2 blocks of every grey level 0..255 (no grid)
    save("u_grey8_ramp_512x2", 512, 2, 0, 8, [[x // 2 for x in range(512)] for _ in range(2)])
    save("u_grey8_ramp_256x256", 256, 256, 0, 8, [[(x + y) // 2 for x in range(256)] for y in range(256)])

    # -- edges ----------------------------------------------------------------
    lv = [0, 13, 14, 15, 28, 40, 60, 100, 128, 180, 220, 255]
    w, h, px = quadrant_blocks(40, 40, 4, 4, r, lv)
    save("e_grey8_quadrants_160x160", w, h, 0, 8, px)
    w, h, px = quadrant_blocks(40, 40, 2, 2, r, [hsv_rgb(r.below(360), r.below(101) / 100, r.below(101) / 100)
                                                 for _ in range(16)])
    save("e_rgb8_quadrants_80x80", w, h, 2, 8, px)
    w, h, px = quadrant_blocks(20, 20, 2, 4, r, lv)     # 20x20 grid, Sx 2, Sy 4
    save("e_grey8_quadrants_40x80", w, h, 0, 8, px)
    w, h, px = quadrant_blocks(19, 50, 2, 2, r, lv)     # no grid: 19 x 50 blocks
    save("e_grey8_quadrants_nogrid_38x100", w, h, 0, 8, px)
    save("e_rgb8_checker1_81x81", 81, 81, 2, 8, [[(255, 255, 255) if (x + y) % 2 else (0, 0, 0)
                                                  for x in range(81)] for y in range(81)])
    save("e_rgb8_checker3_120x100", 120, 100, 2, 8, [[(250, 40, 10) if (x // 3 + y // 3) % 2 else (10, 40, 250)
                                                      for x in range(120)] for y in range(100)])
    save("e_rgb8_hstripes_100x100", 100, 100, 2, 8, [[(200, 180, 20) if (y // 2) % 2 else (20, 30, 90)
                                                      for x in range(100)] for y in range(100)])
    save("e_rgb8_vstripes_100x100", 100, 100, 2, 8, [[(30, 200, 60) if (x // 2) % 2 else (220, 220, 230)
                                                      for x in range(100)] for y in range(100)])
    save("e_rgb8_diag_160x120", 160, 120, 2, 8, [[(0, 0, 0) if ((x + y) // 3) % 2 else (255, 255, 255)
                                                  for x in range(160)] for y in range(120)])
    save("e_rgb8_antidiag_160x120", 160, 120, 2, 8, [[(0, 90, 0) if ((x - y) // 3) % 2 else (250, 120, 250)
                                                      for x in range(160)] for y in range(120)])

    # -- noise and gradients ----------------------------------------------------
    save("n_rgb8_noise_64x64", 64, 64, 2, 8, noise_rgb(64, 64, r))
    save("n_rgb8_noise_100x80", 100, 80, 2, 8, noise_rgb(100, 80, r))
    save("n_rgb8_noise_33x21", 33, 21, 2, 8, noise_rgb(33, 21, r))
    save("g_rgb8_huewheel_200x200", 200, 200, 2, 8,
         [[hsv_rgb(math.degrees(math.atan2(y - 100, x - 100)) + 180,
                   min(1.0, math.hypot(x - 100, y - 100) / 100), 0.35 + 0.65 * (y / 199))
           for x in range(200)] for y in range(200)])
    save("g_rgb8_gradient_256x256", 256, 256, 2, 8, [[(x, y, 255 - (x + y) // 2) for x in range(256)]
                                                     for y in range(256)])

    # -- larger ----------------------------------------------------------------
    px = scene(640, 480, r, noise=0, shapes=14)
    for y in range(0, 480, 3):                      # sparse noise keeps it compressible
        row = px[y]
        for x in range(r.below(7), 640, 11):
            row[x] = tuple(clamp(c + r.below(41) - 20) for c in row[x])
    save("l_rgb8_640x480", 640, 480, 2, 8, px)
    pal, idx = quantise_palette(scene(1500, 1100, r, noise=0, shapes=24), 6)
    save("l_pal8_1500x1100", 1500, 1100, 3, 8, idx, plte=pal)
    return made


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    made = make_all(out)
    total = sum(s for _, s in made)
    for name, size in made:
        print("%8d  %s" % (size, name))
    print("%d images, %d bytes" % (len(made), total))


if __name__ == "__main__":
    main()
