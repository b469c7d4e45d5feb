"""The ctypes structs of the binding (python/patina/_lib.py) against the C
compiler's layout of the structs they mirror: tests/abi_layout.c prints each
struct's size and member offsets (CTest passes its path in
PATINA_ABI_LAYOUT; by hand it is build/tests/abi_layout). A member added to
a header without its ctypes twin would have the library write past a
buffer Python owns (the search statistics and the pivot search options
were such cases, found by running this suite under AddressSanitizer)."""

import ctypes
import json
import os
import subprocess

import pytest

from conftest import REPO
from patina import _lib

LAYOUT = os.environ.get("PATINA_ABI_LAYOUT", os.path.join(REPO, "build", "tests", "abi_layout"))


@pytest.fixture(scope="module")
def layout():
    if not os.access(LAYOUT, os.X_OK):
        pytest.fail(f"{LAYOUT} is missing: build the tests (CTest sets PATINA_ABI_LAYOUT)")
    return json.loads(subprocess.run([LAYOUT], check=True, capture_output=True).stdout)


def mirrored():
    return [c for c in vars(_lib).values()
            if isinstance(c, type) and issubclass(c, ctypes.Structure) and c is not ctypes.Structure]


def test_every_struct_names_its_c_type():
    assert mirrored(), "no ctypes structs found"
    for cls in mirrored():
        assert getattr(cls, "_c_type_", None), f"{cls.__name__} has no _c_type_"


def test_every_printed_struct_is_mirrored(layout):
    names = {cls._c_type_ for cls in mirrored()}
    assert set(layout) == names, (sorted(set(layout) - names), sorted(names - set(layout)))


@pytest.mark.parametrize("cls", mirrored(), ids=lambda c: c.__name__)
def test_layout(layout, cls):
    c = layout[cls._c_type_]
    rename = getattr(cls, "_c_names_", {})
    py = {rename.get(name, name): getattr(cls, name).offset for name, *_ in cls._fields_}
    assert set(py) == set(c["fields"]), f"{cls.__name__}: members differ: python {sorted(set(py) - set(c['fields']))}, " \
                                        f"C {sorted(set(c['fields']) - set(py))}"
    for name, off in py.items():
        assert off == c["fields"][name], f"{cls.__name__}.{name}: offset {off} in Python, {c['fields'][name]} in C"
    assert ctypes.sizeof(cls) == c["size"], f"{cls.__name__}: {ctypes.sizeof(cls)} bytes in Python, {c['size']} in C"
