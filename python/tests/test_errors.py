"""Bad input raises patina.Error subclasses with the library's message and
status; nothing crashes."""

import warnings

import numpy as np
import pytest

import patina
from patina import errors
from conftest import smooth_noise, write_png


def expect(cls, status, fn, *args, match=None, **kw):
    with pytest.raises(cls) as ei:
        fn(*args, **kw)
    e = ei.value
    assert isinstance(e, patina.Error)
    assert e.status == status
    assert e.message and str(e) == e.message
    if match:
        assert match in e.message, e.message
    return e


def test_missing_file(tmp_path):
    e = expect(patina.NotFoundError, errors.E_NOTFOUND, patina.extract, str(tmp_path / "nope.jpg"),
               match="nope.jpg")
    assert isinstance(e, LookupError)
    assert e.status_name  # the library's short name of the status


def test_unknown_family_and_bad_options():
    img = smooth_noise(16, 16)
    expect(patina.InvalidError, errors.E_INVALID, patina.extract, img, "nope", match="unknown family 'nope'")
    expect(patina.InvalidError, errors.E_INVALID, patina.extract, img, "lbp:P=99", match="'P'")
    expect(patina.InvalidError, errors.E_INVALID, patina.extract, img, "lbp:Q=1", match="Q")
    expect(patina.InvalidError, errors.E_INVALID, patina.extract, img, "cedd:compact=2")
    expect(patina.InvalidError, errors.E_INVALID, patina.extract, img, "")
    expect(patina.InvalidError, errors.E_INVALID, patina.extract, img, "cedd\0x", match="NUL")
    expect(patina.ArgumentTypeError, errors.E_INVALID, patina.extract, img, 42)
    assert issubclass(patina.InvalidError, ValueError)


def test_bad_arrays():
    cases = [
        (np.zeros((8, 8), np.float32), "uint8"),
        (np.zeros((8, 8), np.int64), "uint8"),
        (np.zeros((8, 8), bool), "uint8"),
        (np.zeros((8, 8, 4), np.uint8), "alpha"),
        (np.zeros((8, 8, 2), np.uint8), "shape"),
        (np.zeros(8, np.uint8), "shape"),
        (np.zeros((2, 8, 8, 3), np.uint8), "shape"),
        (np.zeros((0, 8), np.uint8), "empty"),
        (np.zeros((8, 0, 3), np.uint8), "empty"),
    ]
    for a, words in cases:
        expect(patina.InvalidError, errors.E_INVALID, patina.extract, a, match=words)
    expect(patina.ArgumentTypeError, errors.E_INVALID, patina.extract, 12345)
    expect(patina.ArgumentTypeError, errors.E_INVALID, patina.extract, None)
    expect(patina.ArgumentTypeError, errors.E_INVALID, patina.extract, [[1, 2], [3, 4]])
    expect(patina.ArgumentTypeError, errors.E_INVALID, patina.extract, 3.5)
    # a 1x1 image is fine
    assert patina.extract(np.full((1, 1, 3), 200, np.uint8), "cedd").shape == (144,)


def test_bad_batches(tmp_path):
    expect(patina.ArgumentTypeError, errors.E_INVALID, patina.extract_batch, "one.jpg")
    expect(patina.InvalidError, errors.E_INVALID, patina.extract_batch, smooth_noise(8, 8), match="extract()")
    good = smooth_noise(16, 16)
    e = expect(patina.NotFoundError, errors.E_NOTFOUND, patina.extract_batch,
               [good, str(tmp_path / "missing.png")])
    assert "missing.png" in e.message
    e = expect(patina.InvalidError, errors.E_INVALID, patina.extract_batch, [good, np.zeros((4, 4), np.int16)])
    assert "image 1" in e.message
    # all paths: decoded in parallel, the failing one named
    p = tmp_path / "ok.png"
    write_png(p, good)
    e = expect(patina.NotFoundError, errors.E_NOTFOUND, patina.extract_batch, [str(p), str(tmp_path / "gone.png")])
    assert "gone.png" in e.message and "image 1" in e.message


def test_bad_files(tmp_path):
    expect(patina.FormatError, errors.E_FORMAT, patina.extract, b"not an image at all", match="unknown image format")
    g = tmp_path / "garbage.jpg"
    g.write_bytes(b"\xff\xd8\xff\xe0" + b"\0" * 10)
    with pytest.raises(patina.Error) as ei:
        patina.extract(str(g))
    assert ei.value.status in (errors.E_CORRUPT, errors.E_FORMAT) and "garbage.jpg" in ei.value.message
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(patina.Error):
        patina.extract(str(empty))
    with pytest.raises(patina.Error):
        patina.extract(b"")
    # a folder is not an image
    with pytest.raises(patina.Error):
        patina.extract(str(tmp_path))
    # bytes paths are refused: bytes are an encoded image
    expect(patina.FormatError, errors.E_FORMAT, patina.extract, str(g).encode())


def test_truncated_png(tmp_path):
    p = tmp_path / "t.png"
    write_png(p, smooth_noise(64, 64))
    data = p.read_bytes()
    expect(patina.CorruptError, errors.E_CORRUPT, patina.extract, data[: len(data) // 2], match="<bytes>")


def test_decoder_warning_and_strict(samples):
    """A JPEG with extraneous bytes before its SOS marker decodes with a
    warning (DecodeWarning), and fails with strict=True (CorruptError)."""
    data = open(samples[0], "rb").read()
    sos = data.index(b"\xff\xda")
    damaged = data[:sos] + b"\0\0\0\0" + data[sos:]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        d = patina.extract(damaged, "cedd")
    assert d.shape == (144,)
    assert any(issubclass(x.category, patina.DecodeWarning) and "extraneous" in str(x.message) for x in w)
    expect(patina.CorruptError, errors.E_CORRUPT, patina.extract, damaged, "cedd", strict=True, match="strict")


def test_limits(tmp_path):
    with patina.Context(max_pixels=100) as ctx:
        expect(patina.LimitError, errors.E_LIMIT, patina.extract, smooth_noise(20, 20), context=ctx,
               match="exceeds the limit")
        p = tmp_path / "big.png"
        write_png(p, smooth_noise(20, 20))
        expect(patina.LimitError, errors.E_LIMIT, patina.extract, str(p), context=ctx, match="big.png")
        assert patina.extract(smooth_noise(10, 10), context=ctx).shape == (144,)
    with pytest.raises(patina.InvalidError):
        patina.Context(threads=-1)
    with pytest.raises(patina.InvalidError):
        patina.Context(max_pixels="many")


def test_devices_and_context_args():
    img = smooth_noise(16, 16)
    expect(patina.InvalidError, errors.E_INVALID, patina.extract, img, device="tpu", match="tpu")
    expect(patina.ArgumentTypeError, errors.E_INVALID, patina.extract, img, context="ctx")


def test_collections(tmp_path):
    expect(patina.NotFoundError, errors.E_NOTFOUND, patina.Collection, str(tmp_path / "none"))
    (tmp_path / "notcoll").mkdir()
    (tmp_path / "notcoll" / "file.txt").write_text("hello")
    with pytest.raises(patina.Error) as ei:
        patina.Collection(str(tmp_path / "notcoll"))
    assert "notcoll" in ei.value.message
    with pytest.raises(patina.Error):
        patina.Collection(str(tmp_path / "notcoll"), create=True)
    with pytest.raises(patina.InvalidError):
        patina.Collection(str(tmp_path / "c"), create=True, readonly=True)
    with pytest.raises(patina.InvalidError):
        patina.Collection(str(tmp_path / "c"), create=True, family="nope")
    c = patina.Collection(str(tmp_path / "c"), create=True)
    img = smooth_noise(24, 24)
    c.add("a", img)
    # searching a table the collection lacks: the message lists its tables
    expect(patina.NotFoundError, errors.E_NOTFOUND, c.search, img, family="lbp", match="cedd:compact=0")
    expect(patina.InvalidError, errors.E_INVALID, c.search, img, k=0)
    expect(patina.InvalidError, errors.E_INVALID, c.search, img, k=-3)
    expect(patina.InvalidError, errors.E_INVALID, c.search, img, k=2.5)
    expect(patina.LimitError, errors.E_LIMIT, c.search, img, k=2 ** 64)   # not a size_t
    expect(patina.LimitError, errors.E_LIMIT, c.identify, img, k=10 ** 12)
    expect(patina.InvalidError, errors.E_INVALID, c.search, img, range=-1.0)
    expect(patina.InvalidError, errors.E_INVALID, c.search, img, range=float("nan"))
    expect(patina.InvalidError, errors.E_INVALID, c.search, img, device="hybridish")
    expect(patina.InvalidError, errors.E_INVALID, c.search, np.zeros(144, np.uint8), device="hybrid",
           match="not a search device")   # the library's rule (an extraction device only)
    expect(patina.InvalidError, errors.E_INVALID, c.search, img, bound="tight")
    # descriptors of the wrong dtype or length
    expect(patina.InvalidError, errors.E_INVALID, c.add, "d", np.zeros(144, np.float32), match="uint8")
    expect(patina.InvalidError, errors.E_INVALID, c.add, "d", np.zeros(10, np.uint8), match="144")
    expect(patina.InvalidError, errors.E_INVALID, c.search, np.zeros(143, np.uint8))
    # keys
    expect(patina.ArgumentTypeError, errors.E_INVALID, c.add, b"bytes-key", img)
    expect(patina.InvalidError, errors.E_INVALID, c.add, "", img)
    expect(patina.InvalidError, errors.E_INVALID, c.add, "a\0b", img)
    expect(patina.KeyNotFoundError, errors.E_NOTFOUND, c.remove, "absent")
    expect(patina.KeyNotFoundError, errors.E_NOTFOUND, c.update, "absent", img)
    expect(patina.KeyNotFoundError, errors.E_NOTFOUND, c.__getitem__, "absent")
    expect(patina.KeyNotFoundError, errors.E_NOTFOUND, c.remove, 999)
    with pytest.raises(KeyError):
        c["absent"]
    # identification needs a rootsift table
    e = expect(patina.NotFoundError, errors.E_NOTFOUND, c.identify, img)
    assert "for identification" in e.message and "rootsift" in e.message   # the families that have it
    expect(patina.InvalidError, errors.E_INVALID, c.identify, img, scoring="best")
    expect(patina.InvalidError, errors.E_INVALID, c.identify, img, table="cedd")   # not a local-feature table
    # a read-only handle refuses writes
    c.close()
    r = patina.Collection(str(tmp_path / "c"), readonly=True)
    expect(patina.InvalidError, errors.E_INVALID, r.add, "b", img)
    assert len(r) == 1
    r.close()
    # a closed handle refuses everything, cleanly
    expect(patina.InvalidError, errors.E_INVALID, len, r, match="closed")
    expect(patina.InvalidError, errors.E_INVALID, r.search, img, match="closed")
    r.close()  # idempotent


def test_every_status_has_a_class():
    for s in range(1, 14):
        cls = errors.error_class(s)
        assert issubclass(cls, patina.Error) and cls.status == s
    e = errors.make_error(99, "odd")
    assert isinstance(e, patina.InternalError) and e.status == 99
