"""Contexts, extractors, images in and descriptors out.

Images are taken as a path (str, bytes path is NOT accepted: bytes are an
encoded file), encoded file bytes (bytes, bytearray, memoryview), or a
numpy uint8 array: (H, W) grey, (H, W, 1) grey or (H, W, 3) RGB. Grey is
expanded to RGB with r = g = b, exactly what the library's decoders do with
a grey file, so a grey PNG and its pixel array give the same descriptor.
Paths and encoded bytes are decoded by the library (sniffing the content,
with the context's limits), arrays are passed to it without a copy when they
are C-contiguous RGB.
"""

import ctypes
import dataclasses
import hashlib
import os
import threading
import warnings
from typing import Optional, Tuple

import numpy as np

from . import _lib
from . import errors

_DTYPES = {
    _lib.ELEM_U8: np.dtype(np.uint8),
    _lib.ELEM_U16: np.dtype(np.uint16),
    _lib.ELEM_U32: np.dtype(np.uint32),
    _lib.ELEM_F32: np.dtype(np.float32),
    _lib.ELEM_F64: np.dtype(np.float64),
}
_OPTION_TYPES = ("int", "double", "bool", "enum", "string")


def _invalid(msg):
    return errors.InvalidError(msg, errors.E_INVALID, "invalid argument")


def _type_error(msg):
    return errors.ArgumentTypeError(msg, errors.E_INVALID, "invalid argument")


def _s(b):
    return b.decode("utf-8", "surrogateescape") if b is not None else None


# ------------------------------------------------------------------ library
def version(library=None) -> str:
    """The library's version ("0.1.0")."""
    return _lib.resolve(library).version_string


def build_info(library=None) -> str:
    """The library's build features ("cuda=no jpeg=libjpeg-turbo ...")."""
    return _s(_lib.resolve(library).build_info())


def gpu_count(library=None) -> int:
    """Usable CUDA devices (0 without CUDA or without a GPU)."""
    return int(_lib.resolve(library).gpu_count())


# ------------------------------------------------------------------ context
class _Closing:
    """`with` support and a close() when collected, for the classes that own
    a handle and define close()."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


class Context(_Closing):
    """Worker threads, the GPU (opened on first use) and image limits.

    Every extraction, search and identification runs on a context; calls
    that take ``context=None`` use the library's default context (all CPUs,
    default limits), made on first use. A context may be shared by threads:
    calls that use its workers take turns (the C calls release the GIL).

    threads: CPU workers (0 = all online CPUs). gpu_index: CUDA device
    ordinal. gpus: the devices instead -- "all", a list such as "0,1" or
    [0, 1] (repeats allowed: "0,0" is two slices on device 0); a
    collection's rows are then split across them and every search or
    identification runs on all at once, with the answers of one device
    (docs/gpu.md). gpu_mem_budget: bytes of GPU memory the context may hold
    on each device (0 = a quarter of what is free). max_pixels,
    max_file_bytes: image limits (0 = the library's defaults: 10^8 pixels,
    1 GiB)."""

    def __init__(self, threads=0, gpu_index=0, gpu_mem_budget=0, max_pixels=0, max_file_bytes=0,
                 library=None, gpus=None):
        lib = _lib.resolve(library)
        opts = _lib.ContextOpts()
        lib.context_opts_init(ctypes.byref(opts))
        for name, v in (("threads", threads), ("gpu_index", gpu_index), ("gpu_mem_budget", gpu_mem_budget),
                        ("max_pixels", max_pixels), ("max_file_bytes", max_file_bytes)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                raise _invalid(f"Context: {name} must be an integer >= 0, got {v!r}")
        if threads > 0x7FFFFFFF or gpu_index > 0x7FFFFFFF:
            raise _invalid("Context: threads and gpu_index must fit a C int")
        opts.threads = int(threads)
        opts.gpu_index = int(gpu_index)
        opts.gpu_mem_budget = int(gpu_mem_budget)
        opts.limits.max_pixels = int(max_pixels)
        opts.limits.max_file_bytes = int(max_file_bytes)
        if gpus is not None and not isinstance(gpus, str):
            try:
                items = list(gpus)
            except TypeError:
                raise _invalid(f"Context: gpus must be \"all\", a string such as \"0,1\" or a list of "
                               f"device numbers, got {gpus!r}") from None
            if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in items):
                raise _invalid(f"Context: gpus must list device numbers, got {gpus!r}")
            gpus = ",".join(str(int(i)) for i in items)
        gpus_b = gpus.encode() if gpus is not None else None  # kept alive through the call (copied there)
        opts.gpus = gpus_b
        h = ctypes.c_void_p()
        lib.check(lib.context_new(ctypes.byref(h), ctypes.byref(opts)), "context")
        self._lib = lib
        self._h = h

    @property
    def library(self):
        return self._lib

    @property
    def handle(self):
        if not self._h:
            raise _invalid("the context is closed")
        return self._h

    @property
    def threads(self) -> int:
        return int(self._lib.context_threads(self.handle))

    @property
    def devices(self):
        """The device ordinals of the context's slices (one entry without a
        list of several devices)."""
        n = int(self._lib.context_devices(self.handle, None, 0))
        out = (ctypes.c_int * n)()
        self._lib.context_devices(self.handle, out, n)
        return [int(v) for v in out]

    @property
    def limits(self):
        """(max_pixels, max_file_bytes) in force."""
        lim = self._lib.context_limits(self.handle).contents
        return int(lim.max_pixels), int(lim.max_file_bytes)

    def close(self):
        """Frees the context (its workers and GPU memory). Idempotent."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.context_free(h)

    def __repr__(self):
        state = f"{self.threads} threads" if self._h else "closed"
        return f"<patina.Context {state}>"


_default_contexts = {}
_default_ctx_lock = threading.Lock()


def _context(context, library=None) -> Context:
    """The context to run on: the one given, or the library's default."""
    if context is not None:
        if not isinstance(context, Context):
            raise _type_error(f"context must be a patina.Context, got {type(context).__name__}")
        if library is not None and _lib.resolve(library) is not context.library:
            raise _invalid("context and library= name different libraries")
        return context
    lib = _lib.resolve(library)
    with _default_ctx_lock:
        ctx = _default_contexts.get(id(lib))
        if ctx is None:
            ctx = _default_contexts[id(lib)] = Context(library=lib)
    return ctx


# ----------------------------------------------------------------- families
@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a family, or of search, identify or index (options()),
    as the library's table declares it."""
    name: str
    type: str                 # "int", "double", "bool", "enum" or "string"
    default: Optional[str]    # as text, the way a spec spells it (None: no default)
    help: str
    min: Optional[float] = None   # int and double: bounds (inclusive; min excluded when min_open)
    max: Optional[float] = None
    choices: Optional[Tuple[str, ...]] = None  # enum
    min_open: bool = False


@dataclasses.dataclass(frozen=True)
class Family:
    """A descriptor family and what its default spec gives."""
    name: str
    help: str
    default_spec: str         # every option spelled out, canonical
    dim: int                  # elements per descriptor with the default options
    dtype: np.dtype           # element type with the default options (some options change it)
    distance: str             # the search distance with the default options
    devices: Tuple[str, ...]  # where it can be extracted in this build
    options: Tuple[Option, ...]
    caps: int = 0             # PATINA_CAP_* bits (patina.CAP_SEARCH, CAP_IDENTIFY, ...)


def _option(o):
    t = _OPTION_TYPES[o.type] if 0 <= o.type < len(_OPTION_TYPES) else str(o.type)
    num = t in ("int", "double")
    return Option(name=_s(o.name), type=t, default=_s(o.default) if o.default is not None else None,
                  help=_s(o.help), min=o.min if num else None, max=o.max if num else None,
                  choices=tuple(_s(o.choices).split("|")) if o.choices else None, min_open=bool(o.min_open))


def options(kind, library=None):
    """The options of "search", "identify" or "index" as the library declares
    them once (include/patina/options.h): names, types, bounds, defaults,
    help. The keyword defaults of Collection.search and identify_batch are
    these (tests/test_options.py)."""
    lib = _lib.resolve(library)
    if kind not in _lib.OPTION_SETS:
        raise _invalid(f"options: kind must be one of {', '.join(_lib.OPTION_SETS)}, got {kind!r}")
    out = []
    for i in range(lib.options_count(_lib.OPTION_SETS[kind])):
        o = _lib.OptionInfo()
        lib.check(lib.options_get(ctypes.byref(o), _lib.OPTION_SETS[kind], i))
        out.append(_option(o))
    return tuple(out)


def families(library=None):
    """The registered descriptor families, in the library's order."""
    lib = _lib.resolve(library)
    out = []
    for f in range(lib.family_count()):
        opts = []
        for i in range(lib.family_option_count(f)):
            o = _lib.OptionInfo()
            lib.check(lib.family_option(ctypes.byref(o), f, i))
            opts.append(_option(o))
        ex = Extractor(_s(lib.family_name(f)), library=lib)
        out.append(Family(name=ex.family, help=_s(lib.family_help(f)), default_spec=ex.spec, dim=ex.dim,
                          dtype=ex.dtype, distance=ex.distance_name, devices=ex.devices, options=tuple(opts),
                          caps=int(lib.family_caps(f))))
    return out


class Extractor:
    """A family and its parsed options, from one string: "lbp:P=8,R=1".

    ``caps``: what the family can do, PATINA_CAP_* bits (patina.CAP_SEARCH,
    CAP_IDENTIFY, CAP_PIVOTS, ...) from the library's family table.

    Unknown families, unknown options and values out of bounds raise
    ``InvalidError`` with the library's message. Immutable."""

    def __init__(self, spec="cedd", library=None):
        if isinstance(spec, Extractor):
            spec = spec.spec
        if not isinstance(spec, str):
            raise _type_error(f"a family spec is a str such as 'lbp:P=8,R=1', got {type(spec).__name__}")
        if "\0" in spec:
            raise _invalid(f"family spec {spec!r} holds a NUL character")
        lib = _lib.resolve(library)
        h = ctypes.c_void_p()
        lib.check(lib.extractor_new(ctypes.byref(h), spec.encode("utf-8", "surrogateescape")), "descriptor")
        self._lib = lib
        self._h = h
        self.spec = _s(lib.extractor_spec(h))
        self.family = _s(lib.extractor_family(h))
        self.dim = int(lib.extractor_dim(h))
        self.elem = int(lib.extractor_elem(h))
        self.dtype = _DTYPES[self.elem]
        self.nbytes = int(lib.extractor_bytes(h))
        self.distance_name = _s(lib.extractor_distance_name(h))
        self.devices = tuple(d for d in ("cpu", "gpu", "hybrid")
                             if lib.extractor_has_device(h, _lib.DEVICES[d]))
        self.caps = int(lib.extractor_caps(h))

    @property
    def library(self):
        return self._lib

    @property
    def handle(self):
        return self._h

    def __del__(self):
        h, self._h = getattr(self, "_h", None), None
        if h:
            try:
                self._lib.extractor_free(h)
            except Exception:
                pass

    def __repr__(self):
        return f"<patina.Extractor {self.spec} ({self.dim} x {self.dtype}, {self.distance_name})>"

    def check_descriptor(self, d, what="descriptor"):
        """d as a C-contiguous 1-D array of this family's dtype and dim, or InvalidError."""
        if not isinstance(d, np.ndarray):
            raise _type_error(f"{what}: expected a numpy array of {self.dim} {self.dtype}, got {type(d).__name__}")
        if d.ndim != 1 or d.shape[0] != self.dim:
            raise _invalid(f"{what}: {self.spec} descriptors are 1-D arrays of {self.dim} elements, got shape "
                           f"{d.shape}")
        if d.dtype != self.dtype:
            raise _invalid(f"{what}: {self.spec} descriptors are {self.dtype}, got {d.dtype} (convert explicitly "
                           f"with .astype(np.{self.dtype.name}) if that is what you mean)")
        return np.ascontiguousarray(d)

    def distance(self, a, b) -> float:
        """The family's distance between two descriptors of this extractor."""
        a = self.check_descriptor(a, "distance: a")
        b = self.check_descriptor(b, "distance: b")
        return float(self._lib.extractor_distance(self._h, a.ctypes.data, b.ctypes.data))


def _extractor(spec, library=None) -> Extractor:
    if isinstance(spec, Extractor):
        if library is not None and _lib.resolve(library) is not spec.library:
            raise _invalid("extractor and library= name different libraries")
        return spec
    return Extractor(spec, library)


# ------------------------------------------------------------------- images
class _Prepared:
    """One input image handed to the library: the C struct, what keeps its
    pixels alive, and what a collection records about it."""

    __slots__ = ("img", "keep", "owned", "name", "size", "sha256", "mtime", "lib")

    def __init__(self, lib):
        self.lib = lib
        self.img = _lib.Image()
        self.keep = None     # a numpy array whose buffer img.data points into
        self.owned = False   # img.data is the library's (patina_image_release)
        self.name = "<array>"
        self.size = 0
        self.sha256 = b"\0" * 32
        self.mtime = 0

    @property
    def width(self):
        return int(self.img.width)

    @property
    def height(self):
        return int(self.img.height)

    def release(self):
        if self.owned:
            self.lib.image_release(ctypes.byref(self.img))
            self.owned = False
        self.keep = None


def _describe(item):
    if isinstance(item, (str, os.PathLike)):
        return repr(os.fspath(item))
    if isinstance(item, (bytes, bytearray, memoryview)):
        return f"<{len(item)} encoded bytes>"
    if isinstance(item, np.ndarray):
        return f"<array {item.shape} {item.dtype}>"
    return f"<{type(item).__name__}>"


def _as_rgb(a, what):
    """A C-contiguous (H, W, 3) uint8 array of an image array."""
    if not isinstance(a, np.ndarray):
        if hasattr(a, "__array_interface__") or hasattr(a, "__array__"):
            a = np.asarray(a)  # e.g. a PIL image
        else:
            raise _type_error(f"{what}: an image is a path, encoded bytes or a numpy uint8 array, got "
                              f"{type(a).__name__}")
    if a.dtype != np.uint8:
        raise _invalid(f"{what}: image arrays must be uint8 (0..255), got {a.dtype}; convert explicitly, e.g. "
                       f"np.clip(x * 255, 0, 255).astype(np.uint8)")
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim == 2:
        a = np.repeat(a[:, :, None], 3, axis=2)
    elif a.ndim != 3 or a.shape[2] != 3:
        extra = " (drop alpha with a[..., :3], or composite it first)" if a.ndim == 3 and a.shape[2] == 4 else ""
        raise _invalid(f"{what}: image arrays are (H, W) grey or (H, W, 3) RGB, got shape {a.shape}{extra}")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise _invalid(f"{what}: empty image {a.shape[1]}x{a.shape[0]}")
    if a.shape[0] > 0x7FFFFFFF or a.shape[1] > 0x7FFFFFFF // 3:
        raise errors.LimitError(f"{what}: image {a.shape[1]}x{a.shape[0]} is too large", errors.E_LIMIT)
    return np.ascontiguousarray(a)


def _decode_opts(lib, ctx, strict):
    opts = _lib.DecodeOpts()
    lib.decode_opts_init(ctypes.byref(opts))
    lim = lib.context_limits(ctx.handle).contents
    opts.limits.max_pixels = lim.max_pixels
    opts.limits.max_file_bytes = lim.max_file_bytes
    opts.strict = 1 if strict else 0
    return opts


def _warn(report, stacklevel=4):
    if report.warnings:
        warnings.warn(_s(report.warning), errors.DecodeWarning, stacklevel=stacklevel)


def _prepare(item, ctx, strict, what="image", want_hash=False):
    """Decodes or wraps one image. The caller releases the result."""
    lib = ctx.library
    p = _Prepared(lib)
    if isinstance(item, (str, os.PathLike)):
        path = os.fspath(item)
        if isinstance(path, bytes):
            raise _type_error(f"{what}: bytes are taken as an encoded image; pass a path as str or os.PathLike")
        cpath = _lib.encode_path(path)
        data = ctypes.c_void_p()
        size = ctypes.c_size_t()
        lim = lib.context_limits(ctx.handle)
        lib.check(lib.file_read(ctypes.byref(data), ctypes.byref(size), cpath, lim), "read")
        try:
            p.name = path
            p.size = int(size.value)
            if want_hash:
                h = (ctypes.c_uint8 * 32)()
                lib.sha256(h, data, size)
                p.sha256 = bytes(h)
                try:
                    p.mtime = int(os.stat(path).st_mtime)
                except OSError:
                    p.mtime = 0
            _decode_into(p, lib, ctx, strict, data, size.value, cpath)
        finally:
            lib.free(data)
        return p
    if isinstance(item, (bytes, bytearray, memoryview)):
        buf = bytes(item) if not isinstance(item, bytes) else item
        p.name = "<bytes>"
        p.size = len(buf)
        if want_hash:
            p.sha256 = hashlib.sha256(buf).digest()
        _decode_into(p, lib, ctx, strict, buf, len(buf), b"<bytes>")
        return p
    a = _as_rgb(item, what)
    h, w = a.shape[0], a.shape[1]
    max_pixels = lib.context_limits(ctx.handle).contents.max_pixels
    if h * w > max_pixels:
        raise errors.LimitError(f"{what}: {w}x{h} = {w * h} pixels exceeds the limit of {max_pixels}",
                                errors.E_LIMIT, "over a limit")
    p.keep = a
    p.img.width, p.img.height, p.img.stride = w, h, 3 * w
    p.img.data = a.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
    p.img.owned = 0
    if want_hash:
        p.sha256 = hashlib.sha256(a.data).digest()
    return p


def _decode_into(p, lib, ctx, strict, data, size, name):
    report = _lib.DecodeReport()
    opts = _decode_opts(lib, ctx, strict)
    lib.check(lib.image_decode_with(ctypes.byref(p.img), ctypes.byref(report), data, size, ctypes.byref(opts),
                                    name), "decode")
    p.owned = True
    _warn(report, 5)


def _image_array(img):
    """A copy of a patina_image_t's pixels as (H, W, 3) uint8."""
    h, w, stride = int(img.height), int(img.width), int(img.stride)
    raw = np.ctypeslib.as_array(img.data, shape=(h * stride,))
    return raw.reshape(h, stride)[:, :3 * w].reshape(h, w, 3).copy()


def decode(image, *, strict=False, context=None, library=None):
    """The pixels of an image (a path or encoded bytes; arrays are returned as
    RGB) as a new (H, W, 3) uint8 array, decoded the way extraction sees them
    (alpha composited over black, 16-bit rounded; docs/images.md)."""
    ctx = _context(context, library)
    p = _prepare(image, ctx, strict, "decode")
    try:
        return _image_array(p.img) if p.owned else p.keep.copy()
    finally:
        p.release()


def _prepare_all(images, ctx, strict, want_hash=False):
    """Prepared images of a sequence (paths decoded in parallel)."""
    items = list(images)
    out = []
    try:
        if len(items) > 1 and not want_hash and all(isinstance(x, (str, os.PathLike)) and
                                                    not isinstance(os.fspath(x), bytes) for x in items):
            out = _load_paths(items, ctx, strict)
        else:
            for i, x in enumerate(items):
                out.append(_prepare(x, ctx, strict, f"image {i} {_describe(x)}", want_hash))
    except BaseException:
        for p in out:
            p.release()
        raise
    return out


def _load_paths(paths, ctx, strict):
    """patina_load_files over the context's workers: files read and decoded in parallel."""
    lib = ctx.library
    enc = [_lib.encode_path(os.fspath(x)) for x in paths]
    n = len(enc)
    cpaths = (ctypes.c_char_p * n)(*enc)
    imgs = (_lib.Image * n)()
    res = (_lib.LoadResult * n)()
    opts = _lib.LoadOpts()
    lib.load_opts_init(ctypes.byref(opts))
    opts.strict = 1 if strict else 0
    out = []
    done = 0
    try:
        while done < n:
            taken = ctypes.c_size_t()
            first = ctypes.cast(ctypes.addressof(cpaths) + done * ctypes.sizeof(ctypes.c_char_p),
                                ctypes.POINTER(ctypes.c_char_p))
            lib.check(lib.load_files(ctx.handle, ctypes.byref(imgs[done]), ctypes.byref(res[done]),
                                     ctypes.byref(taken), first, n - done, ctypes.byref(opts)), "load")
            for i in range(done, done + taken.value):
                p = _Prepared(lib)
                p.name = os.fspath(paths[i])
                p.img = imgs[i]
                p.owned = res[i].status == errors.OK
                out.append(p)
            for i in range(done, done + taken.value):
                if res[i].status != errors.OK:
                    raise errors.make_error(res[i].status, f"image {i}: {_s(res[i].error)}",
                                            _s(lib.status_str(res[i].status)))
                _warn(res[i].report, 5)
            done += taken.value
    except BaseException:
        for p in out:
            p.release()
        raise
    return out


# --------------------------------------------------------------- extraction
def _extract_prepared(ex, ctx, prepared, device, names=None):
    """(n, dim) descriptors of prepared images; raises naming the first that fails."""
    lib = ctx.library
    n = len(prepared)
    out = np.empty((n, ex.dim), dtype=ex.dtype)
    if n == 0:
        return out
    imgs = (_lib.Image * n)(*[p.img for p in prepared])
    st = (ctypes.c_int * n)()
    lib.check(lib.extract_batch(ctx.handle, ex.handle, _lib.device_code(device), out.ctypes.data, imgs, n, st),
              "extract")
    for i in range(n):
        if st[i] != errors.OK:
            raise _extract_error(ex, ctx, prepared[i], st[i], names[i] if names else f"image {i}")
    return out


def _extract_error(ex, ctx, p, status, label):
    """The message of one image's failure: its extraction again on the CPU
    alone, which leaves the library's message for it (as the CLI does)."""
    lib = ctx.library
    tmp = np.empty(max(ex.nbytes, 1), dtype=np.uint8)
    one = ctypes.c_int(0)
    lib.clear_error()
    msg = None
    if lib.extract_batch(ctx.handle, ex.handle, _lib.DEVICES["cpu"], tmp.ctypes.data, ctypes.byref(p.img), 1,
                         ctypes.byref(one)) == errors.OK and one.value != errors.OK:
        msg = _s(lib.last_error())
    name = _s(lib.status_str(status))
    text = f"{label} ({p.name}): {ex.family} failed: {msg}" if msg else \
        f"{label} ({p.name}): {ex.family} failed ({name})"
    return errors.make_error(status, text, name)


def extract(image, spec="cedd", *, device="auto", strict=False, context=None, library=None):
    """The descriptor of one image: a 1-D numpy array of the family's dtype.

    image: a path, encoded bytes, or a uint8 array (H, W) / (H, W, 3).
    spec: "family[:key=value,...]", e.g. "lbp:P=8,R=1" (or an Extractor).
    device: "auto", "cpu", "gpu" or "hybrid" (same bytes for integer families).
    strict: a decoder warning fails the image (CorruptError) instead of
    warning (patina.DecodeWarning)."""
    return extract_batch([image], spec, device=device, strict=strict, context=context, library=library)[0]


def extract_batch(images, spec="cedd", *, device="auto", strict=False, context=None, library=None):
    """Descriptors of many images in one batch: an (n, dim) array, row i for
    images[i]. images: a sequence of images (paths, bytes, arrays, mixed) or
    an (N, H, W, 3) uint8 array. An image that fails raises its error,
    naming its index (nothing is returned)."""
    if isinstance(images, (str, bytes, os.PathLike)):
        raise _type_error("extract_batch takes a sequence of images; use extract() for one")
    if isinstance(images, np.ndarray) and images.ndim != 4:
        raise _invalid("extract_batch takes a list of images or an (N, H, W, 3) array; for one image use "
                       "extract()")
    ctx = _context(context, library)
    ex = _extractor(spec, ctx.library)
    _lib.device_code(device)
    prepared = _prepare_all(images, ctx, strict)
    try:
        return _extract_prepared(ex, ctx, prepared, device)
    finally:
        for p in prepared:
            p.release()


# -------------------------------------------------------- record decoders
@dataclasses.dataclass
class RootsiftFeatures:
    """The features of a rootsift record (include/patina/rootsift.h)."""
    count: int
    m: int
    quant: str                  # "u8" or "f16"
    qscale: float               # RootSIFT component = stored / qscale
    downscale: float
    width: int                  # the image the features were detected in
    height: int
    orig_width: int             # the image given; keypoints are in its pixels
    orig_height: int
    keypoints: np.ndarray       # (count, 4) float32: x, y, scale, angle (radians)
    descriptors: np.ndarray     # (count, 128): uint8 (u8) or float32 (f16 values), as stored


def rootsift_features(record, library=None) -> RootsiftFeatures:
    """Decodes a rootsift record (extract(..., "rootsift") or a stored descriptor)."""
    lib = _lib.resolve(library)
    rec = _record_bytes(record)
    info = _lib.RootsiftInfo()
    lib.check(lib.rootsift_info(ctypes.byref(info), rec.ctypes.data, rec.nbytes), "rootsift")
    n = int(info.count)
    kp = np.empty((n, 4), dtype=np.float32)
    desc = np.empty((n, 128), dtype=np.float32)
    for i in range(n):
        lib.check(lib.rootsift_feature(kp[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                       desc[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                       rec.ctypes.data, rec.nbytes, i), "rootsift")
    return RootsiftFeatures(count=n, m=int(info.m), quant="f16" if info.f16 else "u8", qscale=float(info.qscale),
                            downscale=float(info.downscale), width=int(info.width), height=int(info.height),
                            orig_width=int(info.orig_width), orig_height=int(info.orig_height), keypoints=kp,
                            descriptors=desc if info.f16 else desc.astype(np.uint8))


@dataclasses.dataclass
class Signature:
    """The centroids of a signature record (include/patina/signature.h)."""
    count: int
    k: int
    alpha: float
    form: str                   # "gaussian", "heuristic" or "minus"
    centroids: np.ndarray       # (count, 8) float32: weight, x, y, L, a, b, contrast, entropy


def signature_centroids(record, library=None) -> Signature:
    """Decodes a signature record (extract(..., "signature") or a stored descriptor)."""
    lib = _lib.resolve(library)
    rec = _record_bytes(record)
    info = _lib.SignatureInfo()
    lib.check(lib.signature_info(ctypes.byref(info), rec.ctypes.data, rec.nbytes), "signature")
    n = int(info.count)
    rows = np.empty((n, 8), dtype=np.float32)
    for i in range(n):
        lib.check(lib.signature_centroid(rows[i].ctypes.data_as(ctypes.POINTER(ctypes.c_float)), rec.ctypes.data,
                                         rec.nbytes, i), "signature")
    forms = ("gaussian", "heuristic", "minus")
    return Signature(count=n, k=int(info.k), alpha=float(info.alpha),
                     form=forms[info.form] if 0 <= info.form < 3 else str(info.form), centroids=rows)


def _record_bytes(record):
    if isinstance(record, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(record), dtype=np.uint8)
    if isinstance(record, np.ndarray):
        if record.ndim != 1:
            raise _invalid(f"a record is a 1-D array, got shape {record.shape}")
        return np.ascontiguousarray(record).view(np.uint8)
    raise _type_error(f"a record is a 1-D numpy array or bytes, got {type(record).__name__}")
