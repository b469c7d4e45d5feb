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

Runs as a script (exit 77 = skipped: no nats-server, no samples, no GPU
for --device gpu) or under pytest. Environment: PATINA_CLI (the patina
program), PATINA_SOURCE_DIR, PATINA_BUILD_DIR (where a staged build keeps
bin/nats-server.xz: scripts/device.sh), PATINA_NATS_SERVER.

    test_cluster_basic.py                          # CPU shards (CTest test_cluster_basic)
    test_cluster_basic.py --device gpu --gpus 0/0  # two GPU shards sharing GPU 0
    test_cluster_basic.py --device gpu --gpus 0/1  # shard 1 on GPU 0, shard 2 on GPU 1
    test_cluster_basic.py --device gpu --gpus 0,1/0,1  # each shard splits its rows over both GPUs

--gpus gives the shards' --gpus in turn ("/" between shards, cycled); the
CTest entries test_cluster_basic_gpu_* (label gpu) run these.
"""
import argparse
import atexit
import hashlib
import lzma
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
BUILD = os.environ.get("PATINA_BUILD_DIR", "")
P = 8
NIMAGES = 24
# How the shards run (main() sets them from the command line): CPU by default.
DEVICE = "cpu"
GPUS = []  # the --gpus of the 1st, 2nd, ... shard started, cycled; [] = none given


class Skip(Exception):
    pass


def say(*a):
    print(*a, flush=True)


def shard_args(i):
    """The device arguments of the i-th shard started."""
    if DEVICE == "cpu":
        return ["--device", "cpu", "-j", "1"]
    return ["--device", DEVICE] + (["--gpus", GPUS[i % len(GPUS)]] if GPUS else [])


_unpacked = []


def nats_server():
    """$PATINA_NATS_SERVER, .venv-nats/bin/nats-server, a staged build's bin/nats-server or its
    bin/nats-server.xz (scripts/device.sh stages it so: the GPU machine has no NATS; unpacked here
    into a temporary folder), or nats-server on PATH."""
    cands = [os.environ.get("PATINA_NATS_SERVER", ""), os.path.join(SRC, ".venv-nats", "bin", "nats-server")]
    if BUILD:
        cands.append(os.path.join(BUILD, "bin", "nats-server"))
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    xz = os.path.join(BUILD, "bin", "nats-server.xz") if BUILD else ""
    if xz and os.path.isfile(xz):
        if not _unpacked:
            d = tempfile.mkdtemp(prefix="patina-nats-")
            atexit.register(shutil.rmtree, d, True)
            out = os.path.join(d, "nats-server")
            with lzma.open(xz) as f, open(out, "wb") as g:
                shutil.copyfileobj(f, g)
            os.chmod(out, 0o755)
            _unpacked.append(out)
        return _unpacked[0]
    found = shutil.which("nats-server")
    if not found:
        raise Skip("no nats-server (.venv-nats/bin/nats-server, PATINA_NATS_SERVER, $PATINA_BUILD_DIR/bin/"
                   "nats-server[.xz] or on PATH: scripts/bootstrap.sh nats)")
    return found


def gpu_count():
    """The GPUs the CLI sees (`patina info`: "gpus: N"; 0 in a build without CUDA)."""
    r = subprocess.run([CLI, "info"], capture_output=True, text=True, timeout=120)
    for line in r.stdout.splitlines():
        if line.startswith("gpus:"):
            return int(line.split()[1])
    return 0


def need_gpus():
    """Skip unless the GPUs that --gpus names exist (at least one for --device gpu)."""
    if DEVICE != "gpu":
        return
    want = 1 + max([int(x) for g in GPUS for x in g.split(",") if x.isdigit()] + [0])
    have = gpu_count()
    if have < want:
        raise Skip(f"{want} GPU{'s' if want > 1 else ''} needed (--gpus {'/'.join(GPUS) or 'default'}), "
                   f"`patina info` sees {have}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# A sanitizer build answers 10-30x slower: a query's deadline (5 s by default) cuts off shards that
# are only slow, and the answer comes back partial. Those builds give the cluster's queries 20 times
# the deadline asked for, and 10 minutes (the most) where none is.
SANITIZED = os.environ.get("PATINA_SANITIZE", "OFF") not in ("", "OFF")


def run(*args, ok=(0,), **kw):
    if SANITIZED and args[:1] in (("search",), ("identify",)) and "--cluster" in args:
        if "--deadline" in args:
            i = args.index("--deadline") + 1
            args = (*args[:i], str(min(600000, 20 * int(args[i]))), *args[i + 1:])
        else:
            args = (*args, "--deadline", "600000")
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
    def __init__(self, max_payload=None):
        """One JetStream server on loopback; max_payload: its max_payload in bytes (None: the server's
        default, 1 MiB)."""
        self.tmp = tempfile.mkdtemp(prefix="patina-cluster-")
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        conf = []
        if max_payload is not None:
            with open(os.path.join(self.tmp, "nats.conf"), "w") as f:
                f.write(f"max_payload: {int(max_payload)}\n")
            conf = ["-c", os.path.join(self.tmp, "nats.conf")]
        self.nats = subprocess.Popen([nats_server(), *conf, "-js", "-sd", os.path.join(self.tmp, "js"), "-a",
                                      "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        self.shards = {}
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)

    def shard(self, coll, name, copies, extra=(), device_args=None):
        """Starts shard name (device_args: its device arguments instead of shard_args')."""
        log = open(os.path.join(self.tmp, f"{name}.log"), "w")
        argv = [CLI, "shard", coll, "--cluster", self.url, "--name", name, "--copies", str(copies),
                *(shard_args(len(self.shards)) if device_args is None else device_args), *extra]
        say(f"start {name}: patina {' '.join(argv[1:])}")
        self.shards[name] = subprocess.Popen(argv, cwd=SRC, stdout=log, stderr=subprocess.STDOUT)

    def log(self, name):
        with open(os.path.join(self.tmp, f"{name}.log"), errors="replace") as f:
            return f.read()

    def status(self, coll):
        return json.loads(run("cluster", "status", coll, "--cluster", self.url, "--json").stdout)

    def wait_ready(self, coll, shards, each_all=False, copies=None, timeout=120):
        """Every partition ready somewhere; each_all: every shard ready for every partition; copies: the
        hand-over done (every partition held by exactly that many shards, all ready)."""
        end = time.time() + timeout
        while time.time() < end:
            st = self.status(coll)
            live = {m["name"]: m for m in st["members"]}
            np_ = st["partitions"]  # the collection's own (test_cluster_gpumem's is 4, not P)
            if all(n in live for n in shards) and st["covered"] == np_ and \
                    (not each_all or all(len(live[n]["ready"]) == np_ for n in shards)) and \
                    (copies is None or all(len(pc["copies"]) == copies and all(x["ready"] for x in pc["copies"])
                                           for pc in st["partition_copies"])):
                return st
            time.sleep(0.3)
        raise AssertionError(f"shards {shards} not ready: {self.status(coll)}\n" +
                             "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in shards))

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
    need_gpus()
    say(f"shards on {DEVICE}" + (f", --gpus {' / '.join(GPUS)}" if GPUS else "") +
        f"; {len(files)} images, P = {P}; the embedded collection on this process's default device")
    c = Cluster()
    try:
        emb = os.path.join(c.tmp, "emb.patina")
        run("cluster", "create", "photos", "--cluster", c.url, "--partitions", str(P), "-f", "cedd", "-f", "signature",
            "-f", "rootsift")
        for fam in ("cedd", "signature", "rootsift"):
            run("index", emb, "--root", ".", "-q", "-j", "2", "-f", fam, *files)
            run("index", "photos", "--cluster", c.url, "--root", ".", "-q", "-j", "2", "-f", fam, *files)
        # --drain-timeout 2: s2 stops last, when no shard is left to take its partitions
        c.shard("photos", "s1", 2, ("--drain-timeout", "2"))
        c.shard("photos", "s2", 2, ("--drain-timeout", "2"))
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
            say(f"{' '.join(args[:5])}: cluster == embedded ({sum(len(a['hits']) for a in k)} hits of "
                f"{len(queries)} queries: keys and distances)")
        e, k = both("identify", "-k", "5", *queries[:2])
        assert ident_of(e) == ident_of(k), (e, k)
        assert all(a["partial"] is False and a["coverage"]["partitions"] == P for a in k), k
        say(f"identify -k 5: cluster == embedded (decisions {[a['decision'] for a in k]}; keys, scores, inliers, "
            "matches)")
        # --distinct: the front end's sibling check reads the two references from their partitions and
        # decides as the embedded collection. The margin is set one above rank 1's lead over rank 2 for
        # each query that has a verified rank 2, so the check runs; S = 1 and a huge S decide both ways.
        # The margin counts inliers; with --accept inliers the threshold does too.
        e0 = jsonl(run("identify", emb, "-k", "5", "--threshold", "0", "--accept", "inliers", *files,
                       "--format", "json").stdout)
        asked, kept = 0, []
        for f, a in zip(files, e0):
            h = a["hits"]
            if len(h) < 2 or not h[1]["verified"] or not h[1]["inliers"]:
                continue
            d = str(h[0]["inliers"] - h[1]["inliers"] + 1)
            for s in ("1", "1000000"):
                e, k = both("identify", "-k", "2", "--threshold", "1", "--accept", "inliers", "--distinct", d,
                            "--sibling-inliers", s, f)
                assert ident_of(e) == ident_of(k), (f, d, s, e, k)
                if s == "1":
                    kept.append(k[0]["decision"] != "unknown")
                else:
                    assert k[0]["decision"] == "unknown", k  # not siblings: the margin fails
            asked += 1
            if asked == 3:
                break
        assert asked and any(kept), f"the sibling check was not exercised both ways ({asked} queries, {kept})"
        say(f"identify --distinct: cluster == embedded on {asked} queries whose margin needs the sibling check "
            f"({sum(kept)} of them kept by a sibling runner-up at S = 1, none at S = 10^6)")
        # the options the shards' verification and the front end's decision use travel with the request:
        # guided matching (in the shards), the ambiguity margin and a threshold (in the merge)
        e, k = both("identify", "-k", "5", "--guided", "--guided-ratio", "0.85", "--ambiguity", "0",
                    "--threshold", "0", *queries[:2])
        assert ident_of(e) == ident_of(k), (e, k)
        say(f"identify --guided --ambiguity 0 --threshold 0: cluster == embedded (decisions "
            f"{[a['decision'] for a in k]})")
        # the acceptance rule travels too: the shards' scores and the front end's calibration follow it
        e, k = both("identify", "-k", "5", "--accept", "inliers", *queries[:2])
        assert ident_of(e) == ident_of(k), (e, k)
        assert all(h["score"] == h["inliers"] for a in k for h in a["hits"] if h["verified"]), k
        say("identify --accept inliers: cluster == embedded, scores counted in inliers")
        # the half-size query: both answers merged over the partitions, then fused as the embedded
        # collection fuses them (margin 0: the halved photograph's answer wins wherever it scores more)
        for margin in ("0", "10"):
            e, k = both("identify", "-k", "5", "--half-query", "64", "--half-query-margin", margin, *queries[:2])
            assert ident_of(e) == ident_of(k), (margin, e, k)
            assert [a["half_query"] for a in e] == [a["half_query"] for a in k], (margin, e, k)
        say(f"identify --half-query 64: cluster == embedded at margins 0 and 10 (decisions "
            f"{[a['decision'] for a in k]})")

        # kill -9 with 2 copies: the other copy answers, whole
        c.kill("s1")
        e = jsonl(run("search", emb, "-f", "cedd", "-k", "5", *queries, "--format", "json").stdout)
        k = jsonl(run("search", "photos", "--cluster", c.url, "-f", "cedd", "-k", "5", *queries, "--format",
                      "json", "--deadline", "2000").stdout)
        assert hits_of(e) == hits_of(k)
        assert all(a["partial"] is False for a in k)
        say("kill -9 of s1 with copies 2: k-NN answers whole and equal to the embedded ones")
        c.kill("s2", signal.SIGTERM)  # a clean leave (no other shard: it waits --drain-timeout)
        time.sleep(6)  # s1's entry expires (TTL 5 s)

        # 1 copy: kill -9 one shard, the answer is partial with the survivor's partitions
        c.shard("photos", "t1", 1)
        c.shard("photos", "t2", 1)
        st = c.wait_ready("photos", ["t1", "t2"], copies=1)
        t2 = {m["name"]: m for m in st["members"]}["t2"]
        kept = set(t2["ready"])
        assert 0 < len(kept) < P, st
        c.kill("t1")
        wide = jsonl(run("search", emb, "-f", "cedd", "-k", str(NIMAGES), *queries, "--format", "json").stdout)
        r = run("search", "photos", "--cluster", c.url, "-f", "cedd", "-k", "5", *queries, "--format", "json",
                "--deadline", "2000", ok=(1,))
        k = jsonl(r.stdout)
        # while t1's entry lives on (TTL 5 s) the scatter asks t1, gets no responders, reads the members
        # again and asks t1 once more (rescue); after it, no member lists t1's partitions: either way the
        # answer says why it is partial
        assert "search: partial answer" in r.stderr and ("shard t1: no responders" in r.stderr or
                                                         "no shard holds a ready copy" in r.stderr), r.stderr
        refs = sum(1 for f in files if partition(f) in kept)
        for w, a in zip(wide, k):
            assert a["partial"] is True
            assert a["coverage"] == {"partitions": len(kept), "partitions_total": P, "references": refs}, a
            expect = [(h["key"], h["distance"]) for h in w["hits"] if partition(h["key"]) in kept][:5]
            assert [(h["key"], h["distance"]) for h in a["hits"]] == expect
        k = jsonl(run("identify", "photos", "--cluster", c.url, "-k", "5", *queries[:2], "--format", "json",
                      "--deadline", "2000", ok=(1,)).stdout)
        assert all(a["decision"] == "incomplete" for a in k), k
        assert all(a["partial"] is True and a["coverage"] == {"partitions": len(kept), "partitions_total": P,
                                                              "references": refs} for a in k), k
        say(f"kill -9 of t1 with copies 1: partial answers over the {len(kept)} partitions t2 holds "
            f"({refs} references), equal to the embedded answer restricted to them; identify: incomplete")
        r = run("search", "photos", "--cluster", c.url, "-f", "cedd", "-k", "5", queries[0], "--no-partial",
                "--deadline", "2000", ok=(3,))
        assert "partitions answered" in r.stderr
    finally:
        c.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="the cluster against the embedded engine")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="the shards' --device")
    ap.add_argument("--gpus", default="", help="the shards' --gpus in turn, '/' between shards (0/1, 0/0, 0,1/0,1)")
    args = ap.parse_args()
    DEVICE = args.device
    GPUS = [g for g in args.gpus.split("/") if g]
    try:
        test_cluster_basic()
    except Skip as e:
        print(f"skipped: {e}")
        sys.exit(77)
    print("test_cluster_basic: OK")
