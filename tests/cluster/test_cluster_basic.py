#!/usr/bin/env python3
"""The cluster end to end: one JetStream server, two CPU shards, P = 8.

Sample photographs are indexed with cedd, signature and rootsift into an
embedded collection and, through the buckets, into a cluster collection;
the cluster's k-NN, range, SQFD (signature k-NN) and identify answers must
equal the embedded ones (compared by key, distance / score, inliers,
matches, decision: ids are allocated differently). Then kill -9 of a shard:
with 2 copies the answer stays whole; with 1 copy it is partial with the
exact coverage (the partitions the survivor holds, their references) and
identification says "incomplete".

Runs as a script (exit 77 = skipped: no nats-server, no samples) or under
pytest. Environment: PATINA_CLI (the patina program), PATINA_SOURCE_DIR.
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SRC = os.environ.get("PATINA_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
CLI = os.environ.get("PATINA_CLI", os.path.join(SRC, "build", "patina"))
P = 8
NIMAGES = 24


class Skip(Exception):
    pass


def nats_server():
    venv = os.path.join(SRC, ".venv-nats", "bin", "nats-server")
    if os.access(venv, os.X_OK):
        return venv
    found = shutil.which("nats-server")
    if not found:
        raise Skip("no nats-server (.venv-nats/bin/nats-server or on PATH: scripts/bootstrap.sh)")
    return found


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(*args, ok=(0,), **kw):
    r = subprocess.run([CLI, *args], cwd=SRC, capture_output=True, text=True, timeout=900, **kw)
    if r.returncode not in ok:
        raise AssertionError(f"patina {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r


def partition(key, p=P):
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % p


def jsonl(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def hits_of(answers):
    return [[(h["key"], h["distance"]) for h in a["hits"]] for a in answers]


def ident_of(answers):
    return [(a["decision"], [(h["key"], h["score"], h["inliers"], h["matches"], h["verified"]) for h in a["hits"]])
            for a in answers]


class Cluster:
    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="patina-cluster-")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.nats = subprocess.Popen([nats_server(), "-js", "-sd", os.path.join(self.tmp, "js"), "-a", "127.0.0.1",
                                      "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.shards = {}
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)

    def shard(self, coll, name, copies):
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        self.shards[name] = subprocess.Popen([CLI, "shard", coll, "--cluster", self.url, "--name", name, "--copies",
                                              str(copies), "--device", "cpu", "-j", "1"], cwd=SRC, stdout=log,
                                             stderr=subprocess.STDOUT)

    def status(self, coll):
        return json.loads(run("cluster", "status", coll, "--cluster", self.url, "--json").stdout)

    def wait_ready(self, coll, shards, each_all=False, timeout=120):
        end = time.time() + timeout
        while time.time() < end:
            st = self.status(coll)
            live = {m["name"]: m for m in st["members"]}
            if all(n in live for n in shards) and st["covered"] == P and \
                    (not each_all or all(len(live[n]["ready"]) == P for n in shards)):
                return st
            time.sleep(0.3)
        raise AssertionError(f"shards {shards} not ready: {self.status(coll)}")

    def kill(self, name, sig=signal.SIGKILL):
        self.shards[name].send_signal(sig)
        self.shards[name].wait(30)

    def close(self):
        for p in self.shards.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        self.nats.kill()
        self.nats.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)


def test_cluster_basic():
    samples = os.path.join(SRC, "samples")
    if not os.path.isdir(samples):
        raise Skip("no samples/ (scripts/fetch-samples.sh)")
    files = sorted(os.path.relpath(os.path.join(d, f), SRC) for d, _, fs in os.walk(samples) for f in fs)[:NIMAGES]
    queries = files[:3]
    c = Cluster()
    try:
        emb = os.path.join(c.tmp, "emb.patina")
        run("cluster", "create", "photos", "--cluster", c.url, "--partitions", str(P), "-f", "cedd", "-f", "signature",
            "-f", "rootsift")
        for fam in ("cedd", "signature", "rootsift"):
            run("index", emb, "--root", ".", "-q", "-j", "2", "-f", fam, *files)
            run("index", "photos", "--cluster", c.url, "--root", ".", "-q", "-j", "2", "-f", fam, *files)
        c.shard("photos", "s1", 2)
        c.shard("photos", "s2", 2)
        c.wait_ready("photos", ["s1", "s2"], each_all=True)

        def both(*args):
            e = jsonl(run(*args[:1], emb, *args[1:], "--format", "json").stdout)
            k = jsonl(run(*args[:1], "photos", "--cluster", c.url, *args[1:], "--format", "json").stdout)
            return e, k

        # k-NN (cedd), range (cedd), SQFD (signature k-NN), identify (rootsift)
        for args in (("search", "-f", "cedd", "-k", "5", *queries), ("search", "-f", "cedd", "--range", "45", *queries),
                     ("search", "-f", "signature", "-k", "5", *queries)):
            e, k = both(*args)
            assert hits_of(e) == hits_of(k), (args, e, k)
            assert all(a["partial"] is False and a["coverage"]["partitions"] == P for a in k)
        e, k = both("identify", "-k", "5", *queries[:2])
        assert ident_of(e) == ident_of(k), (e, k)

        # kill -9 with 2 copies: the other copy answers, whole
        c.kill("s1")
        e = jsonl(run("search", emb, "-f", "cedd", "-k", "5", *queries, "--format", "json").stdout)
        k = jsonl(run("search", "photos", "--cluster", c.url, "-f", "cedd", "-k", "5", *queries, "--format",
                      "json", "--deadline", "2000").stdout)
        assert hits_of(e) == hits_of(k)
        assert all(a["partial"] is False for a in k)
        c.kill("s2", signal.SIGTERM)  # a clean leave
        time.sleep(6)  # s1's entry expires (TTL 5 s)

        # 1 copy: kill -9 one shard, the answer is partial with the survivor's partitions
        c.shard("photos", "t1", 1)
        c.shard("photos", "t2", 1)
        st = c.wait_ready("photos", ["t1", "t2"])
        # the first to start may hold every partition until the other is ready for its share
        end = time.time() + 60
        while time.time() < end and any(len(x["copies"]) > 1 for x in st["partition_copies"]):
            time.sleep(0.3)
            st = c.wait_ready("photos", ["t1", "t2"])
        t2 = {m["name"]: m for m in st["members"]}["t2"]
        kept = set(t2["ready"])
        assert 0 < len(kept) < P, st
        c.kill("t1")
        wide = jsonl(run("search", emb, "-f", "cedd", "-k", str(NIMAGES), *queries, "--format", "json").stdout)
        k = jsonl(run("search", "photos", "--cluster", c.url, "-f", "cedd", "-k", "5", *queries, "--format", "json",
                      "--deadline", "2000", ok=(1,)).stdout)
        refs = sum(1 for f in files if partition(f) in kept)
        for w, a in zip(wide, k):
            assert a["partial"] is True
            assert a["coverage"] == {"partitions": len(kept), "partitions_total": P, "references": refs}, a
            expect = [(h["key"], h["distance"]) for h in w["hits"] if partition(h["key"]) in kept][:5]
            assert [(h["key"], h["distance"]) for h in a["hits"]] == expect
        k = jsonl(run("identify", "photos", "--cluster", c.url, "-k", "5", *queries[:2], "--format", "json",
                      "--deadline", "2000", ok=(1,)).stdout)
        assert all(a["decision"] == "incomplete" for a in k), k
        r = run("search", "photos", "--cluster", c.url, "-f", "cedd", "-k", "5", queries[0], "--no-partial",
                "--deadline", "2000", ok=(3,))
        assert "partitions answered" in r.stderr
    finally:
        c.close()


if __name__ == "__main__":
    try:
        test_cluster_basic()
    except Skip as e:
        print(f"skipped: {e}")
        sys.exit(77)
    print("test_cluster_basic: OK")
