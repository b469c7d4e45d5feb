"""The options of search, identify and index are declared once, in the
library's table (include/patina/options.h): the binding's keyword defaults
and choice maps, and the bounds and defaults of the server's OpenAPI
document (src/serve/openapi.json) are checked here against that table, read
from the shared library."""

import inspect
import json
import math
import os

import pytest

import patina
from patina import collection as pcoll
from conftest import REPO


def table(kind):
    return {o.name: o for o in patina.options(kind)}


def number(o):
    """The table's default of a numeric or bool option as a Python value."""
    if o.type == "int" or o.type == "bool":
        return int(o.default)
    return float(o.default)


def test_tables():
    for kind in ("search", "identify", "index"):
        opts = patina.options(kind)
        assert opts and len({o.name for o in opts}) == len(opts)
        for o in opts:
            if o.type in ("int", "double") and o.default is not None:
                v = number(o)
                assert (v > o.min if o.min_open else v >= o.min) and v <= o.max, o
            if o.type == "enum":
                assert o.default in o.choices
    with pytest.raises(patina.InvalidError):
        patina.options("nope")
    assert table("search")["k"].max == 1000000 and table("identify")["ratio"].min_open


def defaults(fn):
    return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.default is not inspect.Parameter.empty}


def test_python_defaults_are_the_library_table():
    s = table("search")
    d = defaults(patina.Collection.search_batch)
    assert d["k"] == number(s["k"]) == defaults(patina.Collection.search)["k"]
    assert d["max_hits"] == number(s["max_hits"]) == defaults(patina.Collection.search)["max_hits"]
    assert d["device"] == s["device"].default and d["range"] is None and s["range"].default is None
    i = table("identify")
    d = defaults(patina.Collection.identify_batch)
    assert d["k"] == number(i["k"]) == defaults(patina.Collection.identify)["k"]
    for name in ("ratio", "verify_top", "ransac_threshold", "iterations", "seed"):
        assert d[name] == number(i[name]), name
        assert type(d[name]) is (float if i[name].type == "double" else int), name
    # threshold: None takes the table's calibration at far 0.01, which is the library's default threshold for
    # a table without reference views (test_collection checks both)
    assert d["threshold"] is None and d["far"] is None
    assert d["verify"] is bool(number(i["verify"])) and d["shape_check"] is bool(number(i["shape_check"]))
    for name in ("scoring", "model", "precision", "device"):
        assert d[name] == i[name].default, name
    # the binding's maps of words to enum values follow the table's order
    assert list(pcoll._SCORING) == list(i["scoring"].choices)
    assert list(pcoll._MODELS) == list(i["model"].choices)
    assert list(pcoll._PRECISION) == list(i["precision"].choices)
    assert sorted(pcoll._SCORING.values()) == list(range(len(i["scoring"].choices)))


def test_k_limit_is_the_library_s(tmp_path):
    with patina.Collection(str(tmp_path / "c.patina"), create=True) as c:
        with pytest.raises(patina.LimitError, match="search: k = 1000001 is over the limit of 1000000"):
            c.search_batch([patina.extract(tiny_image())], k=1000001)
        with pytest.raises(patina.InvalidError, match="k = 0"):
            c.search_batch([patina.extract(tiny_image())], k=0)
        with pytest.raises(patina.LimitError, match="identify: k = 1000001 is over the limit of 1000000"):
            c.identify_batch([tiny_image()], k=1000001)


def tiny_image():
    import numpy as np
    return np.full((8, 8, 3), 128, dtype=np.uint8)


# ------------------------------------------------------------------ OpenAPI
def openapi():
    with open(os.path.join(REPO, "src", "serve", "openapi.json")) as f:
        return json.load(f)


def parameter(doc, path, name):
    for p in doc["paths"][path]["post"]["parameters"]:
        if p.get("name") == name:
            return p["schema"]
    raise KeyError(f"{path}: no parameter {name}")


def same_bounds(schema, o, where):
    """The schema's minimum / exclusiveMinimum / maximum / default are the option's."""
    assert schema.get("minimum") == o.min, where
    assert bool(schema.get("exclusiveMinimum", False)) == o.min_open, where
    if math.isinf(o.max):
        assert "maximum" not in schema, where
    else:
        assert schema.get("maximum") == o.max, where
    if o.default is None:
        assert "default" not in schema, where
    else:
        assert schema.get("default") == number(o), where


def test_openapi_bounds_are_the_library_table():
    doc = openapi()
    s, i = table("search"), table("identify")
    search = "/v1/collections/{collection}/search"
    ident = "/v1/collections/{collection}/identify"
    same_bounds(parameter(doc, search, "k"), s["k"], "search ?k")
    same_bounds(doc["components"]["schemas"]["SearchRequest"]["properties"]["k"], s["k"], "SearchRequest.k")
    same_bounds(parameter(doc, search, "range"), s["range"], "search ?range")
    same_bounds(doc["components"]["schemas"]["SearchRequest"]["properties"]["range"], s["range"], "SearchRequest.range")
    for name in ("k", "ratio", "threshold"):
        same_bounds(parameter(doc, ident, name), i[name], f"identify ?{name}")
    assert parameter(doc, ident, "verify").get("default") == number(i["verify"])
