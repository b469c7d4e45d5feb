#!/usr/bin/env python3
"""Identification experiments without re-extracting the queries: the query records of a bench/identify
sets folder are extracted once (cached in a .npy file) and identified again with any options, written as
`patina identify --format csv` rows plus matches and the query's features (score.py reads the first six).

  PYTHONPATH=python PATINA_LIB=build-cpu/libpatina.so .venv-identify/bin/python lab/identify/replay.py \\
      SETS COLLECTION CACHE.npy OUT.csv [option=value ...]

COLLECTION: the references indexed with -f rootsift (run.sh leaves SETS/results/refs.patina). Options are
patina_identify_opts_t fields (guided=1 guided_ratio=0.9 threshold=0 ...; k defaults to 5 and threshold to 0
here, so rank-1 scores are raw). coverage=1 adds, for ranks 1 and 2 when verified with >= 3 inliers, the spatial
coverage of their inliers in the query (patina_table_identify_pairs): hull = the convex hull's area / the query's
area, cells = the fraction of an 8 x 8 grid over the query holding an inlier (lab/identify/fused.py reads them). A new CACHE is extracted with the collection's spec; delete it after
changing the spec (or the extraction)."""
import csv
import ctypes
import os
import sys

import numpy as np

import patina
from patina import _lib
from patina._core import _prepare

sets, coll_path, cache, out = sys.argv[1:5]
opts = dict(a.split("=", 1) for a in sys.argv[5:])
coverage = opts.pop("coverage", "0") == "1"
names = []
for d in ("queries", "impostors"):
    names += sorted(os.path.join(d, f) for f in os.listdir(os.path.join(sets, d)))
coll = patina.Collection(coll_path, readonly=True)
lib = coll._lib
t = coll._table(None, need=_lib.CAP_IDENTIFY, keep=True, handle_family=False)
qbytes = int(lib.table_query_bytes(t.h))
if os.path.exists(cache):
    qrec = np.load(cache)
    assert qrec.shape == (len(names), qbytes), "stale cache %s" % cache
else:
    qrec = np.zeros((len(names), qbytes), dtype=np.uint8)
    for b in range(0, len(names), 16):
        prep = [_prepare(os.path.join(sets, n), coll._ctx, False, n) for n in names[b:b + 16]]
        imgs = (_lib.Image * len(prep))(*[p.img for p in prep])
        st = (ctypes.c_int * len(prep))()
        chunk = np.zeros((len(prep), qbytes), dtype=np.uint8)
        lib.check(lib.table_identify_extract(t.h, coll._ctx.handle, chunk.ctypes.data, imgs, len(prep), st), "extract")
        qrec[b:b + len(prep)] = chunk
        for p in prep:
            p.release()
        print("extracted %d/%d" % (b + len(prep), len(names)), file=sys.stderr)
    np.save(cache, qrec)
io = _lib.IdentifyOpts()
lib.identify_opts_init(ctypes.byref(io))
io.k = 5
io.threshold = 0.0
for k, v in opts.items():
    cur = getattr(io, k)
    setattr(io, k, type(cur)(float(v)) if isinstance(cur, float) else int(float(v)))
nq = len(names)
hits = (_lib.IdentifyHit * (nq * io.k))()
res = (_lib.IdentifyResult * nq)()
keys = (ctypes.c_void_p * (nq * io.k))()
lib.check(lib.table_identify(t.h, qrec.ctypes.data, nq, ctypes.byref(io), hits, res, keys), "identify")
fields = [f for f, _ in _lib.IdentifyHit._fields_ if f not in ("id",)]


def cover(i, hid):
    """(hull area, occupied cells) of the inliers of query i against reference hid, as fractions of the query."""
    import cv2
    cap = 1024
    buf = (ctypes.c_float * (4 * cap))()
    n = ctypes.c_size_t()
    lib.check(lib.table_identify_pairs(t.h, qrec[i].ctypes.data, hid, ctypes.byref(io), buf, cap, ctypes.byref(n)),
              "pairs")
    pts = np.frombuffer(buf, dtype=np.float32, count=4 * min(n.value, cap)).reshape(-1, 4)[:, :2]
    h, w = cv2.imread(os.path.join(sets, names[i]), cv2.IMREAD_GRAYSCALE).shape
    if len(pts) < 3:
        return 0.0, 0.0
    hull = float(cv2.contourArea(cv2.convexHull(pts.astype(np.float32)))) / (w * h)
    cx = np.clip((pts[:, 0] * 8 / w).astype(int), 0, 7)
    cy = np.clip((pts[:, 1] * 8 / h).astype(int), 0, 7)
    return hull, len(set(zip(cx.tolist(), cy.tolist()))) / 64.0


extra = ["hull", "cells"] if coverage else []
with open(out, "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["query", "rank", "key", "score", "inliers", "decision", "features"] + fields + extra)
    for i, n in enumerate(names):
        r = res[i]
        dec = {0: "unknown", 1: "match", 2: "ambiguous"}.get(r.decision, str(r.decision))
        if r.nhits == 0:
            w.writerow([n, 0, "", 0, 0, "unknown", r.query_features] + [0] * (len(fields) + len(extra)))
        for j in range(r.nhits):
            h = hits[i * io.k + j]
            key = _lib.decode_key(ctypes.string_at(keys[i * io.k + j])) if keys[i * io.k + j] else "?"
            cov = []
            if coverage:
                cov = ["%.4f" % c for c in (cover(i, h.id) if j < 2 and h.verified and h.inliers >= 3 else (0, 0))]
            w.writerow([n, j + 1, key, repr(h.score), h.inliers, dec if j == 0 else "-", r.query_features]
                       + [getattr(h, x) for x in fields] + cov)
for kp in keys:
    if kp:
        lib.free(kp)
