#!/usr/bin/env python3
"""Writes and hedging through the cluster's front ends: one JetStream server, three CPU shards with 2
copies of each of P = 8 partitions, `patina serve photos --cluster URL` and the CLI.

- an add is found by a search started right after its acknowledgement (through serve and through
  `patina index --cluster` + `patina search --cluster`); a delete leaves no phantom; a replace gives the
  new descriptor;
- concurrent writers (add, delete) and searchers (k-NN with k above the rows: every live image) for
  about 20 s while a fourth shard joins (its copies load and turn ready during the writes) and leaves: a search that starts after an add's acknowledgement (and ends before its delete begins)
  sees it, a search that starts after a delete's acknowledgement does not;
- a shard stopped with SIGSTOP costs a query one hedge delay, not deadlines: with --deadline 8000 and
  --hedge 300 the fan-out of a query takes well under the deadline and its answer is whole and equal
  to the one before.

Runs as a script (exit 77 = skipped: no nats-server, no samples) or under pytest. Environment:
PATINA_CLI (the patina program), PATINA_SOURCE_DIR.
"""
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_cluster_basic import CLI, P, SRC, Cluster, Skip, free_port, jsonl, run  # noqa: E402

TOKEN = "cluster-writes-token"
COLL = "photos"


class Front:
    """patina serve photos --cluster URL."""

    def __init__(self, c, *extra):
        self.port = free_port()
        tok = os.path.join(c.tmp, "token")
        with open(tok, "w") as f:
            f.write(TOKEN + "\n")
        self.log = open(os.path.join(c.tmp, f"serve-{self.port}.log"), "w")
        self.proc = subprocess.Popen([CLI, "serve", COLL, "--cluster", c.url, "--listen", f"127.0.0.1:{self.port}",
                                      "--token-file", tok, "-q", *extra], cwd=SRC, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"
        for _ in range(200):
            try:
                self.get("/healthz")
                return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("serve --cluster did not start")

    def call(self, method, path, body=None, ctype=None, auth=False):
        req = urllib.request.Request(self.base + path, data=body, method=method)
        if ctype:
            req.add_header("Content-Type", ctype)
        if auth:
            req.add_header("Authorization", "Bearer " + TOKEN)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read() or b"null") if "json" in r.headers.get("Content-Type", "") \
                    else r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def get(self, path):
        return self.call("GET", path)

    def put(self, key, data):
        return self.call("PUT", f"/v1/collections/{COLL}/images/{key}", data, "image/jpeg", auth=True)

    def delete(self, key):
        return self.call("DELETE", f"/v1/collections/{COLL}/images/{key}", auth=True)

    def search_image(self, data, k=5, extra=""):
        return self.call("POST", f"/v1/collections/{COLL}/search?k={k}{extra}", data, "image/jpeg")

    def search_key(self, key, k=5):
        return self.call("POST", f"/v1/collections/{COLL}/search", json.dumps({"key": key, "k": k}).encode(),
                         "application/json")

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def keys_at_zero(answer):
    return {h["key"] for h in answer["hits"] if h["distance"] == 0}


def setup(files):
    c = Cluster()
    run("cluster", "create", COLL, "--cluster", c.url, "--partitions", str(P), "-f", "cedd")
    for name in ("s1", "s2", "s3"):
        c.shard(COLL, name, 2)
    c.wait_ready(COLL, ["s1", "s2", "s3"], copies=2)
    return c


def check_add_delete_replace(c, front, files):
    imgs = [open(os.path.join(SRC, f), "rb").read() for f in files]
    # through serve: add, found by a search right after the acknowledgement
    for i in range(6):
        st, a = front.put(f"one/{i}", imgs[i])
        assert st == 201 and a["created"] is True, (st, a)
        st, s = front.search_key(f"one/{i}")
        assert st == 200 and f"one/{i}" in keys_at_zero(s), (i, s)
        assert s["partial"] is False and s["coverage"]["partitions"] == P and "fanout_ms" in s["timing"], s
        assert 0 <= s["timing"]["shard_ms"] <= s["timing"]["wait_ms"] <= s["timing"]["fanout_ms"], s["timing"]
    # POST of an existing key: 409; PUT of the same key: a replace (200, created false)
    st, a = front.call("POST", f"/v1/collections/{COLL}/images?key=one/0", imgs[0], "image/jpeg", auth=True)
    assert st == 409, (st, a)
    # replace: the new descriptor is what is found
    st, a = front.put("one/0", imgs[10])
    assert st == 200 and a["created"] is False, (st, a)
    st, s = front.search_image(imgs[10], k=10)
    assert "one/0" in keys_at_zero(s), s
    st, s = front.search_image(imgs[0], k=10)
    assert "one/0" not in keys_at_zero(s), s
    # delete: no phantom
    for i in range(1, 4):
        st, a = front.delete(f"one/{i}")
        assert st == 200 and a["deleted"] is True, (st, a)
        st, s = front.search_image(imgs[i], k=50)
        assert st == 200 and f"one/{i}" not in {h["key"] for h in s["hits"]}, (i, s)
    st, a = front.delete("one/1")
    assert st == 404, (st, a)
    st, rec = front.get(f"/v1/collections/{COLL}/images/one/4")
    assert st == 200 and rec["key"] == "one/4" and rec["tables"] == ["cedd:compact=0"], rec
    # through the CLI: patina index --cluster, then patina search --cluster right after
    for f in files[12:15]:
        run("index", COLL, "--cluster", c.url, "--root", ".", "-q", "-f", "cedd", f)
        k = jsonl(run("search", COLL, "--cluster", c.url, "-f", "cedd", "-k", "3", f, "--format", "json").stdout)
        assert any(h["key"] == f and h["distance"] == 0 for h in k[0]["hits"]), (f, k)
    # the collection's information and metrics
    st, info = front.get(f"/v1/collections/{COLL}")
    assert st == 200 and info["cluster"] is True and info["partitions"] == P and info["partitions_ready"] == P, info
    st, text = front.get("/metrics")
    assert "patina_cluster_fanout_seconds_bucket" in text and "patina_cluster_requests_total" in text, text
    # the fan-out's split: every answer counted once in each histogram, the shard's part the smallest
    counts, sums = {}, {}
    for line in text.splitlines():
        for name in ("fanout", "request", "shard"):
            pre = f"patina_cluster_{name}_seconds_"
            if line.startswith(pre + f'count{{collection="{COLL}"}}'):
                counts[name] = int(line.split()[-1])
            elif line.startswith(pre + f'sum{{collection="{COLL}"}}'):
                sums[name] = float(line.split()[-1])
    assert len(counts) == 3 and len(set(counts.values())) == 1 and counts["fanout"] > 0, text
    assert sums["shard"] <= sums["request"] <= sums["fanout"] + 1e-3, sums


def check_concurrent(c, front, files, seconds=20.0):
    imgs = [open(os.path.join(SRC, f), "rb").read() for f in files]
    lock = threading.Lock()
    added = {}    # key -> acknowledgement time of its add
    deleting = {}  # key -> time its delete began
    deleted = {}  # key -> acknowledgement time of its delete
    errors = []
    stop = time.monotonic() + seconds

    def writer(w):
        rnd = random.Random(w)
        n = 0
        mine = []
        while time.monotonic() < stop and not errors:
            if mine and (len(mine) > 12 or rnd.random() < 0.35):
                key = mine.pop(rnd.randrange(len(mine)))
                with lock:
                    deleting[key] = time.monotonic()
                st, a = front.delete(key)
                if st != 200:
                    errors.append(f"delete {key}: {st} {a}")
                    return
                with lock:
                    deleted[key] = time.monotonic()
            else:
                key = f"w{w}/{n}"
                n += 1
                st, a = front.put(key, imgs[rnd.randrange(len(imgs))])
                if st != 201:
                    errors.append(f"add {key}: {st} {a}")
                    return
                with lock:
                    added[key] = time.monotonic()
                mine.append(key)
                # read your write, at once
                st, s = front.search_key(key, k=1000)
                if st != 200 or key not in {h["key"] for h in s["hits"]}:
                    errors.append(f"add {key} acknowledged, not found by the search after it: {st} {s}")
                    return

    def searcher(sidx):
        rnd = random.Random(100 + sidx)
        while time.monotonic() < stop and not errors:
            with lock:
                before = dict(added), dict(deleting), dict(deleted)
            t0 = time.monotonic()
            st, s = front.search_image(imgs[rnd.randrange(len(imgs))], k=1000)
            t1 = time.monotonic()
            if st != 200 or s["partial"]:
                errors.append(f"search: {st} {s}")
                return
            seen = [h["key"] for h in s["hits"]]
            got = set(seen)
            if len(got) != len(seen):
                errors.append(f"a key twice in one answer: {seen}")
            with lock:
                during = dict(deleting)
            ack, _, gone = before
            for key, t in ack.items():
                if t < t0 and key not in during and key not in got:
                    errors.append(f"lost: {key} acknowledged at {t:.3f}, search {t0:.3f}-{t1:.3f}")
            for key, t in gone.items():
                if t < t0 and key in got:
                    errors.append(f"phantom: {key} deleted at {t:.3f}, search {t0:.3f}-{t1:.3f}")

    def churn():
        # copies turn ready while writes go on: s4 joins (takes partitions, loads, turns ready), then
        # leaves cleanly (its partitions' other copies answer)
        time.sleep(seconds * 0.2)
        c.shard(COLL, "s4", 2)
        time.sleep(seconds * 0.45)
        c.kill("s4", signal.SIGTERM)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)] + \
              [threading.Thread(target=searcher, args=(s,)) for s in range(2)] + [threading.Thread(target=churn)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    assert len(added) >= 10 and len(deleted) >= 3, (len(added), len(deleted))
    return len(added), len(deleted)


def check_hedge(c, files):
    """SIGSTOP of a shard: the queries cost about one hedge delay."""
    front = Front(c, "--deadline", "8000", "--hedge", "300")
    img = open(os.path.join(SRC, files[0]), "rb").read()
    try:
        st, whole = front.search_image(img, k=10)
        assert st == 200 and not whole["partial"], whole
        c.shards["s2"].send_signal(signal.SIGSTOP)
        try:
            fan = []
            for _ in range(4):  # within the member entry's TTL (5 s): s2 is still listed as ready
                st, a = front.search_image(img, k=10)
                assert st == 200 and not a["partial"], a
                assert [(h["key"], h["distance"]) for h in a["hits"]] == \
                       [(h["key"], h["distance"]) for h in whole["hits"]], (a, whole)
                fan.append(a["timing"]["fanout_ms"])
            st, text = front.get("/metrics")
            hedged = [ln for ln in text.splitlines() if 'outcome="hedged"' in ln]
        finally:
            c.shards["s2"].send_signal(signal.SIGCONT)
        # s2 actively holds some partitions, so a query waits for it up to the hedge delay, then its
        # partitions' other copies answer: far below one deadline (8000 ms), let alone two
        assert max(fan) < 2500, fan
        assert any(float(ln.split()[-1]) >= 1 for ln in hedged), hedged
        return fan
    finally:
        front.close()


def test_cluster_writes():
    samples = os.path.join(SRC, "samples")
    if not os.path.isdir(samples):
        raise Skip("no samples/ (scripts/fetch-samples.sh)")
    files = sorted(os.path.relpath(os.path.join(d, f), SRC) for d, _, fs in os.walk(samples) for f in fs
                   if f.lower().endswith((".jpg", ".jpeg")))[:24]
    c = setup(files)
    try:
        front = Front(c)
        try:
            check_add_delete_replace(c, front, files)
            na, nd = check_concurrent(c, front, files)
        finally:
            front.close()
        fan = check_hedge(c, files)
        print(f"concurrent: {na} adds, {nd} deletes; fan-out with a stopped shard: {fan} ms")
    finally:
        c.close()


if __name__ == "__main__":
    try:
        test_cluster_writes()
    except Skip as e:
        print(f"test_cluster_writes: skipped: {e}")
        sys.exit(77)
    print("test_cluster_writes: OK")
