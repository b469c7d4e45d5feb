#!/usr/bin/env python3
"""Lever (a) of issue 30: a calibrated fused acceptance score, fitted on one split of the benchmark and
evaluated on the other (two folds by ITEM: genuine queries by their item, impostors by their source
texture or photograph, so no item is in both the training and the evaluation side of a fold).

Input: a lab/identify/replay.py CSV made with coverage=1 (matches, inliers, hull, cells of ranks 1 and 2).
Per candidate (rank 1, and rank 2 for the ambiguity rule): x = [log(1 + inliers), inliers / matches, hull,
cells, log(1 + the other rank's inliers)], standardised on the training side; logistic regression (Newton,
L2 1e-2) of "genuine query and rank 1 of its item (grouped view)" against "clean impostor" (genuine
queries whose rank 1 is wrong are negatives too: accepting them is a misidentification). Each fold's
threshold for a FAR target is the training side's smallest p with at most that fraction of its clean
impostors accepted; FAR and FRR are then counted on the evaluation side (pooled over both folds). The same
protocol is applied to the plain rank-1 inliers, so the two rows compare like with like.

Writes OUT.csv (score.py's contract: rank-1 and rank-2 scores = 1000 p of the fold that did not see the
query, inliers = the same so score.py's ambiguity rule applies) and prints the table.

  lab/identify/fused.py SETS REPLAY.csv OUT.csv [--shares CSV] [--siblings CSV] [--seed N]
"""
import argparse
import csv
import hashlib
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "identify"))
import score  # noqa: E402

TARGETS = (0.01, 0.001)


def feats(c, other):
    inl, m = c["inliers"], max(c["matches"], 1)
    return [math.log1p(inl), inl / m, c["hull"], c["cells"], math.log1p(other)]


def fit(x, y, l2=1e-2, it=50):
    x1 = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(x1.shape[1])
    for _ in range(it):
        p = 1 / (1 + np.exp(-x1 @ w))
        g = x1.T @ (p - y) + l2 * np.r_[w[:-1], 0]
        h = (x1 * (p * (1 - p))[:, None]).T @ x1 + l2 * np.eye(len(w))
        step = np.linalg.solve(h, g)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sets")
    ap.add_argument("replay")
    ap.add_argument("out")
    ap.add_argument("--shares")
    ap.add_argument("--siblings")
    ap.add_argument("--seed", default="30")
    a = ap.parse_args()
    manifest = {score.qkey(r["query"]): r for r in score.read_csv(os.path.join(a.sets, "manifest.csv"))}
    item_of = {r["file"]: r["item"] for r in score.read_csv(os.path.join(a.sets, "groups.csv"))}
    sharing = {r["texture"] for r in score.sharing_pairs(a.shares or os.path.join(a.sets, "shares.csv"), 14)}
    view = score.View(score.content_links(a.siblings or os.path.join(a.sets, "siblings.csv"), item_of, 14))
    rows = {}
    for r in score.read_csv(a.replay):
        c = {k: float(r.get(k) or 0) for k in ("inliers", "matches", "hull", "cells", "verified")}
        c["key"] = os.path.basename(r["key"])
        c["rank"] = int(r["rank"])
        rows.setdefault(score.qkey(r["query"]), []).append(c)
    qs = sorted(rows)
    data = []
    for q in qs:
        m = manifest[q]
        cs = sorted(rows[q], key=lambda c: c["rank"])
        c1 = cs[0]
        c2 = cs[1] if len(cs) > 1 and cs[1]["verified"] else None
        i2 = c2["inliers"] if c2 else 0.0
        if m["set"] == "genuine":
            kind = "genuine"
            ok = view.same(item_of.get(c1["key"]), m["item"])
            grp = m["item"]
        elif m["set"] == "impostor-texture" and m["source"] in sharing:
            continue
        else:
            kind, ok, grp = "impostor", False, m["source"]
        fold = int(hashlib.sha1((a.seed + grp).encode()).hexdigest(), 16) % 2
        same12 = c2 is not None and view.same(item_of.get(c1["key"]), item_of.get(c2["key"]))
        data.append(dict(q=q, kind=kind, ok=ok, fold=fold, x1=feats(c1, i2), x2=feats(c2, c1["inliers"]) if c2 else None,
                         inl1=c1["inliers"], inl2=i2, same12=same12, c1=c1, c2=c2))
    x = np.array([d["x1"] for d in data])
    y = np.array([1.0 if d["kind"] == "genuine" and d["ok"] else 0.0 for d in data])
    fold = np.array([d["fold"] for d in data])
    p1 = np.zeros(len(data))
    p2 = np.full(len(data), -1.0)
    for f in (0, 1):
        tr = fold != f
        mu, sd = x[tr].mean(0), x[tr].std(0) + 1e-9
        w = fit((x[tr] - mu) / sd, y[tr])
        print("fold %d weights (standardised: log inliers, ratio, hull, cells, log other; bias): %s" % (
            f, " ".join("%.2f" % v for v in w)), file=sys.stderr)
        for i, d in enumerate(data):
            if d["fold"] != f:
                continue
            z = (np.array(d["x1"]) - mu) / sd
            p1[i] = 1 / (1 + math.exp(-(z @ w[:-1] + w[-1])))
            if d["x2"] is not None:
                z = (np.array(d["x2"]) - mu) / sd
                p2[i] = 1 / (1 + math.exp(-(z @ w[:-1] + w[-1])))

    def decide(i, s1, s2, t):
        """'item' (accepted as rank 1's item), 'none' or 'ambiguous'."""
        if s1[i] < t:
            return "none"
        if s2[i] >= t and not data[i]["same12"]:
            return "ambiguous"
        return "item"

    def rates(idx, s1, s2, t):
        g = [i for i in idx if data[i]["kind"] == "genuine"]
        im = [i for i in idx if data[i]["kind"] == "impostor"]
        far = sum(decide(i, s1, s2, t) != "none" for i in im) / max(len(im), 1)
        frr = 1 - sum(decide(i, s1, s2, t) == "item" and data[i]["ok"] for i in g) / max(len(g), 1)
        return far, frr

    def threshold(idx, s1, s2, far_max):
        for t in sorted(set(s1[i] for i in idx)) + [math.inf]:
            if rates(idx, s1, s2, t)[0] <= far_max:
                return t
        return math.inf

    inl1 = np.array([d["inl1"] for d in data])
    inl2 = np.array([d["inl2"] if d["c2"] is not None else -1 for d in data])
    print("| score | target FAR | evaluation FAR | evaluation FRR | (thresholds per fold) |")
    print("|---|---|---|---|---|")
    for name, s1, s2 in (("rank-1 inliers", inl1, inl2), ("fused p", p1, p2)):
        for tgt in TARGETS:
            acc_far = acc_frr = 0.0
            ts = []
            ng = ni = 0
            for f in (0, 1):
                tr = [i for i in range(len(data)) if data[i]["fold"] != f]
                ev = [i for i in range(len(data)) if data[i]["fold"] == f]
                t = threshold(tr, s1, s2, tgt)
                ts.append(t)
                far, frr = rates(ev, s1, s2, t)
                g = sum(data[i]["kind"] == "genuine" for i in ev)
                im = len(ev) - g
                acc_far += far * im
                acc_frr += frr * g
                ng += g
                ni += im
            print("| %s | %g | %.1f%% | %.1f%% | %s |" % (name, tgt, 100 * acc_far / ni, 100 * acc_frr / ng,
                                                        ", ".join("%.4g" % t for t in ts)))
    with open(a.out, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["query", "rank", "key", "score", "inliers", "decision"])
        done = set()
        for i, d in enumerate(data):
            done.add(d["q"])
            w.writerow([d["q"], 1, d["c1"]["key"], "%.1f" % (1000 * p1[i]), "%.1f" % (1000 * p1[i]), "-"])
            if d["c2"] is not None:
                w.writerow([d["q"], 2, d["c2"]["key"], "%.1f" % (1000 * p2[i]), "%.1f" % (1000 * p2[i]), "-"])
        for q in qs:  # the impostor-shared queries: scored by inliers (score.py leaves them out of the grouped view)
            if q not in done:
                c1 = sorted(rows[q], key=lambda c: c["rank"])[0]
                w.writerow([q, 1, c1["key"], 1000.0, 1000.0, "-"])


if __name__ == "__main__":
    main()
