"""Patina's errors as Python exceptions.

Every library call returns a status; a failing one becomes an exception of
the class below that matches the status, carrying the status code
(``.status``, an int equal to the C enum), its short name (``.status_name``)
and the library's message (``.message``: what and where, e.g. "decode:
truncated JPEG data in 'x.jpg'"). Arguments the binding itself refuses
(wrong dtype or shape, a missing key) raise the same classes with the
binding's message, so ``except patina.Error`` catches everything Patina
raises. Each class also derives from the matching built-in exception
(``InvalidError`` is a ``ValueError``, ``PatinaIOError`` an ``OSError``, ...).
"""

OK = 0
E_INVALID = 1
E_NOMEM = 2
E_IO = 3
E_FORMAT = 4
E_CORRUPT = 5
E_LIMIT = 6
E_NOTFOUND = 7
E_UNAVAILABLE = 8
E_GPU = 9
E_STORE = 10
E_FULL = 11
E_BUSY = 12
E_INTERNAL = 13
DONE = 14


class Error(Exception):
    """Base class: a Patina status with the library's message."""

    status = E_INTERNAL

    def __init__(self, message, status=None, status_name=None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.message = message
        self.status_name = status_name

    def __str__(self):
        return self.message


class InvalidError(Error, ValueError):
    """A bad argument or option value (PATINA_E_INVALID)."""
    status = E_INVALID


class ArgumentTypeError(InvalidError, TypeError):
    """An argument of a type the binding does not take (PATINA_E_INVALID)."""


class NoMemoryError(Error, MemoryError):
    """Host or device allocation failed (PATINA_E_NOMEM)."""
    status = E_NOMEM


class PatinaIOError(Error, OSError):
    """A read, write or open failed (PATINA_E_IO)."""
    status = E_IO


class FormatError(Error, ValueError):
    """Unknown or unsupported image or data format (PATINA_E_FORMAT)."""
    status = E_FORMAT


class CorruptError(Error, ValueError):
    """Corrupt or truncated data (PATINA_E_CORRUPT)."""
    status = E_CORRUPT


class LimitError(Error, ValueError):
    """Over a configured limit: pixels, bytes, k (PATINA_E_LIMIT)."""
    status = E_LIMIT


class NotFoundError(Error, LookupError):
    """No such record, table, family or file (PATINA_E_NOTFOUND)."""
    status = E_NOTFOUND


class KeyNotFoundError(NotFoundError, KeyError):
    """A key the collection does not hold (also a KeyError)."""

    def __str__(self):  # KeyError would quote the message
        return self.message


class UnavailableError(Error, RuntimeError):
    """A feature not built in, or no device present (PATINA_E_UNAVAILABLE)."""
    status = E_UNAVAILABLE


class GPUError(Error, RuntimeError):
    """A CUDA runtime error (PATINA_E_GPU)."""
    status = E_GPU


class StoreError(Error, RuntimeError):
    """A storage back end error (PATINA_E_STORE)."""
    status = E_STORE


class FullError(Error, OSError):
    """Disk or map full; nothing committed was lost (PATINA_E_FULL)."""
    status = E_FULL


class BusyError(Error, RuntimeError):
    """Resource locked by another writer (PATINA_E_BUSY)."""
    status = E_BUSY


class InternalError(Error, RuntimeError):
    """A bug in Patina: an invariant did not hold (PATINA_E_INTERNAL)."""
    status = E_INTERNAL


class DecodeWarning(UserWarning):
    """A decoder warning: damaged but decodable data (the pixels are partly made up)."""


_BY_STATUS = {
    E_INVALID: InvalidError,
    E_NOMEM: NoMemoryError,
    E_IO: PatinaIOError,
    E_FORMAT: FormatError,
    E_CORRUPT: CorruptError,
    E_LIMIT: LimitError,
    E_NOTFOUND: NotFoundError,
    E_UNAVAILABLE: UnavailableError,
    E_GPU: GPUError,
    E_STORE: StoreError,
    E_FULL: FullError,
    E_BUSY: BusyError,
    E_INTERNAL: InternalError,
}


def error_class(status):
    """The exception class of a status code (InternalError for unknown codes)."""
    return _BY_STATUS.get(int(status), InternalError)


def make_error(status, message, status_name=None):
    """An exception instance for a status and message."""
    return error_class(status)(message, int(status), status_name)
