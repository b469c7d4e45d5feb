"""Headless-browser tests of the web UI (web/): Debian's chromium and
chromium-driver driven by python3-selenium.

The page is served by `patina serve` when the CLI has that subcommand
(PATINA_CLI, default build/patina). A build without it gets a stand-in
instead: MockServe below, a few routes of the server's API (GET
/v1/collections, POST .../search and .../identify, GET .../images/KEY with
?content=1 or ?thumbnail=N (the stand-in sends the original for both),
problem+json errors) answered through the Python binding, so
the UI's own behaviour is tested either way; the server-specific test is
skipped with the reason. Without chromium, chromedriver or selenium every
test is skipped, saying which is missing.

    PATINA_LIB=build/libpatina.so python3 -m pytest tests/serve
"""

import email.parser
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("PATINA_LIB", os.path.join(REPO, "build", "libpatina.so"))
CLI = os.environ.get("PATINA_CLI", os.path.join(REPO, "build", "patina"))
SAMPLES = os.environ.get("PATINA_SAMPLES_DIR", os.path.join(REPO, "samples"))
WEB = os.path.join(REPO, "web")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # pragma: no cover
    webdriver = None

import numpy as np  # noqa: E402
import patina  # noqa: E402

PHOTOS = ["opencv/baboon.jpg", "opencv/fruits.jpg", "opencv/HappyFish.jpg", "opencv/pic1.png",
          "opencv/left01.jpg", "opencv/blox.jpg", "kphotoalbum/bar55.jpg"]
UNREGISTERED = "opencv/building.jpg"  # a photograph of none of the registered items
# keys that are no file: a long path and a long name without a break
LONG_KEYS = ["album/" + "a-very-long-folder-name-" * 12 + "/IMG_" + "9" * 120 + ".jpg", "x" * 400]


def has_serve():
    if not os.access(CLI, os.X_OK):
        return False
    p = subprocess.run([CLI, "help", "serve"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return p.returncode == 0


# ------------------------------------------------------------- the stand-in
class MockServe(BaseHTTPRequestHandler):
    """The routes the UI calls, over patina.Collection (see the module doc)."""
    colls = {}   # name -> path
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def problem(self, status, detail):
        self.reply(status, {"type": "about:blank", "title": {400: "Bad Request", 404: "Not Found",
                                                             415: "Unsupported Media Type",
                                                             422: "Unprocessable Content"}.get(status, "Error"),
                            "status": status, "detail": detail}, "application/problem+json")

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if parts[:1] != ["v1"]:
            name = url.path.lstrip("/") or "index.html"
            path = os.path.join(WEB, os.path.basename(name))
            if not os.path.isfile(path):
                return self.problem(404, "no such file")
            ctype = {"html": "text/html", "js": "text/javascript", "css": "text/css"}[path.rsplit(".", 1)[1]]
            return self.reply(200, open(path, "rb").read(), ctype)
        if parts[1:] == ["collections"]:
            out = []
            for name, path in self.colls.items():
                with patina.Collection(path, readonly=True) as c:
                    tables = [{"spec": t.spec, "rows": t.rows, "descriptor_bytes": t.descriptor_bytes,
                               "family": t.spec.split(":")[0],
                               "use": "identify" if t.spec.startswith("rootsift") else "search"}
                              for t in c.tables().values()]
                    out.append({"name": name, "records": len(c), "tables": tables})
            return self.reply(200, {"collections": out})
        if len(parts) == 5 and parts[1] == "collections" and parts[3] == "images":
            if parts[2] not in self.colls:
                return self.problem(404, f"no collection '{parts[2]}' is served here")
            with patina.Collection(self.colls[parts[2]], readonly=True) as c:
                rec = c.get(parts[4])
            if rec is None:
                return self.problem(404, f"collection '{parts[2]}' has no image '{parts[4]}'")
            if "content=1" in url.query or "thumbnail" in url.query:
                if not os.path.isfile(rec.key):
                    return self.problem(404, f"image '{rec.key}': this key is not a file path")
                return self.reply(200, open(rec.key, "rb").read(), "image/jpeg")
            return self.reply(200, rec.__dict__)
        return self.problem(404, f"no route {url.path}")

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if len(parts) != 4 or parts[1] != "collections" or parts[3] not in ("search", "identify"):
            return self.problem(404, f"no route {url.path}")
        if parts[2] not in self.colls:
            return self.problem(404, f"no collection '{parts[2]}' is served here")
        msg = email.parser.BytesParser().parsebytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body)
        fields = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
                  for p in msg.get_payload()} if msg.is_multipart() else {}
        if "image" not in fields:
            return self.problem(400, "no image: the multipart body has no part named 'image'")
        try:
            with patina.Collection(self.colls[parts[2]], readonly=True) as c:
                if parts[3] == "search":
                    fam = fields.get("family", b"").decode() or None
                    k = int(fields.get("k", b"10"))
                    hits = c.search(fields["image"], k=k, family=fam)
                    spec = patina.Extractor(fam).spec if fam else next(iter(c.tables()))
                    return self.reply(200, {"collection": parts[2], "family": spec, "k": k, "rows": len(c),
                                            "hits": [{"rank": i + 1, "id": h.id, "key": h.key, "distance": h.distance}
                                                     for i, h in enumerate(hits)]})
                half = int(fields.get("half_query", b"0"))
                res = c.identify(fields["image"], k=int(fields.get("k", b"5")),
                                 verify=fields.get("verify", b"1") == b"1", half_query=half)
                out = {"collection": parts[2], "decision": res.decision, "features": res.features,
                       "threshold": res.threshold,  # the binding's default, as the server's
                       "accept": "significance",
                       "hits": [{"rank": i + 1, "id": h.id, "key": h.key, "score": h.score,
                                 "matches": h.matches, "inliers": h.inliers,
                                 "verified": h.verified} for i, h in enumerate(res.candidates)]}
                if half:
                    out["half_query"] = {"features": half, "margin": 10.0, "taken": res.half_query_taken}
                return self.reply(200, out)
        except patina.FormatError:
            # the server's words (src/serve/handlers.c)
            return self.problem(415, "the query image is not a JPEG, PNG or PNM image")
        except patina.Error as e:
            return self.problem(422, str(e))


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def photos():
    paths = [os.path.join(SAMPLES, p) for p in PHOTOS]
    if not all(os.path.isfile(p) for p in paths):
        pytest.skip("sample photographs missing: run scripts/fetch-samples.sh")
    return paths


@pytest.fixture(scope="module")
def collections(photos, tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    photo_coll, refs = str(d / "photos"), str(d / "refs")
    with patina.Collection(photo_coll, create=True, family="cedd") as c:
        c.add_batch([(p, p) for p in photos])
    with patina.Collection(refs, create=True, family="rootsift:m=128,n=256") as c:
        c.add_batch([(p, p) for p in photos])
    wide = str(d / "wide")
    with patina.Collection(wide, create=True, family="cedd") as c:
        c.add_batch([(photos[2], photos[2])] + [(k, photos[i]) for i, k in enumerate(LONG_KEYS)])
    return {"photos": photo_coll, "refs": refs, "wide": wide}


def start_patina_serve(colls, jobs_coll=None):
    """patina serve over the collections and (jobs_coll) an empty one for
    bulk jobs, thumbnails from the sample folder; (process, URL, write token)."""
    extra = [jobs_coll, "--create"] if jobs_coll else []
    p = subprocess.Popen([CLI, "serve", *colls.values(), *extra, "--listen", "127.0.0.1:0", "--web", WEB,
                          "--content-dir", SAMPLES, "-q"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = token = None
    for _ in range(20):
        line = p.stderr.readline().decode()
        m = re.search(r"listening on http://(\d+\.\d+\.\d+\.\d+|\[[0-9a-f:]+\]|localhost):(\d+)", line)
        if m:
            url = f"http://127.0.0.1:{m.group(2)}"
        m = re.search(r"Bearer \.\.\.\): (\S+)", line)
        if m:
            token = m.group(1)
        if not line or "batching window" in line:
            break
    if not url or not token:
        p.kill()
        raise AssertionError("patina serve did not say where it listens, or its token")
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, url, token


class ServedURL(str):
    """The base URL, with the server's write token (None: the stand-in)."""
    def __new__(cls, url, token):
        u = super().__new__(cls, url)
        u.token = token
        return u


@pytest.fixture(scope="module", params=["patina-serve", "stand-in"])
def base_url(request, collections):
    if request.param == "patina-serve":
        if not has_serve():
            pytest.skip(f"{CLI} has no 'serve' subcommand (the serve branch): the UI is tested against the stand-in")
        proc, url, token = start_patina_serve(collections, os.path.join(os.path.dirname(collections["photos"]),
                                                                        "jobs"))
        yield ServedURL(url, token)
        proc.terminate()
        proc.wait(20)
        return
    MockServe.colls = collections
    srv = ThreadingHTTPServer(("127.0.0.1", 0), MockServe)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield ServedURL(f"http://127.0.0.1:{srv.server_address[1]}", None)
    srv.shutdown()


@pytest.fixture(scope="module")
def browser():
    if webdriver is None:
        pytest.skip("python3-selenium missing (apt-get install python3-selenium)")
    if not CHROMIUM or not DRIVER:
        pytest.skip("chromium or chromedriver missing (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1000"):
        opts.add_argument(a)
    # the browser without the ASan runtime that a sanitizer build preloads
    # into python3 (tests/run_python_tests.sh)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    drv = webdriver.Chrome(service=Service(DRIVER, env=env), options=opts)
    drv.set_page_load_timeout(30)
    yield drv
    drv.quit()


def upload(drv, input_id, path):
    el = drv.find_element(By.ID, input_id)
    drv.execute_script("arguments[0].hidden = false;", el)   # chromedriver types only into visible inputs
    el.send_keys(path)


def wait(drv, cond, timeout=60):
    return WebDriverWait(drv, timeout).until(lambda d: cond(d))


_loads = iter(range(1, 1 << 30))


def open_page(drv, base_url, page):
    """A fresh load of the UI on `page` (a new query string each time: going
    from one #page to another in the same document would only fire
    hashchange, and a collections reload started by an earlier test could
    then replace the selects under this one), once its collections are in
    (the collections table lists every one; the pages' menus only some)."""
    drv.get(f"{base_url}/?load={next(_loads)}#{page}")
    wait(drv, lambda d: d.execute_script(
        "const t = document.getElementById('collections-table');"
        "return t.getAttribute('aria-busy') === 'false' && t.querySelectorAll('tbody tr').length > 0"))


def options(drv, select_id):
    return drv.execute_script(f"return [...document.querySelectorAll('#{select_id} option')].map(o => o.value)")


# --------------------------------------------------------------------- tests
def test_search_shows_ranked_thumbnails(browser, base_url, photos, collections):
    open_page(browser, base_url, "search")
    browser.find_element(By.CSS_SELECTOR, "#search-collection option[value=photos]").click()
    upload(browser, "search-file", photos[1])
    k = browser.find_element(By.ID, "search-k")
    k.clear()
    k.send_keys("5")
    browser.find_element(By.ID, "search-go").click()
    hits = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results li.hit"))
    assert len(hits) == 5
    assert hits[0].get_attribute("data-key") == photos[1]
    assert "distance 0.00000" in hits[0].text
    # the same ranking as the binding's
    with patina.Collection(collections["photos"], readonly=True) as c:
        want = [h.key for h in c.search(photos[1], k=5)]
    assert [h.get_attribute("data-key") for h in hits] == want
    assert "5 of 7 images" in browser.find_element(By.ID, "search-summary").text
    # thumbnails come from the image route (?thumbnail=256): all five load,
    # made by the server (at most 256 pixels on the longer side; the
    # stand-in sends the originals)
    wait(browser, lambda d: d.execute_script(
        "const im = [...document.querySelectorAll('#search-results img')];"
        "return im.length === 5 && im.every(i => i.complete && i.naturalWidth > 0)"))
    imgs = browser.execute_script(
        "return [...document.querySelectorAll('#search-results img')].map(i => [i.src, i.naturalWidth, i.naturalHeight])")
    assert all(src.endswith("?thumbnail=256") for src, _, _ in imgs), imgs
    if base_url.token:
        assert all(max(w, h) <= 256 for _, w, h in imgs), imgs
        assert max(max(w, h) for _, w, h in imgs) == 256, imgs  # the photographs are larger: cut to 256
    # a tile opens the original in a new tab
    links = browser.execute_script(
        "return [...document.querySelectorAll('#search-results li.hit a.thumb')]"
        ".map(a => [a.closest('li').dataset.key, a.href, a.target])")
    assert len(links) == 5 and all(t == "_blank" and href.endswith("?content=1") for _, href, t in links), links
    key, href, _ = links[0]
    with urllib.request.urlopen(href) as resp:
        assert resp.read() == open(key, "rb").read()


def test_demo_collection_shows_thumbnails(browser, photos):
    """The README's first hour: `make run`'s demo (scripts/demo.sh: the
    sample photographs indexed into demo/photos.patina, a cropped,
    rescaled, recompressed variant of one as the query), then `patina serve
    demo/photos.patina --content-dir samples`: a search with the demo's
    query on the Search page ranks the source first, and its tile shows the
    server's thumbnail."""
    if not has_serve():
        pytest.skip(f"{CLI} has no 'serve' subcommand")
    build = os.path.dirname(CLI)
    if not os.access(os.path.join(build, "patina-variant"), os.X_OK):
        pytest.skip(f"no {build}/patina-variant (the demo's query maker; make run or make test build it)")
    if os.path.realpath(SAMPLES) != os.path.realpath(os.path.join(REPO, "samples")):
        pytest.skip("the demo indexes the repository's samples/ (PATINA_SAMPLES_DIR points elsewhere)")
    demo = subprocess.run([os.path.join(REPO, "scripts", "demo.sh"), build], capture_output=True, text=True,
                          timeout=600)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    src = re.search(r"query: demo/query\.jpg = (\S+) ", demo.stdout).group(1)
    proc, url, _ = start_patina_serve({"photos.patina": os.path.join(REPO, "demo", "photos.patina")})
    try:
        open_page(browser, url, "search")
        browser.find_element(By.CSS_SELECTOR, "#search-collection option[value='photos.patina']").click()
        upload(browser, "search-file", os.path.join(REPO, "demo", "query.jpg"))
        k = browser.find_element(By.ID, "search-k")
        k.clear()
        k.send_keys("3")
        browser.find_element(By.ID, "search-go").click()
        hits = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results li.hit"))
        assert hits[0].get_attribute("data-key") == src, [h.get_attribute("data-key") for h in hits]
        wait(browser, lambda d: d.execute_script(
            "const i = document.querySelector('#search-results li.hit img');"
            "return i && i.complete && i.naturalWidth > 0"))
        src_url, w, h = browser.execute_script(
            "const i = document.querySelector('#search-results li.hit img');"
            "return [i.src, i.naturalWidth, i.naturalHeight]")
        assert src_url.endswith("?thumbnail=256") and max(w, h) == 256, (src_url, w, h)
        assert "no preview" not in hits[0].text
    finally:
        proc.terminate()
        proc.wait(20)


def test_search_error_is_shown(browser, base_url, tmp_path):
    bad = tmp_path / "not-an-image.jpg"
    bad.write_bytes(b"this is text, not a JPEG")
    open_page(browser, base_url, "search")
    upload(browser, "search-file", str(bad))
    browser.find_element(By.ID, "search-go").click()
    box = wait(browser, lambda d: d.find_element(By.ID, "error") if d.find_element(By.ID, "error").is_displayed()
               else None)
    # status, title and the server's detail, separated
    assert box.text == "415 Unsupported Media Type: the query image is not a JPEG, PNG or PNM image", box.text


def test_identification(browser, base_url, photos):
    open_page(browser, base_url, "identify")
    browser.find_element(By.CSS_SELECTOR, "#identify-collection option[value=refs]").click()
    upload(browser, "identify-file", photos[0])
    browser.find_element(By.ID, "identify-go").click()
    dec = wait(browser, lambda d: d.find_element(By.ID, "identify-decision")
               if d.find_element(By.ID, "identify-decision").is_displayed() else None)
    assert dec.text.startswith("Match: " + photos[0]), dec.text
    assert "threshold of 3 " in dec.text or "threshold of 3;" in dec.text, dec.text  # the significance's default
    assert re.search(r"significance [0-9.]+ \(\d+ inliers\)", dec.text), dec.text
    rows = browser.find_elements(By.CSS_SELECTOR, "#identify-candidates tbody tr")
    assert rows and rows[0].get_attribute("data-key") == photos[0]
    wait(browser, lambda d: d.find_element(By.ID, "identify-figure").is_displayed())
    # the verified keypoint pairs were drawn as lines (the server sends them;
    # the stand-in, over the Python binding, has none)
    drawn = int(browser.find_element(By.ID, "identify-canvas").get_attribute("data-pairs"))
    caption = browser.find_element(By.ID, "identify-caption").text
    if base_url.token:
        assert drawn > 10 and caption.startswith(f"{drawn} verified keypoint pairs"), (drawn, caption)
    else:
        assert drawn == 0 and "no keypoint pairs" in caption, caption
    # something was drawn on the canvas
    assert browser.execute_script(
        "const c = document.getElementById('identify-canvas');"
        "const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
        "for (let i = 3; i < px.length; i += 4) if (px[i]) return true; return false;")


def test_identification_closeup(browser, base_url, photos, tmp_path):
    """The close-up box: the photo halved is identified too (half_query), and the decision says when its
    answer was kept. A 2x close-up of a registered photo (every pixel doubled) halves back to it."""
    img = patina.decode(photos[0])
    close = tmp_path / "closeup.ppm"
    close.write_bytes(b"P6\n%d %d\n255\n" % (2 * img.shape[1], 2 * img.shape[0]) +
                      np.ascontiguousarray(np.repeat(np.repeat(img, 2, axis=0), 2, axis=1)).tobytes())
    open_page(browser, base_url, "identify")
    browser.find_element(By.CSS_SELECTOR, "#identify-collection option[value=refs]").click()
    box = browser.find_element(By.ID, "identify-closeup")
    if not box.is_selected():
        box.click()
    upload(browser, "identify-file", str(close))
    browser.find_element(By.ID, "identify-go").click()
    dec = wait(browser, lambda d: d.find_element(By.ID, "identify-decision")
               if d.find_element(By.ID, "identify-decision").is_displayed() else None)
    assert dec.text.startswith("Match: " + photos[0]), dec.text
    assert "answered by the photo halved" in dec.text, dec.text
    box.click()  # off again for the other tests


def test_collections_page(browser, base_url):
    open_page(browser, base_url, "collections")
    # the rows' texts in one script call (a reload may replace the rows meanwhile)
    rows = wait(browser, lambda d: d.execute_script(
        "return [...document.querySelectorAll('#collections-table tbody tr')]"
        ".map(r => [r.cells[0].textContent, r.textContent])"))
    text = dict(rows)
    assert set(text) - {"jobs"} == {"photos", "refs", "wide"}
    assert "7" in text["photos"] and "cedd:compact=0" in text["photos"]


def test_unknown_collection_problem(browser, base_url):
    """A problem document from the API is shown with its status and detail."""
    open_page(browser, base_url, "search")
    browser.execute_script(
        "const s = document.getElementById('search-collection');"
        "const o = document.createElement('option'); o.value = o.textContent = 'no-such'; s.appendChild(o);"
        "s.value = 'no-such';")
    upload(browser, "search-file", os.path.join(SAMPLES, PHOTOS[0]))
    browser.find_element(By.ID, "search-go").click()
    box = wait(browser, lambda d: d.find_element(By.ID, "error") if d.find_element(By.ID, "error").is_displayed()
               else None)
    assert "404" in box.text and "no-such" in box.text


def test_unknown_shows_threshold(browser, base_url):
    """An `unknown` answer says what it was judged against: the threshold
    the API answered and the best candidate's score."""
    open_page(browser, base_url, "identify")
    upload(browser, "identify-file", os.path.join(SAMPLES, UNREGISTERED))
    browser.find_element(By.ID, "identify-go").click()
    dec = wait(browser, lambda d: d.find_element(By.ID, "identify-decision")
               if d.find_element(By.ID, "identify-decision").is_displayed() else None)
    assert re.match(r"Unknown: no registered item reaches the threshold of 3 \(the best, .+, scored significance "
                    r"[0-9.]+ \(\d+ inliers\); \d+ query features\)$", dec.text), dec.text


def test_pages_offer_usable_collections(browser, base_url):
    """The Identify page offers only collections with an identification
    table, the Search page only those with a searchable one (and only their
    searchable tables); a note names the others and why."""
    open_page(browser, base_url, "identify")
    assert options(browser, "identify-collection") == ["refs"]
    note = browser.find_element(By.ID, "identify-note").text
    assert "Not offered here: photos: cedd (search only: the Search page)" in note, note
    open_page(browser, base_url, "search")
    offered = options(browser, "search-collection")
    assert offered[:2] == ["photos", "wide"] and "refs" not in offered, offered
    assert options(browser, "search-family") == ["cedd:compact=0"]
    note = browser.find_element(By.ID, "search-note").text
    assert "refs: rootsift (identification only: the Identify page)" in note, note
    assert browser.find_element(By.ID, "search-go").is_enabled()


def test_no_searchable_collection(browser, collections):
    """A server whose only collection is for identification: the Search page
    says so (no menu of nothing, no misleading 'add images'), its button is
    off, and the Identify page offers the collection."""
    if not has_serve():
        pytest.skip(f"{CLI} has no 'serve' subcommand")
    proc, url, _ = start_patina_serve({"refs": collections["refs"]})
    try:
        open_page(browser, url, "search")
        assert options(browser, "search-collection") == []
        note = browser.find_element(By.ID, "search-note")
        assert note.is_displayed() and note.text == (
            "No collection served here has a searchable table. "
            "refs: rootsift (identification only: the Identify page)."), note.text
        assert not browser.find_element(By.ID, "search-go").is_enabled()
        open_page(browser, url, "identify")
        assert options(browser, "identify-collection") == ["refs"]
        assert not browser.find_element(By.ID, "identify-note").is_displayed()
    finally:
        proc.terminate()
        proc.wait(20)


def test_long_keys_keep_the_grid(browser, base_url, photos):
    """Keys of hundreds of characters stay on one line of their tile (cut
    with an ellipsis, the whole key in the title): every tile has the same
    size and the grid no horizontal overflow."""
    open_page(browser, base_url, "search")
    browser.find_element(By.CSS_SELECTOR, "#search-collection option[value=wide]").click()
    upload(browser, "search-file", photos[2])
    browser.find_element(By.ID, "search-go").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#search-results li.hit")) == 3)
    tiles = browser.execute_script(
        "const ol = document.getElementById('search-results');"
        "return {overflow: ol.scrollWidth - ol.clientWidth, tiles: [...ol.querySelectorAll('li.hit')].map(li => {"
        " const r = li.getBoundingClientRect(), k = li.querySelector('.key');"
        " return [li.dataset.key, k.title, Math.round(r.width), Math.round(r.height), k.getBoundingClientRect().height,"
        "         parseFloat(getComputedStyle(k).lineHeight) || 20]; })}")
    assert tiles["overflow"] <= 0, tiles
    rows = tiles["tiles"]
    assert sorted(r[0] for r in rows) == sorted([photos[2]] + LONG_KEYS), rows
    assert all(key == title for key, title, *_ in rows), rows
    assert len({w for _, _, w, *_ in rows}) == 1 and len({h for _, _, _, h, *_ in rows}) == 1, rows
    assert all(kh < 1.5 * lh for *_, kh, lh in rows), rows  # one line each
    # the keys without a file say so in their tile, the photograph has its thumbnail
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#search-results .thumb .none")) == 2)
    assert browser.find_element(By.CSS_SELECTOR, f"#search-results li.hit[data-key='{photos[2]}'] a.thumb img")


def test_bulk_job_progress(browser, base_url, photos):
    """Photos picked on the collections page go up as a tar bulk job; its
    progress bar runs to the end and the counts are shown."""
    if not base_url.token:
        pytest.skip("the stand-in has no bulk-job routes")
    open_page(browser, base_url, "collections")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#job-collection option[value=jobs]"))
    browser.find_element(By.CSS_SELECTOR, "#job-collection option[value=jobs]").click()
    browser.find_element(By.ID, "job-token").send_keys(base_url.token)
    browser.find_element(By.ID, "job-files").send_keys("\n".join(photos[:4]))
    browser.find_element(By.ID, "job-go").click()
    li = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#jobs li .state-done"), 120)[0]
    assert "4/4 files, 4 indexed, 0 unchanged, 0 failed" in li.text, li.text
    bar = browser.find_element(By.CSS_SELECTOR, "#jobs li progress")
    assert bar.get_attribute("max") == "4" and bar.get_attribute("value") == "4"
    assert not browser.find_element(By.ID, "error").is_displayed()
    # the collections table is reloaded when the job ends: 4 images in 'jobs'
    wait(browser, lambda d: d.execute_script(
        "return [...document.querySelectorAll('#collections-table tbody tr')]"
        ".some(r => r.cells[0].textContent === 'jobs' && r.cells[1].textContent === '4')"))
    # a fresh load lists the server's jobs (GET /v1/jobs), this one done
    jid = li.find_element(By.XPATH, "..").get_attribute("id")
    open_page(browser, base_url, "collections")
    listed = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, f"#jobs li#{jid} .state-done"))
    assert "4/4 files, 4 indexed" in listed[0].text, listed[0].text
    assert not browser.find_element(By.ID, "error").is_displayed()
    # a wrong token: the 401 is shown
    tok = browser.find_element(By.ID, "job-token")
    tok.clear()
    tok.send_keys("wrong-token")
    browser.find_element(By.ID, "job-files").send_keys(photos[4])
    browser.find_element(By.ID, "job-go").click()
    box = wait(browser, lambda d: d.find_element(By.ID, "error") if d.find_element(By.ID, "error").is_displayed()
               else None)
    assert box.text.startswith("401 Unauthorized: "), box.text
