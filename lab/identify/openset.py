#!/usr/bin/env python3
"""Open-set statistics from `patina identify --format json -k K --threshold 0` over genuine and impostor
queries: for candidate acceptance scores (rank-1 inliers, inlier ratio, an a-contrario significance, the
margin over rank 2), FRR at FAR <= 1% / 0.1% and the EER, as score.py defines them (a genuine query counts as
correctly accepted only when its rank 1 is its item).
   lab/identify/openset.py SETS RESULT.jsonl"""
import csv, json, math, sys

sets, path = sys.argv[1], sys.argv[2]
man = {r["query"]: r for r in csv.DictReader(open(f"{sets}/manifest.csv"))}
item_of = {"refs/" + r["file"]: r["item"] for r in csv.DictReader(open(f"{sets}/groups.csv"))}

def log_binom_tail(n, k, p):
    """log10 P[X >= k], X ~ Bin(n, p)."""
    if k <= 0: return 0.0
    if k > n: return -300.0
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * math.log(p) + (n - i) * math.log1p(-p)
             for i in range(k, n + 1)]
    mx = max(terms)
    return (mx + math.log(sum(math.exp(t - mx) for t in terms))) / math.log(10)

P = 3.1416e-4   # pi (0.01 L)^2 / L^2: a square reference, the default inlier distance
rows = []
for line in open(path):
    o = json.loads(line)
    m = man[o["query"]]
    h = o["hits"]
    r1 = h[0] if h else {"matches": 0, "inliers": 0, "key": ""}
    r2 = h[1] if len(h) > 1 else {"matches": 0, "inliers": 0}
    gen = m["set"] == "genuine"
    ok = gen and h and item_of.get(r1["key"]) == m["item"]
    n, k = r1["matches"], r1["inliers"]
    nfa = -(math.log10(max(1, n * (n - 1) / 2)) + log_binom_tail(n - 2, k - 2, P)) if n >= 2 else 0.0
    rows.append(dict(gen=gen, ok=ok, inl=k, ratio=k / n if n else 0, nfa=nfa, margin=k - r2["inliers"],
                     feats=o["features"], matches=n))

def roc(key):
    g = [r for r in rows if r["gen"]]
    im = [r for r in rows if not r["gen"]]
    ts = sorted(set(r[key] for r in rows))
    res = {}
    best = None
    for t in ts:
        far = sum(r[key] >= t for r in im) / len(im)
        frr = sum(not (r["ok"] and r[key] >= t) for r in g) / len(g)
        for lim in (0.01, 0.001):
            if far <= lim and lim not in res: res[lim] = (frr, t)
        if best is None or abs(far - frr) < best[0]: best = (abs(far - frr), (far + frr) / 2, t)
    return res, best

print(f"{sum(r['gen'] for r in rows)} genuine ({sum(r['ok'] for r in rows)} correct at rank 1), "
      f"{sum(not r['gen'] for r in rows)} impostors")
for key in ("inl", "ratio", "nfa", "margin"):
    res, best = roc(key)
    f1 = res.get(0.01, (1, float("nan"))); f2 = res.get(0.001, (1, float("nan")))
    print(f"{key:7s} FRR@FAR<=1% {100*f1[0]:5.1f}% (T={f1[1]:.3g})  FRR@FAR<=0.1% {100*f2[0]:5.1f}% (T={f2[1]:.3g})  "
          f"EER {100*best[1]:5.1f}% (T={best[2]:.3g})")
imp = sorted((r for r in rows if not r["gen"]), key=lambda r: -r["inl"])[:12]
print("top impostors (inliers, matches, nfa):", [(r["inl"], r["matches"], round(r["nfa"], 1)) for r in imp])
gl = sorted((r for r in rows if r["ok"]), key=lambda r: r["inl"])[:30]
print("weakest correct genuine (inliers, matches, nfa):", [(r["inl"], r["matches"], round(r["nfa"], 1)) for r in gl])
