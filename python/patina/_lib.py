"""Finding and loading libpatina.so, and its C declarations for ctypes.

This module is the only place that knows the C ABI: the structs mirror
include/patina/*.h field by field (each names its C type in ``_c_type_``;
python/tests/test_abi.py compares sizes and offsets with the C compiler's,
printed by tests/abi_layout.c), and every function used has its argument
and result types declared (ctypes would otherwise pass pointers as ints).
Nothing here is public; ``patina.load`` and ``patina.Library`` are.

Where the library comes from, first match wins:
  1. ``patina.load(path)`` (or a ``library=`` argument of ``Context``,
     ``Collection``, ``extract`` ...): that file;
  2. the ``PATINA_LIB`` environment variable: that file;
  3. the package's own directory: ``libpatina.so*`` installed beside
     ``__init__.py`` (copied there before ``pip install``);
  4. the system loader: ``libpatina.so.0`` / ``libpatina.so`` on the usual
     paths (LD_LIBRARY_PATH, ldconfig's cache: ``make install`` as root);
  5. the ``libdir`` of an installed ``patina.pc`` (``pkg-config --variable=libdir
     patina``): ``cmake --install`` to /usr/local, or to another prefix named
     in PKG_CONFIG_PATH, without ldconfig.
The first library loaded this way becomes the default; an explicit
``load(path)`` replaces the default for objects created afterwards.
"""

import ctypes
import ctypes.util
import glob
import os
import subprocess
import threading

from . import errors

c_size_t = ctypes.c_size_t
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_int = ctypes.c_int
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_int64 = ctypes.c_int64
c_int32 = ctypes.c_int32
c_double = ctypes.c_double
c_float = ctypes.c_float
P = ctypes.POINTER

PATINA_WARNING_MAX = 512
PATINA_ERROR_MAX = 1024
PATINA_KEY_MAX = 65535

OPEN_READONLY = 0
OPEN_WRITE = 1
OPEN_CREATE = 3

ELEM_U8, ELEM_U16, ELEM_U32, ELEM_F32, ELEM_F64 = range(5)
DEVICES = {"auto": 0, "cpu": 1, "gpu": 2, "hybrid": 3}
# patina_option_set (include/patina/options.h)
OPTION_SETS = {"search": 0, "identify": 1, "index": 2}

# patina_family_caps / patina_extractor_caps (descriptor.h): what a family can do
CAP_SEARCH = 1 << 0      # searched by a distance (k-NN, range)
CAP_IDENTIFY = 1 << 1    # local features: identification
CAP_PIVOTS = 1 << 2      # searches can be filtered by a stored pivot table
CAP_GPU = 1 << 3         # GPU extraction compiled in
CAP_HYBRID = 1 << 4      # hybrid CPU/GPU extraction compiled in
CAP_CODEMAP = 1 << 5     # per-pixel code maps
CAP_JSON = 1 << 6        # a JSON description beyond the vector
CAP_KEYPOINTS = 1 << 7   # records of keypoints (rootsift_features)
CAP_CENTROIDS = 1 << 8   # records of weighted centroids (signature_centroids)
QUERY_KNN, QUERY_RANGE = 0, 1          # patina_query_kind
CHANGE_PUT, CHANGE_REMOVE = 0, 1       # patina_change_op
BOUNDS = {"ptolemaic": 0, "metric": 1, "none": 2}   # patina_pivot_bound

# The integer constants above by their C names: python/tests/test_abi.py
# compares them with the values tests/abi_layout.c prints.
C_CONSTANTS = {
    "PATINA_OPEN_READONLY": OPEN_READONLY, "PATINA_OPEN_WRITE": OPEN_WRITE, "PATINA_OPEN_CREATE": OPEN_CREATE,
    "PATINA_ELEM_U8": ELEM_U8, "PATINA_ELEM_U16": ELEM_U16, "PATINA_ELEM_U32": ELEM_U32,
    "PATINA_ELEM_F32": ELEM_F32, "PATINA_ELEM_F64": ELEM_F64,
    "PATINA_DEVICE_AUTO": DEVICES["auto"], "PATINA_DEVICE_CPU": DEVICES["cpu"], "PATINA_DEVICE_GPU": DEVICES["gpu"],
    "PATINA_DEVICE_HYBRID": DEVICES["hybrid"],
    "PATINA_CAP_SEARCH": CAP_SEARCH, "PATINA_CAP_IDENTIFY": CAP_IDENTIFY, "PATINA_CAP_PIVOTS": CAP_PIVOTS,
    "PATINA_CAP_GPU": CAP_GPU, "PATINA_CAP_HYBRID": CAP_HYBRID, "PATINA_CAP_CODEMAP": CAP_CODEMAP,
    "PATINA_CAP_JSON": CAP_JSON, "PATINA_CAP_KEYPOINTS": CAP_KEYPOINTS, "PATINA_CAP_CENTROIDS": CAP_CENTROIDS,
    "PATINA_QUERY_KNN": QUERY_KNN, "PATINA_QUERY_RANGE": QUERY_RANGE,
    "PATINA_CHANGE_PUT": CHANGE_PUT, "PATINA_CHANGE_REMOVE": CHANGE_REMOVE,
    "PATINA_BOUND_PTOLEMAIC": BOUNDS["ptolemaic"], "PATINA_BOUND_METRIC": BOUNDS["metric"],
    "PATINA_BOUND_NONE": BOUNDS["none"],
    "PATINA_WARNING_MAX": PATINA_WARNING_MAX, "PATINA_ERROR_MAX": PATINA_ERROR_MAX, "PATINA_KEY_MAX": PATINA_KEY_MAX,
}


# ------------------------------------------------------------------ structs
class Image(ctypes.Structure):
    """patina_image_t: (height, stride) u8, interleaved RGB."""
    _c_type_ = "patina_image_t"
    _fields_ = [("width", c_int), ("height", c_int), ("stride", c_size_t),
                ("data", P(ctypes.c_uint8)), ("owned", c_int)]


class Limits(ctypes.Structure):
    _c_type_ = "patina_limits_t"
    _fields_ = [("max_pixels", c_uint64), ("max_file_bytes", c_uint64)]


class DecodeOpts(ctypes.Structure):
    _c_type_ = "patina_decode_opts_t"
    _fields_ = [("limits", Limits), ("strict", c_int), ("apply_orientation", c_int)]


class DecodeReport(ctypes.Structure):
    _c_type_ = "patina_decode_report_t"
    _fields_ = [("warnings", ctypes.c_uint), ("warning", ctypes.c_char * PATINA_WARNING_MAX)]


class ContextOpts(ctypes.Structure):
    _c_type_ = "patina_context_opts_t"
    _fields_ = [("threads", c_int), ("gpu_index", c_int), ("gpu_mem_budget", c_uint64),
                ("limits", Limits), ("nvjpeg_library", c_char_p), ("nvjpeg_lanes", c_int), ("gpus", c_char_p)]


class LoadOpts(ctypes.Structure):
    _c_type_ = "patina_load_opts_t"
    _fields_ = [("strict", c_int), ("batch_memory", c_uint64), ("apply_orientation", c_int)]


class LoadResult(ctypes.Structure):
    _c_type_ = "patina_load_result_t"
    _fields_ = [("status", c_int), ("error", ctypes.c_char * PATINA_ERROR_MAX), ("report", DecodeReport)]


class OptionInfo(ctypes.Structure):
    _c_type_ = "patina_option_info_t"
    _c_names_ = {"default": "def"}  # a Python keyword in C
    _fields_ = [("name", c_char_p), ("type", c_int), ("min", c_double), ("max", c_double),
                ("default", c_char_p), ("choices", c_char_p), ("help", c_char_p), ("min_open", c_int)]


class Record(ctypes.Structure):
    _c_type_ = "patina_record_t"
    _fields_ = [("id", c_uint64), ("key", c_void_p), ("size", c_uint64), ("sha256", ctypes.c_uint8 * 32),
                ("mtime", c_int64), ("added", c_int64), ("width", c_int32), ("height", c_int32)]


class Insert(ctypes.Structure):
    _c_type_ = "patina_insert_t"
    _fields_ = [("key", c_char_p), ("size", c_uint64), ("sha256", ctypes.c_uint8 * 32), ("mtime", c_int64),
                ("width", c_int32), ("height", c_int32), ("desc", c_void_p)]


class CollectionInfo(ctypes.Structure):
    _c_type_ = "patina_collection_info_t"
    _fields_ = [("format", c_uint32), ("records", c_uint64), ("next_id", c_uint64), ("tables", c_size_t),
                ("map_size", c_uint64), ("used", c_uint64), ("page_size", c_uint32), ("max_readers", c_uint32)]


class Hit(ctypes.Structure):
    _c_type_ = "patina_hit_t"
    _fields_ = [("id", c_uint64), ("distance", c_double)]


class SearchStats(ctypes.Structure):
    _c_type_ = "patina_search_stats_t"
    _fields_ = [("gpu_tensor", c_size_t), ("gpu_filter", c_size_t), ("gpu_exact", c_size_t), ("cpu", c_size_t),
                ("chunks", c_size_t), ("host_bytes", c_size_t), ("pivot_dists", c_size_t), ("pruned", c_size_t),
                ("computed", c_size_t)]


class IdentifyOpts(ctypes.Structure):
    _c_type_ = "patina_identify_opts_t"
    _fields_ = [("k", c_size_t), ("ratio", c_double), ("scoring", c_int), ("verify", c_int),
                ("verify_top", c_size_t), ("model", c_int), ("ransac_threshold", c_double),
                ("iterations", c_int), ("shape_check", c_int), ("seed", c_uint64), ("threshold", c_double),
                ("device", c_int), ("precision", c_int), ("gpu_arena_slots", c_size_t),
                ("guided", c_int), ("guided_ratio", c_double), ("ambiguity", c_double),
                ("distinct", c_double), ("sibling_inliers", c_double), ("accept", c_int),
                ("view_candidates", c_size_t), ("first_features", c_size_t),
                ("half_view_features", c_size_t)]


class IdentifyHit(ctypes.Structure):
    _c_type_ = "patina_identify_hit_t"
    _fields_ = [("id", c_uint64), ("score", c_double), ("matches", c_uint32), ("inliers", c_uint32),
                ("verified", c_int)]


class IdentifyResult(ctypes.Structure):
    _c_type_ = "patina_identify_result_t"
    _fields_ = [("decision", c_int), ("nhits", c_size_t), ("query_features", c_uint32), ("threshold", c_double)]


class RootsiftInfo(ctypes.Structure):
    _c_type_ = "patina_rootsift_info_t"
    _fields_ = [("count", c_uint32), ("m", c_uint32), ("f16", c_int), ("qscale", c_float),
                ("downscale", c_float), ("width", c_uint32), ("height", c_uint32),
                ("orig_width", c_uint32), ("orig_height", c_uint32)]


class SignatureInfo(ctypes.Structure):
    _c_type_ = "patina_signature_info_t"
    _fields_ = [("count", c_uint32), ("k", c_uint32), ("alpha", c_double), ("form", c_int)]


class PivotOpts(ctypes.Structure):
    _c_type_ = "patina_pivot_opts_t"
    _fields_ = [("pivots", c_size_t), ("select", c_int), ("seed", c_uint64)]


# table.h: live tables
class TableOpts(ctypes.Structure):
    _c_type_ = "patina_table_opts_t"
    _fields_ = [("partition", c_uint32), ("partitions", c_uint32), ("pivots", c_int), ("need", ctypes.c_uint),
                ("create", c_int)]


class TableQuery(ctypes.Structure):
    _c_type_ = "patina_table_query_t"
    _fields_ = [("kind", c_int), ("k", c_size_t), ("radius", c_double), ("max_hits", c_size_t),
                ("device", c_int), ("bound", c_int), ("keys", c_int), ("stats", P(SearchStats))]


class TableResults(ctypes.Structure):
    """patina_table_results_t: query i's hits are hits[offsets[i] .. offsets[i+1])."""
    _c_type_ = "patina_table_results_t"
    _fields_ = [("nq", c_size_t), ("offsets", P(c_size_t)), ("hits", P(Hit)), ("keys", P(c_char_p)),
                ("rows", c_size_t), ("version", c_uint64)]


class TableFanout(ctypes.Structure):
    """patina_table_fanout_t: where the last call over several slices spent its time (seconds)."""
    _c_type_ = "patina_table_fanout_t"
    _fields_ = [("slices", c_size_t), ("total", c_double), ("slice_max", c_double), ("slice_min", c_double),
                ("start_max", c_double), ("merge", c_double)]


class Change(ctypes.Structure):
    _c_type_ = "patina_change_t"
    _fields_ = [("op", c_int), ("id", c_uint64), ("key", c_char_p), ("desc", c_void_p)]


# Every function the binding calls: name -> (result type, argument types).
# A result of c_int is a patina_status unless said otherwise.
_PROTOS = {
    # status.h, patina.h
    "patina_status_str": (c_char_p, [c_int]),
    "patina_last_error": (c_char_p, []),
    "patina_clear_error": (None, []),
    # what the library hands over as malloc'd is freed by the library itself
    # (libc's free() may not be its allocator: a sanitizer build, another C
    # runtime): Library.free
    "patina_free": (None, [c_void_p]),
    "patina_version": (c_char_p, []),
    "patina_build_info": (c_char_p, []),
    "patina_gpu_count": (c_int, []),
    "patina_gpu_describe": (c_int, [c_int, c_char_p, c_size_t]),
    "patina_cpu_count": (c_int, []),
    # image.h
    "patina_limits_init": (None, [P(Limits)]),
    "patina_decode_opts_init": (None, [P(DecodeOpts)]),
    "patina_image_decode_with": (c_int, [P(Image), P(DecodeReport), c_void_p, c_size_t, P(DecodeOpts), c_char_p]),
    "patina_image_load_with": (c_int, [P(Image), P(DecodeReport), c_char_p, P(DecodeOpts)]),
    "patina_image_release": (None, [P(Image)]),
    "patina_file_read": (c_int, [P(c_void_p), P(c_size_t), c_char_p, P(Limits)]),
    # context.h
    "patina_context_opts_init": (None, [P(ContextOpts)]),
    "patina_context_new": (c_int, [P(c_void_p), P(ContextOpts)]),
    "patina_context_free": (None, [c_void_p]),
    "patina_context_threads": (c_int, [c_void_p]),
    "patina_context_limits": (P(Limits), [c_void_p]),
    "patina_context_devices": (c_size_t, [c_void_p, P(c_int), c_size_t]),
    # descriptor.h
    "patina_family_count": (c_size_t, []),
    "patina_family_name": (c_char_p, [c_size_t]),
    "patina_family_help": (c_char_p, [c_size_t]),
    "patina_family_option_count": (c_size_t, [c_size_t]),
    "patina_family_option": (c_int, [P(OptionInfo), c_size_t, c_size_t]),
    # options.h
    "patina_option_set_name": (c_char_p, [c_int]),
    "patina_options_count": (c_size_t, [c_int]),
    "patina_options_get": (c_int, [P(OptionInfo), c_int, c_size_t]),
    "patina_options_find": (c_int, [P(OptionInfo), c_int, c_char_p]),
    "patina_options_check": (c_int, [c_int, c_char_p, c_double]),
    "patina_extractor_new": (c_int, [P(c_void_p), c_char_p]),
    "patina_extractor_free": (None, [c_void_p]),
    "patina_extractor_spec": (c_char_p, [c_void_p]),
    "patina_extractor_family": (c_char_p, [c_void_p]),
    "patina_extractor_dim": (c_size_t, [c_void_p]),
    "patina_extractor_elem": (c_int, [c_void_p]),  # patina_elem
    "patina_extractor_bytes": (c_size_t, [c_void_p]),
    "patina_extractor_distance_name": (c_char_p, [c_void_p]),
    "patina_extractor_has_device": (c_int, [c_void_p, c_int]),  # 0/1
    "patina_extractor_distance": (c_double, [c_void_p, c_void_p, c_void_p]),
    "patina_context_resolve": (c_int, [c_void_p, c_void_p, c_int, P(c_int)]),
    "patina_extract_batch": (c_int, [c_void_p, c_void_p, c_int, c_void_p, P(Image), c_size_t, P(c_int)]),
    # pipeline.h
    "patina_load_opts_init": (None, [P(LoadOpts)]),
    "patina_load_files": (c_int, [c_void_p, P(Image), P(LoadResult), P(c_size_t), P(c_char_p), c_size_t,
                                  P(LoadOpts)]),
    # store.h
    "patina_record_release": (None, [P(Record)]),
    "patina_collection_open": (c_int, [P(c_void_p), c_char_p, c_int, c_uint64]),
    "patina_collection_close": (None, [c_void_p]),
    "patina_collection_count": (c_int, [c_void_p, P(c_uint64)]),
    "patina_collection_info": (c_int, [c_void_p, P(CollectionInfo)]),
    "patina_collection_table_info": (c_int, [c_void_p, c_char_p, P(c_size_t), P(c_size_t)]),
    "patina_collection_get_by_key": (c_int, [c_void_p, c_char_p, P(Record)]),
    "patina_collection_get": (c_int, [c_void_p, c_uint64, P(Record)]),
    "patina_collection_put": (c_int, [c_void_p, c_char_p, c_size_t, P(Insert), c_size_t, P(c_uint64)]),
    "patina_collection_get_descriptor": (c_int, [c_void_p, c_char_p, c_uint64, c_void_p, c_size_t]),
    "patina_collection_remove": (c_int, [c_void_p, c_uint64]),
    "patina_collection_next": (c_int, [c_void_p, P(c_uint64), P(Record)]),
    "patina_collection_tables": (c_int, [c_void_p, P(P(c_void_p)), P(c_size_t)]),
    "patina_sha256": (None, [c_void_p, c_void_p, c_size_t]),
    "patina_collection_version": (c_int, [c_void_p, P(c_uint64)]),
    # descriptor.h: capabilities
    "patina_family_caps": (ctypes.c_uint, [c_size_t]),
    "patina_extractor_caps": (ctypes.c_uint, [c_void_p]),
    # identify.h (options of patina_table_identify)
    "patina_identify_opts_init": (None, [P(IdentifyOpts)]),
    "patina_identify_far_threshold": (c_int, [c_double, P(c_double)]),
    "patina_identify_far_threshold_table": (c_int, [c_char_p, c_double, P(c_double)]),
    "patina_identify_far_threshold_opts": (c_int, [c_char_p, P(IdentifyOpts), c_double, P(c_double)]),
    "patina_identify_far_threshold_half": (c_int, [c_char_p, P(IdentifyOpts), c_double, P(c_double)]),
    "patina_identify_decision_name": (c_char_p, [c_int]),
    # table.h: live tables (handles are c_void_p: patina_table_t *)
    "patina_key_partition": (c_uint32, [c_char_p, c_uint32]),
    "patina_table_opts_init": (None, [P(TableOpts)]),
    "patina_table_open": (c_int, [P(c_void_p), c_void_p, c_void_p, c_char_p, P(TableOpts)]),
    "patina_table_new": (c_int, [P(c_void_p), c_void_p, c_char_p, P(TableOpts)]),
    "patina_table_free": (None, [c_void_p]),
    "patina_table_spec": (c_char_p, [c_void_p]),
    "patina_table_extractor": (c_void_p, [c_void_p]),  # borrowed from the table
    "patina_table_caps": (ctypes.c_uint, [c_void_p]),
    "patina_table_size": (c_size_t, [c_void_p]),
    "patina_table_matched_rows": (c_size_t, [c_void_p]),
    "patina_table_version": (c_uint64, [c_void_p]),
    "patina_table_pivots": (c_size_t, [c_void_p]),
    "patina_table_refresh": (c_int, [c_void_p, P(c_int)]),
    "patina_table_query_init": (None, [P(TableQuery)]),
    "patina_table_results_release": (None, [P(TableResults)]),
    "patina_table_search": (c_int, [c_void_p, c_void_p, c_size_t, P(TableQuery), P(TableResults)]),
    "patina_table_search_many": (c_int, [P(c_void_p), c_size_t, c_void_p, c_size_t, P(TableQuery),
                                         P(TableResults)]),
    "patina_table_results_merge": (c_int, [P(TableResults), c_size_t, P(TableQuery), P(TableResults)]),
    "patina_table_fanout": (c_int, [c_void_p, P(TableFanout)]),
    "patina_table_warm": (c_int, [c_void_p]),
    "patina_table_query_bytes": (c_size_t, [c_void_p]),
    "patina_table_identify_extract": (c_int, [c_void_p, c_void_p, c_void_p, P(Image), c_size_t, P(c_int)]),
    "patina_table_identify_extract_half": (c_int, [c_void_p, c_void_p, c_void_p, P(Image), c_size_t, P(c_int)]),
    # keys: (nq * k) char *, malloc'd by the library (freed with patina_free): c_void_p, not c_char_p,
    # so that ctypes keeps the pointers
    "patina_table_identify": (c_int, [c_void_p, c_void_p, c_size_t, P(IdentifyOpts), P(IdentifyHit),
                                      P(IdentifyResult), P(c_void_p)]),
    # tables: (nt) table handles; keys as patina_table_identify
    # the half-size query: queries, half_queries, nq, half_features, margin, then as patina_table_identify,
    # then taken (nq bytes, may be NULL)
    "patina_table_identify_half": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_size_t, c_double,
                                           P(IdentifyOpts), P(IdentifyHit), P(IdentifyResult), P(c_void_p),
                                           c_void_p]),
    "patina_table_identify_many": (c_int, [P(c_void_p), c_size_t, c_void_p, c_size_t, P(IdentifyOpts), P(IdentifyHit),
                                           P(IdentifyResult), P(c_void_p)]),
    "patina_table_identify_pairs": (c_int, [c_void_p, c_void_p, c_uint64, P(IdentifyOpts), P(c_float), c_size_t,
                                            P(c_size_t)]),
    "patina_tables_put": (c_int, [P(c_void_p), c_size_t, P(Insert), c_size_t, P(c_void_p), P(c_uint64)]),
    "patina_tables_remove": (c_int, [P(c_void_p), c_size_t, P(c_uint64), c_size_t, P(c_size_t)]),
    "patina_table_save": (c_int, [c_void_p, P(c_size_t)]),
    "patina_pivot_opts_init": (None, [P(PivotOpts)]),
    "patina_table_build_pivots": (c_int, [c_void_p, P(PivotOpts)]),
    "patina_table_apply": (c_int, [c_void_p, P(Change), c_size_t, c_uint64, P(c_size_t)]),
    # rootsift.h, signature.h
    "patina_rootsift_info": (c_int, [P(RootsiftInfo), c_void_p, c_size_t]),
    "patina_rootsift_feature": (c_int, [P(c_float), P(c_float), c_void_p, c_size_t, c_size_t]),
    "patina_signature_info": (c_int, [P(SignatureInfo), c_void_p, c_size_t]),
    "patina_signature_centroid": (c_int, [P(c_float), c_void_p, c_size_t, c_size_t]),
}



class Library:
    """One loaded libpatina.so: its functions with their C types declared.

    ``Library(path)`` loads the file at ``path``; most programs never build
    one themselves (``patina.load`` does, and everything else uses the
    default). Attributes ``path`` and ``version`` say what was loaded."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            self._dll = ctypes.CDLL(self.path)
        except OSError as e:
            raise errors.UnavailableError(f"patina: cannot load the library '{self.path}': {e}",
                                          errors.E_UNAVAILABLE) from None
        missing = []
        for name, (res, args) in _PROTOS.items():
            try:
                fn = getattr(self._dll, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.restype = res
            fn.argtypes = args
            setattr(self, name[len("patina_"):], fn)
        if missing:
            raise errors.UnavailableError(
                f"patina: '{self.path}' lacks {len(missing)} function(s) this binding needs "
                f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}): an older libpatina?",
                errors.E_UNAVAILABLE)
        self.version_string = self.version().decode()

    def __repr__(self):
        return f"<patina.Library {self.version_string} from {self.path!r}>"

    # -------------------------------------------------------------- errors
    def error(self, status, what=None):
        """The exception for a failed call: the thread's last message (ctypes
        runs the call on this thread, so it is this call's message)."""
        msg = self.last_error()
        msg = msg.decode("utf-8", "surrogateescape") if msg else ""
        name = self.status_str(status)
        name = name.decode() if name else str(status)
        if not msg:
            msg = f"{what}: {name}" if what else name
        return errors.make_error(status, msg, name)

    def check(self, status, what=None):
        """Raises the exception of a status that is not PATINA_OK."""
        if status != errors.OK:
            raise self.error(status, what)


_default = None
_default_lock = threading.Lock()


def _candidates():
    env = os.environ.get("PATINA_LIB")
    if env:
        yield env, "PATINA_LIB"
        return
    here = os.path.dirname(os.path.abspath(__file__))
    local = sorted(glob.glob(os.path.join(here, "libpatina.so*")), key=len)
    for p in local:
        yield p, "the package directory"
    for name in ("libpatina.so.0", "libpatina.so"):
        yield name, "the system loader"
    found = ctypes.util.find_library("patina")
    if found:
        yield found, "the system loader"
    libdir = _pkg_config_libdir()
    if libdir:
        for name in ("libpatina.so.0", "libpatina.so"):
            yield os.path.join(libdir, name), "pkg-config's libdir of patina"


def _pkg_config_libdir():
    """The libdir that an installed patina.pc names, or None."""
    try:
        p = subprocess.run(["pkg-config", "--variable=libdir", "patina"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    libdir = p.stdout.decode(errors="replace").strip()
    return libdir if p.returncode == 0 and libdir else None


def load(path=None):
    """Loads libpatina.so and makes it the default library.

    With ``path``, that file (a ``Library`` is also accepted and made the
    default). Without: the ``PATINA_LIB`` environment variable, then the
    package directory, then the system loader, then the libdir of an
    installed patina.pc (pkg-config). Returns the ``Library``.
    Raises ``UnavailableError`` (saying where it looked) when none loads."""
    global _default
    if isinstance(path, Library):
        lib = path
    elif path is not None:
        lib = Library(path)
    else:
        tried = []
        lib = None
        for cand, where in _candidates():
            try:
                lib = Library(cand)
                break
            except errors.UnavailableError as e:
                tried.append(f"{cand} ({where}): {e}")
        if lib is None:
            raise errors.UnavailableError(
                "patina: libpatina.so not found; call patina.load(PATH), set PATINA_LIB=PATH, or install "
                "the library (make install) — tried:\n  " + "\n  ".join(tried), errors.E_UNAVAILABLE)
    with _default_lock:
        _default = lib
    return lib


def default():
    """The default library, loaded on first use (see ``load``)."""
    lib = _default
    if lib is None:
        with _default_lock:
            lib = _default
        if lib is None:
            lib = load()
    return lib


def resolve(library):
    """A Library from an argument: None (the default), a Library or a path."""
    if library is None:
        return default()
    if isinstance(library, Library):
        return library
    return Library(library)


def device_code(device):
    """patina_device of a name ("auto", "cpu", "gpu", "hybrid")."""
    if not isinstance(device, str) or device not in DEVICES:
        raise errors.InvalidError(f"unknown device {device!r} (auto, cpu, gpu or hybrid)", errors.E_INVALID)
    return DEVICES[device]


def encode_path(p):
    """bytes of a str / bytes / PathLike path (os.fsencode: surrogateescape)."""
    b = os.fsencode(p)
    if b"\0" in b:
        raise errors.InvalidError(f"path {p!r} holds a NUL byte", errors.E_INVALID)
    return b


def decode_key(b):
    """str of a key's bytes (os.fsdecode: bytes that are not UTF-8 become lone surrogates)."""
    return os.fsdecode(b)
