"""The binding's view of the C ABI (python/patina/_lib.py) against the C
side: its function prototypes against the declarations in include/patina
(parameter count and kinds), and its ctypes structs against the C
compiler's layout of the structs they mirror: tests/abi_layout.c prints each
struct's size and member offsets (CTest passes its path in
PATINA_ABI_LAYOUT; by hand it is build/tests/abi_layout). A member added to
a header without its ctypes twin would have the library write past a
buffer Python owns (the search statistics and the pivot search options
were such cases, found by running this suite under AddressSanitizer)."""

import ctypes
import json
import os
import re
import subprocess

import pytest

from conftest import REPO
from patina import _lib

LAYOUT = os.environ.get("PATINA_ABI_LAYOUT", os.path.join(REPO, "build", "tests", "abi_layout"))


@pytest.fixture(scope="module")
def printed():
    if not os.access(LAYOUT, os.X_OK):
        pytest.fail(f"{LAYOUT} is missing: build the tests (CTest sets PATINA_ABI_LAYOUT)")
    return json.loads(subprocess.run([LAYOUT], check=True, capture_output=True).stdout)


@pytest.fixture(scope="module")
def layout(printed):
    """{C struct name: {"size", "fields"}}."""
    return {name: v for name, v in printed.items() if not name.startswith("#")}


def test_constants(printed):
    """The enum and macro values the binding spells out (devices, element
    types, capabilities, query kinds, ...) are the headers' values."""
    c = printed["#constants"]
    assert set(c) == set(_lib.C_CONSTANTS), (sorted(set(c) - set(_lib.C_CONSTANTS)),
                                             sorted(set(_lib.C_CONSTANTS) - set(c)))
    bad = {name: (v, c[name]) for name, v in _lib.C_CONSTANTS.items() if v != c[name]}
    assert not bad, f"python value, C value: {bad}"


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


# ------------------------------------------------------------ prototypes
# Every function of _lib._PROTOS against its declaration in
# include/patina/*.h: the same number of parameters, and each parameter and
# the result of the same kind -- a pointer where C has one, else a scalar of
# the C type's size (an int where C has size_t would pass half of it).

SCALARS = {"int": 4, "unsigned": 4, "unsigned int": 4, "size_t": 8, "uint64_t": 8, "int64_t": 8, "uint32_t": 4,
           "int32_t": 4, "uint16_t": 2, "uint8_t": 1, "double": 8, "float": 4, "char": 1, "_Bool": 1, "bool": 1}


def _headers():
    text = ""
    inc = os.path.join(REPO, "include", "patina")
    for name in sorted(os.listdir(inc)):
        if name.endswith(".h"):
            with open(os.path.join(inc, name)) as f:
                text += f.read() + "\n"
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    enums = set(re.findall(r"typedef\s+enum\s*\w*\s*\{[^}]*\}\s*(\w+)\s*;", text))
    fnptrs = set(re.findall(r"typedef\s+[^;]*\(\s*\*\s*(\w+)\s*\)", text))
    decls = {}
    for m in re.finditer(r"PATINA_API\s+([^;(]*?)\b(patina_\w+)\s*\(", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        params, depth, cur = [], 0, ""
        for ch in text[m.end():i - 1]:
            if ch == "," and depth == 0:
                params.append(cur)
                cur = ""
                continue
            depth += {"(": 1, ")": -1}.get(ch, 0)
            cur += ch
        params.append(cur)
        params = [" ".join(p.split()) for p in params]
        if params == ["void"] or params == [""]:
            params = []
        decls[m.group(2)] = (" ".join(m.group(1).split()), params)
    return decls, enums, fnptrs


def _kind(c, enums, fnptrs):
    """'ptr', or the byte size of a scalar C type (a parameter name, const
    and the like dropped), or None for void."""
    if "*" in c or "[" in c or "(" in c:
        return "ptr"
    words = [w for w in c.replace("const", " ").replace("volatile", " ").split()]
    if words == ["void"]:
        return None
    if any(w in fnptrs for w in words):
        return "ptr"
    if any(w in enums for w in words):
        return 4
    for n in (2, 1):
        t = " ".join(words[:n])
        if t in SCALARS:
            return SCALARS[t]
    raise AssertionError(f"unknown C type in '{c}'")


def _pointer_parts(c):
    """(stars, base type words) of a C pointer type, the parameter name dropped."""
    c = re.sub(r"\[[^]]*\]", "*", c)
    stars = c.count("*")
    words = [w for w in re.split(r"[\s*]+", c) if w and w not in ("const", "volatile", "restrict")]
    if len(words) > 1 and words[-1] not in SCALARS and words[-1] != "char" and not words[-1].endswith("_t"):
        words = words[:-1]  # the parameter's name
    return stars, words


def _pointee_ok(t, c, enums):
    """Whether ctypes POINTER(T) t points at what the C pointer type c does:
    the same struct (its _c_type_), a scalar of the same size, or a pointer
    where C has a pointer to a pointer. c_void_p and c_char_p (opaque and
    untyped pointers) are checked as pointers only."""
    if t in (ctypes.c_void_p, ctypes.c_char_p) or not issubclass(t, ctypes._Pointer):
        return True
    target = t._type_
    stars, words = _pointer_parts(c)
    if isinstance(target, type) and issubclass(target, ctypes.Structure):
        return stars == 1 and words == [target._c_type_]
    if _ctype_kind(target) == "ptr":
        return stars >= 2
    if stars != 1:
        return False
    base = " ".join(words)
    size = 4 if any(w in enums for w in words) else SCALARS.get(base)
    return size == ctypes.sizeof(target)


def _ctype_kind(t):
    if t is None:
        return None
    if t in (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p) or issubclass(t, (ctypes._Pointer, ctypes._CFuncPtr)):
        return "ptr"
    return ctypes.sizeof(t)


def test_prototypes():
    decls, enums, fnptrs = _headers()
    assert len(decls) > 100, len(decls)
    bad = []
    for name, (res, args) in _lib._PROTOS.items():
        if name not in decls:
            bad.append(f"{name}: not declared in include/patina")
            continue
        cres, cparams = decls[name]
        if len(args) != len(cparams):
            bad.append(f"{name}: {len(args)} argument types, C has {len(cparams)} parameters")
            continue
        if _ctype_kind(res) != _kind(cres, enums, fnptrs) or (res is not None and not _pointee_ok(res, cres, enums)):
            bad.append(f"{name}: result {res} for C '{cres}'")
        for i, (a, c) in enumerate(zip(args, cparams)):
            if _ctype_kind(a) != _kind(c, enums, fnptrs) or not _pointee_ok(a, c, enums):
                bad.append(f"{name}: argument {i + 1} {a} for C '{c}'")
    assert not bad, "\n".join(bad)


def test_table_api_is_mirrored():
    """Every function of include/patina/table.h, and the capability queries,
    has its prototype in the binding's mirror (test_prototypes checks it)."""
    with open(os.path.join(REPO, "include", "patina", "table.h")) as f:
        declared = set(re.findall(r"PATINA_API\s+[^;(]*?\b(patina_\w+)\s*\(", re.sub(r"/\*.*?\*/", " ", f.read(),
                                                                                   flags=re.S)))
    assert len(declared) > 20, declared
    missing = sorted((declared | {"patina_family_caps", "patina_extractor_caps"}) - set(_lib._PROTOS))
    assert not missing, missing


def test_prototype_check_catches_a_wrong_pointee():
    """The check above is not vacuous: a query pointer where C takes the
    results, or a 32-bit count array where C has size_t, are caught."""
    decls, enums, _ = _headers()
    _, params = decls["patina_table_search"]
    assert _pointee_ok(ctypes.POINTER(_lib.TableResults), params[4], enums)
    assert not _pointee_ok(ctypes.POINTER(_lib.TableQuery), params[4], enums)
    _, params = decls["patina_tables_remove"]
    assert _pointee_ok(ctypes.POINTER(ctypes.c_size_t), params[4], enums)
    assert not _pointee_ok(ctypes.POINTER(ctypes.c_uint32), params[4], enums)
    assert _pointee_ok(ctypes.POINTER(ctypes.c_void_p), decls["patina_tables_put"][1][0], enums)
