#!/usr/bin/env python3
"""Patina's glcm family against scikit-image (and mahotas where installed).

Usage: glcm_skimage.py --cli PATH/TO/patina --dir DIR [--quick] [--jobs N]

DIR holds 8-bit grey binary PGMs (tests/test_glcm_skimage.c writes random
images and the grey of real photographs there, by patina's own colour-to-grey
rule). For every levels in 2, 8, 32, 256 and symmetric in 0, 1 the script runs
  patina extract -f glcm:levels=L,quant=uniform,distances=...,angles=...,symmetric=S --format json
and compares, per image and offset:
  * counts with skimage.feature.graycomatrix(q, distances, deg2rad(angles), levels=L,
    symmetric=S) on q = v*L//256: exactly;
  * properties with skimage.feature.graycoprops for the names this scikit-image
    has (0.19.3: contrast, dissimilarity, homogeneity, ASM, energy,
    correlation); mean, variance, std and entropy (scikit-image >= 0.25) with
    their upstream formulas written out below in numpy when graycoprops lacks
    them: |a - b| <= 1e-9 * max(|a|, |b|) + 1e-12;
  * Haralick's features with a numpy transcription of docs/glcm.md (the
    maximal correlation coefficient through numpy.linalg.eigvals): 1e-9;
  * mahotas.features.haralick (if importable) on the definitions that agree,
    with offsets given explicitly as mahotas builds them (docs/glcm.md,
    "Other implementations").
Prints a summary and exits 1 on any mismatch, 77 when scikit-image is missing.
"""
import argparse
import json
import math
import os
import subprocess
import sys

try:
    import numpy as np
    import skimage
    from skimage.feature import graycomatrix, graycoprops
except ImportError as e:  # pragma: no cover
    print("SKIPPED: scikit-image/numpy not importable (%s)" % e)
    sys.exit(77)

try:
    import mahotas
    import mahotas.features
except ImportError:
    mahotas = None

PROPS = ["contrast", "dissimilarity", "homogeneity", "ASM", "energy", "correlation",
         "mean", "variance", "std", "entropy"]
HARALICK = ["asm", "contrast", "correlation", "sum_of_squares", "idm", "sum_average",
            "sum_variance", "sum_entropy", "entropy", "difference_variance",
            "difference_entropy", "imc1", "imc2", "mcc"]
REL, ABS = 1e-9, 1e-12


def read_pgm(path):
    with open(path, "rb") as f:
        data = f.read()
    fields, pos = [], 0
    while len(fields) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            while data[pos:pos + 1] not in (b"\n", b""):
                pos += 1
            continue
        start = pos
        while not data[pos:pos + 1].isspace():
            pos += 1
        fields.append(data[start:pos])
    assert fields[0] == b"P5" and int(fields[3]) == 255, path
    w, h = int(fields[1]), int(fields[2])
    return np.frombuffer(data[pos + 1:pos + 1 + w * h], np.uint8).reshape(h, w)


def upstream_prop(P, prop):
    """graycoprops' mean/variance/std/entropy as scikit-image 0.25 writes them."""
    P = P.astype(np.float64)
    s = P.sum(axis=(0, 1), keepdims=True)
    s[s == 0] = 1
    P = P / s
    L = P.shape[0]
    I = np.arange(L).reshape((L, 1, 1, 1))
    mean = np.sum(I * P, axis=(0, 1))
    if prop == "mean":
        return mean
    var = np.sum(P * ((I - mean) ** 2), axis=(0, 1))
    if prop == "variance":
        return var
    if prop == "std":
        return np.sqrt(var)
    ln = -np.log(P, where=(P != 0), out=np.zeros_like(P))
    return np.sum(P * ln, axis=(0, 1))


def sk_prop(P, prop):
    try:
        return graycoprops(P, prop)
    except ValueError:
        return upstream_prop(P, prop)


def textbook_haralick(C):
    """docs/glcm.md transcribed: 0-based grey levels, log2 entropies, nats in imc2."""
    C = C.astype(np.float64)
    T = C.sum()
    f = np.zeros(14)
    if T == 0:
        f[2] = 1.0
        return f
    p = C / T
    L = p.shape[0]
    i, j = np.mgrid[:L, :L]
    px, py = p.sum(1), p.sum(0)
    k = np.arange(L)
    mx, my = (k * px).sum(), (k * py).sum()
    vx, vy = (((k - mx) ** 2) * px).sum(), (((k - my) ** 2) * py).sum()
    ps = np.bincount((i + j).ravel(), p.ravel(), 2 * L - 1)
    pd = np.bincount(np.abs(i - j).ravel(), p.ravel(), L)

    def H(v):
        v = v[v > 0]
        return -(v * np.log2(v)).sum()
    ks, kd = np.arange(2 * L - 1), np.arange(L)
    f[0] = (p * p).sum()
    f[1] = (kd ** 2 * pd).sum()
    f[2] = 1.0 if vx == 0 or vy == 0 else ((i - mx) * (j - my) * p).sum() / math.sqrt(vx * vy)
    f[3] = vx
    f[4] = (p / (1.0 + (i - j) ** 2)).sum()
    f[5] = (ks * ps).sum()
    f[6] = ((ks - f[5]) ** 2 * ps).sum()
    f[7] = H(ps)
    f[8] = H(p.ravel())
    f[9] = ((kd - (kd * pd).sum()) ** 2 * pd).sum()
    f[10] = H(pd)
    hx, hy = H(px), H(py)
    outer = np.outer(px, py)
    nz = p > 0
    hxy1 = -(p[nz] * np.log2(outer[nz])).sum()
    hxy2 = H(outer.ravel())
    # HXY1 = HXY2 = HX + HY: both measures are functions of the mutual
    # information, summed term by term to avoid cancelling entropies.
    mi = max(0.0, (p[nz] * np.log2(p[nz] / outer[nz])).sum())
    assert abs((hxy1 - f[8]) - mi) < 1e-9 and abs((hxy2 - f[8]) - mi) < 1e-9
    f[11] = -mi / max(hx, hy) if max(hx, hy) > 0 else 0.0
    f[12] = math.sqrt(-math.expm1(-2 * math.log(2) * mi))
    r, c = px > 0, py > 0
    if r.sum() >= 2 and c.sum() >= 2:
        pr = p[np.ix_(r, c)]
        Q = (pr / px[r][:, None] / py[c][None, :]) @ pr.T
        ev = np.sort(np.real(np.linalg.eigvals(Q)))
        f[13] = math.sqrt(min(1.0, ev[-2])) if ev[-2] > 0 else 0.0
    return f


class Stats:
    def __init__(self):
        self.matrices = self.cells = self.values = 0
        self.fail = 0
        self.maxrel = {}

    def close(self, what, got, want, rel=REL, abs_=ABS):
        got, want = float(got), float(want)
        err = abs(got - want)
        scale = max(abs(got), abs(want))
        self.values += 1
        r = err / scale if scale > 0 else 0.0
        if r > self.maxrel.get(what.split(" ")[0], 0.0):
            self.maxrel[what.split(" ")[0]] = r
        if not err <= rel * scale + abs_:
            self.fail += 1
            if self.fail <= 20:
                print("MISMATCH %s: patina %.17g, peer %.17g" % (what, got, want))


def run_cli(cli, spec, files, jobs):
    cmd = [cli, "extract", "-f", spec, "--format", "json", "-j", str(jobs)] + files
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print("patina failed (%d): %s" % (out.returncode, out.stderr))
        sys.exit(1)
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    assert len(lines) == len(files), (len(lines), len(files))
    return lines


def compare_skimage(args, files, images, st, levels, symmetric, distances, angles, do_haralick):
    spec = "glcm:levels=%d,quant=uniform,distances=%s,angles=%s,symmetric=%d,normed=0" % (
        levels, ",".join(map(str, distances)), ",".join(map(str, angles)), symmetric)
    rows = run_cli(args.cli, spec, files, args.jobs)
    for path, row in zip(files, rows):
        q = (images[path].astype(np.int64) * levels // 256).astype(np.uint8)
        P = graycomatrix(q, distances, np.deg2rad(np.array(angles, np.float64)), levels=levels,
                         symmetric=bool(symmetric))
        got = np.array(row["glcm"], dtype=np.uint64)          # [d][a][i][j]
        want = np.transpose(P, (2, 3, 0, 1)).astype(np.uint64)
        st.matrices += want.shape[0] * want.shape[1]
        st.cells += want.size
        if got.shape != want.shape or not np.array_equal(got, want):
            st.fail += 1
            bad = np.argwhere(got != want) if got.shape == want.shape else None
            print("COUNTS DIFFER %s %s: %s" % (os.path.basename(path), spec,
                  "shape %s vs %s" % (got.shape, want.shape) if bad is None else
                  "first at [d][a][i][j]=%s: %d vs %d" % (tuple(bad[0]), got[tuple(bad[0])],
                                                          want[tuple(bad[0])])))
            continue
        for name in PROPS:
            sk = sk_prop(P, name)
            g = row["props"][name]
            for d in range(len(distances)):
                for a in range(len(angles)):
                    st.close("%s %s L=%d d=%g a=%g" % (name, os.path.basename(path), levels,
                             distances[d], angles[a]), g[d][a], sk[d, a])
        if do_haralick:
            for d in range(len(distances)):
                for a in range(len(angles)):
                    t = textbook_haralick(P[:, :, d, a])
                    for k, name in enumerate(HARALICK):
                        # mcc: the square root of an eigenvalue known to ~1e-16.
                        # imc2 = sqrt(1 - exp(-2 I ln2)) ~ sqrt(2 ln2 I) for a small
                        # mutual information I, which numpy's float sums know to
                        # ~1e-15 absolute: d(imc2) ~ ln2 * 1e-15 / imc2.
                        tol = 1e-12
                        if name == "mcc":
                            tol = 1e-8
                        elif name == "imc2":
                            tol = min(1e-7, 1e-14 / max(abs(t[k]), 1e-300))
                        st.close("haralick.%s %s L=%d d=%g a=%g" % (name, os.path.basename(path),
                                 levels, distances[d], angles[a]),
                                 row["haralick"][name][d][a], t[k], 1e-9, tol)


def compare_mahotas(args, files, images, st, levels, distance):
    """mahotas.features.haralick(q, distance=d, use_x_minus_y_variance=True,
    compute_14th_feature=True): symmetric matrices of the four directions
    (0,d), (d,d), (d,0), (d,-d). Compared: features 1-12; imc2 after turning
    mahotas' base-2 entropies into the exponent it uses; not the 14th
    (mahotas takes eigenvalues of a correlation matrix of p, not Haralick's Q)."""
    offs = "0:%d,%d:%d,%d:0,%d:-%d" % (distance, distance, distance, distance, distance, distance)
    spec = "glcm:levels=%d,quant=uniform,offsets=%s,symmetric=1" % (levels, offs)
    rows = run_cli(args.cli, spec, files, args.jobs)
    for path, row in zip(files, rows):
        q = (images[path].astype(np.int64) * levels // 256).astype(np.uint8)
        counts = np.array(row["glcm"][0], dtype=np.int64)
        if counts.reshape(4, -1).sum(1).min() == 0:
            continue  # mahotas raises on empty matrices
        try:
            mh = mahotas.features.haralick(q, distance=distance, use_x_minus_y_variance=True,
                                           compute_14th_feature=True)
        except ValueError:
            continue
        for a in range(4):
            for k in range(12):
                st.close("mahotas.%s %s L=%d d=%d dir=%d" % (HARALICK[k], os.path.basename(path),
                         levels, distance, a), row["haralick"][HARALICK[k]][0][a], mh[a, k])
            # mahotas: sqrt(1 - exp(-2 (HXY2 - HXY))) with entropies in bits
            mi_bits = -math.log(1 - row["haralick"]["imc2"][0][a] ** 2) / (2 * math.log(2)) \
                if row["haralick"]["imc2"][0][a] < 1 else float("inf")
            # mahotas subtracts entropies (HXY2 - HXY): ~1e-15 absolute in the
            # mutual information, ~sqrt(2e-15) in imc2 when it is near 0.
            st.close("mahotas.imc2(bits) %s L=%d d=%d dir=%d" % (os.path.basename(path), levels,
                     distance, a), math.sqrt(max(0.0, 1 - math.exp(-2 * mi_bits))), mh[a, 12],
                     1e-9, 1e-7)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer combinations")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-mahotas", action="store_true")
    args = ap.parse_args()
    files = sorted(os.path.join(args.dir, f) for f in os.listdir(args.dir) if f.endswith(".pgm"))
    if not files:
        print("no .pgm files in %s" % args.dir)
        return 1
    images = {f: read_pgm(f) for f in files}
    npx = sum(im.size for im in images.values())
    print("peer: scikit-image %s, numpy %s%s; %d images, %.1f Mpixel" % (
        skimage.__version__, np.__version__,
        ", mahotas %s" % mahotas.__version__ if mahotas and not args.no_mahotas else "",
        len(files), npx / 1e6))
    st = Stats()
    angles = [0, 45, 90, 135]
    for levels in (2, 8, 32, 256):
        for symmetric in (0, 1):
            distances = [1, 5] if levels == 256 else [1, 2, 5, 70]
            if args.quick:
                distances = [1, 3]
            compare_skimage(args, files, images, st, levels, symmetric, distances, angles,
                            do_haralick=levels <= 32)
    # scikit-image's rounding on other angles (ties, negative cosines, > 180 degrees)
    compare_skimage(args, files, images, st, 8, 0, [1, 2, 3, 4],
                    [30, 60, 150, 180, 210, 270, 315, -45], do_haralick=False)
    if mahotas and not args.no_mahotas:
        for levels in (8, 32):
            for d in (1, 2):
                compare_mahotas(args, files, images, st, levels, d)
    print("compared %d matrices (%d cells) exactly and %d floating-point values" % (
        st.matrices, st.cells, st.values))
    for k in sorted(st.maxrel):
        print("  max relative difference %-34s %.3g" % (k, st.maxrel[k]))
    if st.fail:
        print("FAILED: %d mismatches" % st.fail)
        return 1
    print("OK: counts identical, properties within %g relative" % REL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
