#!/usr/bin/env python3
"""Scores identification runs (issue 15's benchmark) from their CSVs and the sets' manifest.

  score.py --sets DIR --run NAME=CSV [--run NAME=CSV ...] [--threshold NAME=T ...]
           [--timings CSV ...] [--out FILE.md]

--sets: the folder make_sets.py wrote (manifest.csv, groups.csv). Each run's CSV has the columns of
`patina identify --format csv` (query,rank,key,score,inliers,decision), made with an accepting
threshold so that rank-1 scores are raw. A query is matched to the manifest by its last two path
components (queries/g0001.png); a key to its item by its file name (groups.csv). Prints markdown:

- top-1 / top-5: genuine queries whose rank-1 / any of ranks 1..5 is a reference of the true item
  (any recolour in the item's group counts); per distortion kind (queries with that single kind,
  and all queries with 2..4 kinds together as "combined").
- Open set, accepting when the rank-1 score >= T: FAR(T) = impostor queries accepted / impostors;
  FRR(T) = genuine queries NOT correctly accepted (rejected, or rank-1 of a wrong item) / genuine.
  At the run's threshold (--threshold NAME=T; the system's default): FAR, FRR, and the genuine
  queries accepted with a wrong item (misidentified). ROC over every rank-1 score as T: FRR at
  FAR <= 1% and <= 0.1% (the smallest such T), that T for FAR <= 1%, and the EER (the T where
  |FAR - FRR| is smallest; (FAR + FRR) / 2 there) beside the EER where the (FAR, FRR) polyline over
  the thresholds crosses FAR = FRR (interpolated between the two thresholds around the crossing:
  with integer inlier scores one threshold's read can sit far from it). With N impostors, FAR
  steps by 1/N.
- Impostors that are not impostors: some held-out textures reuse photographed content of a
  registered one (two composites with the same window, a clean and a "flat" copy of one leather, a
  door with and without windows) although the pixel grouping did not link them. --shares (default
  SETS/shares.csv when present; run.sh makes it with content_share.py: pairs of originals proposed
  by matchers, decided by pixels) names them: impostor-texture queries whose source shares content
  with some registered texture (shared == 1; in a CSV without that column, >= --shares-min (14)
  inliers) become the set "impostor-shared". The open-set table is computed over the clean
  impostors (photos and non-sharing textures); a second table gives the same over all impostors.
- Registered references that share content: the same test between the registered originals
  (--siblings, default SETS/siblings.csv when present) links items whose originals share content.
  GROUPED numbers count a rank 1 on a linked item as correct and leave the impostor-shared queries
  out; RAW numbers count neither (items are the pixel groups only, every impostor is an impostor).
  Both are reported.
- Ambiguous answers: at threshold T a query is ambiguous when rank 2 is verified (inliers > 0 in
  the CSV) with inliers >= T too and at least --ambiguity (the library's default, 0.5) times rank
  1's, as `patina identify` decides (its `ambiguity` option; 0 is the rule without the margin). When ranks 1 and 2 are one item (in
  the view's grouping) that is an answer of that item; otherwise the query is not accepted as one
  item: a genuine one counts in FRR (and in the "ambiguous" column), an impostor as accepted.
- --plots DIR: far_frr.png (FRR against FAR of every run, and FAR(T), FRR(T) of the first run),
  scores.png (rank-1 score distributions of genuine and impostor queries per run), made with
  matplotlib.
- --timings: CSVs system,stage,items,seconds -> items/s per stage.
Exit status 0; 1 when a run misses queries of the manifest or has unknown ones (reported).
"""
import argparse
import collections
import csv
import math
import os
import sys

KINDS = ["perspective", "rotate", "crop", "scale", "photometric", "blur", "noise", "jpeg"]


def qkey(path):
    return "/".join(path.replace("\\", "/").split("/")[-2:])


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_run(path, manifest):
    """{query: [(rank, key, score)]} sorted by rank; problems as messages."""
    runs = collections.defaultdict(list)
    for r in read_csv(path):
        runs[qkey(r["query"])].append((int(r["rank"]), os.path.basename(r["key"]), float(r["score"]),
                                       float(r.get("inliers") or 0)))
    problems = []
    missing = [q for q in manifest if q not in runs]
    extra = [q for q in runs if q not in manifest]
    if missing:
        problems.append("%s: %d manifest queries missing (e.g. %s)" % (path, len(missing), missing[0]))
    if extra:
        problems.append("%s: %d queries not in the manifest (e.g. %s)" % (path, len(extra), extra[0]))
    return {q: sorted(v) for q, v in runs.items()}, problems


def evaluate(run, manifest, item_of):
    """Per query: (set, kinds, rank-1 score, rank-1 item, rank-2 item, rank-2 verified inliers, true item,
    top-5 items)."""
    out = {}
    for q, m in manifest.items():
        rows = [r for r in run.get(q, []) if r[0] >= 1]
        score = rows[0][2] if rows else 0.0
        items = [item_of.get(r[1]) for r in rows[:5]]
        i1 = items[0] if items else None
        i2 = items[1] if len(items) > 1 else None
        s2 = rows[1][3] if len(rows) > 1 else 0.0
        out[q] = (m["set"], m["kinds"], score, i1, i2, s2, m["item"] if m["set"] == "genuine" else None, items)
    return out


class View:
    """A scoring view: grouped (content links between items count, impostor-shared left out) or raw."""

    def __init__(self, link, ambiguity=0.5):
        self.link = link  # item -> content group (identity for the raw view)
        self.ambiguity = ambiguity  # the library's margin (patina_identify_opts_t.ambiguity)

    def same(self, a, b):
        return a is not None and b is not None and self.link.get(a, a) == self.link.get(b, b)

    def top1(self, v):
        return v[6] is not None and self.same(v[3], v[6])

    def top5(self, v):
        return v[6] is not None and any(self.same(i, v[6]) for i in v[7])

    def answer(self, v, t):
        """'none' (rejected), 'ambiguous' (two items) or 'item' (one item: rank 1's) at threshold t."""
        if v[3] is None or v[2] < t:
            return "none"
        if v[5] > 0 and v[5] >= t and v[5] >= self.ambiguity * v[2] and not self.same(v[3], v[4]):
            return "ambiguous"
        return "item"


def far_frr(ev, t, view, shared=False):
    gen = [v for v in ev.values() if v[0] == "genuine"]
    imp = [v for v in ev.values() if v[0] != "genuine" and (shared or v[0] != "impostor-shared")]
    far = sum(view.answer(v, t) != "none" for v in imp) / max(1, len(imp))
    ok = sum(view.answer(v, t) == "item" and view.top1(v) for v in gen)
    frr = 1 - ok / max(1, len(gen))
    mis = sum(view.answer(v, t) == "item" and not view.top1(v) for v in gen) / max(1, len(gen))
    amb = sum(view.answer(v, t) == "ambiguous" for v in gen) / max(1, len(gen))
    return far, frr, mis, amb


def curve(ev, view, shared=False):
    ts = sorted({v[2] for v in ev.values()}) + [float("inf")]
    return [(t,) + far_frr(ev, t, view, shared) for t in ts]


def roc(ev, view, shared=False):
    pts = curve(ev, view, shared)
    res = {}
    for x in (0.01, 0.001):
        ok = [p for p in pts if p[1] <= x]
        res[x] = ok[0]  # smallest threshold meeting the FAR bound (inf always does)
    eer = min(pts, key=lambda p: (abs(p[1] - p[2]), p[0]))
    res["eer"] = eer
    res["eer_lin"] = eer_interpolated(pts)
    return res


def eer_interpolated(pts):
    """The EER where the (FAR, FRR) polyline over the thresholds crosses FAR = FRR: between the last
    threshold with FAR >= FRR and the next one, linearly (what a threshold drawn at random between the
    two achieves); with integer scores the read at one threshold can sit far from the crossing."""
    for a, b in zip(pts, pts[1:]):
        da, db = a[1] - a[2], b[1] - b[2]
        if da >= 0 > db:
            lam = da / (da - db)
            return a[1] + lam * (b[1] - a[1])
    return (pts[-1][1] + pts[-1][2]) / 2


def sharing_pairs(path, shares_min):
    """The rows of a shares/siblings CSV that share content: shared == 1 when the CSV has that column
    (content_share.py: decided by pixels), else inliers >= shares_min (the peer's inliers alone)."""
    rows = read_csv(path)
    if rows and "shared" in rows[0]:
        return [r for r in rows if r["shared"] == "1"]
    return [r for r in rows if int(r["inliers"]) >= shares_min]


def content_links(path, item_of, shares_min):
    """item -> representative item of its content group (union-find over the sibling pairs)."""
    parent = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x
    for r in sharing_pairs(path, shares_min):
        a, b = item_of.get(r["texture"]), item_of.get(r["registered"])
        if a and b and a != b:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)
    return {i: find(i) for i in set(item_of.values())}


def plots(folder, runs, view, thresholds):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(folder, exist_ok=True)
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.8))
    for name, ev in runs:
        pts = curve(ev, view)
        ax[0].plot([max(p[1], 1e-4) for p in pts], [p[2] for p in pts], drawstyle="steps-post", label=name)
    ax[0].set_xscale("log")
    ax[0].set_xlim(1e-4 * 0.9, 1)
    ax[0].set_ylim(0, 1)
    ax[0].axvline(0.01, color="grey", lw=0.6, ls=":")
    ax[0].axhline(0.03, color="grey", lw=0.6, ls=":")
    ax[0].set_xlabel("FAR (clean impostors; 0 drawn at 1e-4)")
    ax[0].set_ylabel("FRR (genuine not accepted as their item)")
    ax[0].set_title("FRR against FAR, grouped")
    ax[0].legend(fontsize=8)
    name, ev = runs[0]
    pts = [p for p in curve(ev, view) if p[0] != float("inf")]
    ax[1].plot([p[0] for p in pts], [p[1] for p in pts], drawstyle="steps-post", label="FAR(T)")
    ax[1].plot([p[0] for p in pts], [p[2] for p in pts], drawstyle="steps-post", label="FRR(T)")
    ax[1].plot([p[0] for p in pts], [p[4] for p in pts], drawstyle="steps-post", label="ambiguous(T)", lw=0.8)
    if name in thresholds:
        ax[1].axvline(thresholds[name], color="grey", ls=":", label="default T = %g" % thresholds[name])
    ax[1].set_xscale("symlog", linthresh=10)
    ax[1].set_xlim(left=0)
    ax[1].set_xlabel("threshold T (rank-1 score)")
    ax[1].set_title("%s: FAR and FRR against the threshold, grouped" % name)
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "far_frr.png"), dpi=110)
    plt.close(fig)
    fig, axs = plt.subplots(1, len(runs), figsize=(5 * len(runs), 4), squeeze=False)
    for a, (name, ev) in zip(axs[0], runs):
        gen_ok = [v[2] for v in ev.values() if v[0] == "genuine" and view.top1(v)]
        gen_bad = [v[2] for v in ev.values() if v[0] == "genuine" and not view.top1(v)]
        imp = [v[2] for v in ev.values() if v[0] not in ("genuine", "impostor-shared")]
        top = max([1.0] + gen_ok + gen_bad + imp)
        bins = [0] + [1.25 ** i for i in range(int(math.log(top) / math.log(1.25)) + 2)]
        a.hist([imp, gen_bad, gen_ok], bins=bins, stacked=True, label=["clean impostors", "genuine, rank 1 wrong",
                                                                       "genuine, rank 1 right"],
               color=["#c0504d", "#f2b134", "#4f81bd"])
        a.set_xscale("symlog", linthresh=1)
        a.set_xlim(left=0)
        if name in thresholds:
            a.axvline(thresholds[name], color="black", ls=":", lw=0.8)
        a.set_title("%s: rank-1 scores" % name)
        a.set_xlabel("rank-1 score")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(folder, "scores.png"), dpi=110)
    plt.close(fig)


def load_sets(sets, shares=None, shares_min=14):
    """(manifest, item_of) of a sets folder, the impostor-texture queries whose source shares content
    with a registered texture (shares, default SETS/shares.csv) marked "impostor-shared"."""
    manifest = {qkey(r["query"]): r for r in read_csv(os.path.join(sets, "manifest.csv"))}
    item_of = {r["file"]: r["item"] for r in read_csv(os.path.join(sets, "groups.csv"))}
    sharing = {r["texture"] for r in sharing_pairs(shares or os.path.join(sets, "shares.csv"), shares_min)}
    for m in manifest.values():
        if m["set"] == "impostor-texture" and m["source"] in sharing:
            m["set"] = "impostor-shared"
    return manifest, item_of


def item_folds(gen, imp, splits):
    """Item-disjoint 2-fold cross-validation for the lab's acceptance rules: per seed 0 .. splits - 1,
    the genuine queries split by their true item and the impostors by query, each half in turn the
    training half: yields (train genuine, train impostors, test genuine, test impostors). gen and imp
    are lists of (query, evaluate()'s tuple)."""
    import random
    for seed in range(splits):
        rnd = random.Random(seed)
        items = sorted(set(v[6] for _, v in gen))
        rnd.shuffle(items)
        half = set(items[:len(items) // 2])
        iq = [q for q, _ in imp]
        rnd.shuffle(iq)
        ihalf = set(iq[:len(iq) // 2])
        ga, gb = [x for x in gen if x[1][6] in half], [x for x in gen if x[1][6] not in half]
        ia, ib = [x for x in imp if x[0] in ihalf], [x for x in imp if x[0] not in ihalf]
        yield ga, ia, gb, ib
        yield gb, ib, ga, ia


def pct(x):
    return "%.1f%%" % (100 * x)


def fmt_t(t):
    return "inf" if t == float("inf") else ("%g" % t)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", required=True)
    ap.add_argument("--run", action="append", default=[], required=True)
    ap.add_argument("--threshold", action="append", default=[])
    ap.add_argument("--timings", action="append", default=[])
    ap.add_argument("--shares", help="CSV texture,registered,inliers (default: SETS/shares.csv when present)")
    ap.add_argument("--siblings", help="CSV texture,registered,inliers between registered originals "
                    "(default: SETS/siblings.csv when present)")
    ap.add_argument("--shares-min", type=int, default=14)
    ap.add_argument("--ambiguity", type=float, default=0.5,
                    help="the decision's ambiguity margin, as the identify runs used it (library default 0.5)")
    ap.add_argument("--plots", help="folder for far_frr.png and scores.png")
    ap.add_argument("--out")
    a = ap.parse_args()

    manifest = {qkey(r["query"]): r for r in read_csv(os.path.join(a.sets, "manifest.csv"))}
    item_of = {r["file"]: r["item"] for r in read_csv(os.path.join(a.sets, "groups.csv"))}
    shares = a.shares or os.path.join(a.sets, "shares.csv")
    nshared = 0
    if os.path.exists(shares):
        sharing = {r["texture"]: r for r in sharing_pairs(shares, a.shares_min)}
        for m in manifest.values():
            if m["set"] == "impostor-texture" and m["source"] in sharing:
                m["set"] = "impostor-shared"
                nshared += 1
    elif a.shares:
        ap.error("--shares %s does not exist" % a.shares)
    siblings = a.siblings or os.path.join(a.sets, "siblings.csv")
    raw = View({}, a.ambiguity)
    if os.path.exists(siblings):
        grouped = View(content_links(siblings, item_of, a.shares_min), a.ambiguity)
    elif a.siblings:
        ap.error("--siblings %s does not exist" % a.siblings)
    else:
        grouped = View({}, a.ambiguity)
    nlinked = sum(1 for i, g in grouped.link.items() if i != g)
    thresholds = {}
    for s in a.threshold:
        name, _, t = s.partition("=")
        thresholds[name] = float(t)
    runs, problems = [], []
    for s in a.run:
        name, _, path = s.partition("=")
        if not path:
            ap.error("--run wants NAME=CSV, got %r" % s)
        run, p = load_run(path, manifest)
        problems += p
        runs.append((name, evaluate(run, manifest, item_of)))

    sets = collections.Counter(m["set"] for m in manifest.values())
    lines = []
    lines.append("Sets: %s; %d references; %d registered items linked to another by shared content "
                 "(grouped view)." % (", ".join("%d %s" % (n, s) for s, n in sorted(sets.items())),
                                      sum(1 for f in os.listdir(os.path.join(a.sets, "refs"))), nlinked))
    lines.append("")
    names = [n for n, _ in runs]
    lines.append("| genuine queries | n | " + " | ".join("%s top-1 / top-5 (raw top-1)" % n for n in names) + " |")
    lines.append("|---|---|" + "---|" * len(names))
    groups = [("all", lambda k: True)] + [(k, (lambda kk: lambda k: k == kk)(k)) for k in KINDS] \
        + [("combined (2-4 kinds)", lambda k: "+" in k)]
    for label, sel in groups:
        qs = [q for q, m in manifest.items() if m["set"] == "genuine" and sel(m["kinds"])]
        if not qs:
            continue
        cells = []
        for _, ev in runs:
            cells.append("%s / %s (%s)" % (pct(sum(grouped.top1(ev[q]) for q in qs) / len(qs)),
                                           pct(sum(grouped.top5(ev[q]) for q in qs) / len(qs)),
                                           pct(sum(raw.top1(ev[q]) for q in qs) / len(qs))))
        lines.append("| %s | %d | %s |" % (label, len(qs), " | ".join(cells)))
    with_t = [(n, ev) for n, ev in runs if n in thresholds]
    if with_t:
        lines.append("")
        lines.append("FRR at each run's threshold by distortion (grouped; genuine queries not accepted as their item):")
        lines.append("")
        lines.append("| genuine queries | n | " + " | ".join("%s FRR(T=%s)" % (n, fmt_t(thresholds[n])) for n, _ in with_t)
                     + " |")
        lines.append("|---|---|" + "---|" * len(with_t))
        for label, sel in groups:
            qs = [q for q, m in manifest.items() if m["set"] == "genuine" and sel(m["kinds"])]
            if not qs:
                continue
            cells = [pct(1 - sum(grouped.answer(ev[q], thresholds[n]) == "item" and grouped.top1(ev[q]) for q in qs)
                         / len(qs)) for n, ev in with_t]
            lines.append("| %s | %d | %s |" % (label, len(qs), " | ".join(cells)))
    for view, title in ((grouped, "GROUPED: over the clean impostors (photos and held-out textures sharing no content "
                                  "with a registered one%s), a rank 1 on an item sharing content with the true one "
                                  "counted right" % (
                                      "; %d impostor queries share content and are left out" % nshared
                                      if nshared else "")),
                        (raw, "RAW: over all impostors, items = the pixel groups only")):
        shared = view is raw
        lines.append("")
        lines.append(title + ":")
        lines.append("")
        lines.append("| open set | threshold T | FAR(T) | FRR(T) | misidentified(T) | ambiguous(T) | FAR by impostor "
                     "source | FRR @ FAR<=1% | T for FAR<=1% | FRR @ FAR<=0.1% | EER (T) | EER, interpolated |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, ev in runs:
            r = roc(ev, view, shared)
            if name in thresholds:
                t = thresholds[name]
                far, frr, mis, amb = far_frr(ev, t, view, shared)
                src = []
                for s in sorted(x for x in sets if x != "genuine"):
                    imp = [v for v in ev.values() if v[0] == s]
                    src.append("%s %s" % (s.replace("impostor-", ""),
                                          pct(sum(view.answer(v, t) != "none" for v in imp) / len(imp))))
                at = [fmt_t(t), pct(far), pct(frr), pct(mis), pct(amb), ", ".join(src)]
            else:
                at = ["(none given)", "", "", "", "", ""]
            e = r["eer"]
            lines.append("| %s | %s | %s | %s | %s | %s (T=%s) | %s |" % (
                name, " | ".join(at), pct(r[0.01][2]), fmt_t(r[0.01][0]), pct(r[0.001][2]), pct((e[1] + e[2]) / 2),
                fmt_t(e[0]), pct(r["eer_lin"])))
    if a.timings:
        lines.append("")
        lines.append("| timing (wall) | stage | items | seconds | items/s |")
        lines.append("|---|---|---|---|---|")
        for path in a.timings:
            for r in read_csv(path):
                n, s = int(r["items"]), float(r["seconds"])
                lines.append("| %s | %s | %d | %.1f | %.2f |" % (r["system"], r["stage"], n, s, n / s if s > 0 else 0))
    if a.plots:
        plots(a.plots, runs, grouped, thresholds)
        lines.append("")
        lines.append("Plots: %s, %s." % (os.path.join(a.plots, "far_frr.png"), os.path.join(a.plots, "scores.png")))
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    for p in problems:
        print("score: %s" % p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
