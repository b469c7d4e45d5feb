"""Collections: add, remove, update, look up, search and identify.

A ``Collection`` is an open LMDB collection (a directory, the same one the
CLI reads and writes). Writes are transactions of the library: ``add``,
``update`` and ``add_batch`` commit whole or not at all. Searches and
identifications go through the library's live tables (include/patina/table.h):
a handle opens each table it searches or identifies against once and keeps
it open, with its index, stored pivot table or reference set loaded, until
``close()``. Writes through the handle update those tables in place; writes
by other handles or processes are noticed by the table's next call (the
collection's version) and it reloads first. Which table a call uses when
none is named, and which device runs it, are the library's rules.
"""

import ctypes
import dataclasses
import hashlib
import os
import threading
from typing import List, NamedTuple, Optional

import numpy as np

from . import _lib
from . import errors
from ._core import (_Closing, _context, _describe, _extract_prepared, _extractor, _invalid, _prepare, _s,
                    _type_error)

_SCORING = {"one2one": 0, "raw": 1, "mutual": 2}
_MODELS = {"similarity": 0, "affine": 1, "homography": 2}
_PRECISION = {"int8": 0, "fp16": 1}
_ACCEPT = {"significance": 0, "inliers": 1}
# The family of a write into a collection that has no table yet: the CLI's `-f` default.
_FIRST_FAMILY = "cedd"


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
    key: str          # None only when another writer removed the image between the search and its key's lookup
    distance: float
    id: int


class Candidate(NamedTuple):
    """One identification candidate, best first."""
    key: str          # None as for Hit
    score: float      # inliers when verified, else the scoring rule's matches
    matches: int
    inliers: int      # 0 when not verified
    verified: bool
    id: int


@dataclasses.dataclass(frozen=True)
class Identification:
    """The answer for one query photograph."""
    decision: str                 # "match" (rank 1 accepted), "ambiguous" (ranks 1 and 2 both verified
                                  # and accepted: the photo shows content of both) or "unknown"
    features: int                 # features of the query
    candidates: List[Candidate]   # best first, at most k
    threshold: float = 13.0       # what rank 1's score was judged against (threshold, or far's calibration)
    half_query_taken: bool = False  # with half_query: the half-size query's answer is the one given
                                    # (its scores less half_query_margin)

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


class _Table:
    """One live table (patina_table_t) of a collection handle: its handle,
    canonical spec, extractor (queries and writes are described with it) and
    capabilities (PATINA_CAP_*)."""

    __slots__ = ("h", "spec", "ex", "caps")

    def __init__(self, lib, h):
        self.h = h
        self.spec = _s(lib.table_spec(h))
        self.ex = _extractor(self.spec, lib)
        self.caps = int(lib.table_caps(h))


def _families_with(lib, cap):
    """Names of the registered families with capability cap."""
    return [_s(lib.family_name(f)) for f in range(lib.family_count()) if lib.family_caps(f) & cap]


def _c_array(ctype, values):
    return (ctype * len(values))(*values)


class Collection(_Closing):
    """An open collection.

    path: the collection's directory. create: make it when missing (an
    empty directory is filled; a non-empty one that is not a collection is
    refused). readonly: open for reading only (writes raise InvalidError).
    family: the default table of add, search and descriptor ("lbp:P=8,R=1",
    or a bare family name for the collection's only table of that family);
    None lets the library choose: the collection's only table for the use
    (search: a table searched by a distance; writes and descriptor(): any),
    and for a write into a collection without tables "cedd" (the CLI's
    default). identify's default is the library's choice among the tables
    for identification. map_size: bytes the collection may
    grow to (0: the library's default). context: the Context to compute on
    (None: the default).

    Tables searched, identified against or written to stay open (loaded at
    their first search) until close(). Use as a context manager, or call
    close(). One handle may be shared by threads (searches run in parallel;
    a write waits for the calls in flight on the tables it updates)."""

    def __init__(self, path, create=False, family=None, *, readonly=False, map_size=0, context=None,
                 library=None):
        ctx = _context(context, library)
        self._lib = ctx.library
        self._ctx = ctx
        self._h = None
        self._tables = {}   # canonical spec -> _Table, freed by close()
        self._tables_lock = threading.Lock()
        if create and readonly:
            raise _invalid("Collection: create=True and readonly=True exclude each other")
        if not isinstance(map_size, int) or map_size < 0:
            raise _invalid(f"Collection: map_size must be an integer >= 0, got {map_size!r}")
        if family is not None:   # checked here, given to the library as spelled (a bare family name keeps its meaning)
            ex = _extractor(family, self._lib)
            family = family if isinstance(family, str) else ex.spec
        self._family = family
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
        """Frees the open tables and closes the collection. Idempotent."""
        lock = getattr(self, "_tables_lock", None)
        if lock is not None:
            with lock:
                tables, self._tables = self._tables, {}
            for t in tables.values():
                self._lib.table_free(t.h)
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
        out = {}
        for spec in self._specs():
            rows, nb = ctypes.c_size_t(), ctypes.c_size_t()
            s = self._lib.collection_table_info(self._handle(), spec.encode(), ctypes.byref(rows), ctypes.byref(nb))
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
        t = self._table(family)
        try:
            ex = t.ex
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
        finally:
            self._drop(t)

    # ---------------------------------------------------------------- tables
    def _table(self, family, need=0, create=False, keep=False, handle_family=True) -> _Table:
        """The live table a call names: family=, else the handle's family
        (with handle_family), else the library's choice among the tables
        with capabilities need.
        A table this handle keeps is returned as is; another is opened
        (patina_table_open: the library resolves the spec) and kept until
        close() with keep, else the caller hands it to _drop."""
        lib = self._lib
        spec = family if family is not None or not handle_family else self._family
        if spec is not None:
            canonical = _extractor(spec, lib).spec
            if not isinstance(spec, str):   # an Extractor
                spec = canonical
            # a kept table is one of the collection's, so the library would pick it for its canonical spec
            with self._tables_lock:
                t = self._tables.get(canonical)
            if t is not None:
                return t
        opts = _lib.TableOpts()
        lib.table_opts_init(ctypes.byref(opts))
        opts.need = need
        opts.create = 1 if create else 0
        h = ctypes.c_void_p()
        s = lib.table_open(ctypes.byref(h), self._ctx.handle, self._handle(),
                           spec.encode("utf-8", "surrogateescape") if spec is not None else None, ctypes.byref(opts))
        if s != errors.OK:
            msg = f"collection '{self.path}': {_s(lib.last_error())}"
            if s == errors.E_NOTFOUND and spec is None and need:
                msg += f" (families for it: {', '.join(_families_with(lib, need))})"
            raise errors.make_error(s, msg, _s(lib.status_str(s)))
        try:
            t = _Table(lib, h)
        except BaseException:
            lib.table_free(h)
            raise
        return self._keep(t) if keep else self._known(t)

    def _known(self, t) -> _Table:
        """The table this handle keeps for t's spec (t freed), else t."""
        with self._tables_lock:
            kept = self._tables.get(t.spec)
        if kept is not None and kept is not t:
            self._lib.table_free(t.h)
            return kept
        return t

    def _keep(self, t) -> _Table:
        """Keeps t open until close() (or the table already kept for its spec, t freed)."""
        with self._tables_lock:
            kept = self._tables.setdefault(t.spec, t)
        if kept is not t:
            self._lib.table_free(t.h)
        return kept

    def _drop(self, t):
        """Frees t unless this handle keeps it."""
        with self._tables_lock:
            kept = self._tables.get(t.spec) is t
        if not kept:
            self._lib.table_free(t.h)

    def _specs(self):
        """The collection's table specs."""
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
        return specs

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

    def _write_table(self, family) -> _Table:
        """The table a write goes to (opened with create: a new spec makes a new table)."""
        try:
            return self._table(family, create=True)
        except errors.NotFoundError:
            if family is not None or self._family is not None or self._specs():
                raise
            self._lib.clear_error()
            return self._table(_FIRST_FAMILY, create=True)

    def _write_set(self, first=None, pivots=False):
        """The tables a write goes through: first, every table this handle
        keeps, and with pivots every table of the collection that a stored
        pivot table can filter (so that the stored one follows)."""
        out = [first] if first is not None else []
        if pivots:
            for spec in self._specs():
                if _extractor(spec, self._lib).caps & _lib.CAP_PIVOTS:
                    self._table(spec, keep=True)
        with self._tables_lock:
            kept = list(self._tables.values())
        return out + [t for t in kept if first is None or t.spec != first.spec]

    def _save(self, tables):
        """Stored pivot tables brought up to date with the writes (patina_table_save)."""
        for t in tables:
            if t.caps & _lib.CAP_PIVOTS:
                self._lib.check(self._lib.table_save(t.h, None), "pivots")

    def _put(self, t, keys, descs, meta):
        """patina_tables_put of n images into t, through every table this handle keeps."""
        n = len(keys)
        if n == 0:
            self._drop(t)
            return []
        ok = False
        try:
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
            tables = self._write_set(t)
            handles = _c_array(ctypes.c_void_p, [x.h for x in tables])
            per_table = (ctypes.c_void_p * len(tables))()   # NULL: a table written no descriptor
            per_table[0] = mat.ctypes.data
            ids = (ctypes.c_uint64 * n)()
            self._lib.check(self._lib.tables_put(handles, len(tables), items, n, per_table, ids), "collection")
            ok = True
        finally:
            if not ok:
                self._drop(t)
        tables[0] = self._keep(t)
        self._save(tables)
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
        pairs = list(items.items()) if isinstance(items, dict) else list(items)
        for p in pairs:
            if not isinstance(p, tuple) or len(p) != 2:
                raise _type_error("add_batch takes (key, image or descriptor) pairs or a dict")
        t = self._write_table(family)
        try:
            keys, descs, meta = self._items(t.ex, pairs, strict, device)
        except BaseException:
            self._drop(t)
            raise
        return self._put(t, keys, descs, meta)

    def update(self, key, item, family=None, *, strict=False, device="auto") -> int:
        """add() for a key the collection holds: KeyNotFoundError otherwise."""
        t = self._write_table(family)
        try:
            keys, descs, meta = self._items(t.ex, [(key, item)], strict, device, must_exist=True)
        except BaseException:
            self._drop(t)
            raise
        return self._put(t, keys, descs, meta)[0]

    def remove(self, key) -> None:
        """Removes the image of key (a str) or id (an int) and its descriptors
        in every table (one transaction); stored pivot tables drop its row.
        KeyNotFoundError when absent."""
        rec = self.get(key)
        if rec is None:
            raise self._missing(key)
        lib = self._lib
        tables = self._write_set(pivots=True)
        extra = None
        if not tables:   # nothing open: any table of the collection carries the remove
            specs = self._specs()
            if specs:
                extra = self._table(specs[0])
                tables = [extra]
        try:
            if tables:
                handles = _c_array(ctypes.c_void_p, [x.h for x in tables])
                s = lib.tables_remove(handles, len(tables), ctypes.byref(ctypes.c_uint64(rec.id)), 1, None)
            else:
                s = lib.collection_remove(self._handle(), rec.id)
            if s == errors.E_NOTFOUND:   # removed by someone else meanwhile
                lib.clear_error()
                raise self._missing(key)
            lib.check(s, "collection")
            self._save(tables)
        finally:
            if extra is not None:
                self._drop(extra)

    def __delitem__(self, key):
        self.remove(key)

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

    def search(self, query, k=10, *, range=None, family=None, device="auto", max_hits=0, bound="ptolemaic",
               strict=False) -> List[Hit]:
        """The k nearest images to query (an image or a descriptor), or with
        range=r every image at distance <= r (the nearest max_hits of them
        when max_hits > 0). Returns Hits (key, distance, id) ordered by
        distance, ties by id: the same as `patina search`.

        family: the table to search (None: see Collection). device: "auto",
        "cpu" or "gpu", where the query is described and the search runs,
        by the library's device policy (include/patina/table.h): the same
        results on every device; "gpu" without a usable GPU raises
        UnavailableError. bound: for tables with a stored pivot table, the
        lower bounds used ("ptolemaic", "metric", "none"; the same results)."""
        return self.search_batch([query], k, range=range, family=family, device=device, max_hits=max_hits,
                                 bound=bound, strict=strict)[0]

    def search_batch(self, queries, k=10, *, range=None, family=None, device="auto", max_hits=0,
                     bound="ptolemaic", strict=False) -> List[List[Hit]]:
        """search() for many queries in one call (one extraction batch, one
        patina_table_search): a list of hit lists in the order of queries.
        queries: a sequence of images and descriptors, or an (n, dim) array
        of descriptors. A hit's key is None only when another writer removed
        its image between the search and the key's lookup."""
        lib = self._lib
        q = _lib.TableQuery()
        lib.table_query_init(ctypes.byref(q))
        q.device = _lib.device_code(device)
        if bound not in _lib.BOUNDS:
            raise _invalid(f"bound must be one of {', '.join(_lib.BOUNDS)}, got {bound!r}")
        q.bound = _lib.BOUNDS[bound]
        if range is None:
            if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
                raise _invalid(f"k must be an integer, got {k!r}")
            # the library's bounds (1 .. PATINA_K_MAX)
            lib.check(lib.options_check(_lib.OPTION_SETS["search"], b"k", float(k)))
            q.kind, q.k = _lib.QUERY_KNN, int(k)
        else:
            q.kind, q.radius = _lib.QUERY_RANGE, float(range)
        if not isinstance(max_hits, (int, np.integer)) or isinstance(max_hits, bool) or not 0 <= max_hits < 1 << 63:
            raise _invalid(f"max_hits must be an integer >= 0, got {max_hits!r}")
        q.max_hits = int(max_hits)
        q.keys = 1
        t = self._table(family, need=_lib.CAP_SEARCH, keep=True)
        mat = self._queries(t.ex, queries, strict, device)
        nq = mat.shape[0]
        res = _lib.TableResults()
        lib.check(lib.table_search(t.h, mat.ctypes.data if nq else None, nq, ctypes.byref(q), ctypes.byref(res)),
                  "search")
        try:
            out = []
            for i in builtins_range(nq):
                row = []
                for j in builtins_range(res.offsets[i], res.offsets[i + 1]):
                    key = res.keys[j]
                    h = res.hits[j]
                    row.append(Hit(_lib.decode_key(key) if key is not None else None, float(h.distance), int(h.id)))
                out.append(row)
            return out
        finally:
            lib.table_results_release(ctypes.byref(res))

    # ------------------------------------------------------------- identify
    def identify(self, photo, k=5, **opts) -> Identification:
        """Which registered item photo shows, or "unknown" (the collection
        needs a rootsift table: index with family "rootsift"). Options as
        identify_batch."""
        return self.identify_batch([photo], k, **opts)[0]

    def identify_batch(self, photos, k=5, *, ratio=0.8, scoring="one2one", verify=True, verify_top=10,
                       model="similarity", ransac_threshold=0.01, iterations=1000, shape_check=True, seed=0,
                       threshold=None, table=None, device="auto", precision="int8", strict=False, guided=False,
                       guided_ratio=0.9, far=None, ambiguity=0.5, distinct=0.0,
                       sibling_inliers=13.0, accept="significance", view_candidates=0,
                       first_features=0, half_view_features=0, half_query=0,
                       half_query_margin=10.0) -> List[Identification]:
        """Identifies many photos (images) against the collection's rootsift
        references in one call: RootSIFT 2-NN ratio test, scoring, RANSAC
        verification of the verify_top best, re-ranking by inliers, and an
        open-set decision (rank 1's score >= threshold: "match"). The options
        and their defaults are those of `patina identify` (docs/identify.md).
        table: the table to identify against (None: the collection's only
        table for identification, the library's choice). device: "auto",
        "cpu" or "gpu", by the library's device policy. guided: match again
        inside the neighbourhoods RANSAC's model predicts (at guided_ratio) and
        verify those. accept: what threshold is compared with, "significance"
        (the default: -log10 of the a-contrario expected number of false
        alarms of rank 1's inliers) or "inliers" (their count). threshold: the
        acceptance threshold in that unit; None, the default, takes far's.
        far: instead of threshold, the threshold calibrated for that
        false-accept rate on the identification benchmark, for the acceptance
        rule and the table's reference views setting (None: 0.01, as
        `patina identify`); "ambiguous"
        when rank 2 is verified, of another item, reaches it too and holds at
        least ambiguity (0.5) times rank 1's score (0: whenever it reaches
        it). distinct: rank 1 is accepted only when its score exceeds the
        verified rank 2's by at least this margin, rank 2 counting 0 when the
        two references are siblings (one's image verifies against the other's
        rows with at least sibling_inliers inliers); 0, the default: off.
        view_candidates: for references registered with views, match the
        items' registered images first and then the views of the best
        view_candidates items by those (0, the default: every view of every
        item). first_features: match every reference with each photo's
        first_features strongest features, then the best candidates again
        with all of them (0, the default: all at once). half_view_features:
        with view_candidates, over references indexed with a half-size view
        (views 1 or 3), the first pass also matches each item's half-size
        view with each photo's half_view_features strongest features (0,
        the default: the first rows alone). half_query: also identify each
        photo halved (a close-up meets its registered image at about its
        scale once halved), its first pass on its half_query strongest
        features, and keep that answer where its score less
        half_query_margin (10) beats the photo's; its scores are then
        reported less the margin (0, the default: off; docs/identify.md
        "The half-size query")."""
        lib = self._lib
        if isinstance(photos, (str, bytes, os.PathLike)) or (isinstance(photos, np.ndarray) and photos.ndim != 4):
            raise _type_error("identify_batch takes a sequence of images; use identify() for one")
        io = _lib.IdentifyOpts()
        lib.identify_opts_init(ctypes.byref(io))
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool):
            raise _invalid(f"k must be an integer, got {k!r}")
        lib.check(lib.options_check(_lib.OPTION_SETS["identify"], b"k", float(k)))  # PATINA_K_MAX
        for name, table_, v in (("scoring", _SCORING, scoring), ("model", _MODELS, model),
                                ("precision", _PRECISION, precision), ("accept", _ACCEPT, accept)):
            if v not in table_:
                raise _invalid(f"{name} must be one of {', '.join(table_)}, got {v!r}")
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
        if threshold is not None and far is not None:
            raise _invalid("far and threshold both set the acceptance threshold: give one")
        if threshold is not None:
            io.threshold = float(threshold)
        io.guided = 1 if guided else 0
        io.guided_ratio = float(guided_ratio)
        io.ambiguity = float(ambiguity)
        io.distinct = float(distinct)
        io.sibling_inliers = float(sibling_inliers)
        io.accept = _ACCEPT[accept]
        if not isinstance(view_candidates, (int, np.integer)) or isinstance(view_candidates, bool):
            raise _invalid(f"view_candidates must be an integer, got {view_candidates!r}")
        lib.check(lib.options_check(_lib.OPTION_SETS["identify"], b"view_candidates", float(view_candidates)))
        io.view_candidates = int(view_candidates)
        if not isinstance(first_features, (int, np.integer)) or isinstance(first_features, bool):
            raise _invalid(f"first_features must be an integer, got {first_features!r}")
        lib.check(lib.options_check(_lib.OPTION_SETS["identify"], b"first_features", float(first_features)))
        io.first_features = int(first_features)
        if not isinstance(half_view_features, (int, np.integer)) or isinstance(half_view_features, bool):
            raise _invalid(f"half_view_features must be an integer, got {half_view_features!r}")
        lib.check(lib.options_check(_lib.OPTION_SETS["identify"], b"half_view_features", float(half_view_features)))
        io.half_view_features = int(half_view_features)
        if not isinstance(half_query, (int, np.integer)) or isinstance(half_query, bool) or half_query < 0:
            raise _invalid(f"half_query must be a non-negative integer, got {half_query!r}")
        if not isinstance(half_query_margin, (int, float, np.integer, np.floating)) or not half_query_margin >= 0:
            raise _invalid(f"half_query_margin must be a number >= 0, got {half_query_margin!r}")
        if far is not None:  # its bounds now; the threshold from the table's calibration below
            thr = ctypes.c_double()
            lib.check(lib.identify_far_threshold(float(far), ctypes.byref(thr)), "identify")
        io.device = _lib.device_code(device)
        io.precision = _PRECISION[precision]
        photos = list(photos)
        if not photos:
            return []
        t = self._table(table, need=_lib.CAP_IDENTIFY, keep=True, handle_family=False)
        if far is not None:  # far's, from the table's own calibration (without far: the library's default,
            thr = ctypes.c_double()  # the same calibration at 0.01, which the call resolves)
            far_fn = lib.identify_far_threshold_half if half_query else lib.identify_far_threshold_opts
            lib.check(far_fn(t.spec.encode(), ctypes.byref(io), float(far), ctypes.byref(thr)), "identify")
            io.threshold = thr.value
        prepared = []
        keys = None
        try:
            for i, ph in enumerate(photos):
                prepared.append(_prepare(ph, self._ctx, strict, f"photo {i} {_describe(ph)}"))
            nq = len(prepared)
            qbytes = int(lib.table_query_bytes(t.h))
            qrec = np.empty(nq * qbytes, dtype=np.uint8)
            imgs = (_lib.Image * nq)(*[p.img for p in prepared])
            st = (ctypes.c_int * nq)()
            lib.check(lib.table_identify_extract(t.h, self._ctx.handle, qrec.ctypes.data, imgs, nq, st), "identify")
            for i in builtins_range(nq):
                if st[i] != errors.OK:
                    raise errors.make_error(st[i], f"photo {i} ({prepared[i].name}): {t.ex.family} extraction "
                                            f"failed ({_s(lib.status_str(st[i]))})", _s(lib.status_str(st[i])))
            hits = (_lib.IdentifyHit * (nq * io.k))()
            res = (_lib.IdentifyResult * nq)()
            keys = (ctypes.c_void_p * (nq * io.k))()   # malloc'd by the library: patina_free
            taken = (ctypes.c_ubyte * max(nq, 1))()
            if half_query:
                hrec = np.empty(nq * qbytes, dtype=np.uint8)
                lib.check(lib.table_identify_extract_half(t.h, self._ctx.handle, hrec.ctypes.data, imgs, nq, None),
                          "identify")
                lib.check(lib.table_identify_half(t.h, qrec.ctypes.data, hrec.ctypes.data, nq, int(half_query),
                                                  float(half_query_margin), ctypes.byref(io), hits, res, keys,
                                                  taken),
                          "identify")
            else:
                lib.check(lib.table_identify(t.h, qrec.ctypes.data, nq, ctypes.byref(io), hits, res, keys),
                          "identify")
            out = []
            for i in builtins_range(nq):
                cands = []
                for r in builtins_range(res[i].nhits):
                    h, key = hits[i * io.k + r], keys[i * io.k + r]
                    cands.append(Candidate(_lib.decode_key(ctypes.string_at(key)) if key else None, float(h.score),
                                           int(h.matches), int(h.inliers), bool(h.verified), int(h.id)))
                out.append(Identification(_s(lib.identify_decision_name(res[i].decision)),
                                          int(res[i].query_features), cands, float(res[i].threshold),
                                          bool(taken[i])))
            return out
        finally:
            for p in prepared:
                p.release()
            if keys is not None:
                for key in keys:
                    if key:
                        lib.free(key)


def _is_id(key):
    return isinstance(key, (int, np.integer)) and not isinstance(key, bool)


builtins_range = range  # search() has a parameter named range
