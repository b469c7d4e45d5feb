#!/usr/bin/env python3
"""End-to-end tests of `patina serve` (docs/serve.md), standard library only.

Starts the server on ephemeral loopback ports with temporary collections of
synthetic PPM images, and checks every endpoint and every status code that
src/serve/openapi.json documents, each answer's body against the documented
schema (a small validator for the subset of JSON Schema the document uses),
malformed requests (bad JSON, wrong types, truncated multipart, huge headers,
slow clients, a 10 GB declared body, decompression bombs) with the server
still serving after each, auth and limits, concurrent adds/deletes/searches
(no phantom or lost records), SIGTERM (drain, exit 0) and kill -9 (nothing
answered with 2xx is lost).

usage: test_serve.py PATINA_BINARY [TEST_NAME...]   (exit 0 = pass)
"""
import http.client
import io
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
import warnings

PATINA = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/patina"
ONLY = sys.argv[2:]
TMP = os.path.realpath(tempfile.mkdtemp(prefix="patina-serve-test-"))
# The tests run in TMP, where the collections are: the key of an image that
# `patina index` stores is its path relative to the collection's root (the
# folder that holds the collection), so the relative paths written here are
# the keys too.
os.chdir(TMP)

# ------------------------------------------------------------------ images


def ppm(w, h, seed):
    """A w x h binary PPM of coloured rectangles on a gradient (corners and
    edges for SIFT, colours and textures for CEDD); the same bytes per seed."""
    rnd = random.Random(seed)
    px = bytearray(w * h * 3)
    a, b = rnd.randrange(256), rnd.randrange(256)
    for y in range(h):
        for x in range(w):
            i = 3 * (y * w + x)
            px[i] = (a + x) & 255
            px[i + 1] = (b + y) & 255
            px[i + 2] = (x * y) & 255
    for _ in range(14):
        x0, y0 = rnd.randrange(w - 8), rnd.randrange(h - 8)
        x1, y1 = min(w, x0 + rnd.randrange(6, w // 2)), min(h, y0 + rnd.randrange(6, h // 2))
        c = (rnd.randrange(256), rnd.randrange(256), rnd.randrange(256))
        for y in range(y0, y1):
            for x in range(x0, x1):
                i = 3 * (y * w + x)
                px[i:i + 3] = bytes(c)
    return b"P6\n%d %d\n255\n" % (w, h) + bytes(px)


def write_images(folder, n, seed0, w=64, h=48):
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(n):
        p = os.path.join(folder, "img%03d.ppm" % i)
        with open(p, "wb") as f:
            f.write(ppm(w, h, seed0 + i))
        paths.append(os.path.relpath(p, TMP) if p.startswith(TMP + os.sep) else p)
    return paths


# ------------------------------------------------------------ schema check

class SchemaError(Exception):
    pass


def validate(doc, schema, value, where="$"):
    """The subset of OpenAPI 3.0 schemas src/serve/openapi.json uses."""
    if "$ref" in schema:
        name = schema["$ref"].split("/")[-1]
        return validate(doc, doc["components"]["schemas"][name], value, where)
    if value is None:
        if schema.get("nullable"):
            return
        raise SchemaError("%s: null where %s is expected" % (where, schema.get("type", "a value")))
    if "oneOf" in schema:
        ok = 0
        for s in schema["oneOf"]:
            try:
                validate(doc, s, value, where)
                ok += 1
            except SchemaError:
                pass
        if ok != 1:
            raise SchemaError("%s: matches %d of oneOf" % (where, ok))
        return
    t = schema.get("type")
    checks = {"object": dict, "array": list, "string": str, "boolean": bool}
    if t in checks and not isinstance(value, checks[t]):
        raise SchemaError("%s: %r is not of type %s" % (where, value, t))
    if t == "integer" and (isinstance(value, bool) or not isinstance(value, int)):
        raise SchemaError("%s: %r is not an integer" % (where, value))
    if t == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise SchemaError("%s: %r is not a number" % (where, value))
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError("%s: %r not in %r" % (where, value, schema["enum"]))
    if "minimum" in schema and value < schema["minimum"]:
        raise SchemaError("%s: %r < minimum %r" % (where, value, schema["minimum"]))
    if "maximum" in schema and value > schema["maximum"]:
        raise SchemaError("%s: %r > maximum %r" % (where, value, schema["maximum"]))
    if "pattern" in schema and not re.search(schema["pattern"], value):
        raise SchemaError("%s: %r does not match %s" % (where, value, schema["pattern"]))
    if t == "object":
        for k in schema.get("required", []):
            if k not in value:
                raise SchemaError("%s: required property '%s' missing" % (where, k))
        for k, s in schema.get("properties", {}).items():
            if k in value:
                validate(doc, s, value[k], where + "." + k)
    if t == "array":
        if "minItems" in schema and len(value) < schema["minItems"]:
            raise SchemaError("%s: fewer than %d items" % (where, schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaError("%s: more than %d items" % (where, schema["maxItems"]))
        for i, v in enumerate(value):
            validate(doc, schema.get("items", {}), v, "%s[%d]" % (where, i))


# ------------------------------------------------------------------ server

OPENAPI = None
SEEN = set()          # (template, method, status) answered and checked
TEMPLATES = []        # (regex, template)


def load_openapi(doc):
    global OPENAPI
    OPENAPI = doc
    for tpl in doc["paths"]:
        rx = "^" + re.sub(r"\\\{key\\\}", ".+", re.sub(r"\\\{(collection|id)\\\}", "[^/]+", re.escape(tpl))) + "$"
        TEMPLATES.append((re.compile(rx), tpl))


def template_of(path):
    path = path.split("?")[0]
    for rx, tpl in TEMPLATES:
        if rx.match(path):
            return tpl
    if not path.startswith("/v1/") and path not in ("/healthz", "/readyz", "/metrics", "/openapi.json"):
        return "/"  # static files
    return None


class Server:
    def __init__(self, colls, *extra, env=None, tls=None):
        self.colls = colls
        self.args = [PATINA, "serve", *colls, "--listen", "127.0.0.1:0", *extra]
        self.log = []
        self.tls = tls  # an ssl.SSLContext trusting the server's certificate: HTTPS
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
        self.port = self.token = None
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stderr.readline().decode("utf-8", "replace")
            if not line:
                raise RuntimeError("patina serve exited: %s" % "".join(self.log))
            self.log.append(line)
            m = re.search(r"listening on https?://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            m = re.search(r"Bearer \.\.\.\): (\S+)", line)
            if m:
                self.token = m.group(1)
            if "batching window" in line:
                break
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line.decode("utf-8", "replace"))

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def stop_ok(self):
        """SIGTERM, then the exit status must be 0; a failure says which
        status (a negative one is the signal that killed it) and shows the
        server's last lines."""
        rc = self.stop()
        time.sleep(0.05)  # the drain thread takes the last lines
        expect(rc == 0, "exit status %d; the server's last lines:\n%s" % (rc, "".join(self.log[-30:])))

    def request(self, method, path, body=None, headers=None, token=False, conn=None, check=True):
        h = dict(headers or {})
        if token:
            h["Authorization"] = "Bearer " + (self.token if token is True else token)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        c = conn or (http.client.HTTPSConnection("127.0.0.1", self.port, timeout=60, context=self.tls) if self.tls
                     else http.client.HTTPConnection("127.0.0.1", self.port, timeout=60))
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        if not conn:
            c.close()
        res = Resp(r.status, dict((k.lower(), v) for k, v in r.getheaders()), data)
        if check:
            check_doc(method, path, res)
        return res

    def over_limit(self, method, path, size, ctype, token=False):
        """Declares a body of `size` bytes and sends none of it: the answer
        must come at once (a client sending the body would see the
        connection closed after the answer)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        h = "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n" % (method, path, ctype, size)
        if token:
            h += "Authorization: Bearer %s\r\n" % self.token
        s.sendall((h + "\r\n").encode())
        r = http.client.HTTPResponse(s)
        r.begin()
        res = Resp(r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read())
        s.close()
        check_doc(method, path, res)
        expect(res.status == 413, "%s %s with %d bytes: %d" % (method, path, size, res.status))

    def json(self, method, path, body=None, status=200, **kw):
        r = self.request(method, path, body, **kw)
        if r.status != status:
            raise AssertionError("%s %s: %d (wanted %d): %s" % (method, path, r.status, status, r.data[:500]))
        return r.obj()


class Resp:
    def __init__(self, status, headers, data):
        self.status, self.headers, self.data = status, headers, data

    def obj(self):
        return json.loads(self.data)


def check_doc(method, path, res):
    """The answer against the operation's documented response."""
    tpl = template_of(path)
    if tpl is None:
        return
    ops = OPENAPI["paths"][tpl]
    m = method.lower()
    if m == "head" or m not in ops:
        return
    resp = ops[m]["responses"].get(str(res.status))
    if resp is None:
        if res.status in (405, 503, 500):
            if res.status == 500:
                raise AssertionError("%s %s: 500: %s" % (method, path, res.data[:300]))
            return
        raise AssertionError("%s %s answered %d, which the OpenAPI document does not list: %s"
                             % (method, path, res.status, res.data[:300]))
    if "content" not in resp:  # documented without a body (304)
        if res.data:
            raise AssertionError("%s %s %d: a body where none is documented: %r" % (method, path, res.status, res.data[:100]))
        SEEN.add((tpl, m, res.status))
        return
    ctype = res.headers.get("content-type", "")
    base = ctype.split(";")[0].strip()
    media = resp["content"].get(base)
    if media is None:
        raise AssertionError("%s %s %d: Content-Type %s, documented %s"
                             % (method, path, res.status, ctype, ", ".join(resp["content"])))
    if base.endswith("json"):
        validate(OPENAPI, media["schema"], json.loads(res.data), "%s %s %d" % (method, tpl, res.status))
    SEEN.add((tpl, m, res.status))


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def multipart(fields, files):
    """fields: {name: str}, files: {name: (filename, bytes, ctype)} -> (body, content type)."""
    b = "----patina-test-%d" % random.randrange(1 << 30)
    out = io.BytesIO()
    for k, v in fields.items():
        vs = v if isinstance(v, list) else [v]
        for one in vs:
            out.write(b"--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (b.encode(), k.encode(), one.encode()))
    for k, (fn, data, ct) in files.items():
        out.write(b"--%s\r\nContent-Disposition: form-data; name=\"%s\"; filename=\"%s\"\r\nContent-Type: %s\r\n\r\n"
                  % (b.encode(), k.encode(), fn.encode(), ct.encode()))
        out.write(data + b"\r\n")
    out.write(b"--%s--\r\n" % b.encode())
    return out.getvalue(), "multipart/form-data; boundary=%s" % b


def raw(port, data, read=True, timeout=10):
    """Sends raw bytes, returns the status line's code (or None when the
    server closed without answering)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        if not read:
            return s
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", buf)
        return int(m.group(1)) if m else None
    except (ConnectionResetError, BrokenPipeError):
        return None
    finally:
        if read:
            s.close()


def index(coll, paths, family="cedd"):
    subprocess.run([PATINA, "index", coll, *paths, "-f", family, "-q"], check=True)


# ------------------------------------------------------------------- setup

IMG = write_images(os.path.join(TMP, "imgs"), 24, 1000)
index(os.path.join(TMP, "photos"), IMG)
REF = write_images(os.path.join(TMP, "refs"), 6, 5000, 160, 120)
index(os.path.join(TMP, "refs.patina"), REF, "rootsift")
IMPORT = os.path.join(TMP, "import")
write_images(os.path.join(IMPORT, "batch"), 12, 2000)
os.makedirs(os.path.join(TMP, "outside"), exist_ok=True)

MAIN = Server([os.path.join(TMP, "photos"), os.path.join(TMP, "refs.patina"), os.path.join(TMP, "empty")],
              "--max-body", "2M", "--max-tar", "4M", "--max-pixels", "1000000", "--max-k", "100",
              "--max-range-hits", "5", "--timeout", "2", "--request-timeout", "3", "--import-dir", IMPORT,
              "--content-dir", os.path.join(TMP, "imgs"), "--create", "-q")  # --create: "empty"
load_openapi(MAIN.json("GET", "/openapi.json"))
MAIN.json("GET", "/openapi.json")  # checked, now that the document is known
KEY0 = IMG[0]  # "imgs/img000.ppm": the key is the path relative to the root, TMP

# ------------------------------------------------------------------- tests


def test_basics():
    s = MAIN
    expect(s.json("GET", "/healthz")["status"] == "ok", "healthz")
    expect(s.json("GET", "/readyz")["collections"] == 3, "readyz")
    colls = s.json("GET", "/v1/collections")["collections"]
    expect([c["name"] for c in colls] == ["photos", "refs.patina", "empty"], colls)
    info = s.json("GET", "/v1/collections/photos")
    expect(info["records"] == 24 and info["tables"][0]["spec"] == "cedd:compact=0", info)
    s.json("GET", "/v1/collections/nope", status=404)
    m = s.request("GET", "/metrics")
    expect(m.status == 200 and b"patina_http_requests_total" in m.data and b"patina_collection_records" in m.data
           and b"process_resident_memory_bytes" in m.data and b"_bucket{" in m.data, m.data[:300])
    r = s.request("GET", "/")
    expect(r.status == 200 and b"<html" in r.data, "index.html")
    s.json("GET", "/nope.html", status=404)
    s.json("GET", "/v1/nothing", status=404, check=False)
    expect(s.request("DELETE", "/v1/collections", check=False).status == 405, "405")
    expect(s.request("GET", "/../../etc/passwd", check=False).status == 404, "traversal")


def test_images():
    s = MAIN
    img = ppm(40, 30, 77)
    body, ct = multipart({"key": "up/one.ppm"}, {"image": ("one.ppm", img, "image/x-portable-pixmap")})
    rec = s.json("POST", "/v1/collections/photos/images", body, status=201, headers={"Content-Type": ct}, token=True)
    expect(rec["key"] == "up/one.ppm" and rec["width"] == 40 and rec["created"] is True, rec)
    s.json("POST", "/v1/collections/photos/images", body, status=409, headers={"Content-Type": ct}, token=True)
    s.json("POST", "/v1/collections/photos/images", body, status=401, headers={"Content-Type": ct})
    s.json("POST", "/v1/collections/photos/images", body, status=401, headers={"Content-Type": ct}, token="x" * 48)
    s.json("POST", "/v1/collections/nope/images", body, status=404, headers={"Content-Type": ct}, token=True)
    b2, ct2 = multipart({}, {"image": ("a.ppm", img, "image/x-portable-pixmap")})
    s.json("POST", "/v1/collections/photos/images", b2, status=400, headers={"Content-Type": ct2}, token=True)
    s.json("POST", "/v1/collections/photos/images", body[:len(body) // 2], status=400, headers={"Content-Type": ct}, token=True)
    s.json("POST", "/v1/collections/photos/images?key=t.txt", b"hello", status=415, headers={"Content-Type": "text/plain"}, token=True)
    s.json("POST", "/v1/collections/photos/images?key=t.bin", b"hello, not an image", status=415,
           headers={"Content-Type": "application/octet-stream"}, token=True)
    s.json("POST", "/v1/collections/photos/images?key=cut.ppm", img[:100], status=422,
           headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
    s.json("POST", "/v1/collections/photos/images?key=bomb.ppm", b"P6\n100000 100000\n255\n" + b"\0" * 64, status=413,
           headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
    s.over_limit("POST", "/v1/collections/photos/images?key=big.ppm", 2 * 1024 * 1024 + 1, "image/x-portable-pixmap", token=True)
    s.over_limit("PUT", "/v1/collections/photos/images/big.ppm", 2 * 1024 * 1024 + 1, "image/x-portable-pixmap", token=True)
    s.json("POST", "/v1/collections/photos/images?key=f.ppm&family=nosuch", img, status=422,
           headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
    # PUT: add, replace (keys may hold '/' and escaped bytes)
    path = "/v1/collections/photos/images/put/two%20words.ppm"
    rec = s.json("PUT", path, img, status=201, headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
    expect(rec["key"] == "put/two words.ppm", rec)
    rec2 = s.json("PUT", path, ppm(40, 30, 78), status=200, headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
    expect(rec2["id"] == rec["id"] and rec2["sha256"] != rec["sha256"] and rec2["created"] is False, rec2)
    s.json("PUT", path, img, status=401, headers={"Content-Type": "image/x-portable-pixmap"})
    s.json("PUT", path, b"text", status=415, headers={"Content-Type": "text/plain"}, token=True)
    s.json("PUT", path, img[:60], status=422, headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
    s.json("PUT", path, b"P6\n5000 5000\n255\n", status=413, headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
    got = s.json("GET", path)
    expect(got["sha256"] == rec2["sha256"] and got["tables"] == ["cedd:compact=0"], got)
    s.json("GET", "/v1/collections/photos/images/no/such", status=404)
    # the new image is searchable at once, and gone at once after DELETE
    hits = s.json("POST", "/v1/collections/photos/search", {"key": "put/two words.ppm", "k": 1})["hits"]
    expect(hits[0]["key"] == "put/two words.ppm" and hits[0]["distance"] == 0, hits)
    s.json("DELETE", path, status=401)
    d = s.json("DELETE", path, status=200, token=True)
    expect(d["deleted"] and d["id"] == rec["id"], d)
    s.json("DELETE", path, status=404, token=True)
    hits = s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "k": 100})["hits"]
    expect(all(h["key"] != "put/two words.ppm" for h in hits), "deleted image still found")
    s.json("DELETE", "/v1/collections/photos/images/up/one.ppm", status=200, token=True)
    # an empty collection takes a first image (cedd by default)
    s.json("PUT", "/v1/collections/empty/images/first.ppm", img, status=201,
           headers={"Content-Type": "image/x-portable-pixmap"}, token=True)


def test_search():
    s = MAIN
    r = s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "k": 3})
    expect(r["hits"][0]["key"] == KEY0 and r["hits"][0]["distance"] == 0 and len(r["hits"]) == 3, r)
    expect([h["rank"] for h in r["hits"]] == [1, 2, 3] and r["rows"] >= 24, r)
    expect(all(r["hits"][i]["distance"] <= r["hits"][i + 1]["distance"] for i in range(2)), "order")
    r2 = s.json("POST", "/v1/collections/photos/search", {"id": r["hits"][0]["id"], "k": 3, "family": "cedd"})
    expect(r2["hits"] == r["hits"] and r2["query"] == "id", r2)
    # by image: raw and multipart, the same hits as by key
    with open(KEY0, "rb") as f:
        data = f.read()
    r3 = s.json("POST", "/v1/collections/photos/search?k=3", data, headers={"Content-Type": "image/x-portable-pixmap"})
    expect(r3["hits"] == r["hits"], r3)
    body, ct = multipart({"k": "3"}, {"image": ("q.ppm", data, "image/x-portable-pixmap")})
    r4 = s.json("POST", "/v1/collections/photos/search", body, headers={"Content-Type": ct})
    expect(r4["hits"] == r["hits"], r4)
    # by descriptor: a flat one; k > rows gives every row
    r5 = s.json("POST", "/v1/collections/photos/search", {"descriptor": [0] * 144, "k": 100})
    expect(len(r5["hits"]) == r5["rows"], r5)
    # range: cut at --max-range-hits 5
    r6 = s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "range": 100})
    expect(len(r6["hits"]) == 5 and r6["truncated"] is True, r6)
    r7 = s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "range": 0})
    expect(r7["truncated"] is False and r7["hits"][0]["key"] == KEY0, r7)
    # malformed and unanswerable
    for bad in [b"{", b"[1,2]", b'{"key": 5}', b'{"key": "x", "k": "3"}', b'{"key": "x", "k": 3, "range": 1}',
                b'{"k": 3}', b'{"key": "x", "k": 0}', b'{"key": "x", "k": -1}', b'{"descriptor": "abc"}',
                b'{"key": "x", "key": "y"}', b'{"descriptor": [1, "a"]}']:
        s.json("POST", "/v1/collections/photos/search", bad, status=400, headers={"Content-Type": "application/json"})
    s.json("POST", "/v1/collections/photos/search", {"key": "no/such", "k": 3}, status=404)
    s.json("POST", "/v1/collections/nope/search", {"key": "x", "k": 3}, status=404)
    s.json("POST", "/v1/collections/photos/search", {"descriptor": [0] * 10}, status=422)
    s.json("POST", "/v1/collections/photos/search", {"descriptor": [300] * 144}, status=422)
    s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "family": "lbp"}, status=422)
    s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "family": "nosuch"}, status=422)
    s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "k": 101}, status=422)
    # the library's limit and message (include/patina/options.h), before this server's --max-k
    p = s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "k": 1000001}, status=422)
    expect(p["detail"] == "search: k = 1000001 is over the limit of 1000000", p)
    s.json("POST", "/v1/collections/photos/search", b"k=3", status=415, headers={"Content-Type": "text/plain"})
    s.json("POST", "/v1/collections/photos/search?k=3", b"P6\n90000 90000\n255\n", status=413,
           headers={"Content-Type": "image/x-portable-pixmap"})
    s.over_limit("POST", "/v1/collections/photos/search", 3 * 1024 * 1024, "image/x-portable-pixmap")


def test_signature_pivots():
    """A signature table with a stored pivot table (patina index --pivots)
    is searched through it: the same hits, bit for bit, as a collection of
    the same images without one (the scan); the pivot metrics move; the
    server's adds and deletes keep it current."""
    spec = "signature:k=16,samples=500"
    piv, scan = os.path.join(TMP, "sigpiv"), os.path.join(TMP, "sigscan")
    subprocess.run([PATINA, "index", piv, *IMG, "-f", spec, "--pivots", "4", "-q"], check=True)
    subprocess.run([PATINA, "index", scan, *IMG, "-f", spec, "-q"], check=True)
    srv = Server([piv, scan], "-q")

    def same(query, **extra):
        a = srv.json("POST", "/v1/collections/sigpiv/search", dict(query, **extra))
        b = srv.json("POST", "/v1/collections/sigscan/search", dict(query, **extra))
        expect([(h["key"], h["distance"]) for h in a["hits"]] == [(h["key"], h["distance"]) for h in b["hits"]],
               (query, extra, a, b))
        return a

    def pivot_rows():
        m = srv.request("GET", "/metrics").data.decode()
        return {o: int(v) for o, v in re.findall(r'patina_search_pivot_rows_total\{outcome="(\w+)"\} (\d+)', m)}
    try:
        for key in IMG[:6]:
            r = same({"key": key}, k=5)
            expect(r["hits"][0]["key"] == key and r["hits"][0]["distance"] == 0 and r["rows"] == len(IMG), r)
            same({"key": key}, range=r["hits"][2]["distance"])
        rows = pivot_rows()
        expect(rows.get("computed", 0) > 0 and rows.get("pruned", 0) > 0, rows)
        # writes through the server: the pivot table follows (the new image is its own nearest)
        img = ppm(64, 48, 777)
        hdr = {"Content-Type": "image/x-portable-pixmap"}
        for c in ("sigpiv", "sigscan"):
            expect(srv.request("PUT", "/v1/collections/%s/images/new" % c, img, headers=hdr, token=True).status == 201,
                   "put")
        r = same({"key": "new"}, k=3)
        expect(r["hits"][0]["key"] == "new" and r["rows"] == len(IMG) + 1, r)
        for c in ("sigpiv", "sigscan"):
            srv.json("DELETE", "/v1/collections/%s/images/%s" % (c, IMG[1]), token=True)
        r = same({"key": IMG[0]}, k=len(IMG) + 5)
        expect(IMG[1] not in [h["key"] for h in r["hits"]] and r["rows"] == len(IMG), r)
        expect(pivot_rows()["computed"] > rows["computed"], "the pivot table served after the writes")
    finally:
        srv.stop_ok()


def test_damaged_pivots():
    """A stored pivot table that cannot be read (its header zeroed in the
    collection's file) is logged and the table is searched without it: the
    scan's hits."""
    spec = "signature:k=16,samples=500"
    coll, scan = os.path.join(TMP, "sigdamaged"), os.path.join(TMP, "sigdamscan")
    subprocess.run([PATINA, "index", coll, *IMG[:8], "-f", spec, "--pivots", "2", "-q"], check=True)
    subprocess.run([PATINA, "index", scan, *IMG[:8], "-f", spec, "-q"], check=True)
    data = os.path.join(coll, "data.mdb")
    with open(data, "r+b") as f:
        b = f.read()
        at = b.find(b"PTNAPIV1")
        expect(at >= 0 and b.find(b"PTNAPIV1", at + 1) < 0, "one pivot table header in %s" % data)
        f.seek(at)
        f.write(b"\0" * 8)
    srv = Server([coll, scan], "-q")
    try:
        for key in IMG[:3]:
            a = srv.json("POST", "/v1/collections/sigdamaged/search", {"key": key, "k": 4})
            b = srv.json("POST", "/v1/collections/sigdamscan/search", {"key": key, "k": 4})
            expect(a["hits"][0]["key"] == key and a["rows"] == 8, a)
            expect([(h["key"], h["distance"]) for h in a["hits"]] == [(h["key"], h["distance"]) for h in b["hits"]],
                   (a, b))
        time.sleep(0.2)
        expect(sum("its pivot table is not used" in line for line in srv.log) == 1, srv.log[-5:])
    finally:
        srv.stop_ok()


def test_tables_follow_writes():
    """A collection with two searchable tables: a search must name one (the
    detail lists both); a PUT that replaces an image's content for one table
    drops the image from the other table's answers at once (its old
    descriptor describes content that is gone), and a write to the
    identification table is identified at once."""
    coll = os.path.join(TMP, "twofam")
    index(coll, IMG[:10])
    index(coll, IMG[:10], "lbp")
    refs = os.path.join(TMP, "refs2")
    index(refs, REF[:3], "rootsift")
    srv = Server([coll, refs], "-q")
    hdr = {"Content-Type": "image/x-portable-pixmap"}
    try:
        p = srv.json("POST", "/v1/collections/twofam/search", {"key": IMG[0], "k": 3}, status=422)
        expect("cedd" in p["detail"] and "lbp" in p["detail"], p)
        lbp = srv.json("POST", "/v1/collections/twofam/search", {"key": IMG[4], "k": 20, "family": "lbp"})
        expect(lbp["hits"][0]["key"] == IMG[4] and lbp["rows"] == 10, lbp)  # the lbp table is loaded now
        new = ppm(64, 48, 4242)
        r = srv.request("PUT", "/v1/collections/twofam/images/" + IMG[4] + "?family=cedd", new, headers=hdr, token=True)
        expect(r.status == 200, r.data)
        rec = srv.json("GET", "/v1/collections/twofam/images/" + IMG[4])
        expect([t.split(":")[0] for t in rec["tables"]] == ["cedd"], rec)
        lbp = srv.json("POST", "/v1/collections/twofam/search", {"key": IMG[5], "k": 20, "family": "lbp"})
        expect(IMG[4] not in [h["key"] for h in lbp["hits"]] and lbp["rows"] == 9, lbp)
        cedd = srv.json("POST", "/v1/collections/twofam/search", {"key": IMG[4], "k": 20, "family": "cedd"})
        expect(cedd["hits"][0]["key"] == IMG[4] and cedd["hits"][0]["distance"] == 0 and cedd["rows"] == 10, cedd)
        # identification: a new reference is found at once, and gone at once after DELETE
        q = ppm(160, 120, 5999)
        srv.json("POST", "/v1/collections/refs2/identify?k=1&verify=0", q, headers=hdr)  # loaded
        r = srv.request("PUT", "/v1/collections/refs2/images/newref", q, headers=hdr, token=True)
        expect(r.status == 201, r.data)
        got = srv.json("POST", "/v1/collections/refs2/identify?k=1", q, headers=hdr)
        expect(got["hits"][0]["key"] == "newref" and got["decision"] == "match", got)
        srv.json("DELETE", "/v1/collections/refs2/images/newref", token=True)
        got = srv.json("POST", "/v1/collections/refs2/identify?k=3", q, headers=hdr)
        expect("newref" not in [h["key"] for h in got["hits"]], got)
    finally:
        srv.stop_ok()


def test_search_queue_full():
    """--max-queue 1 and a 300 ms batching window: a second search while
    the first waits in the batch gets 429."""
    srv = Server([os.path.join(TMP, "photos")], "--max-queue", "1", "--batch-window", "300000", "-q")
    try:
        out = []

        def one():
            out.append(srv.request("POST", "/v1/collections/photos/search", {"key": KEY0, "k": 2}).status)
        ts = [threading.Thread(target=one) for _ in range(4)]
        for t in ts:
            t.start()
            time.sleep(0.02)
        for t in ts:
            t.join()
        expect(sorted(out)[0] == 200 and 429 in out, out)
    finally:
        srv.stop_ok()


def test_identify():
    s = MAIN
    with open(REF[2], "rb") as f:
        q = f.read()
    r = s.json("POST", "/v1/collections/refs.patina/identify?k=3", q, headers={"Content-Type": "image/x-portable-pixmap"})
    expect(r["hits"] and r["hits"][0]["key"] == REF[2] and r["features"] > 0, r)
    expect(r["decision"] == "match", r)
    # the threshold the decision was judged against: the library's default, or the one asked for
    expect(r["threshold"] == 3, r)  # the significance's calibration (FAR 1%, no reference views)
    ri = s.json("POST", "/v1/collections/refs.patina/identify?k=3&accept=inliers", q,
                headers={"Content-Type": "image/x-portable-pixmap"})
    expect(ri["threshold"] == 13 and ri["hits"][0]["score"] == ri["hits"][0]["inliers"], ri)  # the count's
    expect(r["hits"][0]["score"] > ri["hits"][0]["score"], (r, ri))
    p = s.json("POST", "/v1/collections/refs.patina/identify?accept=count", q, status=400,
               headers={"Content-Type": "image/x-portable-pixmap"})
    expect("accept" in p["detail"], p)
    r4 = s.json("POST", "/v1/collections/refs.patina/identify?k=1&threshold=100000", q,
                headers={"Content-Type": "image/x-portable-pixmap"})
    expect(r4["threshold"] == 100000 and r4["decision"] == "unknown" and r4["hits"][0]["score"] < 100000, r4)
    # far: the threshold calibrated for that false-accept rate (0.001: significance 9), not with threshold
    r5 = s.json("POST", "/v1/collections/refs.patina/identify?k=3&far=0.001", q,
                headers={"Content-Type": "image/x-portable-pixmap"})
    expect(r5["threshold"] == 9 and r5["decision"] in ("match", "ambiguous", "unknown"), r5)
    expect(r5["decision"] == ("unknown" if r5["hits"][0]["score"] < 9 else
                              "ambiguous" if len(r5["hits"]) > 1 and r5["hits"][1]["verified"] and
                              r5["hits"][1]["score"] >= 9 and
                              r5["hits"][1]["score"] >= 0.5 * r5["hits"][0]["score"] else "match"), r5)
    # ambiguity: the margin of "ambiguous" (0: a verified rank 2 at the threshold is enough); [0, 1]
    r6 = s.json("POST", "/v1/collections/refs.patina/identify?k=3&threshold=0&ambiguity=0", q,
                headers={"Content-Type": "image/x-portable-pixmap"})
    expect(r6["decision"] == ("ambiguous" if len(r6["hits"]) > 1 and r6["hits"][1]["verified"] else "match"), r6)
    p = s.json("POST", "/v1/collections/refs.patina/identify?ambiguity=2", q, status=400,
               headers={"Content-Type": "image/x-portable-pixmap"})
    expect("ambiguity" in p["detail"], p)
    # distinct: a margin rank 1 meets changes nothing; one above its own score makes it unknown
    r7 = s.json("POST", "/v1/collections/refs.patina/identify?k=3&accept=inliers&threshold=4&distinct=3&sibling_inliers=13", q,
                headers={"Content-Type": "image/x-portable-pixmap"})
    expect(r7["decision"] in ("match", "ambiguous") and r7["hits"][0]["key"] == REF[2], r7)
    r8 = s.json("POST", "/v1/collections/refs.patina/identify?k=3&accept=inliers&threshold=4&distinct=%d" %
                (r7["hits"][0]["score"] + 1), q, headers={"Content-Type": "image/x-portable-pixmap"})
    expect(r8["decision"] == "unknown" and r8["hits"][0]["key"] == REF[2], r8)
    for bad in ("distinct=-1", "sibling_inliers=0"):
        p = s.json("POST", "/v1/collections/refs.patina/identify?" + bad, q, status=400,
                   headers={"Content-Type": "image/x-portable-pixmap"})
        expect(bad.split("=")[0] in p["detail"], p)
    p = s.json("POST", "/v1/collections/refs.patina/identify?far=0.01&threshold=5", q, status=400,
               headers={"Content-Type": "image/x-portable-pixmap"})
    expect("both set the acceptance threshold" in p["detail"], p)
    p = s.json("POST", "/v1/collections/refs.patina/identify?far=0.0001", q, status=400,
               headers={"Content-Type": "image/x-portable-pixmap"})
    expect("far = 0.0001 is outside" in p["detail"], p)
    # far on a table with reference views: that table's own calibration (views=2;
    # patina_identify_far_threshold_opts), as `patina identify --far` takes it
    refsv = os.path.join(TMP, "refsv.patina")
    index(refsv, REF[:3], "rootsift:views=2")
    srv = Server([refsv], "-q")
    try:
        rv = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3&far=0.01", q,
                      headers={"Content-Type": "image/x-portable-pixmap"})
        expect(rv["threshold"] == 2.5 and rv["hits"] and rv["hits"][0]["key"] == REF[2], rv)
        rv = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3", q,
                      headers={"Content-Type": "image/x-portable-pixmap"})
        expect(rv["threshold"] == 2.5, rv)  # the default: the table's far 0.01, as `patina identify`
        rv = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3&far=0.001", q,
                      headers={"Content-Type": "image/x-portable-pixmap"})
        expect(rv["threshold"] == 19, rv)
        rv = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3&far=0.001&accept=inliers", q,
                      headers={"Content-Type": "image/x-portable-pixmap"})
        expect(rv["threshold"] == 65, rv)  # counted in inliers: that rule's table
        # the view pass (view_candidates): over every item it is the answer of every row; bounded by --max-k
        full = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3", q,
                        headers={"Content-Type": "image/x-portable-pixmap"})
        rv = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3&view_candidates=3", q,
                      headers={"Content-Type": "image/x-portable-pixmap"})
        expect([(h["key"], h["matches"], h["inliers"]) for h in rv["hits"]] ==
               [(h["key"], h["matches"], h["inliers"]) for h in full["hits"]], (rv, full))
        for bad, status in (("-1", 400), ("5000", 422)):  # not a count; over --max-k
            p = srv.json("POST", "/v1/collections/refsv.patina/identify?view_candidates=" + bad, q, status=status,
                         headers={"Content-Type": "image/x-portable-pixmap"})
            expect("view_candidates" in p["detail"], p)
        # the first pass's features: with every item a candidate (k 3 of 2 items) and F at least the
        # query's features, the answer of one pass; out of bounds is a 400
        rv = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3&first_features=16384", q,
                      headers={"Content-Type": "image/x-portable-pixmap"})
        expect([(h["key"], h["matches"], h["inliers"]) for h in rv["hits"]] ==
               [(h["key"], h["matches"], h["inliers"]) for h in full["hits"]], (rv, full))
        # F = 8: the items with a match among the query's 8 strongest features are the candidates, matched
        # again with all 45 (an item with none is not one: a prefix of the full answer here)
        rv = srv.json("POST", "/v1/collections/refsv.patina/identify?k=3&first_features=8", q,
                      headers={"Content-Type": "image/x-portable-pixmap"})
        got = [(h["key"], h["matches"], h["inliers"]) for h in rv["hits"]]
        expect(got and len(got) < len(full["hits"]) and
               got == [(h["key"], h["matches"], h["inliers"]) for h in full["hits"]][:len(got)], (rv, full))
        for bad in ("-1", "16385"):
            p = srv.json("POST", "/v1/collections/refsv.patina/identify?first_features=" + bad, q, status=400,
                         headers={"Content-Type": "image/x-portable-pixmap"})
            expect("first_features" in p["detail"], p)
        # the half-size view in the view pass: refsv's views (2) hold none, a 422 that says so; out of
        # bounds a 400
        p = srv.json("POST", "/v1/collections/refsv.patina/identify?view_candidates=1&half_view_features=8", q,
                     status=422, headers={"Content-Type": "image/x-portable-pixmap"})
        expect("half-size view" in p["detail"], p)
        p = srv.json("POST", "/v1/collections/refsv.patina/identify?half_view_features=16385", q, status=400,
                     headers={"Content-Type": "image/x-portable-pixmap"})
        expect("half_view_features" in p["detail"], p)
    finally:
        srv.stop_ok()
    # verified candidates carry their inlier pairs (at most 200), inside both images
    for h in r["hits"]:
        expect(h["verified"] and len(h["pairs"]) == min(h["inliers"], 200), h)
    top = r["hits"][0]
    expect(top["inliers"] > 0 and all(0 <= qx <= 160 and 0 <= qy <= 120 and 0 <= rx <= 160 and 0 <= ry <= 120
                                      for qx, qy, rx, ry in top["pairs"]), top["pairs"][:5])
    # the query is the reference itself: its inliers map points onto themselves
    expect(sum(abs(qx - rx) + abs(qy - ry) < 3 for qx, qy, rx, ry in top["pairs"]) >= 0.9 * len(top["pairs"]),
           top["pairs"][:5])
    r3 = s.json("POST", "/v1/collections/refs.patina/identify?k=1&pairs=3", q,
                headers={"Content-Type": "image/x-portable-pixmap"})
    expect(len(r3["hits"][0]["pairs"]) == min(3, r3["hits"][0]["inliers"]), r3)
    body, ct = multipart({"k": "2", "verify": "0"}, {"image": ("q.ppm", q, "image/x-portable-pixmap")})
    r2 = s.json("POST", "/v1/collections/refs.patina/identify", body, headers={"Content-Type": ct})
    expect(r2["hits"][0]["key"] == REF[2] and not r2["hits"][0]["verified"] and "pairs" not in r2["hits"][0], r2)
    s.json("POST", "/v1/collections/photos/identify", q, status=422, headers={"Content-Type": "image/x-portable-pixmap"})
    s.json("POST", "/v1/collections/refs.patina/identify", b"", status=400, headers={"Content-Type": "image/x-portable-pixmap"})
    s.json("POST", "/v1/collections/refs.patina/identify?k=x", q, status=400, headers={"Content-Type": "image/x-portable-pixmap"})
    # the library's bounds and messages (include/patina/options.h)
    p = s.json("POST", "/v1/collections/refs.patina/identify?k=1000001", q, status=422,
               headers={"Content-Type": "image/x-portable-pixmap"})
    expect(p["detail"] == "identify: k = 1000001 is over the limit of 1000000", p)
    p = s.json("POST", "/v1/collections/refs.patina/identify?ratio=1.5", q, status=400,
               headers={"Content-Type": "image/x-portable-pixmap"})
    expect(p["detail"] == "identify: ratio = 1.5 is outside (0, 1]", p)
    s.json("POST", "/v1/collections/refs.patina/identify", b"x", status=415, headers={"Content-Type": "text/plain"})
    s.json("POST", "/v1/collections/refs.patina/identify", q[:80], status=422, headers={"Content-Type": "image/x-portable-pixmap"})
    # the half-size query: a close-up (every pixel doubled) halves back to the reference itself, whose answer
    # beats the close-up's; its pairs' query points are mapped onto the close-up (x -> 2 x + 0.5)
    big = doubled(q)
    ppm_h = {"Content-Type": "image/x-portable-pixmap"}
    rh = s.json("POST", "/v1/collections/refs.patina/identify?k=3&half_query=64&half_query_margin=0", big,
                headers=ppm_h)
    expect(rh["half_query"] == {"features": 64, "margin": 0, "taken": True} and rh["hits"][0]["key"] == REF[2], rh)
    pairs = rh["hits"][0]["pairs"]
    expect(pairs and sum(abs(qx - (2 * rx + 0.5)) + abs(qy - (2 * ry + 0.5)) < 4 for qx, qy, rx, ry in pairs) >=
           0.9 * len(pairs), pairs[:5])
    # a margin no answer beats: the close-up's own answer, as without the half-size query
    r0 = s.json("POST", "/v1/collections/refs.patina/identify?k=3", big, headers=ppm_h)
    rn = s.json("POST", "/v1/collections/refs.patina/identify?k=3&half_query=64&half_query_margin=1000000", big,
                headers=ppm_h)
    expect(rn["half_query"]["taken"] is False and "half_query" not in r0 and rn["threshold"] >= r0["threshold"] and
           [(h["key"], h["matches"], h["inliers"], h["score"]) for h in rn["hits"]] ==
           [(h["key"], h["matches"], h["inliers"], h["score"]) for h in r0["hits"]], (rn, r0))
    for bad in ("half_query=16385", "half_query=-1", "half_query_margin=-1", "half_query_margin=x"):
        p = s.json("POST", "/v1/collections/refs.patina/identify?" + bad, q, status=400, headers=ppm_h)
        expect(bad.split("=")[0] in p["detail"], (bad, p))


def doubled(data):
    """A binary PPM (as ppm() writes them) at twice its size, every pixel repeated 2 x 2."""
    magic, size, mx, px = data.split(b"\n", 3)
    w, h = (int(v) for v in size.split())
    rows = []
    for y in range(h):
        row = b"".join(px[3 * (y * w + x):3 * (y * w + x) + 3] * 2 for x in range(w))
        rows += [row, row]
    return b"P6\n%d %d\n255\n" % (2 * w, 2 * h) + b"".join(rows)


def make_tar(n, seed, prefix="tar", size=(48, 40)):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as t:
        for i in range(n):
            data = ppm(size[0], size[1], seed + i)
            ti = tarfile.TarInfo("%s/%03d.ppm" % (prefix, i))
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("%s/notes.txt" % prefix)
        ti.size = 5
        t.addfile(ti, io.BytesIO(b"hello"))
    return out.getvalue()


def wait_job(s, jid, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        j = s.json("GET", "/v1/jobs/%d" % jid)
        if j["state"] in ("done", "failed", "cancelled"):
            return j
        time.sleep(0.05)
    raise AssertionError("job %d did not finish" % jid)


def test_jobs():
    s = MAIN
    j = s.json("POST", "/v1/collections/photos/jobs", {"folder": os.path.join(IMPORT, "batch")}, status=202, token=True)
    j = wait_job(s, j["id"])
    expect(j["state"] == "done" and j["files"] == 12 and j["indexed"] == 12 and j["failed"] == 0, j)
    key = "import/batch/img005.ppm"  # relative to the collection's root, TMP
    expect(s.json("GET", "/v1/collections/photos/images/" + key)["key"] == key, "job's record")
    hits = s.json("POST", "/v1/collections/photos/search", {"key": key, "k": 1})["hits"]
    expect(hits[0]["key"] == key, "a job's rows are searched (stale indexes reloaded)")
    j2 = wait_job(s, s.json("POST", "/v1/collections/photos/jobs", {"folder": os.path.join(IMPORT, "batch")}, status=202, token=True)["id"])
    expect(j2["skipped"] == 12 and j2["indexed"] == 0, j2)
    tar = make_tar(5, 3000)
    j3 = s.json("POST", "/v1/collections/photos/jobs?family=cedd", tar, status=202,
                headers={"Content-Type": "application/x-tar"}, token=True)
    j3 = wait_job(s, j3["id"])
    expect(j3["state"] == "done" and j3["indexed"] == 5 and j3["failed"] == 1 and len(j3["errors"]) == 1, j3)
    expect(s.json("GET", "/v1/collections/photos/images/tar/003.ppm")["width"] == 48, "tar member's record")
    s.json("POST", "/v1/collections/photos/jobs", {"folder": os.path.join(TMP, "outside")}, status=403, token=True)
    s.json("POST", "/v1/collections/photos/jobs", {"folder": "/etc/../" + IMPORT + "/../outside"}, status=403, token=True)
    s.json("POST", "/v1/collections/photos/jobs", {"folder": os.path.join(IMPORT, "missing")}, status=422, token=True)
    s.json("POST", "/v1/collections/photos/jobs", {"folder": os.path.join(IMPORT, "batch"), "family": "nosuch"}, status=422, token=True)
    s.json("POST", "/v1/collections/photos/jobs", {"folder": 3}, status=400, token=True)
    s.json("POST", "/v1/collections/photos/jobs", b"{", status=400, headers={"Content-Type": "application/json"}, token=True)
    s.json("POST", "/v1/collections/photos/jobs", b"x" * 1024, status=400, headers={"Content-Type": "application/x-tar"}, token=True)
    s.json("POST", "/v1/collections/photos/jobs", b"x", status=415, headers={"Content-Type": "text/plain"}, token=True)
    s.over_limit("POST", "/v1/collections/photos/jobs", 4 * 1024 * 1024 + 1, "application/x-tar", token=True)
    s.json("POST", "/v1/collections/photos/jobs", {"folder": IMPORT}, status=401)
    s.json("POST", "/v1/collections/nope/jobs", {"folder": IMPORT}, status=404, token=True)
    jobs = s.json("GET", "/v1/jobs")["jobs"]
    expect(len(jobs) >= 3 and jobs[0]["id"] > jobs[-1]["id"], jobs)
    s.json("GET", "/v1/jobs/999999", status=404)
    s.json("DELETE", "/v1/jobs/999999", status=404, token=True)
    s.json("DELETE", "/v1/jobs/%d" % j3["id"], status=409, token=True)
    s.json("DELETE", "/v1/jobs/%d" % j3["id"], status=401)


def test_jobs_cancel_and_queue():
    srv = Server([os.path.join(TMP, "jobq")], "--max-jobs", "1", "--create", "-q")
    try:
        big = make_tar(150, 9000, "big", (96, 96))
        hdr = {"Content-Type": "application/x-tar"}
        first = srv.json("POST", "/v1/collections/jobq/jobs", big, status=202, headers=hdr, token=True)
        codes = [srv.request("POST", "/v1/collections/jobq/jobs", big, headers=hdr, token=True).status for _ in range(3)]
        expect(codes[0] == 202 and 429 in codes, codes)
        c = srv.json("DELETE", "/v1/jobs/%d" % first["id"], status=200, token=True)
        expect(c["id"] == first["id"], c)
        j = wait_job(srv, first["id"])
        expect(j["state"] == "cancelled" and j["processed"] < 150, j)
    finally:
        srv.stop_ok()


def test_jobs_file():
    """--jobs-file: jobs outlive the server. SIGTERM while a folder job runs
    queues it again and the next start finishes it (files indexed before are
    skipped); finished jobs come back as they were and ids go on; a kill -9
    right after a job ends loses nothing; unfinished tar jobs and jobs of a
    collection not served end as failed; a file that is not a jobs file stops
    the start and is left as it is."""
    jf = os.path.join(TMP, "jobs.json")
    coll = os.path.join(TMP, "persist")
    many = os.path.join(IMPORT, "many")
    nmany = 1500  # rootsift of 96x96 noise on one thread: a few ms a file, chunks of 256
    os.makedirs(many, exist_ok=True)
    rnd = random.Random(5)
    for i in range(nmany):
        with open(os.path.join(many, "n%04d.ppm" % i), "wb") as f:
            f.write(b"P6\n96 96\n255\n" + rnd.randbytes(96 * 96 * 3))
    args = ("--jobs-file", jf, "--import-dir", IMPORT, "--job-threads", "1", "--create", "-q")
    path = "/v1/collections/persist/jobs"

    srv = Server([coll], *args)
    small = srv.json("POST", path, {"folder": os.path.join(IMPORT, "batch")}, status=202, token=True)
    small = wait_job(srv, small["id"])
    expect(small["state"] == "done" and small["indexed"] == 12 and small["resumed"] == 0 and small["families"] == [],
           small)
    big = srv.json("POST", path, {"folder": many, "family": "rootsift:m=128,n=256"}, status=202, token=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        st = srv.json("GET", "/v1/jobs/%d" % big["id"])
        if st["processed"] >= 256 or st["state"] != "running" and st["state"] != "queued":
            break
        time.sleep(0.02)
    expect(st["state"] == "running" and st["processed"] < nmany,
           "the folder job was not running after its first chunk (too fast a machine? raise nmany): %r" % st)
    srv.stop_ok()
    with open(jf) as f:
        doc = json.load(f)
    kept = {j["id"]: j for j in doc["jobs"]}
    expect(kept[big["id"]]["state"] == "queued" and 256 <= kept[big["id"]]["processed"] < nmany, kept[big["id"]])
    expect(kept[small["id"]]["state"] == "done" and doc["next_id"] == big["id"] + 1, doc)

    srv = Server([coll], *args)
    try:
        j = wait_job(srv, big["id"], 120)
        expect(j["state"] == "done" and j["resumed"] == 1 and j["files"] == nmany and j["failed"] == 0 and
               j["skipped"] >= 256 and j["indexed"] + j["skipped"] == nmany and
               j["families"] == ["rootsift:m=128,n=256"], j)
        again = srv.json("GET", "/v1/jobs/%d" % small["id"])
        expect(all(again[k] == small[k] for k in ("state", "files", "indexed", "folder", "created", "finished")),
               (again, small))
        info = srv.json("GET", "/v1/collections/persist")
        expect(info["records"] == 12 + nmany, info)
        # a kill -9 right after a job ends: the restart shows it done (as
        # written, or resumed and redone with every file skipped)
        k9 = srv.json("POST", path, {"folder": os.path.join(IMPORT, "batch")}, status=202, token=True)
        expect(k9["id"] == big["id"] + 1, "ids go on after a restart: %r" % k9)
        k9 = wait_job(srv, k9["id"])
    finally:
        srv.proc.kill()
        srv.proc.wait()
    srv = Server([coll], *args)
    try:
        j = wait_job(srv, k9["id"])
        # counts are per (file, table): cedd skipped, rootsift indexed
        expect(k9["state"] == "done" and k9["skipped"] == 12 and k9["indexed"] == 12, k9)
        if j["resumed"] == 0:
            expect(all(j[k] == k9[k] for k in ("state", "files", "indexed", "skipped", "failed")), (j, k9))
        else:
            expect(j["state"] == "done" and j["indexed"] == 0 and j["skipped"] == 24, j)
    finally:
        srv.stop_ok()

    # unfinished jobs that cannot go on, as a kill -9 would leave them
    with open(jf) as f:
        doc = json.load(f)
    base = dict(doc["jobs"][0])
    n = doc["next_id"]
    tar_job = dict(base, id=n, kind="tar", state="running", processed=3)
    tar_job.pop("folder", None)
    gone = dict(base, id=n + 1, collection="elsewhere", kind="folder", folder=many, state="queued")
    doc["jobs"][:0] = [gone, tar_job]
    doc["next_id"] = n + 2
    with open(jf, "w") as f:
        json.dump(doc, f)
    srv = Server([coll], *args)
    try:
        t = srv.json("GET", "/v1/jobs/%d" % n)
        expect(t["state"] == "failed" and "archive is not kept" in t["message"] and t["finished"], t)
        g = srv.json("GET", "/v1/jobs/%d" % (n + 1))
        expect(g["state"] == "failed" and "not served" in g["message"] and g["collection"] == "elsewhere", g)
        nxt = srv.json("POST", path, {"folder": os.path.join(IMPORT, "batch")}, status=202, token=True)
        expect(nxt["id"] == n + 2, nxt)
        wait_job(srv, nxt["id"])
    finally:
        srv.stop_ok()

    # not a jobs file: no start, the file untouched
    for bad in (b"{not json", b'{"patina_jobs": 99, "next_id": 1, "jobs": []}',
                b'{"patina_jobs": 1, "next_id": 1, "jobs": [{"id": 1}]}'):
        with open(jf, "wb") as f:
            f.write(bad)
        p = subprocess.run([PATINA, "serve", coll, "--listen", "127.0.0.1:0", *args], capture_output=True, timeout=60)
        expect(p.returncode == 3 and b"--jobs-file" in p.stderr, (p.returncode, p.stderr))
        with open(jf, "rb") as f:
            expect(f.read() == bad, "the jobs file was changed")
    # a file that cannot be written (its folder is missing): no start
    nowhere = os.path.join(TMP, "no-such-dir", "jobs.json")
    p = subprocess.run([PATINA, "serve", coll, "--listen", "127.0.0.1:0", "--jobs-file", nowhere], capture_output=True,
                       timeout=60)
    expect(p.returncode == 3 and b"cannot write" in p.stderr, (p.returncode, p.stderr))
    shutil.rmtree(many)


def test_malformed():
    s = MAIN
    port = s.port
    # huge headers
    st = raw(port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    expect(st is None or 400 <= st < 500, "huge header: %r" % st)
    # a 10 GB declared body: refused before any of it is read
    t0 = time.time()
    st = raw(port, b"POST /v1/collections/photos/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n"
             b"Content-Length: 10737418240\r\n\r\n")
    expect(st == 413 and time.time() - t0 < 5, "10 GB body: %r" % st)
    st = raw(port, b"PUT /v1/collections/photos/images/x HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n"
             b"Authorization: Bearer " + s.token.encode() + b"\r\nExpect: 100-continue\r\nContent-Length: 10737418240\r\n\r\n")
    expect(st == 413, "10 GB body with Expect: %r" % st)
    st = raw(port, b"POST /v1/collections/photos/search HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    expect(st is not None and 400 <= st < 500, "bad Content-Length: %r" % st)
    st = raw(port, b"POST /v1/collections/photos/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}")
    expect(st == 415, "gzip body: %r" % st)
    st = raw(port, b"BLAH\r\n\r\n")
    expect(st is None or 400 <= st < 500, "garbage: %r" % st)
    # a chunked body past --max-body (2M): the rest is dropped, then 413
    sock = raw(port, b"POST /v1/collections/photos/search HTTP/1.1\r\nHost: x\r\nContent-Type: image/jpeg\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n", read=False)
    try:
        chunk = b"100000\r\n" + b"\0" * 0x100000 + b"\r\n"
        for _ in range(4):
            sock.sendall(chunk)
        sock.sendall(b"0\r\n\r\n")
        r = http.client.HTTPResponse(sock)
        r.begin()
        res = Resp(r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read())
        check_doc("POST", "/v1/collections/photos/search", res)
        expect(res.status == 413 and b"chunked" in res.data, (res.status, res.data))
    finally:
        sock.close()
    # slow clients: half a request line, half a body; both dropped after --timeout 2
    slow1 = raw(port, b"GET /heal", read=False)
    slow2 = raw(port, b"POST /v1/collections/photos/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{\"k\":", read=False)
    expect(s.json("GET", "/healthz")["status"] == "ok", "serving while slow clients wait")
    for sock in (slow1, slow2):
        sock.settimeout(10)
        t0 = time.time()
        try:
            data = sock.recv(100)
        except ConnectionResetError:
            data = b""
        expect(data == b"" and time.time() - t0 < 9, "slow client not dropped: %r" % data)
        sock.close()
    # a client trickling a header, or a body, a byte at a time (each within
    # --timeout 2) is cut off by --request-timeout 3

    def trickle(head, byte):
        """Seconds until the server closed a connection fed one byte every 0.5 s (None: not in 10 s)."""
        sock = raw(port, head, read=False)
        t0 = time.time()
        try:
            while time.time() - t0 < 10:
                sock.sendall(byte)
                time.sleep(0.5)
            return None
        except (BrokenPipeError, ConnectionResetError):
            return time.time() - t0
        finally:
            sock.close()
    t = trickle(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ", b"a")
    expect(t is not None and 2.5 < t < 6, "trickling client not cut off: %r s" % t)
    t = trickle(b"POST /v1/collections/photos/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n", b" ")
    expect(t is not None and 2.5 < t < 6, "trickled body not cut off: %r s" % t)
    expect(s.json("GET", "/healthz")["status"] == "ok", "serving after the trickles")
    # decompression bombs: a PNG and a JPEG header declaring a huge image
    import struct
    import zlib

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0)) + \
        chunk(b"IDAT", zlib.compress(b"\0" * 100000)) + chunk(b"IEND", b"")
    s.json("POST", "/v1/collections/photos/search?k=1", png, status=413, headers={"Content-Type": "image/png"})
    jpg = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffc0000b080fa00fa0010111" + "00ffd9")
    st = s.request("POST", "/v1/collections/photos/search?k=1", jpg, headers={"Content-Type": "image/jpeg"}).status
    expect(st in (413, 422), "jpeg bomb: %d" % st)
    expect(s.json("GET", "/healthz")["status"] == "ok", "still serving")
    expect(s.proc.poll() is None, "server died")


def test_concurrent():
    """Writers add and delete their own keys while readers run k-NN searches
    returning every row: a key is never missing while it is surely stored,
    never present while it is surely deleted, and the final state is right."""
    s = MAIN
    rows = s.json("POST", "/v1/collections/photos/search", {"key": KEY0, "k": 100})["rows"]
    expect(rows < 60, rows)
    events = {}     # key -> [(t_start, t_end, 'put'|'del')]
    searches = []   # (t_start, t_end, set of keys)
    errors = []
    stop = threading.Event()
    img = {w: ppm(32, 32, 40000 + w) for w in range(4)}

    def writer(w):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            for i in range(40):
                key = "conc/w%d/%d" % (w, i % 3)
                path = "/v1/collections/photos/images/" + key
                t0 = time.time()
                r = s.request("PUT", path, img[w], headers={"Content-Type": "image/x-portable-pixmap"}, token=True, conn=conn)
                events.setdefault(key, []).append((t0, time.time(), "put"))
                expect(r.status in (200, 201), r.data)
                if i % 2:
                    t0 = time.time()
                    r = s.request("DELETE", path, token=True, conn=conn)
                    events[key].append((t0, time.time(), "del"))
                    expect(r.status == 200, r.data)
            conn.close()
        except Exception as e:
            errors.append(e)

    def reader():
        try:
            conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
            while not stop.is_set():
                t0 = time.time()
                r = s.request("POST", "/v1/collections/photos/search", {"descriptor": [0] * 144, "k": 100}, conn=conn)
                expect(r.status == 200, r.data)
                keys = [h["key"] for h in r.obj()["hits"]]
                expect(len(keys) == len(set(keys)), "a key twice")
                searches.append((t0, time.time(), set(keys)))
            conn.close()
        except Exception as e:
            errors.append(e)
    ws = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    rs = [threading.Thread(target=reader) for _ in range(3)]
    for t in ws + rs:
        t.start()
    for t in ws:
        t.join()
    # (the readers go on until they have made a few searches: a slow build,
    # a sanitizer's, may have the writers done first)
    deadline = time.time() + 60
    while len(searches) <= 10 and not errors and time.time() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in rs:
        t.join()
    expect(not errors, errors)
    expect(len(searches) > 10, len(searches))
    checked = 0
    for key, evs in events.items():
        for (ts, te, found) in searches:
            # the key's state is sure over [ts, te] when the last operation that
            # ended before ts is the last that started before te
            before = [e for e in evs if e[1] < ts]
            started = [e for e in evs if e[0] < te]
            if before and len(before) == len(started):
                sure = before[-1][2]
                expect((key in found) == (sure == "put"), "%s: %s surely, search says %s" % (key, sure, key in found))
                checked += 1
            if not started:
                expect(key not in found, "%s found before its first add" % key)
    expect(checked > 0, "no search fell in a sure interval")
    for key, evs in events.items():
        st = s.request("GET", "/v1/collections/photos/images/" + key).status
        expect(st == (200 if evs[-1][2] == "put" else 404), "%s: final %d after %s" % (key, st, evs[-1][2]))
    for key, evs in events.items():
        if evs[-1][2] == "put":
            s.json("DELETE", "/v1/collections/photos/images/" + key, token=True)


def test_kill9_durability():
    coll = os.path.join(TMP, "durable")
    srv = Server([coll], "--create", "-q")
    img = ppm(40, 40, 123)
    added = []
    for i in range(5):
        r = srv.request("PUT", "/v1/collections/durable/images/k%d" % i, img if i % 2 else ppm(40, 40, 200 + i),
                        headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
        expect(r.status == 201, r.data)
        added.append("k%d" % i)
    srv.request("DELETE", "/v1/collections/durable/images/k0", token=True)
    srv.proc.kill()
    srv.proc.wait()
    srv2 = Server([coll], "-q")
    try:
        for k in added[1:]:
            expect(srv2.request("GET", "/v1/collections/durable/images/" + k).status == 200, "lost " + k)
        expect(srv2.request("GET", "/v1/collections/durable/images/k0").status == 404, "deleted k0 came back")
        r = srv2.json("POST", "/v1/collections/durable/search", {"key": "k2", "k": 10})
        expect(len(r["hits"]) == 4, r)
    finally:
        srv2.stop_ok()


def test_external_writes():
    """Another process (the CLI) indexes into and removes from a served
    collection: the next search sees the change (the collection's version
    moved past the one the server's indexes reflect), as do the server's
    own writes after it."""
    coll = os.path.join(TMP, "shared")
    first = write_images(os.path.join(TMP, "shared-imgs"), 6, 7000)
    index(coll, first)
    srv = Server([coll], "-q")
    try:
        r = srv.json("POST", "/v1/collections/shared/search", {"key": first[0], "k": 50})
        expect(len(r["hits"]) == 6, r)  # the indexes are loaded now
        more = write_images(os.path.join(TMP, "shared-more"), 3, 7100)
        index(coll, more)  # another process
        r = srv.json("POST", "/v1/collections/shared/search", {"key": more[1], "k": 50})
        expect(len(r["hits"]) == 9 and r["hits"][0]["key"] == more[1] and r["hits"][0]["distance"] == 0, r)
        subprocess.run([PATINA, "rm", coll, first[2]], check=True, capture_output=True)
        r = srv.json("POST", "/v1/collections/shared/search", {"key": first[0], "k": 50})
        expect(len(r["hits"]) == 8 and first[2] not in [h["key"] for h in r["hits"]], r)
        # the server's own write after an outside one: both visible
        subprocess.run([PATINA, "rm", coll, first[3]], check=True, capture_output=True)
        q = srv.request("PUT", "/v1/collections/shared/images/own", ppm(40, 40, 7200),
                        headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
        expect(q.status == 201, q.data)
        r = srv.json("POST", "/v1/collections/shared/search", {"key": "own", "k": 50})
        keys = [h["key"] for h in r["hits"]]
        expect(len(keys) == 8 and keys[0] == "own" and first[3] not in keys, r)
    finally:
        srv.stop_ok()


def test_sigterm():
    srv = Server([os.path.join(TMP, "photos")], "--drain", "5", "-q")
    keep = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    keep2 = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    for c in (keep, keep2):
        expect(srv.request("GET", "/readyz", conn=c).status == 200, "ready")
    # a request in flight: its body half sent
    body = json.dumps({"key": KEY0, "k": 2}).encode()
    slow = raw(srv.port, b"POST /v1/collections/photos/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body) + body[:5], read=False)
    time.sleep(0.2)
    srv.proc.send_signal(signal.SIGTERM)
    # /readyz turns 503 once the signal is handled (polled: a loaded machine
    # may take a while), and the process stays while the request is in flight.
    # A request that races the signal may get its 200 with "Connection:
    # close" (the server had stopped accepting by the time it answered): the
    # second kept-alive connection then asks.
    deadline = time.time() + 20
    while True:
        r = srv.request("GET", "/readyz", conn=keep)
        if r.status == 503 or r.headers.get("connection") == "close" or time.time() > deadline:
            break
        time.sleep(0.05)
    if r.status != 503:
        r = srv.request("GET", "/readyz", conn=keep2)
    expect(r.status == 503, "readyz while draining: %d" % r.status)
    expect(srv.proc.poll() is None, "exited with a request in flight")
    # the listening socket is closed right after draining starts (polled: the
    # 503 above can come first)
    refused = False
    while not refused and time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", srv.port), timeout=2).close()
            time.sleep(0.05)
        except OSError:
            refused = True
    expect(refused, "new connections accepted while draining")
    slow.sendall(body[5:])
    slow.settimeout(10)
    data = slow.recv(65536)
    expect(data.startswith(b"HTTP/1.1 200"), "the request in flight was answered: %r" % data[:100])
    slow.close()
    keep.close()
    keep2.close()
    expect(srv.proc.wait(15) == 0, "exit status after SIGTERM")


def test_image_content():
    """?content=1: the original bytes of a key that is a file under
    --content-dir (or --import-dir), unchanged since it was indexed."""
    s = MAIN
    with open(KEY0, "rb") as f:
        want = f.read()
    r = s.request("GET", "/v1/collections/photos/images/" + KEY0 + "?content=1")
    expect(r.status == 200 and r.data == want and r.headers["content-type"] == "image/x-portable-anymap",
           (r.status, r.headers))
    expect(s.json("GET", "/v1/collections/photos/images/" + KEY0 + "?content=0")["key"] == KEY0, "content=0")
    s.json("GET", "/v1/collections/photos/images/" + KEY0 + "?content=yes", status=400)
    # a file outside the allowed folders
    p = s.json("GET", "/v1/collections/refs.patina/images/" + REF[0] + "?content=1", status=404)
    expect("--content-dir" in p["detail"], p)
    # an uploaded image: its bytes were never kept
    s.json("PUT", "/v1/collections/photos/images/uploaded/c.ppm", ppm(20, 20, 77), status=201, token=True,
           headers={"Content-Type": "image/x-portable-pixmap"})
    p = s.json("GET", "/v1/collections/photos/images/uploaded/c.ppm?content=1", status=404)
    expect("not a file path" in p["detail"], p)
    # a file changed since it was indexed
    path = os.path.join("imgs", "changed.ppm")
    with open(path, "wb") as f:
        f.write(ppm(30, 30, 78))
    index(os.path.join(TMP, "photos"), [path])
    # (the server's next write reloads; the record is read from the store either way)
    with open(path, "wb") as f:
        f.write(ppm(30, 30, 79))
    p = s.json("GET", "/v1/collections/photos/images/" + path + "?content=1", status=404)
    expect("changed" in p["detail"], p)
    os.remove(path)
    p = s.json("GET", "/v1/collections/photos/images/" + path + "?content=1", status=404)
    expect("gone" in p["detail"], p)
    s.json("DELETE", "/v1/collections/photos/images/" + path, token=True)
    s.json("DELETE", "/v1/collections/photos/images/uploaded/c.ppm", token=True)


def jpeg_size(data):
    """(width, height) from a JPEG's SOF marker."""
    expect(data[:2] == b"\xff\xd8", "not a JPEG: %r" % data[:20])
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            raise AssertionError("JPEG markers out of step at %d" % i)
        m = data[i + 1]
        n = int.from_bytes(data[i + 2:i + 4], "big")
        if 0xC0 <= m <= 0xCF and m not in (0xC4, 0xC8, 0xCC):
            return int.from_bytes(data[i + 7:i + 9], "big"), int.from_bytes(data[i + 5:i + 7], "big")
        i += 2 + n
    raise AssertionError("no SOF marker")


def thumb_counts(s):
    m = s.request("GET", "/metrics").data.decode()
    return tuple(int(re.search(r'patina_thumbnail_cache_requests_total\{outcome="%s"\} (\d+)' % o, m).group(1))
                 for o in ("hit", "miss"))


def test_thumbnail():
    """?thumbnail=N: the file of ?content=1 downscaled to N pixels on its
    longer side, as a JPEG with an ETag (304 when it matches), cached."""
    s = MAIN
    big = os.path.join(TMP, "imgs", "big.ppm")
    with open(big, "wb") as f:
        f.write(ppm(300, 200, 31))
    huge = os.path.join(TMP, "imgs", "huge.ppm")  # over the server's --max-pixels (1000000)
    with open(huge, "wb") as f:
        f.write(b"P6\n1200 1000\n255\n" + bytes(3 * 1200 * 1000))
    index(os.path.join(TMP, "photos"), [big, huge])
    # keys: the files' paths relative to the collection's root (TMP, the folder that holds it)
    bigk, hugek = os.path.relpath(big, TMP), os.path.relpath(huge, TMP)
    url = "/v1/collections/photos/images/" + bigk
    try:
        hit0, miss0 = thumb_counts(s)
        r = s.request("GET", url + "?thumbnail=100")
        expect(r.status == 200 and r.headers["content-type"] == "image/jpeg", (r.status, r.headers, r.data[:200]))
        expect(jpeg_size(r.data) == (100, 67), jpeg_size(r.data))
        sha = s.json("GET", url)["sha256"]
        etag = r.headers["etag"]
        expect(etag == '"%s-100"' % sha and "no-cache" in r.headers["cache-control"], r.headers)
        expect(thumb_counts(s) == (hit0, miss0 + 1), "a first thumbnail is a miss: %r" % (thumb_counts(s),))
        r2 = s.request("GET", url + "?thumbnail=100")
        expect(r2.status == 200 and r2.data == r.data, "the cached thumbnail differs")
        expect(thumb_counts(s) == (hit0 + 1, miss0 + 1), "a second one is a hit: %r" % (thumb_counts(s),))
        # revalidation: 304 without a body for its tag (weak or in a list too), 200 for another
        for inm in (etag, "W/" + etag, '"other", ' + etag, "*"):
            r3 = s.request("GET", url + "?thumbnail=100", headers={"If-None-Match": inm})
            expect(r3.status == 304 and r3.data == b"" and r3.headers["etag"] == etag, (inm, r3.status, r3.headers))
        r3 = s.request("GET", url + "?thumbnail=64", headers={"If-None-Match": etag})
        expect(r3.status == 200 and jpeg_size(r3.data) == (64, 43), r3.status)
        # the default size (256); an image smaller than N is never enlarged
        r4 = s.request("GET", url + "?thumbnail")
        expect(r4.status == 200 and jpeg_size(r4.data) == (256, 171) and r4.headers["etag"].endswith('-256"'),
               r4.headers)
        r4 = s.request("GET", "/v1/collections/photos/images/" + KEY0 + "?thumbnail=1024")
        expect(r4.status == 200 and jpeg_size(r4.data) == (64, 48), r4.status)
        # bad N
        for bad, st in (("x", 400), ("-5", 400), ("12px", 400), ("5", 422), ("31", 422), ("1025", 422),
                        ("99999999999999999999", 422)):
            p = s.json("GET", url + "?thumbnail=" + bad, status=st)
            expect("thumbnail" in p["detail"], p)
        p = s.json("GET", url + "?thumbnail=64&content=1", status=400)
        expect("not both" in p["detail"], p)
        # no file: the rule and the words of ?content=1
        p = s.json("GET", "/v1/collections/refs.patina/images/" + REF[0] + "?thumbnail=64", status=404)
        expect("--content-dir" in p["detail"], p)
        s.json("PUT", "/v1/collections/photos/images/uploaded/t.ppm", ppm(20, 20, 5), status=201, token=True,
               headers={"Content-Type": "image/x-portable-pixmap"})
        p = s.json("GET", "/v1/collections/photos/images/uploaded/t.ppm?thumbnail=64", status=404)
        expect("not a file path" in p["detail"], p)
        # the same content under a key without a file is not served from the cache
        s.json("PUT", "/v1/collections/photos/images/uploaded/same.ppm", open(big, "rb").read(), status=201,
               token=True, headers={"Content-Type": "image/x-portable-pixmap"})
        s.json("GET", "/v1/collections/photos/images/uploaded/same.ppm?thumbnail=100", status=404)
        s.json("GET", "/v1/collections/photos/images/nope.ppm?thumbnail=64", status=404)
        # a file over the server's pixel limit does not decode here
        p = s.json("GET", "/v1/collections/photos/images/" + hugek + "?thumbnail=64", status=422)
        expect("exceeds the limit" in p["detail"], p)
        # a changed file: 404 (and a cached thumbnail of the old content is not served for it)
        with open(big, "wb") as f:
            f.write(ppm(300, 201, 31))
        p = s.json("GET", url + "?thumbnail=100", status=404)
        expect("changed" in p["detail"], p)
    finally:
        for k in (bigk, hugek, "uploaded/t.ppm", "uploaded/same.ppm"):
            s.request("DELETE", "/v1/collections/photos/images/" + k, token=True)
        for f in (big, huge):
            os.remove(f)


def test_moved_collection():
    """A collection moved together with its images (keys relative to its
    root): ?content=1 serves the files from their new place (under
    --content-dir), search finds the same keys, and the CLI indexing the
    moved folder finds every image stored already."""
    base = os.path.join(TMP, "trip")
    pics = write_images(os.path.join(base, "pics"), 4, 8800)
    coll = os.path.join(base, "trip.patina")
    subprocess.run([PATINA, "index", coll, os.path.join(base, "pics"), "-q"], check=True, cwd="/")
    moved = os.path.join(TMP, "trip-moved")
    os.rename(base, moved)
    srv = Server([os.path.join(moved, "trip.patina")], "--content-dir", os.path.join(moved, "pics"), "-q")
    try:
        key = "pics/img002.ppm"
        with open(os.path.join(moved, key), "rb") as f:
            want = f.read()
        r = srv.request("GET", "/v1/collections/trip.patina/images/" + key + "?content=1")
        expect(r.status == 200 and r.data == want, (r.status, r.data[:200]))
        hits = srv.json("POST", "/v1/collections/trip.patina/search", {"key": key, "k": 2})["hits"]
        expect(hits[0]["key"] == key and hits[0]["distance"] == 0, hits)
    finally:
        srv.stop_ok()
    out = subprocess.run([PATINA, "index", os.path.join(moved, "trip.patina"), os.path.join(moved, "pics")],
                         check=True, capture_output=True, text=True)
    expect("indexed 0, skipped 4 (unchanged)" in out.stderr, out.stderr)
    expect(len(pics) == 4, pics)


def test_connection_limits():
    """--max-per-ip: more connections from one address are closed at once."""
    srv = Server([os.path.join(TMP, "photos")], "--max-per-ip", "2", "-q")
    try:
        # two kept-alive connections, each answered once (so both are
        # surely counted by the server, however loaded the machine)
        a = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        b = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        for c in (a, b):
            expect(srv.request("GET", "/healthz", conn=c).status == 200, "the first two connections")
        st = raw(srv.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        expect(st is None, "a third connection was served: %r" % st)
        a.close()
        # served again once the server has seen one close (polled)
        deadline = time.time() + 20
        while (st := raw(srv.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) != 200 \
                and time.time() < deadline:
            time.sleep(0.1)
        expect(st == 200, "not served after one closed")
        b.close()
    finally:
        srv.stop_ok()


def test_tls():
    """--tls-cert/--tls-key: HTTPS with TLS 1.2 or 1.3 only; plain HTTP and a
    silent client on the port get nothing; bad certificate setups stop the
    start with the reason."""
    import ssl
    d = os.path.join(TMP, "tls")
    os.makedirs(d, exist_ok=True)

    def pair(name):
        key, cert = os.path.join(d, name + ".key"), os.path.join(d, name + ".pem")
        p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                            "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=localhost",
                            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"], capture_output=True)
        expect(p.returncode == 0, "openssl (scripts/bootstrap.sh installs it): %r" % p.stderr[-300:])
        return cert, key
    try:
        cert, key = pair("server")
    except FileNotFoundError:
        raise AssertionError("no openssl to make a test certificate (scripts/bootstrap.sh installs it)")
    ctx = ssl.create_default_context(cafile=cert)
    coll = os.path.join(TMP, "tlscoll")
    srv = Server([coll], "--tls-cert", cert, "--tls-key", key, "--timeout", "2", "--create", "-q", tls=ctx)
    try:
        expect(any("listening on https://" in line for line in srv.log), srv.log)
        expect(srv.json("GET", "/healthz")["status"] == "ok", "healthz over TLS")
        r = srv.request("PUT", "/v1/collections/tlscoll/images/a", ppm(40, 40, 3),
                        headers={"Content-Type": "image/x-portable-pixmap"}, token=True)
        expect(r.status == 201, r.data)
        srv.json("PUT", "/v1/collections/tlscoll/images/b", ppm(40, 40, 4), status=401,
                 headers={"Content-Type": "image/x-portable-pixmap"})
        hits = srv.json("POST", "/v1/collections/tlscoll/search", {"key": "a", "k": 1})["hits"]
        expect(hits[0]["key"] == "a", hits)
        # the negotiated protocol; a TLS 1.1 client is refused by the server
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw_sock:
            with ctx.wrap_socket(raw_sock, server_hostname="127.0.0.1") as t:
                expect(t.version() in ("TLSv1.2", "TLSv1.3"), t.version())
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(cert)
        old.set_ciphers("DEFAULT:@SECLEVEL=0")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old.minimum_version = ssl.TLSVersion.TLSv1
            old.maximum_version = ssl.TLSVersion.TLSv1_1
        try:
            with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as raw_sock:
                with old.wrap_socket(raw_sock, server_hostname="127.0.0.1"):
                    refused = False
        except (ssl.SSLError, ConnectionResetError):
            refused = True
        expect(refused, "a TLS 1.1 handshake was accepted")
        # plain HTTP on the TLS port: no HTTP answer
        expect(raw(srv.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n") is None, "plain HTTP answered")
        # a client that connects and says nothing is dropped after --timeout
        # (a TLS alert record, then the close)
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        t0 = time.time()
        data = b""
        try:
            while True:
                chunk = s.recv(100)
                if not chunk:
                    break
                data += chunk
        except ConnectionResetError:
            pass
        expect((data == b"" or data.startswith(b"\x15\x03")) and len(data) < 16 and time.time() - t0 < 9,
               "silent client kept: %r after %.1f s" % (data, time.time() - t0))
        s.close()
        expect(srv.json("GET", "/healthz")["status"] == "ok", "serving after the bad clients")
    finally:
        srv.stop_ok()
    # setups that must stop the start, with the reason
    other_cert, other_key = pair("other")
    enc = os.path.join(d, "enc.key")
    subprocess.run(["openssl", "pkey", "-in", key, "-out", enc, "-aes256", "-passout", "pass:x"], check=True)
    notpem = os.path.join(d, "not.pem")
    with open(notpem, "w") as f:
        f.write("hello")
    for extra, code, words in ((["--tls-cert", cert], 2, "both"),
                               (["--tls-cert", cert, "--tls-key", notpem], 2, "not a PEM"),
                               (["--tls-cert", cert, "--tls-key", enc], 2, "encrypted"),
                               (["--tls-cert", cert, "--tls-key", os.path.join(d, "missing")], 2, "missing"),
                               (["--tls-cert", cert, "--tls-key", other_key], 3, "--tls-key its private key")):
        p = subprocess.run([PATINA, "serve", coll, "--listen", "127.0.0.1:0", *extra], capture_output=True, timeout=60)
        expect(p.returncode == code and words.encode() in p.stderr, (extra, p.returncode, p.stderr[-400:]))


def test_security():
    # beyond loopback without a token file: refused
    r = subprocess.run([PATINA, "serve", os.path.join(TMP, "photos"), "--listen", "0.0.0.0:0"], capture_output=True, timeout=30)
    expect(r.returncode == 2 and b"--token-file" in r.stderr, r.stderr)
    tf = os.path.join(TMP, "token")
    with open(tf, "w") as f:
        f.write("s3cret-token-for-tests-0123456789\n")
    srv = Server([os.path.join(TMP, "photos")], "--token-file", tf, "-q")
    try:
        expect(srv.token is None, "a token file's token is not printed")
        srv.token = "s3cret-token-for-tests-0123456789"
        st = srv.request("DELETE", "/v1/collections/photos/images/none", token=True).status
        expect(st == 404, st)
        expect(srv.request("DELETE", "/v1/collections/photos/images/none", token="wrong").status == 401, "wrong token")
    finally:
        srv.stop_ok()


def test_create():
    """A path that holds no collection (missing, or an empty folder) stops
    the start with exit 3 and a message naming it and --create; nothing is
    made there. With --create it gets an empty collection."""
    for name, make in (("never-made", False), ("empty-folder", True)):
        path = os.path.join(TMP, name)
        if make:
            os.makedirs(path)
        p = subprocess.run([PATINA, "serve", path, "--listen", "127.0.0.1:0"], capture_output=True, timeout=60)
        expect(p.returncode == 3 and path.encode() in p.stderr and b"--create" in p.stderr
               and b"holds no collection" in p.stderr, (name, p.returncode, p.stderr[-400:]))
        expect(os.path.isdir(path) == make and (not make or not os.listdir(path)), "%s: something was made" % name)
        srv = Server([path], "--create", "-q")
        try:
            expect(srv.json("GET", "/v1/collections/" + name)["records"] == 0, name)
            expect(os.path.exists(os.path.join(path, "data.mdb")), "no data.mdb")
        finally:
            srv.stop_ok()
        # made once, it opens without --create
        srv = Server([path], "-q")
        srv.stop_ok()
    # a folder with other things in it: the store's reason, --create or not
    junk = os.path.join(TMP, "outside")
    with open(os.path.join(junk, "notes.txt"), "w") as f:
        f.write("not a collection")
    for extra in ([], ["--create"]):
        p = subprocess.run([PATINA, "serve", junk, "--listen", "127.0.0.1:0", *extra], capture_output=True, timeout=60)
        expect(p.returncode == 3 and (b"not a patina collection" in p.stderr or b"holds no collection" in p.stderr),
               (extra, p.returncode, p.stderr[-400:]))
        expect(os.listdir(junk) == ["notes.txt"], os.listdir(junk))
    os.remove(os.path.join(junk, "notes.txt"))


def test_content_dirs():
    """--content-dir given several times: a key's file under any of them is
    served; one under none is not; a missing one stops the start (2)."""
    srv = Server([os.path.join(TMP, "photos"), os.path.join(TMP, "refs.patina")],
                 "--content-dir", os.path.join(TMP, "imgs"), "--content-dir", os.path.join(TMP, "refs"), "-q")
    try:
        for coll, key in (("photos", KEY0), ("refs.patina", REF[0])):
            with open(key, "rb") as f:
                want = f.read()
            r = srv.request("GET", "/v1/collections/%s/images/%s?content=1" % (coll, key))
            expect(r.status == 200 and r.data == want, (coll, r.status, r.data[:200]))
        out = os.path.join(TMP, "outside", "o.ppm")
        with open(out, "wb") as f:
            f.write(ppm(20, 20, 91))
        index(os.path.join(TMP, "photos"), [out])
        outk = os.path.relpath(out, TMP)  # the key: relative to the collection's root
        p = srv.json("GET", "/v1/collections/photos/images/" + outk + "?content=1", status=404)
        expect("--content-dir" in p["detail"], p)
        srv.json("DELETE", "/v1/collections/photos/images/" + outk, token=True)
        os.remove(out)
    finally:
        srv.stop_ok()
    missing = os.path.join(TMP, "no-such-content")
    p = subprocess.run([PATINA, "serve", os.path.join(TMP, "photos"), "--listen", "127.0.0.1:0", "--content-dir",
                        os.path.join(TMP, "imgs"), "--content-dir", missing], capture_output=True, timeout=60)
    expect(p.returncode == 2 and missing.encode() in p.stderr, (p.returncode, p.stderr[-400:]))


def test_unauthorized():
    """RFC 6750: a write without a token (no Authorization, another scheme,
    an empty Bearer) gets 401 with the plain challenge and a detail saying a
    token is needed; a wrong token gets 401 with error="invalid_token" and a
    detail saying it is not valid. Neither answer repeats the token sent."""
    s = MAIN
    path = "/v1/collections/photos/images/none"
    for headers in ({}, {"Authorization": "Basic dXNlcjpwYXNz"}, {"Authorization": "Bearer"},
                    {"Authorization": "Bearer   "}):
        r = s.request("DELETE", path, headers=headers)
        expect(r.status == 401 and r.headers.get("www-authenticate") == 'Bearer realm="patina"',
               (headers, r.status, r.headers))
        d = r.obj()["detail"]
        expect("needs a token" in d and "not valid" not in d, (headers, d))
    wrong = ["wrong-token-%d" % random.randrange(1 << 30),
             s.token[:-1] + ("0" if s.token[-1] != "0" else "1"),  # same length, last character off
             s.token + "x", s.token[:-1]]
    for tok in wrong:
        r = s.request("DELETE", path, token=tok)
        wa = r.headers.get("www-authenticate", "")
        expect(r.status == 401 and 'error="invalid_token"' in wa and wa.startswith("Bearer "), (tok, r.status, wa))
        d = r.obj()["detail"]
        expect("not valid" in d and "needs a token" not in d, (tok, d))
        expect(tok.encode() not in r.data and tok not in wa and s.token not in wa and s.token.encode() not in r.data,
               "the answer repeats a token")
    # the scheme is case-insensitive (RFC 9110 §11.1); the right token passes
    r = s.request("DELETE", path, headers={"Authorization": "bearer " + s.token})
    expect(r.status == 404, r.status)


def test_coverage():
    """Every (path, method, status) the OpenAPI document lists was answered
    and checked against its schema by the tests above."""
    want = set()
    for tpl, ops in OPENAPI["paths"].items():
        for m, op in ops.items():
            if m == "parameters":
                continue
            for st in op["responses"]:
                want.add((tpl, m, int(st)))
    missing = sorted(want - SEEN)
    expect(not missing, "documented but never exercised: %s" % missing)


TESTS = [test_basics, test_images, test_search, test_signature_pivots, test_damaged_pivots, test_tables_follow_writes,
         test_search_queue_full, test_identify, test_jobs,
         test_jobs_cancel_and_queue, test_jobs_file, test_malformed, test_image_content, test_thumbnail,
         test_moved_collection, test_connection_limits, test_concurrent, test_kill9_durability, test_external_writes,
         test_sigterm, test_tls, test_security, test_create, test_content_dirs, test_unauthorized, test_coverage]


def main():
    failed = 0
    try:
        for t in TESTS:
            if ONLY and t.__name__ not in ONLY:
                continue
            t0 = time.time()
            try:
                t()
                print("ok   %-28s %.2f s" % (t.__name__, time.time() - t0), flush=True)
            except Exception:
                failed += 1
                print("FAIL %s" % t.__name__, flush=True)
                traceback.print_exc()
        if MAIN.proc.poll() is not None:
            print("FAIL the main server died:\n" + "".join(MAIN.log[-30:]))
            failed += 1
        rc = MAIN.stop()
        if rc != 0:
            print("FAIL main server exit status %d:\n%s" % (rc, "".join(MAIN.log[-30:])))
            failed += 1
    finally:
        if MAIN.proc.poll() is None:
            MAIN.proc.kill()
        shutil.rmtree(TMP, ignore_errors=True)
    print("%d failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
