"""Patina for Python: image descriptors, similarity search and texture
identification over libpatina (ctypes; numpy arrays in and out).

    import patina
    d = patina.extract("photo.jpg", "lbp:P=8,R=1")        # 1-D numpy array
    with patina.Collection("photos.patina", create=True) as c:
        c.add("photo.jpg", "photo.jpg")                   # key, image
        for hit in c.search("query.jpg", k=5):
            print(hit.key, hit.distance)

The library is found by patina.load(path), the PATINA_LIB environment
variable, the package directory, then the system loader (see docs/python.md).
Errors raise patina.Error subclasses carrying the library's status and message.
"""

from ._lib import (CAP_CENTROIDS, CAP_CODEMAP, CAP_GPU, CAP_HYBRID, CAP_IDENTIFY, CAP_JSON, CAP_KEYPOINTS, CAP_PIVOTS,
                   CAP_SEARCH, Library, load)
from ._core import (Context, Extractor, Family, Option, RootsiftFeatures, Signature, build_info, decode,
                    extract, extract_batch, families, gpu_count, options, rootsift_features, signature_centroids, version)
from .collection import Candidate, Collection, Hit, Identification, Record, Table
from .errors import (ArgumentTypeError, BusyError, CorruptError, DecodeWarning, Error, FormatError, FullError,
                     GPUError, InternalError, InvalidError, KeyNotFoundError, LimitError, NoMemoryError,
                     NotFoundError, PatinaIOError, StoreError, UnavailableError)

__version__ = "0.1.0"

__all__ = [
    "Library", "load", "version", "build_info", "gpu_count",
    "Context", "Extractor", "Family", "Option", "families", "options",
    "CAP_SEARCH", "CAP_IDENTIFY", "CAP_PIVOTS", "CAP_GPU", "CAP_HYBRID", "CAP_CODEMAP", "CAP_JSON", "CAP_KEYPOINTS",
    "CAP_CENTROIDS",
    "decode", "extract", "extract_batch",
    "RootsiftFeatures", "Signature", "rootsift_features", "signature_centroids",
    "Collection", "Record", "Table", "Hit", "Candidate", "Identification",
    "Error", "InvalidError", "ArgumentTypeError", "NoMemoryError", "PatinaIOError", "FormatError", "CorruptError",
    "LimitError", "NotFoundError", "KeyNotFoundError", "UnavailableError", "GPUError", "StoreError", "FullError",
    "BusyError", "InternalError", "DecodeWarning",
]
