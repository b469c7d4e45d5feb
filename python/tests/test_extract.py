"""patina.extract and friends against `patina extract` (the same bytes), and
the ways of giving one image (path, bytes, array) against each other."""

import os
import re

import numpy as np
import pytest

import patina
from conftest import read_bin, run, smooth_noise, write_png

# Families and option sets checked byte for byte against the CLI.
SPECS = ["cedd", "cedd:compact=1", "lbp:P=8,R=1", "lbp:P=16,R=2,method=uniform,grid=2x2",
         "lbp:P=8,R=1,norm=counts", "lbp:P=8,R=1.5,method=var", "lbp8", "tlbap", "lanadp",
         "glcm:levels=16,distances=1,2", "haralick", "signature:k=16,samples=500", "rootsift:m=64,n=128"]


def test_version_and_build_info(cli):
    info = run(cli, "info").decode()
    assert info.splitlines()[0] == f"patina {patina.version()}"
    assert f"build: {patina.build_info()}" in info
    assert patina.gpu_count() == int(re.search(r"^gpus: (\d+)", info, re.M).group(1))
    assert isinstance(patina.load(), patina.Library)


def test_families_match_info(cli):
    info = run(cli, "info").decode()
    fams = patina.families()
    assert [f.name for f in fams] == re.findall(r"^  (\w+) ", info, re.M)
    for f in fams:
        assert f"default: {f.default_spec}, {f.dim} x" in info
        assert f"distance {f.distance}," in info
        assert f.dtype == patina.Extractor(f.default_spec).dtype
        # the options, in table order, are those of the canonical spec; options added after tables
        # were stored (rootsift's views) are left out of it at their defaults, so they trail
        spelled = f.default_spec.split(":", 1)[1] if ":" in f.default_spec else ""
        names = re.findall(r"(?:^|,)([A-Za-z_]\w*)=", spelled)
        assert [o.name for o in f.options][:len(names)] == names
        for o in f.options[len(names):]:
            assert f"{o.name}={o.default}" not in f.default_spec
            assert f"{o.name}=" in patina.Extractor(f"{f.name}:{o.name}={o.max:g}").spec
        for o in f.options:
            assert o.type in ("int", "double", "bool", "enum", "string")
            assert (o.choices is not None) == (o.type == "enum")
            if o.type == "enum":
                assert o.default in o.choices
            if o.type in ("int", "double"):
                assert o.min <= o.max
    lbp = next(f for f in fams if f.name == "lbp")
    P = lbp.options[0]
    assert (P.name, P.type, P.min, P.max, P.default) == ("P", "int", 1, 32, "8")


@pytest.mark.parametrize("spec", SPECS)
def test_extract_matches_cli_bin(cli, samples, spec):
    spec_cli, records = read_bin(run(cli, "extract", "-f", spec, "--format", "bin", *samples))
    ex = patina.Extractor(spec)
    assert ex.spec == spec_cli
    assert [p for p, _ in records] == samples
    batch = patina.extract_batch(samples, spec)
    assert batch.shape == (len(samples), ex.dim) and batch.dtype == ex.dtype
    for i, (path, rec) in enumerate(records):
        assert batch[i].tobytes() == rec, f"{spec}: {path} differs from the CLI"
    # one at a time, from a path
    for i in (0, 2, len(samples) - 1):
        one = patina.extract(samples[i], spec)
        assert one.tobytes() == records[i][1]


def test_extract_matches_cli_csv(cli, samples):
    """The text the CLI prints is the values the binding returns (%.9g / %.17g round-trip)."""
    for spec, parse in (("lbp:P=8,R=1", np.float32), ("haralick", np.float64), ("cedd", np.uint8)):
        out = run(cli, "extract", "-f", spec, *samples[:4]).decode().splitlines()
        got = patina.extract_batch(samples[:4], spec)
        for line, row in zip(out, got):
            fields = line.split(",")
            assert fields[0] in samples
            want = np.array([parse(x) if parse is not np.uint8 else int(x) for x in fields[1:]], dtype=row.dtype)
            np.testing.assert_array_equal(row, want)


def test_dtype_follows_options():
    assert patina.extract(smooth_noise(20, 20), "lbp:norm=counts").dtype == np.uint32
    assert patina.extract(smooth_noise(20, 20), "lbp").dtype == np.float32
    assert patina.extract(smooth_noise(20, 20), "glcm").dtype == np.float64
    assert patina.extract(smooth_noise(20, 20), "cedd").dtype == np.uint8
    counts = patina.extract(smooth_noise(20, 20), "lbp:norm=counts")
    assert counts.sum() == 20 * 20  # one code per pixel (scikit-image samples outside the border too)


@pytest.mark.parametrize("spec", ["cedd", "lbp:P=8,R=1", "haralick", "signature:k=8,samples=300,seeds=100"])
def test_array_path_bytes_agree(synthetic, spec):
    for key in ("rgb", "grey"):
        a, path = synthetic[key], synthetic[key + "_path"]
        from_path = patina.extract(path, spec)
        with open(path, "rb") as f:
            data = f.read()
        assert patina.extract(data, spec).tobytes() == from_path.tobytes()
        assert patina.extract(bytearray(data), spec).tobytes() == from_path.tobytes()
        assert patina.extract(memoryview(data), spec).tobytes() == from_path.tobytes()
        assert patina.extract(a, spec).tobytes() == from_path.tobytes()
        assert patina.extract(__import__("pathlib").Path(path), spec).tobytes() == from_path.tobytes()
        if a.ndim == 2:   # grey: (H, W), (H, W, 1) and r = g = b are one image
            assert patina.extract(a[:, :, None], spec).tobytes() == from_path.tobytes()
            assert patina.extract(np.repeat(a[:, :, None], 3, axis=2), spec).tobytes() == from_path.tobytes()


def test_decode_round_trip(synthetic, samples):
    np.testing.assert_array_equal(patina.decode(synthetic["rgb_path"]), synthetic["rgb"])
    g = patina.decode(synthetic["grey_path"])
    assert g.shape == synthetic["grey"].shape + (3,)
    np.testing.assert_array_equal(g[:, :, 1], synthetic["grey"])
    for path in samples:   # decoded pixels describe like the file (JPEG, PNG grey, RGBA)
        a = patina.decode(path)
        assert a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3 and a.flags.c_contiguous
        assert patina.extract(a, "cedd").tobytes() == patina.extract(path, "cedd").tobytes()


def test_non_contiguous_arrays():
    big = smooth_noise(80, 90, 3, seed=5)
    views = [big[5:60, 7:70], big[::2, ::3], np.asfortranarray(big), big[:, :, ::-1]]
    for v in views:
        assert patina.extract(v, "lbp").tobytes() == patina.extract(np.ascontiguousarray(v), "lbp").tobytes()
    # the input is not modified
    before = big.copy()
    patina.extract(big, "cedd")
    np.testing.assert_array_equal(big, before)


def test_batch_equals_single(samples, synthetic):
    mixed = [samples[0], synthetic["rgb"], open(samples[2], "rb").read(), synthetic["grey_path"], samples[5]]
    for spec in ("cedd", "lbp:P=8,R=1", "haralick"):
        batch = patina.extract_batch(mixed, spec)
        for i, item in enumerate(mixed):
            assert batch[i].tobytes() == patina.extract(item, spec).tobytes()
    # an (N, H, W, 3) array is a batch of N
    stack = np.stack([smooth_noise(30, 40, 3, seed=s) for s in range(3)])
    b = patina.extract_batch(stack, "cedd")
    for i in range(3):
        assert b[i].tobytes() == patina.extract(stack[i], "cedd").tobytes()
    # empty batch
    e = patina.extract_batch([], "lbp")
    assert e.shape == (0, 256) and e.dtype == np.float32
    # paths in a batch larger than one decoding window, in order
    many = samples * 5
    b = patina.extract_batch(many, "cedd")
    for i in range(len(samples)):
        assert b[i].tobytes() == b[i + len(samples)].tobytes()


def test_devices():
    a = smooth_noise(32, 32)
    ref = patina.extract(a, "cedd", device="cpu")
    assert patina.extract(a, "cedd", device="auto").tobytes() == ref.tobytes()
    if patina.gpu_count() == 0:
        with pytest.raises(patina.UnavailableError):
            patina.extract(a, "cedd", device="gpu")


def test_contexts(samples):
    with patina.Context(threads=1) as c1, patina.Context(threads=2, max_pixels=10 ** 7) as c2:
        assert c1.threads == 1 and c2.threads == 2
        assert c2.limits[0] == 10 ** 7
        a = patina.extract_batch(samples[:4], "lbp", context=c1)
        b = patina.extract_batch(samples[:4], "lbp", context=c2)
        assert a.tobytes() == b.tobytes()
    with pytest.raises(patina.InvalidError):
        c1.threads


def test_extractor_distance(synthetic):
    ex = patina.Extractor("cedd")
    a = patina.extract(synthetic["rgb"], ex)
    b = patina.extract(synthetic["grey"], ex)
    assert ex.distance(a, a) == 0.0
    assert ex.distance(a, b) == ex.distance(b, a) > 0
    assert "cedd:compact=0" in repr(ex)


def test_rootsift_record_matches_cli(cli, samples):
    spec = "rootsift:m=32,n=64"
    lines = run(cli, "extract", "-f", spec, samples[0]).decode().splitlines()
    f = patina.rootsift_features(patina.extract(samples[0], spec))
    assert f.count == len(lines) == int(lines[0].split(",")[1]) and f.m == 32 and f.quant == "u8"
    for i, line in enumerate(lines):
        v = line.split(",")
        np.testing.assert_array_equal(f.keypoints[i], np.array([np.float32(x) for x in v[3:7]]))
        np.testing.assert_array_equal(f.descriptors[i], np.array([int(x) for x in v[7:]], dtype=np.uint8))
    assert f.descriptors.dtype == np.uint8 and f.keypoints.shape == (f.count, 4)


def test_signature_record_matches_cli(cli, samples):
    spec = "signature:k=16,samples=500"
    lines = run(cli, "extract", "-f", spec, samples[1]).decode().splitlines()
    s = patina.signature_centroids(patina.extract(samples[1], spec))
    assert s.count == len(lines) and s.k == 16 and s.form == "gaussian" and s.alpha == 1.0
    for i, line in enumerate(lines):
        np.testing.assert_array_equal(s.centroids[i], np.array([np.float32(x) for x in line.split(",")[3:]]))


def test_library_loading(tmp_path):
    lib = patina.load()
    assert os.path.realpath(lib.path) == os.path.realpath(os.environ["PATINA_LIB"])
    explicit = patina.load(os.environ["PATINA_LIB"])
    assert patina.version(library=explicit) == patina.version()
    with pytest.raises(patina.UnavailableError, match="cannot load"):
        patina.Library(tmp_path / "nope.so")
    # a file that is not a shared library
    bad = tmp_path / "libpatina.so"
    bad.write_bytes(b"not an ELF file")
    with pytest.raises(patina.UnavailableError):
        patina.load(bad)
    patina.load(lib)   # the default again
    assert patina.load(lib) is lib
