#!/usr/bin/env python3
"""Acceptance rules compared on one run (lab/identify/replay.py CSVs, which carry matches): rank-1 inliers,
an a-contrario NFA (ORSA form for a 2-point similarity: (n - 2) C(n, k) C(k, 2) alpha^(k - 2), alpha = pi r^2 / area
of the reference, r = 0.01 x its longer side; nfas: alpha x 0.1 for the keypoint-shape check) and the
inlier ratio; FRR at FAR <= 1% / 0.1% and the EER over the clean impostors (SHARES: shares.csv).
   lab/identify/acceptance.py SETS SHARES RUN.csv ..."""
import csv, sys, os, math
sets = sys.argv[1]; shares_file = sys.argv[2]; shares_min = 14
man = {r["query"]: r for r in csv.DictReader(open(sets + "/manifest.csv"))}
item = {r["file"]: r["item"] for r in csv.DictReader(open(sets + "/groups.csv"))}
shares = {r["texture"] for r in csv.DictReader(open(shares_file)) if int(r["inliers"]) >= shares_min}
import cv2
size = {}
def ref_size(k):
    b = os.path.basename(k)
    if b not in size:
        im = cv2.imread(os.path.join(sets, "refs", b), cv2.IMREAD_UNCHANGED); size[b] = im.shape[1], im.shape[0]
    return size[b]
def lc(n, k): return (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(10)
def nfa(n, k, w, h, pshape, s=2):
    if k <= s or n <= s: return 0.0
    r = 0.01 * max(w, h); alpha = min(1.0, math.pi * r * r / (w * h) * pshape)
    return -(math.log10(n - s) + lc(n, k) + lc(k, s) + (k - s) * math.log10(alpha))
def evaluate(path):
    rows = {}
    for r in csv.DictReader(open(path)):
        rows.setdefault(r["query"], []).append(r)
    out = []
    for q, rs in rows.items():
        m = man[q]
        if m["set"] == "impostor-texture" and m["source"] in shares: continue
        r1 = rs[0]; gen = m["set"] == "genuine"
        ok = gen and item.get(os.path.basename(r1["key"])) == m["item"]
        n, k = int(r1.get("matches") or 0), int(r1["inliers"] or 0)
        n = max(n, k)  # guided matching verifies other correspondences than the matches: at least k
        w, h = ref_size(r1["key"]) if r1["key"] else (1, 1)
        i2 = int(rs[1]["inliers"]) if len(rs) > 1 else 0
        out.append(dict(gen=gen, ok=ok, inl=k, nfa=nfa(n, k, w, h, 1.0), nfas=nfa(n, k, w, h, 0.1),
                        ratio=k / n if n else 0, marg=k - i2, feats=int(r1["features"])))
    return out
def roc(rows, key):
    g = [r for r in rows if r["gen"]]; im = [r for r in rows if not r["gen"]]
    ts = sorted(set(r[key] for r in rows)) + [1e18]
    res = {}; best = None
    for t in ts:
        far = sum(r[key] >= t for r in im) / len(im)
        frr = sum(not (r["ok"] and r[key] >= t) for r in g) / len(g)
        for lim in (0.01, 0.001):
            if far <= lim and lim not in res: res[lim] = (frr, t)
        if best is None or abs(far - frr) < best[0]: best = (abs(far - frr), (far + frr) / 2, t)
    return "FRR@1%% %.1f%% (T=%.3g) FRR@0.1%% %.1f%% EER %.1f%% (T=%.3g)" % (100*res[0.01][0], res[0.01][1], 100*res[0.001][0], 100*best[1], best[2])
for path in sys.argv[3:]:
    rows = evaluate(path)
    print(path, "gen", sum(r["gen"] for r in rows), "imp", sum(not r["gen"] for r in rows))
    for key in ("inl", "nfa", "nfas", "ratio"):
        print("  %-6s %s" % (key, roc(rows, key)))
