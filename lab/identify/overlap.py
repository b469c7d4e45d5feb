#!/usr/bin/env python3
"""Where the verified candidates' inliers land in the query: dumps, for every
query of an identification benchmark set, the ranked candidates (as
`patina identify --format csv --threshold 0` lists them) and each verified
candidate's inlier query points (patina_table_identify_pairs, which repeats
the library's verification exactly), so that rules about a runner-up's
inliers on the same query region as rank 1's (a sibling of the same content)
or elsewhere (independent evidence, as two chance draws of an impostor) can
be scored offline (docs/lab/identify.md, "sibling runner-ups").

    overlap.py --coll REFS.patina --sets SETS --out DUMP.jsonl [-k 5] [--batch 16]

Run from a checkout's python/ on the path, PATINA_LIB naming libpatina.so.
Each line of DUMP: {"query": "queries/g0001.png", "features": n,
"hits": [{"key", "id", "score", "inliers", "verified", "q": [[x, y], ...],
"r": [[x, y], ...]}]} (q: the inliers' query points, r: their reference points).
"""
import argparse
import ctypes
import json
import os
import sys

import numpy as np

import patina
from patina import _lib
from patina._core import _prepare


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coll", required=True)
    ap.add_argument("--sets", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("-k", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    files = []
    for sub in ("queries", "impostors"):
        d = os.path.join(a.sets, sub)
        files += [os.path.join(sub, f) for f in sorted(os.listdir(d))]
    done = set()
    if os.path.exists(a.out):
        with open(a.out) as f:
            done = {json.loads(line)["query"] for line in f if line.strip()}
    files = [f for f in files if f not in done]
    coll = patina.Collection(a.coll, readonly=True)
    lib = coll._lib
    t = coll._table(None, need=_lib.CAP_IDENTIFY, keep=True, handle_family=False)
    io = _lib.IdentifyOpts()
    lib.identify_opts_init(ctypes.byref(io))
    io.k = a.k
    io.threshold = 0.0
    qbytes = int(lib.table_query_bytes(t.h))
    cap = 4096
    pairs = (ctypes.c_float * (4 * cap))()
    out = open(a.out, "a")
    for b0 in range(0, len(files), a.batch):
        batch = files[b0:b0 + a.batch]
        prepared = [_prepare(os.path.join(a.sets, f), coll._ctx, False, f) for f in batch]
        nq = len(prepared)
        qrec = np.empty(nq * qbytes, dtype=np.uint8)
        imgs = (_lib.Image * nq)(*[p.img for p in prepared])
        st = (ctypes.c_int * nq)()
        lib.check(lib.table_identify_extract(t.h, coll._ctx.handle, qrec.ctypes.data, imgs, nq, st), "extract")
        hits = (_lib.IdentifyHit * (nq * a.k))()
        res = (_lib.IdentifyResult * nq)()
        keys = (ctypes.c_void_p * (nq * a.k))()
        lib.check(lib.table_identify(t.h, qrec.ctypes.data, nq, ctypes.byref(io), hits, res, keys), "identify")
        for i in range(nq):
            rows = []
            for r in range(res[i].nhits):
                h, key = hits[i * a.k + r], keys[i * a.k + r]
                row = {"key": _lib.decode_key(ctypes.string_at(key)) if key else None, "id": int(h.id),
                       "score": float(h.score), "inliers": int(h.inliers), "verified": bool(h.verified), "q": [], "r": []}
                if h.verified and h.inliers:
                    n = ctypes.c_size_t()
                    q = qrec[i * qbytes:(i + 1) * qbytes]
                    lib.check(lib.table_identify_pairs(t.h, q.ctypes.data, h.id, ctypes.byref(io), pairs, cap,
                                                       ctypes.byref(n)), "pairs")
                    if n.value != h.inliers:
                        sys.exit(f"{batch[i]}: pairs gave {n.value} inliers, identify {h.inliers}")
                    row["q"] = [[round(pairs[4 * j], 3), round(pairs[4 * j + 1], 3)] for j in range(n.value)]
                    row["r"] = [[round(pairs[4 * j + 2], 3), round(pairs[4 * j + 3], 3)] for j in range(n.value)]
                rows.append(row)
            out.write(json.dumps({"query": batch[i], "features": int(res[i].query_features), "hits": rows}) + "\n")
        out.flush()
        for key in keys:
            if key:
                lib.free(key)
        for p in prepared:
            p.release()
        print(f"{b0 + nq}/{len(files)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
