"""patina.Collection against the CLI on the same collections: search results
(keys, ranks, distances to the bit), records, identification; and the
binding's own add / remove / update round trips."""

import csv
import ctypes
import io
import json
import os
import shutil
import subprocess
import threading

import numpy as np
import pytest

import patina
from conftest import VARIANT, run, run_full, smooth_noise, write_png

SPECS = ["cedd", "lbp:P=8,R=1", "lbp:P=8,R=1,norm=counts,distance=l1", "haralick", "glcm:levels=16",
         "signature:k=16,samples=500"]


def cli_search(cli, coll, queries, *args):
    """`patina search --format csv`: {query: [(rank, key, distance text)]}."""
    out = run(cli, "search", coll, *queries, "--format", "csv", *args).decode()
    res = {q: [] for q in queries}
    for row in csv.reader(io.StringIO(out)):
        res[row[0]].append((int(row[1]), row[2], row[3]))
    return res


def assert_same(py_hits, cli_rows):
    assert [h.key for h in py_hits] == [k for _, k, _ in cli_rows]
    assert [rank for rank, _, _ in cli_rows] == list(range(1, len(cli_rows) + 1))
    for h, (_, _, d) in zip(py_hits, cli_rows):
        assert h.distance == float(d), (h, d)          # %.17g round-trips a double
        assert f"{h.distance:.17g}" == d


@pytest.fixture(scope="module")
def variant(samples, tmp_path_factory):
    """A near-duplicate of samples[0]: cropped, rescaled, re-compressed."""
    if not os.access(VARIANT, os.X_OK):
        pytest.skip(f"no patina-variant at {VARIANT}")
    out = str(tmp_path_factory.mktemp("variant") / "variant.jpg")
    run(VARIANT, samples[0], out, "--crop", "8", "--scale", "0.7", "--quality", "80")
    return out


@pytest.fixture(scope="module")
def indexed(cli, samples, tmp_path_factory):
    """The samples indexed by the CLI in every spec of SPECS."""
    coll = str(tmp_path_factory.mktemp("cli") / "photos.patina")
    for spec in SPECS:
        run(cli, "index", coll, *samples, "-f", spec, "-q")
    return coll


@pytest.mark.parametrize("spec", SPECS)
def test_search_matches_cli(cli, indexed, samples, variant, spec):
    queries = samples[:4] + [variant]
    want = cli_search(cli, indexed, queries, "-f", spec, "-k", "6")
    with patina.Collection(indexed, readonly=True, family=spec) as c:
        got = c.search_batch(queries, k=6)
        for q, hits in zip(queries, got):
            assert len(hits) == 6
            assert_same(hits, want[q])
        # one at a time, and from descriptors, give the same
        for q in queries[:2] + [variant]:
            assert c.search(q, k=6) == got[queries.index(q)]
            d = patina.extract(q, spec)
            assert c.search(d, k=6) == got[queries.index(q)]
        # an (n, dim) array of descriptors
        mat = patina.extract_batch(queries, spec)
        assert c.search_batch(mat, k=6) == got
        # the query itself is its own nearest neighbour, at distance 0
        assert got[0][0].key == samples[0] and got[0][0].distance == 0.0


@pytest.mark.parametrize("spec", ["cedd", "lbp:P=8,R=1", "haralick"])
def test_range_matches_cli(cli, indexed, samples, variant, spec):
    with patina.Collection(indexed, readonly=True) as c:
        knn = c.search(variant, k=len(samples), family=spec)
        radius = knn[len(knn) // 2].distance   # half of the collection within it (ties included)
        want = cli_search(cli, indexed, [variant], "-f", spec, "--range", f"{radius:.17g}")[variant]
        got = c.search(variant, range=radius, family=spec)
        assert_same(got, want)
        assert len(got) >= len(knn) // 2 + 1 and all(h.distance <= radius for h in got)
        assert got == knn[:len(got)]
        capped = c.search(variant, range=radius, family=spec, max_hits=2)
        assert capped == got[:2]
        assert c.search(variant, range=0.0, family=spec) == [h for h in got if h.distance == 0.0]


def test_k_larger_than_collection(indexed, samples):
    with patina.Collection(indexed, readonly=True, family="cedd") as c:
        hits = c.search(samples[3], k=1000)
        assert len(hits) == len(samples) == len(c)
        assert sorted(h.key for h in hits) == sorted(samples)
        d = [h.distance for h in hits]
        assert d == sorted(d)
        assert len(c.search(samples[3], k=1)) == 1


def test_signature_pivot_table_matches_cli(cli, samples, variant, tmp_path):
    spec = "signature:k=16,samples=500"
    coll = str(tmp_path / "pivots.patina")
    run(cli, "index", coll, *samples, "-f", spec, "--pivots", "4", "-q")
    queries = [samples[1], variant]
    for bound in ("ptolemaic", "metric", "none"):
        want = cli_search(cli, coll, queries, "-f", spec, "-k", "5", "--bound", bound)
        with patina.Collection(coll, readonly=True) as c:
            got = c.search_batch(queries, k=5, bound=bound)
        for q, hits in zip(queries, got):
            assert_same(hits, want[q])
    # removing an image through the binding keeps the stored table current (as patina rm)
    with patina.Collection(coll) as c:
        c.remove(samples[2])
        assert samples[2] not in [h.key for h in c.search(samples[2], k=len(samples))]
    want = cli_search(cli, coll, queries, "-f", spec, "-k", "5")
    with patina.Collection(coll, readonly=True) as c:
        for q, hits in zip(queries, c.search_batch(queries, k=5)):
            assert_same(hits, want[q])
        # device "gpu" takes the GPU filter, as the CLI's --device gpu: the
        # same hits with a GPU, UnavailableError (the CLI fails) without one
        if patina.gpu_count() > 0:
            for q, hits in zip(queries, c.search_batch(queries, k=5, device="gpu")):
                assert_same(hits, want[q])
            for q, hits in zip(queries, c.search_batch(queries, range=1e9, device="gpu")):
                assert [h.key for h in hits][:5] == [key for _, key, _ in want[q]]
        else:
            with pytest.raises(patina.UnavailableError):
                c.search(queries[0], k=5, device="gpu")
            p = subprocess.run([cli, "search", coll, queries[0], "-f", spec, "-k", "5", "--device", "gpu"],
                               capture_output=True)
            assert p.returncode != 0 and p.stderr, p


def ls_rows(cli, coll):
    """`patina ls --format csv` without the ADDED column."""
    return [row[:6] for row in csv.reader(io.StringIO(run(cli, "ls", coll, "--format", "csv").decode()))]


def test_binding_writes_what_the_cli_writes(cli, indexed, samples, tmp_path):
    """Paths added through the binding get the records `patina index` gives
    them (size, SHA-256, dimensions) and the same descriptors."""
    coll = str(tmp_path / "py.patina")
    with patina.Collection(coll, create=True) as c:
        ids = c.add_batch([(p, p) for p in samples], family="cedd")
        assert ids == list(range(1, len(samples) + 1))
        c.add_batch([(p, p) for p in samples], family="lbp:P=8,R=1")   # a second table, same records
        assert len(c) == len(samples)
    assert ls_rows(cli, coll) == ls_rows(cli, indexed)
    with patina.Collection(coll, readonly=True) as a, patina.Collection(indexed, readonly=True) as b:
        for p in samples:
            for spec in ("cedd", "lbp:P=8,R=1"):
                assert a.descriptor(p, spec).tobytes() == b.descriptor(p, spec).tobytes()
            ra, rb = a[p], b[p]
            assert (ra.size, ra.sha256, ra.width, ra.height, ra.mtime) == (rb.size, rb.sha256, rb.width, rb.height,
                                                                          rb.mtime)
    # and the CLI searches the binding's collection as its own
    want = cli_search(cli, indexed, samples[:3], "-f", "lbp:P=8,R=1")
    got = cli_search(cli, coll, samples[:3], "-f", "lbp:P=8,R=1")
    assert got == want


def test_add_remove_update_round_trips(cli, samples, tmp_path):
    coll = str(tmp_path / "rt.patina")
    a, b, c3 = smooth_noise(40, 50, seed=11), smooth_noise(40, 50, seed=12), smooth_noise(30, 30, seed=13)
    with patina.Collection(coll, create=True, family="lbp:P=8,R=1") as c:
        assert len(c) == 0 and c.keys() == [] and list(c) == [] and c.tables() == {}
        ia = c.add("a", a)
        ib = c.add("b", samples[0])
        assert (ia, ib) == (1, 2) and len(c) == 2 and c.keys() == ["a", "b"] and "a" in c and "zz" not in c
        np.testing.assert_array_equal(c.descriptor("a"), patina.extract(a, "lbp:P=8,R=1"))
        ra = c["a"]
        assert (ra.id, ra.key, ra.size, ra.width, ra.height, ra.mtime) == (1, "a", 0, 50, 40, 0)
        assert c.get(1) == ra and c.get("nope") is None and c.get("nope", 7) == 7
        assert c[2].key == "b" and c[2].size == os.path.getsize(samples[0])
        assert c.search(a, k=1)[0] == patina.Hit("a", 0.0, 1)
        # update: same id, new descriptor; the search follows
        assert c.update("a", b) == 1
        np.testing.assert_array_equal(c.descriptor("a"), patina.extract(b, "lbp:P=8,R=1"))
        assert c.search(b, k=1)[0] == patina.Hit("a", 0.0, 1)
        assert c["a"].sha256 != ra.sha256
        # add over an existing key replaces it too (keeps the id)
        assert c.add("a", c3) == 1 and len(c) == 2
        # remove by key and by id
        c.remove("a")
        assert "a" not in c and len(c) == 1 and [h.key for h in c.search(c3, k=5)] == ["b"]
        ic = c.add("c", c3)
        assert ic == 3   # ids are never reused
        del c[3]
        assert c.keys() == ["b"]
        info = c.info()
        assert info["records"] == 1 and info["next_id"] == 4 and info["tables"] == 1
        assert c.tables()["lbp:P=8,R=1,method=default,mapping=none,grid=1x1,norm=l1,distance=chi2,vbins=16"].rows == 1
    # the CLI sees what the binding wrote, and the binding what the CLI removes
    assert [r[1] for r in ls_rows(cli, coll)] == ["b"]
    with patina.Collection(coll) as c:
        c.add_batch({"x": samples[1], "y": samples[2]})
    run(cli, "rm", coll, "x")
    with patina.Collection(coll, readonly=True) as c:
        assert c.keys() == ["b", "y"]
        assert "x" not in [h.key for h in c.search(samples[1], k=10)]


def test_descriptors_in_and_second_family(samples, tmp_path):
    with patina.Collection(str(tmp_path / "d.patina"), create=True) as c:
        d = np.arange(144, dtype=np.uint8) % 8
        c.add("vec", d, family="cedd")
        assert c["vec"].size == 0 and c["vec"].width == 0
        np.testing.assert_array_equal(c.descriptor("vec", "cedd"), d)
        assert c.search(d, k=1, family="cedd") == [patina.Hit("vec", 0.0, 1)]
        # a stored image gets a second family's descriptor without losing the first
        c.add("img", samples[0], family="cedd")
        rec = c["img"]
        lbp = patina.extract(samples[0], "lbp")
        c.add("img", lbp, family="lbp")
        assert c["img"] == rec                       # the record stays
        np.testing.assert_array_equal(c.descriptor("img", "cedd"), patina.extract(samples[0], "cedd"))
        np.testing.assert_array_equal(c.descriptor("img", "lbp"), lbp)
        # two tables: calls must say which (the library's rule; its message lists them)
        with pytest.raises(patina.InvalidError, match="2 tables for search"):
            c.search(d)
        with pytest.raises(patina.NotFoundError):
            c.descriptor("vec", "lbp")


def test_add_batch_is_one_transaction(samples, tmp_path):
    with patina.Collection(str(tmp_path / "tx.patina"), create=True) as c:
        c.add("keep", samples[0])
        with pytest.raises(patina.NotFoundError):
            c.add_batch([("n1", samples[1]), ("n2", str(tmp_path / "missing.jpg")), ("n3", samples[2])])
        with pytest.raises(patina.InvalidError):
            c.add_batch([("n1", samples[1]), ("n2", np.zeros((3, 3), np.float64))])
        assert c.keys() == ["keep"]
        with pytest.raises(patina.ArgumentTypeError):
            c.add_batch(["not-a-pair"])
        assert c.add_batch([]) == []
        # a key repeated in a batch: the last wins, one id
        ids = c.add_batch([("dup", samples[1]), ("dup", samples[2])])
        assert ids[0] == ids[1] and c["dup"].size == os.path.getsize(samples[2])


def test_search_sees_other_handles_writes(samples, tmp_path):
    path = str(tmp_path / "live.patina")
    with patina.Collection(path, create=True) as w, patina.Collection(path, readonly=True) as r:
        w.add("one", samples[0])
        assert [h.key for h in r.search(samples[0])] == ["one"]
        w.add("two", samples[1])
        assert sorted(h.key for h in r.search(samples[0])) == ["one", "two"]
        w.remove("one")
        assert [h.key for h in r.search(samples[0])] == ["two"]


def reloads(c, t):
    """Whether table t of handle c had to reload to be current (patina_table_refresh)."""
    r = ctypes.c_int(-1)
    c._lib.check(c._lib.table_refresh(t.h, ctypes.byref(r)))
    return r.value


def collection_version(c):
    v = ctypes.c_uint64()
    c._lib.check(c._lib.collection_version(c._handle(), ctypes.byref(v)))
    return v.value


def test_tables_stay_open(samples, tmp_path):
    """A handle keeps the tables it searches open, loaded once: searches
    reuse them, a write through the handle updates them in place (no
    reload), and a write by another handle is seen by the next search (the
    collection's version)."""
    path = str(tmp_path / "open.patina")
    with patina.Collection(path, create=True) as c:
        c.add_batch([("a", samples[0]), ("b", samples[1])])
        assert [h.key for h in c.search(samples[0], k=1)] == ["a"]
        (spec, t), = c._tables.items()
        assert reloads(c, t) == 0                      # the search loaded it
        assert c.search(samples[1], k=1)[0].key == "b"
        assert c._tables == {spec: t} and reloads(c, t) == 0
        v = c._lib.table_version(t.h)
        c.add("c", samples[2])
        assert reloads(c, t) == 0                      # followed the write in place
        assert c._lib.table_version(t.h) == collection_version(c) > v
        assert c.search(samples[2], k=1)[0] == patina.Hit("c", 0.0, 3)
        c.update("c", samples[3])
        c.remove("a")
        assert reloads(c, t) == 0
        hits = c.search(samples[3], k=5)
        assert hits[0] == patina.Hit("c", 0.0, 3) and sorted(h.key for h in hits) == ["b", "c"]
        # another handle's write: the next search reloads, the table object stays
        with patina.Collection(path) as w:
            w.add("d", samples[4])
        assert c.search(samples[4], k=1)[0] == patina.Hit("d", 0.0, 4)
        assert c._tables == {spec: t} and reloads(c, t) == 0
        assert sorted(h.key for h in c.search(samples[0], k=10)) == ["b", "c", "d"]
    assert c._tables == {}                             # close() freed them


def test_threads_share_a_collection(indexed, samples):
    with patina.Collection(indexed, readonly=True, family="lbp:P=8,R=1") as c:
        want = c.search_batch(samples, k=4)
        errs, got = [], [None] * 4

        def work(t):
            try:
                got[t] = [c.search(q, k=4) for q in samples]
            except Exception as e:  # pragma: no cover - reported below
                errs.append(e)
        ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs and all(g == want for g in got)


def test_odd_keys(cli, tmp_path, synthetic):
    """Keys with commas, quotes, newlines and non-UTF-8 bytes survive (os.fsdecode)."""
    d = tmp_path / "odd"
    d.mkdir()
    names = ["a,b.png", 'q"uote.png', "new\nline.png", "caf\u00e9.png"]
    for n in names:
        shutil.copy(synthetic["rgb_path"], d / n)
    raw = os.fsdecode(b"\xff\xfe.png")
    shutil.copy(synthetic["grey_path"], os.path.join(str(d), raw))
    coll = str(tmp_path / "odd.patina")
    paths = [str(d / n) for n in names] + [os.path.join(str(d), raw)]
    run(cli, "index", coll, *paths, "-q")
    # keys: the real paths relative to the collection's root, the folder that holds it
    keys = [os.path.relpath(os.path.realpath(p), os.path.realpath(str(tmp_path))) for p in paths]
    with patina.Collection(coll, readonly=True) as c:
        assert sorted(c.keys()) == sorted(keys)
        for k in keys:
            assert c[k].key == k
        hits = c.search(paths[-1], k=1)
        assert hits[0].key == keys[-1] and hits[0].distance == 0.0
        assert os.fsencode(hits[0].key) == b"odd/\xff\xfe.png"


def test_context_manager_and_repr(tmp_path):
    c = patina.Collection(str(tmp_path / "cm.patina"), create=True)
    assert "0 images" in repr(c) and not c.closed
    with c:
        c.add("k", smooth_noise(10, 10))
    assert c.closed and "closed" in repr(c)
    with patina.Collection(str(tmp_path / "cm.patina")) as again:
        assert len(again) == 1


# ------------------------------------------------------------ identification
@pytest.fixture(scope="module")
def rootsift_coll(cli, samples, tmp_path_factory):
    coll = str(tmp_path_factory.mktemp("id") / "refs.patina")
    run(cli, "index", coll, *samples[:8], "-f", "rootsift:m=128,n=256", "-q")
    return coll


def test_identify_matches_cli(cli, rootsift_coll, samples, variant, tmp_path):
    unknown = tmp_path / "unknown.png"
    write_png(unknown, smooth_noise(120, 160, seed=99))
    queries = [variant, samples[1], samples[10], str(unknown)]
    out = run(cli, "identify", rootsift_coll, *queries, "--format", "json", "-q").decode().splitlines()
    want = [json.loads(line) for line in out]
    with patina.Collection(rootsift_coll, readonly=True) as c:
        got = c.identify_batch(queries)
        for w, g in zip(want, got):
            assert g.decision == w["decision"] and g.features == w["features"]
            assert [(h.key, h.score, h.matches, h.inliers, h.verified) for h in g.candidates] == \
                [(h["key"], h["score"], h["matches"], h["inliers"], h["verified"]) for h in w["hits"]]
        assert got[0].decision == "match" and got[0].match.key == samples[0]
        assert got[1].match.key == samples[1]
        assert got[3].decision == "unknown" and got[3].match is None
        # one query, options passed through (as the CLI's flags)
        one = c.identify(variant, k=3, verify=False, threshold=0)
        w = json.loads(run(cli, "identify", rootsift_coll, variant, "--format", "json", "-q", "-k", "3",
                           "--no-verify", "--threshold", "0"))
        assert [(h.key, h.score, h.verified) for h in one.candidates] == \
            [(h["key"], h["score"], h["verified"]) for h in w["hits"]]
        # far: the calibrated threshold, as the CLI's --far; guided matching, as --guided
        for far in ("1", "0.001"):
            w = json.loads(run(cli, "identify", rootsift_coll, str(unknown), "--format", "json", "-q", "--far", far,
                               "--guided"))
            g = c.identify(str(unknown), far=float(far), guided=True)
            assert g.decision == w["decision"] and (g.decision == "unknown") == (far != "1")
            assert [(h.key, h.inliers) for h in g.candidates] == [(h["key"], h["inliers"]) for h in w["hits"]]
        with pytest.raises(patina.InvalidError, match="far = 0.0001 is outside"):
            c.identify(variant, far=0.0001)
        # the ambiguity margin reaches the library (checked there: [0, 1]), as --ambiguity
        w = json.loads(run(cli, "identify", rootsift_coll, variant, "--format", "json", "-q", "--threshold", "0",
                           "--ambiguity", "0"))
        assert c.identify(variant, threshold=0, ambiguity=0).decision == w["decision"]
        with pytest.raises(patina.InvalidError, match="ambiguity"):
            c.identify(variant, ambiguity=1.5)
        # the distinctness margin and its sibling check, as --distinct and --sibling-inliers: a margin
        # above rank 1's own score makes the answer unknown, with the CLI's
        top = c.identify(variant, threshold=4, accept="inliers").candidates[0].score
        for d in (3, top + 1):
            w = json.loads(run(cli, "identify", rootsift_coll, variant, "--format", "json", "-q", "--threshold", "4",
                               "--accept", "inliers", "--distinct", str(d), "--sibling-inliers", "5"))
            g = c.identify(variant, threshold=4, distinct=d, sibling_inliers=5, accept="inliers")
            assert g.decision == w["decision"] and (g.decision == "unknown") == (d > top)
        with pytest.raises(patina.InvalidError, match="sibling_inliers"):
            c.identify(variant, distinct=3, sibling_inliers=0)
        # the default acceptance rule, the significance: its calibration (FAR 0.1%: 9; 1%, the default: 3);
        # the inlier count has its own (33 and 13), as --accept inliers
        assert c.identify(variant, far=0.001).threshold == 9 and c.identify(variant).threshold == 3
        assert c.identify(variant, far=0.001, accept="inliers").threshold == 33
        assert c.identify(variant, accept="inliers").threshold == 13
        one = c.identify(variant, accept="inliers")
        w = json.loads(run(cli, "identify", rootsift_coll, variant, "--format", "json", "-q", "--accept", "inliers"))
        assert one.decision == w["decision"] and [h.score for h in one.candidates] == [h["score"] for h in w["hits"]]
        assert one.candidates[0].score == one.candidates[0].inliers
        with pytest.raises(patina.InvalidError, match="accept"):
            c.identify(variant, accept="count")
    # far on a table with reference views: that table's own calibration (views=2: 2.5 at 1%, 19 at 0.1%)
    views = str(tmp_path / "views.patina")
    run(cli, "index", views, *samples[:2], "-f", "rootsift:m=128,n=256,views=2", "-q")
    with patina.Collection(views, readonly=True) as c:
        assert [c.identify(variant, far=f).threshold for f in (0.01, 0.001)] == [2.5, 19]
        assert c.identify(variant).threshold == 2.5  # the default: the table's far 0.01, as `patina identify`
        assert [c.identify(variant, far=f, accept="inliers").threshold for f in (0.01, 0.001)] == [24, 65]
        with pytest.raises(patina.InvalidError, match="far and threshold both set"):
            c.identify(variant, far=0.01, threshold=5)
        w = json.loads(run(cli, "identify", views, variant, "--format", "json", "-q", "--far", "0.001"))
        assert c.identify(variant, far=0.001).decision == w["decision"]
        # the view pass, as --view-candidates: the first rows, then the views of the best 1
        w = json.loads(run(cli, "identify", views, variant, "--format", "json", "-q", "--view-candidates", "1"))
        g = c.identify(variant, view_candidates=1)
        assert g.decision == w["decision"]
        assert [(h.key, h.matches, h.inliers) for h in g.candidates] == \
            [(h["key"], h["matches"], h["inliers"]) for h in w["hits"]]
        with pytest.raises(patina.InvalidError, match="view_candidates"):
            c.identify(variant, view_candidates=-1)
        with pytest.raises(patina.InvalidError, match="view_candidates"):
            c.identify(variant, view_candidates=1.5)
        # the first pass's features, as --first-features: the strongest 16 first, then the candidates again
        w = json.loads(run(cli, "identify", views, variant, "--format", "json", "-q", "--first-features", "16"))
        g = c.identify(variant, first_features=16)
        assert g.decision == w["decision"]
        assert [(h.key, h.matches, h.inliers) for h in g.candidates] == \
            [(h["key"], h["matches"], h["inliers"]) for h in w["hits"]]
        full = c.identify(variant, k=2)
        assert [(h.key, h.matches, h.inliers) for h in c.identify(variant, k=2, first_features=4096).candidates] == \
            [(h.key, h.matches, h.inliers) for h in full.candidates]
        with pytest.raises(patina.InvalidError, match="first_features"):
            c.identify(variant, first_features=16385)
        with pytest.raises(patina.InvalidError, match="first_features"):
            c.identify(variant, first_features="8")
        # the half-size view in the first pass needs one: views 2 hold none (the library's error), and the bound
        with pytest.raises(patina.InvalidError, match="half-size view"):
            c.identify(variant, view_candidates=1, half_view_features=16)
        with pytest.raises(patina.InvalidError, match="half_view_features"):
            c.identify(variant, half_view_features=16385)
        with pytest.raises(patina.InvalidError, match="half_view_features"):
            c.identify(variant, half_view_features=True)
    half = str(tmp_path / "half.patina")
    run(cli, "index", half, *samples[:2], "-f", "rootsift:m=128,n=256,views=1", "-q")
    with patina.Collection(half, readonly=True) as c:
        # as --half-view-features: the first rows and the half-size views, then the views of the best 1
        w = json.loads(run(cli, "identify", half, variant, "--format", "json", "-q", "--view-candidates", "1",
                           "--half-view-features", "32"))
        g = c.identify(variant, view_candidates=1, half_view_features=32)
        assert g.decision == w["decision"]
        assert [(h.key, h.matches, h.inliers) for h in g.candidates] == \
            [(h["key"], h["matches"], h["inliers"]) for h in w["hits"]]
        # the half-size query, as --half-query and --half-query-margin (the same answers and scores)
        for margin in ("10", "0"):
            w = json.loads(run(cli, "identify", half, variant, samples[1], "--format", "json", "-q", "--half-query",
                               "32", "--half-query-margin", margin).decode().splitlines()[0])
            g = c.identify(variant, half_query=32, half_query_margin=float(margin))
            assert g.decision == w["decision"]
            assert w["half_query"] == {"features": 32, "margin": float(margin), "taken": g.half_query_taken}, w
            assert [(h.key, h.score, h.matches, h.inliers) for h in g.candidates] == \
                [(h["key"], h["score"], h["matches"], h["inliers"]) for h in w["hits"]]
        # which answer was given: a margin no score beats keeps the photograph's; a close-up (every pixel
        # doubled) halves back to the registered image itself, whose answer wins at margin 0
        assert c.identify(variant, half_query=32, half_query_margin=1e6).half_query_taken is False
        assert c.identify(variant).half_query_taken is False
        img = patina.decode(samples[0])
        close = np.ascontiguousarray(np.repeat(np.repeat(img, 2, axis=0), 2, axis=1))
        g = c.identify(close, half_query=32, half_query_margin=0)
        assert g.half_query_taken is True and g.candidates[0].key.endswith(os.path.basename(samples[0])), g
        with pytest.raises(patina.InvalidError, match="half_query"):
            c.identify(variant, half_query=-1)
        with pytest.raises(patina.InvalidError, match="half_query_margin"):
            c.identify(variant, half_query=8, half_query_margin=-1)
    with patina.Collection(rootsift_coll, readonly=True) as c:
        rc, _, err = run_full(cli, "identify", rootsift_coll, variant, "--far", "0.01", "--threshold", "5")
        assert rc == 2 and b"--far and --threshold both set" in err
        # an array query is the same as its file
        arr = c.identify(patina.decode(variant))
        assert arr == got[0]
        # the reference set stays loaded between calls
        (t,) = [t for t in c._tables.values() if t.caps & patina.CAP_IDENTIFY]
        assert reloads(c, t) == 0 and c.identify(variant) == got[0] and reloads(c, t) == 0
        # devices are the library's: hybrid is not one for identification
        with pytest.raises(patina.InvalidError, match=r"device = 3 is not one of auto\|cpu\|gpu"):
            c.identify(variant, device="hybrid")


def test_context_over_device_slices(cli, indexed, rootsift_coll, samples, variant):
    """A context over several device slices ("0,0": two slices on device 0;
    without a GPU the CPU answers each) gives one device's answers, bit for
    bit, and the CLI's --gpus the same; bad lists are refused."""
    for bad in ("x", "0,", "-1", [0, "a"], [True], 3):
        with pytest.raises(patina.InvalidError, match="gpus"):
            patina.Context(gpus=bad)
    with patina.Context(threads=2) as one, patina.Context(threads=2, gpus="0,0") as two, \
            patina.Context(threads=2, gpus=[0, 0, 0]) as three:
        assert one.devices == [0] and two.devices == [0, 0] and three.devices == [0, 0, 0]
        queries = samples[:3] + [variant]
        for spec in ("cedd", "signature:k=16,samples=500"):
            got = []
            for ctx in (one, two, three):
                with patina.Collection(indexed, readonly=True, family=spec, context=ctx) as c:
                    knn = c.search_batch(queries, k=5)
                    radius = knn[3][2].distance  # the variant's third nearest
                    got.append((knn, c.search(variant, range=radius), c.search(variant, range=radius, max_hits=2)))
            assert got[0] == got[1] == got[2]
            want = cli_search(cli, indexed, queries, "-f", spec, "-k", "5", "--gpus", "0,0")
            for q, hits in zip(queries, got[1][0]):
                assert_same(hits, want[q])
        ids = []
        for ctx in (one, two, three):
            with patina.Collection(rootsift_coll, readonly=True, context=ctx) as c:
                ids.append([(g.decision, [(h.key, h.score, h.matches, h.inliers, h.verified) for h in g.candidates])
                            for g in c.identify_batch([variant, samples[1], samples[4]], k=3, verify_top=2)])
        assert ids[0] == ids[1] == ids[2]
        assert ids[0][0][0] == "match"
