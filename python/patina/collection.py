"""Collections: add, remove, update, look up, search and identify.

A ``Collection`` is an open LMDB collection (a directory, the same one the
CLI reads and writes). Writes are transactions of the library: ``add``,
``update`` and ``add_batch`` commit whole or not at all. Every search and
identification reads one snapshot of what is committed when it starts
(records added by this handle, by other handles or by other processes
included) and reports keys from that snapshot, as ``patina search`` does.
"""

import ctypes
import dataclasses
import hashlib
import os
from typing import List, NamedTuple, Optional

import numpy as np

from . import _lib
from . import errors
from ._core import (Extractor, _Closing, _context, _describe, _extract_prepared, _extractor, _invalid, _prepare,
                    _s, _type_error)

_SCORING = {"one2one": 0, "raw": 1, "mutual": 2}
_MODELS = {"similarity": 0, "affine": 1, "homography": 2}
_PRECISION = {"int8": 0, "fp16": 1}
_BOUNDS = {"ptolemaic": 0, "metric": 1, "none": 2}
# patina_pivot_strategy by device: the CPU filter, the GPU's, the library's choice
_PIVOT_STRATEGY = {"cpu": 0, "gpu": 2, "auto": 3}


@dataclasses.dataclass(frozen=True)
class Record:
    """An image record of a collection."""
    id: int          # 1, 2, ... assigned on insert, never reused
    key: str         # as added (a path for images indexed by the CLI)
    size: int        # bytes of the encoded file (0 for arrays and descriptors)
    sha256: str      # hex SHA-256 of the content (see Collection.add)
    mtime: int       # seconds since the epoch, of the file (0 when none)
    added: int       # seconds since the epoch, when stored
    width: int
    height: int


@dataclasses.dataclass(frozen=True)
class Table:
    """A descriptor table of a collection."""
    spec: str
    rows: int
    descriptor_bytes: int


class Hit(NamedTuple):
    """One search result: ordered by distance, ties by id."""
    key: str
    distance: float
    id: int


class Candidate(NamedTuple):
    """One identification candidate, best first."""
    key: str
    score: float      # inliers when verified, else the scoring rule's matches
    matches: int
    inliers: int      # 0 when not verified
    verified: bool
    id: int


@dataclasses.dataclass(frozen=True)
class Identification:
    """The answer for one query photograph."""
    decision: str                 # "match" (rank 1 accepted) or "unknown"
    features: int                 # features of the query
    candidates: List[Candidate]   # best first, at most k

    @property
    def match(self) -> Optional[Candidate]:
        """The accepted candidate, or None when the decision is unknown."""
        return self.candidates[0] if self.decision == "match" and self.candidates else None


def _record(r) -> Record:
    return Record(id=int(r.id), key=_lib.decode_key(ctypes.string_at(r.key)) if r.key else "",
                  size=int(r.size), sha256=bytes(r.sha256).hex(), mtime=int(r.mtime), added=int(r.added),
                  width=int(r.width), height=int(r.height))


def _key_bytes(key):
    if not isinstance(key, str):
        raise _type_error(f"keys are str, got {type(key).__name__}")
    b = os.fsencode(key)
    if not b or len(b) > _lib.PATINA_KEY_MAX or b"\0" in b:
        raise _invalid(f"key {key!r}: a key is a non-empty string of at most {_lib.PATINA_KEY_MAX} bytes "
                       "without NUL")
    return b


class _Snapshot:
    """One read transaction: loads and record lookups see one state."""

    def __init__(self, coll):
        self.lib = coll._lib
        self.h = ctypes.c_void_p()
        self.lib.check(self.lib.snapshot_new(ctypes.byref(self.h), coll._handle()), "snapshot")

    def keys(self, ids):
        """Keys of ids (every id a load of this snapshot returned has one)."""
        n = len(ids)
        if n == 0:
            return []
        cids = (ctypes.c_uint64 * n)(*ids)
        recs = (_lib.Record * n)()
        s = self.lib.snapshot_get(self.h, cids, n, recs)
        if s not in (errors.OK, errors.E_NOTFOUND):
            raise self.lib.error(s, "snapshot")
        try:
            return [_lib.decode_key(ctypes.string_at(r.key)) if r.key else "?" for r in recs]
        finally:
            for i in range(n):
                self.lib.record_release(ctypes.byref(recs[i]))

    def close(self):
        h, self.h = self.h, None
        if h:
            self.lib.snapshot_free(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Collection(_Closing):
    """An open collection.

    path: the collection's directory. create: make it when missing (an
    empty directory is filled; a non-empty one that is not a collection is
    refused). readonly: open for reading only (writes raise InvalidError).
    family: the default descriptor spec of add/search ("lbp:P=8,R=1"); None
    means the collection's only table, or "cedd" (the CLI's default) when it
    has none yet; a collection with several tables needs family= here or in
    each call. map_size: bytes the collection may grow to (0: the library's
    default). context: the Context to compute on (None: the default).

    Use as a context manager, or call close(). One handle may be shared by
    threads (reads run in parallel, writes are serialised by the library)."""

    def __init__(self, path, create=False, family=None, *, readonly=False, map_size=0, context=None,
                 library=None):
        ctx = _context(context, library)
        self._lib = ctx.library
        self._ctx = ctx
        self._h = None
        if create and readonly:
            raise _invalid("Collection: create=True and readonly=True exclude each other")
        if not isinstance(map_size, int) or map_size < 0:
            raise _invalid(f"Collection: map_size must be an integer >= 0, got {map_size!r}")
        self._family = _extractor(family, self._lib) if family is not None else None
        self.path = os.fspath(path)
        self.readonly = bool(readonly)
        flags = _lib.OPEN_CREATE if create else (_lib.OPEN_READONLY if readonly else _lib.OPEN_WRITE)
        h = ctypes.c_void_p()
        self._lib.check(self._lib.collection_open(ctypes.byref(h), _lib.encode_path(self.path), flags, map_size),
                        "collection")
        self._h = h

    # ------------------------------------------------------------ lifecycle
    def _handle(self):
        if not self._h:
            raise _invalid(f"collection '{self.path}' is closed")
        return self._h

    def close(self):
        """Closes the collection. Idempotent."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.collection_close(h)

    @property
    def closed(self) -> bool:
        return not self._h

    def __repr__(self):
        if not self._h:
            return f"<patina.Collection {self.path!r} closed>"
        return f"<patina.Collection {self.path!r}: {len(self)} images>"

    # --------------------------------------------------------------- reading
    def __len__(self):
        n = ctypes.c_uint64()
        self._lib.check(self._lib.collection_count(self._handle(), ctypes.byref(n)), "collection")
        return int(n.value)

    def info(self) -> dict:
        """Counters and sizes: format, records, next_id, tables, map_size, used, page_size, max_readers."""
        i = _lib.CollectionInfo()
        self._lib.check(self._lib.collection_info(self._handle(), ctypes.byref(i)), "collection")
        return {name: int(getattr(i, name)) for name, _ in _lib.CollectionInfo._fields_}

    def tables(self) -> dict:
        """The descriptor tables: {spec: Table}."""
        lib = self._lib
        arr = ctypes.POINTER(ctypes.c_void_p)()
        n = ctypes.c_size_t()
        lib.check(lib.collection_tables(self._handle(), ctypes.byref(arr), ctypes.byref(n)), "collection")
        specs = []
        try:
            for i in range(n.value):
                specs.append(_s(ctypes.string_at(arr[i])))
        finally:
            for i in range(n.value):
                lib.free(arr[i])
            lib.free(arr)
        out = {}
        for spec in specs:
            rows, nb = ctypes.c_size_t(), ctypes.c_size_t()
            s = lib.collection_table_info(self._handle(), spec.encode(), ctypes.byref(rows), ctypes.byref(nb))
            if s == errors.OK:
                out[spec] = Table(spec, int(rows.value), int(nb.value))
        return out

    def records(self):
        """An iterator over the records, in id order (each step reads the
        last committed state: records removed meanwhile are not seen)."""
        cursor = ctypes.c_uint64(0)
        while True:
            r = _lib.Record()
            s = self._lib.collection_next(self._handle(), ctypes.byref(cursor), ctypes.byref(r))
            if s == errors.DONE:
                return
            if s != errors.OK:
                raise self._lib.error(s, "collection")
            try:
                rec = _record(r)
            finally:
                self._lib.record_release(ctypes.byref(r))
            yield rec

    def keys(self) -> List[str]:
        """The keys, in id order."""
        return [r.key for r in self.records()]

    def __iter__(self):
        return iter(self.keys())

    def _fetch(self, get, arg):
        """The record the library's get(collection, arg, record) returns, or None when absent."""
        r = _lib.Record()
        s = get(self._handle(), arg, ctypes.byref(r))
        if s == errors.E_NOTFOUND:
            self._lib.clear_error()
            return None
        self._lib.check(s, "collection")
        try:
            return _record(r)
        finally:
            self._lib.record_release(ctypes.byref(r))

    def _lookup(self, key):
        """The record of key, or None."""
        return self._fetch(self._lib.collection_get_by_key, _key_bytes(key))

    def _lookup_id(self, id_):
        """The record of an id, or None."""
        return self._fetch(self._lib.collection_get, int(id_))

    def get(self, key, default=None) -> Optional[Record]:
        """The record of key (a str) or of an id (an int); default when absent."""
        r = self._lookup_id(key) if _is_id(key) else self._lookup(key)
        return default if r is None else r

    def __getitem__(self, key) -> Record:
        r = self.get(key)
        if r is None:
            raise self._missing(key)
        return r

    def __contains__(self, key):
        return self.get(key) is not None

    def _missing(self, key):
        what = f"id {key}" if _is_id(key) else f"key {key!r}"
        return errors.KeyNotFoundError(f"collection '{self.path}' has no {what}", errors.E_NOTFOUND, "not found")

    def descriptor(self, key, family=None) -> np.ndarray:
        """The stored descriptor of key (or id) in the family's table."""
        ex = self._resolve(family)
        rec = self[key]
        out = np.empty(ex.dim, dtype=ex.dtype)
        s = self._lib.collection_get_descriptor(self._handle(), ex.spec.encode(), rec.id, out.ctypes.data,
                                                ex.nbytes)
        if s == errors.E_NOTFOUND:
            raise errors.NotFoundError(f"collection '{self.path}': {key!r} has no descriptor in table "
                                       f"'{ex.spec}' ({self._lib.last_error().decode(errors='replace')})",
                                       errors.E_NOTFOUND, "not found")
        self._lib.check(s, "collection")
        return out

    def _resolve(self, family) -> Extractor:
        """The extractor of a call: family=, the handle's family, the only table, or cedd."""
        if family is not None:
            return _extractor(family, self._lib)
        if self._family is not None:
            return self._family
        specs = list(self.tables())
        if len(specs) == 1:
            return _extractor(specs[0], self._lib)
        if not specs:
            return _extractor("cedd", self._lib)
        raise _invalid(f"collection '{self.path}' has several tables ({', '.join(specs)}): say which with "
                       "family=")

    # --------------------------------------------------------------- writing
    def _items(self, ex, pairs, strict, device, must_exist=False):
        """Descriptors and record fields of (key, image or descriptor) pairs."""
        keys, prepared, descs, meta = [], [], [], []
        try:
            for i, (key, item) in enumerate(pairs):
                kb = _key_bytes(key)
                old = self._lookup(key)
                if must_exist and old is None:
                    raise self._missing(key)
                keys.append(kb)
                if isinstance(item, np.ndarray) and item.ndim == 1:
                    d = ex.check_descriptor(item, f"{key!r}")
                    if old is not None:   # a descriptor for a stored image: its record stays as it is
                        sha, size, mtime, w, h = bytes.fromhex(old.sha256), old.size, old.mtime, old.width, \
                            old.height
                    else:
                        sha, size, mtime, w, h = hashlib.sha256(d.tobytes()).digest(), 0, 0, 0, 0
                    descs.append(d)
                    meta.append((size, sha, mtime, w, h))
                else:
                    p = _prepare(item, self._ctx, strict, f"{key!r} {_describe(item)}", want_hash=True)
                    prepared.append((len(descs), p))
                    descs.append(None)
                    meta.append((p.size, p.sha256, p.mtime, p.width, p.height))
            if prepared:
                rows = _extract_prepared(ex, self._ctx, [p for _, p in prepared], device,
                                         [f"{os.fsdecode(keys[j])!r}" for j, _ in prepared])
                for r, (j, _) in enumerate(prepared):
                    descs[j] = rows[r]
        finally:
            for _, p in prepared:
                p.release()
        return keys, descs, meta

    def _put(self, ex, keys, descs, meta):
        n = len(keys)
        if n == 0:
            return []
        mat = np.ascontiguousarray(np.stack(descs)) if n > 1 else np.ascontiguousarray(descs[0][None, :])
        items = (_lib.Insert * n)()
        for i in range(n):
            size, sha, mtime, w, h = meta[i]
            it = items[i]
            it.key = keys[i]
            it.size = size
            ctypes.memmove(it.sha256, sha, 32)
            it.mtime = mtime
            it.width = w
            it.height = h
            it.desc = mat.ctypes.data + i * ex.nbytes
        ids = (ctypes.c_uint64 * n)()
        self._lib.check(self._lib.collection_put(self._handle(), ex.spec.encode(), ex.nbytes, items, n, ids),
                        "collection")
        if ex.family == "signature":
            self._refresh_pivots([ex.spec])
        return [int(x) for x in ids]

    def add(self, key, item, family=None, *, strict=False, device="auto") -> int:
        """Stores item under key in the family's table; returns the image id.

        item: an image (path, encoded bytes, uint8 array) whose descriptor is
        extracted here, or a descriptor (a 1-D array of the family's dtype
        and dim) computed elsewhere. A key that exists is replaced and keeps
        its id (as in the library: when the content's SHA-256 changes, its
        descriptors in the other tables are dropped). The record: for a path,
        the file's size, SHA-256 and mtime; for bytes, their size and
        SHA-256; for an array, size 0 and the SHA-256 of its (H, W, 3) RGB
        pixels; for a descriptor, the stored record of the key when there is
        one (so other tables stay), else size 0, 0x0 and the SHA-256 of the
        descriptor's bytes."""
        return self.add_batch([(key, item)], family, strict=strict, device=device)[0]

    def add_batch(self, items, family=None, *, strict=False, device="auto") -> List[int]:
        """Stores many (key, image or descriptor) pairs (or a dict) in ONE
        transaction, extracting the images as one batch; returns their ids.
        Any failure raises and stores nothing. A key repeated in the batch:
        the last one wins."""
        ex = self._resolve(family)
        pairs = list(items.items()) if isinstance(items, dict) else list(items)
        for p in pairs:
            if not isinstance(p, tuple) or len(p) != 2:
                raise _type_error("add_batch takes (key, image or descriptor) pairs or a dict")
        keys, descs, meta = self._items(ex, pairs, strict, device)
        return self._put(ex, keys, descs, meta)

    def update(self, key, item, family=None, *, strict=False, device="auto") -> int:
        """add() for a key the collection holds: KeyNotFoundError otherwise."""
        ex = self._resolve(family)
        keys, descs, meta = self._items(ex, [(key, item)], strict, device, must_exist=True)
        return self._put(ex, keys, descs, meta)[0]

    def remove(self, key) -> None:
        """Removes the image of key (a str) or id (an int) and its descriptors
        in every table (one transaction); stored pivot tables drop its row.
        KeyNotFoundError when absent."""
        rec = self.get(key)
        if rec is None:
            raise self._missing(key)
        s = self._lib.collection_remove(self._handle(), rec.id)
        if s == errors.E_NOTFOUND:   # removed by someone else meanwhile
            raise self._missing(key)
        self._lib.check(s, "collection")
        self._refresh_pivots([t for t in self.tables() if t.startswith("signature")])

    def __delitem__(self, key):
        self.remove(key)

    def _refresh_pivots(self, specs):
        """Stored pivot tables follow the records (as `patina rm` and `patina index` do)."""
        lib = self._lib
        for spec in specs:
            ex = _extractor(spec, lib)
            pi = ctypes.c_void_p()
            refreshed = ctypes.c_size_t()
            s = lib.pivot_index_load(ctypes.byref(pi), self._ctx.handle, ex.handle, self._handle(),
                                     ctypes.byref(refreshed))
            try:
                if s == errors.E_NOTFOUND:
                    lib.clear_error()
                    continue
                lib.check(s, "pivots")
                if refreshed.value:
                    lib.check(lib.pivot_index_save(pi, self._handle()), "pivots")
            finally:
                lib.pivot_index_free(pi)

    # --------------------------------------------------------------- search
    def _queries(self, ex, queries, strict, device):
        """(nq, dim) query descriptors of images and/or descriptors."""
        if isinstance(queries, np.ndarray) and queries.ndim == 2 and queries.dtype == ex.dtype and \
                queries.shape[1] == ex.dim:
            return np.ascontiguousarray(queries)
        if isinstance(queries, (str, bytes, os.PathLike)) or (isinstance(queries, np.ndarray) and queries.ndim != 2):
            raise _type_error("search_batch takes a sequence of queries (or an (n, dim) descriptor array); "
                              "use search() for one")
        pairs = [(f"query {i}", q) for i, q in enumerate(queries)]
        out = np.empty((len(pairs), ex.dim), dtype=ex.dtype)
        prepared = []
        try:
            for i, (label, q) in enumerate(pairs):
                if isinstance(q, np.ndarray) and q.ndim == 1:
                    out[i] = ex.check_descriptor(q, label)
                else:
                    prepared.append((i, _prepare(q, self._ctx, strict, f"{label} {_describe(q)}")))
            if prepared:
                rows = _extract_prepared(ex, self._ctx, [p for _, p in prepared], device,
                                         [f"query {i}" for i, _ in prepared])
                for r, (i, _) in enumerate(prepared):
                    out[i] = rows[r]
        finally:
            for _, p in prepared:
                p.release()
        return out

    def _check_table(self, ex):
        rows, nb = ctypes.c_size_t(), ctypes.c_size_t()
        s = self._lib.collection_table_info(self._handle(), ex.spec.encode(), ctypes.byref(rows), ctypes.byref(nb))
        if s == errors.E_NOTFOUND:
            specs = list(self.tables())
            have = f"its tables: {', '.join(specs)}" if specs else "it has no descriptor tables yet"
            raise errors.NotFoundError(f"collection '{self.path}' has no table '{ex.spec}' ({have})",
                                       errors.E_NOTFOUND, "not found")
        self._lib.check(s, "collection")

    def search(self, query, k=10, *, range=None, family=None, device="auto", max_hits=0, bound="ptolemaic",
               strict=False) -> List[Hit]:
        """The k nearest images to query (an image or a descriptor), or with
        range=r every image at distance <= r (the nearest max_hits of them
        when max_hits > 0). Returns Hits (key, distance, id) ordered by
        distance, ties by id: the same as `patina search`.

        family: the table to search (see Collection). device: "auto", "cpu"
        or "gpu" (where the query is described and the search runs; the same
        results). bound: for signature tables with a pivot table, the lower
        bounds used ("ptolemaic", "metric", "none"; the same results). A
        signature table with a pivot table is filtered as `patina search`
        does: on the GPU with device "gpu" (UnavailableError without one),
        and with "auto" when there is a GPU and 256 rows or more (else, or
        when the GPU cannot take it, on the CPU)."""
        return self.search_batch([query], k, range=range, family=family, device=device, max_hits=max_hits,
                                 bound=bound, strict=strict)[0]

    def search_batch(self, queries, k=10, *, range=None, family=None, device="auto", max_hits=0,
                     bound="ptolemaic", strict=False) -> List[List[Hit]]:
        """search() for many queries in one call (one snapshot, one index
        load, one extraction batch, one search call): a list of hit lists in
        the order of queries. queries: a sequence of images and descriptors,
        or an (n, dim) array of descriptors."""
        lib = self._lib
        ex = self._resolve(family)
        dev = _lib.device_code(device)
        if dev == _lib.DEVICES["hybrid"]:
            dev = _lib.DEVICES["auto"]   # as the CLI: hybrid is an extraction device only
        if bound not in _BOUNDS:
            raise _invalid(f"bound must be one of {', '.join(_BOUNDS)}, got {bound!r}")
        if range is None:
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
                raise _invalid(f"k must be an integer, got {k!r}")
            # the library's bounds (1 .. PATINA_K_MAX), checked before the (nq, k) hits are allocated here
            lib.check(lib.options_check(_lib.OPTION_SETS["search"], b"k", float(k)))
            k = int(k)
        else:
            range = float(range)
        if not isinstance(max_hits, (int, np.integer)) or max_hits < 0:
            raise _invalid(f"max_hits must be an integer >= 0, got {max_hits!r}")
        self._check_table(ex)
        q = self._queries(ex, queries, strict, "cpu" if device == "hybrid" else device)
        nq = q.shape[0]
        if nq == 0:
            return []
        with _Snapshot(self) as snap:
            pidx = ctypes.c_void_p()
            idx = ctypes.c_void_p()
            try:
                if ex.family == "signature":
                    s = lib.pivot_index_load_snapshot(ctypes.byref(pidx), self._ctx.handle, ex.handle, snap.h, None)
                    if s == errors.E_NOTFOUND:
                        lib.clear_error()
                    else:
                        lib.check(s, "pivots")
                if not pidx:
                    lib.check(lib.index_load_snapshot(ctypes.byref(idx), ex.handle, snap.h), "search")
                counts = (ctypes.c_size_t * nq)()
                if pidx:
                    po = _lib.PivotSearchOpts()
                    lib.pivot_search_opts_init(ctypes.byref(po))
                    po.bound = _BOUNDS[bound]
                    po.max_hits = int(max_hits)
                    po.strategy = _PIVOT_STRATEGY["auto" if device == "hybrid" else device]
                else:
                    so = _lib.SearchOpts()
                    lib.search_opts_init(ctypes.byref(so))
                    so.device = dev
                    so.max_hits = int(max_hits)
                results = []
                if range is None:
                    hits = (_lib.Hit * (nq * k))()
                    if pidx:
                        s = lib.pivot_index_knn(self._ctx.handle, pidx, q.ctypes.data, nq, k, ctypes.byref(po), hits,
                                                counts)
                    else:
                        s = lib.index_knn(self._ctx.handle, idx, q.ctypes.data, nq, k, ctypes.byref(so), hits, counts)
                    lib.check(s, "search")
                    for i in builtins_range(nq):
                        row = [hits[i * k + r] for r in builtins_range(counts[i])]
                        results.append(self._hits(snap, row))
                else:
                    rh = (ctypes.POINTER(_lib.Hit) * nq)()
                    if pidx:
                        s = lib.pivot_index_range(self._ctx.handle, pidx, q.ctypes.data, nq, range, ctypes.byref(po),
                                                  rh, counts)
                    else:
                        s = lib.index_range(self._ctx.handle, idx, q.ctypes.data, nq, range, ctypes.byref(so), rh,
                                            counts)
                    try:
                        lib.check(s, "search")
                        for i in builtins_range(nq):
                            row = [rh[i][r] for r in builtins_range(counts[i])]
                            results.append(self._hits(snap, row))
                    finally:
                        for i in builtins_range(nq):
                            if rh[i]:
                                lib.free(ctypes.cast(rh[i], ctypes.c_void_p))
                return results
            finally:
                lib.index_free(idx)
                lib.pivot_index_free(pidx)

    @staticmethod
    def _hits(snap, row):
        keys = snap.keys([h.id for h in row])
        return [Hit(key, float(h.distance), int(h.id)) for key, h in zip(keys, row)]

    # ------------------------------------------------------------- identify
    def identify(self, photo, k=5, **opts) -> Identification:
        """Which registered item photo shows, or "unknown" (the collection
        needs a rootsift table: index with family "rootsift"). Options as
        identify_batch."""
        return self.identify_batch([photo], k, **opts)[0]

    def identify_batch(self, photos, k=5, *, ratio=0.8, scoring="one2one", verify=True, verify_top=10,
                       model="similarity", ransac_threshold=0.01, iterations=1000, shape_check=True, seed=0,
                       threshold=13.0, table=None, device="auto", precision="int8", strict=False
                       ) -> List[Identification]:
        """Identifies many photos (images) against the collection's rootsift
        references in one call: RootSIFT 2-NN ratio test, scoring, RANSAC
        verification of the verify_top best, re-ranking by inliers, and an
        open-set decision (rank 1's score >= threshold: "match"). The options
        and their defaults are those of `patina identify` (docs/identify.md).
        table: the rootsift table when the collection has several."""
        lib = self._lib
        if isinstance(photos, (str, bytes, os.PathLike)) or (isinstance(photos, np.ndarray) and photos.ndim != 4):
            raise _type_error("identify_batch takes a sequence of images; use identify() for one")
        io = _lib.IdentifyOpts()
        lib.identify_opts_init(ctypes.byref(io))
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
            raise _invalid(f"k must be an integer, got {k!r}")
        lib.check(lib.options_check(_lib.OPTION_SETS["identify"], b"k", float(k)))  # PATINA_K_MAX
        for name, table_, v in (("scoring", _SCORING, scoring), ("model", _MODELS, model),
                                ("precision", _PRECISION, precision)):
            if v not in table_:
                raise _invalid(f"{name} must be one of {', '.join(table_)}, got {v!r}")
        dev = _lib.device_code(device)
        if dev == _lib.DEVICES["hybrid"]:
            raise _invalid("device 'hybrid' is not an identification device (cpu, gpu, auto)")
        io.k = int(k)
        io.ratio = float(ratio)
        io.scoring = _SCORING[scoring]
        io.verify = 1 if verify else 0
        io.verify_top = int(verify_top)
        io.model = _MODELS[model]
        io.ransac_threshold = float(ransac_threshold)
        io.iterations = int(iterations)
        io.shape_check = 1 if shape_check else 0
        io.seed = int(seed)
        io.threshold = float(threshold)
        io.device = dev
        io.precision = _PRECISION[precision]
        photos = list(photos)
        if not photos:
            return []
        with _Snapshot(self) as snap:
            spec = _lib.RefsetSpec()
            lib.refset_spec_init(ctypes.byref(spec))
            if table is not None:
                spec.table = _extractor(table, lib).spec.encode()
            spec.snapshot = snap.h
            rs = ctypes.c_void_p()
            s = lib.refset_load(ctypes.byref(rs), self._handle(), ctypes.byref(spec))
            if s != errors.OK:
                raise errors.make_error(s, f"collection '{self.path}': {_s(lib.last_error())}",
                                        _s(lib.status_str(s)))
            prepared = []
            try:
                for i, ph in enumerate(photos):
                    prepared.append(_prepare(ph, self._ctx, strict, f"photo {i} {_describe(ph)}"))
                nq = len(prepared)
                qbytes = int(lib.identify_query_bytes(rs))
                qrec = np.empty(nq * qbytes, dtype=np.uint8)
                imgs = (_lib.Image * nq)(*[p.img for p in prepared])
                st = (ctypes.c_int * nq)()
                lib.check(lib.identify_extract(self._ctx.handle, rs, qrec.ctypes.data, imgs, nq, st), "identify")
                for i in builtins_range(nq):
                    if st[i] != errors.OK:
                        raise errors.make_error(st[i], f"photo {i} ({prepared[i].name}): rootsift extraction "
                                                f"failed ({_s(lib.status_str(st[i]))})", _s(lib.status_str(st[i])))
                hits = (_lib.IdentifyHit * (nq * io.k))()
                res = (_lib.IdentifyResult * nq)()
                lib.check(lib.identify(self._ctx.handle, rs, qrec.ctypes.data, nq, ctypes.byref(io), hits, res),
                          "identify")
                out = []
                for i in builtins_range(nq):
                    row = [hits[i * io.k + r] for r in builtins_range(res[i].nhits)]
                    keys = snap.keys([h.id for h in row])
                    cands = [Candidate(key, float(h.score), int(h.matches), int(h.inliers), bool(h.verified),
                                       int(h.id)) for key, h in zip(keys, row)]
                    out.append(Identification("match" if res[i].decision == 1 else "unknown",
                                              int(res[i].query_features), cands))
                return out
            finally:
                for p in prepared:
                    p.release()
                lib.refset_free(rs)


def _is_id(key):
    return isinstance(key, (int, np.integer)) and not isinstance(key, bool)


builtins_range = range  # search() has a parameter named range
