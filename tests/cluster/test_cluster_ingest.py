#!/usr/bin/env python3
"""Bulk indexing across the cluster: `patina index --cluster --distribute` and `patina worker`.

One JetStream server (natsctl), a CPU shard that takes no work (--no-work: it answers the
searches), two CPU workers. The job: sample photographs plus a corrupt and a truncated JPEG,
named by their path below a shared --root. Worker A is stopped (SIGSTOP) while it holds items
(the consumer's ack-pending count from the server's /jsz, with A the only worker yet), worker B
starts, A is killed (-9): its items go to B once the queue's AckWait (3 s here) has passed. The
job completes: every good file indexed exactly once (a search of each finds it at distance 0,
and the collection holds as many references as good files), the two bad files reported with
their errors, exit status 1, items delivered more than once counted. Then a --send-bytes job
of files only the indexer has (the workers' --root lacks them): indexed from the bytes.

Runs as a script (exit 77 = skipped: no nats-server, no samples) or under pytest. Environment:
PATINA_CLI (the patina program), PATINA_SOURCE_DIR.
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import natsctl  # noqa: E402
from test_cluster_basic import CLI, SRC, Skip, jsonl  # noqa: E402

P = 4
NGOOD = 40
ACK_WAIT = 3


def run(*args, cwd, ok=(0,)):
    r = subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    if r.returncode not in ok:
        raise AssertionError(f"patina {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r


def work_state(server, coll):
    """(messages on the work stream, the workers' consumer's ack-pending count) from /jsz."""
    jsz = server.jsz("streams=true&consumers=true")
    for acc in jsz.get("account_details") or []:
        for st in acc.get("stream_detail") or []:
            if st.get("name") == f"patina_{coll}_work":
                pending = 0
                for c in st.get("consumer_detail") or []:
                    if c.get("name") == f"patina_{coll}_workers":
                        pending = c.get("num_ack_pending", 0)
                return st["state"]["messages"], pending
    return 0, 0


def wait_until(what, pred, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def samples():
    d = os.path.join(SRC, "samples")
    if not os.path.isdir(d):
        raise Skip("no samples/ (scripts/fetch-samples.sh)")
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f.lower().endswith((".jpg", ".jpeg")))
    if len(files) < NGOOD + 3:
        raise Skip("too few sample JPEGs")
    return files


def test_cluster_ingest():
    files = samples()
    try:
        nats = natsctl.Cluster(1)
    except natsctl.NatsError as e:
        raise Skip(str(e))
    tmp = tempfile.mkdtemp(prefix="patina-ingest-")
    procs = []

    def start(*args, log):
        p = subprocess.Popen([CLI, *args], cwd=tmp, stdout=open(os.path.join(tmp, log), "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    try:
        url = nats.urls
        root = os.path.join(tmp, "root")
        os.makedirs(os.path.join(root, "good"))
        os.makedirs(os.path.join(root, "bad"))
        good = []
        for i, f in enumerate(files[:NGOOD]):
            key = f"good/{i:03d}-{os.path.basename(f)}"
            shutil.copy(f, os.path.join(root, key))
            good.append(key)
        rnd = random.Random(7)
        with open(os.path.join(root, "bad", "corrupt.jpg"), "wb") as f:  # a JPEG's first bytes, then noise
            f.write(b"\xff\xd8\xff\xe0" + bytes(rnd.randrange(256) for _ in range(6000)))
        with open(files[0], "rb") as f:
            head = f.read(4000)
        with open(os.path.join(root, "bad", "truncated.jpg"), "wb") as f:
            f.write(head)

        run("cluster", "create", "photos", "--cluster", url, "--partitions", str(P), "-f", "cedd", cwd=tmp)
        start("shard", "photos", "--cluster", url, "--name", "s1", "--copies", "1", "--device", "cpu", "-j", "1",
              "--no-work", log="s1.log")

        def ready():
            st = json.loads(run("cluster", "status", "photos", "--cluster", url, "--json", cwd=tmp).stdout)
            return st["covered"] == P
        wait_until("the shard", ready)

        # the job: queued first, then worker A alone
        indexer = subprocess.Popen([CLI, "index", "photos", "--cluster", url, "--distribute", "--root", ".",
                                    "--ack-wait", str(ACK_WAIT), "good", "bad/corrupt.jpg", "bad/truncated.jpg"],
                                   cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(indexer)
        server = nats.servers[0]
        wait_until("the queued job", lambda: work_state(server, "photos")[0] == NGOOD + 2)
        a = start("worker", "photos", "--cluster", url, "--name", "wA", "--root", root, "--device", "cpu", "-j", "1",
                  "--work-batch", "4", log="wA.log")

        # A stopped while it holds items (it is the only worker: they are its). A worker reports a fetch's
        # items one by one, each result published before its ack, so one held item may already have its
        # result out (and the job would not wait for its redelivery); two or more held leave at least one
        # whose result only the redelivery can give.
        def stop_holding():
            a.send_signal(signal.SIGSTOP)
            time.sleep(0.2)  # acks A wrote before it stopped reach the server
            if work_state(server, "photos")[1] >= 2:
                return True
            a.send_signal(signal.SIGCONT)
            return False
        wait_until("worker A holding items", stop_holding)
        held = work_state(server, "photos")[1]
        start("worker", "photos", "--cluster", url, "--name", "wB", "--root", root, "--device", "cpu", "-j", "1",
              "--work-batch", "4", log="wB.log")
        time.sleep(0.5)
        a.kill()  # -9 of a stopped process
        a.wait(30)
        out, err = indexer.communicate(timeout=300)
        assert indexer.returncode == 1, (indexer.returncode, err)
        assert f"{NGOOD} written, 2 failed of {NGOOD + 2} files" in err, err
        assert "by 2 workers" in err or "by 1 worker" in err, err
        bad_lines = [line for line in err.splitlines() if "bad/" in line]
        assert any("corrupt.jpg" in line for line in bad_lines), err
        assert any("truncated.jpg" in line for line in bad_lines), err
        redelivered = int(err.split(" delivered more than once")[0].rsplit(" ", 1)[1])
        assert redelivered >= 1, (held, err)  # A's items, done by B
        # the last acks reach the server's monitoring view (/jsz) a moment after the indexer returns
        wait_until("the work stream drained", lambda: work_state(server, "photos") == (0, 0), timeout=30)

        # every good file exactly once: found by its own image at distance 0, one reference each
        answers = jsonl(run("search", "photos", "--cluster", url, "-f", "cedd", "-k", "3", *good, "--format",
                            "json", cwd=root).stdout)
        assert len(answers) == NGOOD
        for key, a_ in zip(good, answers):
            assert a_["partial"] is False
            assert a_["coverage"]["references"] == NGOOD, a_["coverage"]
            assert key in [h["key"] for h in a_["hits"] if h["distance"] == 0], (key, a_["hits"])

        # --send-bytes: files only the indexer has (not below the workers' --root)
        client = os.path.join(tmp, "client")
        os.makedirs(os.path.join(client, "x"))
        small = [f for f in files[NGOOD:] if os.path.getsize(f) < 512 * 1024][:3]
        assert small, "no sample JPEG under 512 KiB"
        sent = []
        for i, f in enumerate(small):
            key = f"x/{i}-{os.path.basename(f)}"
            shutil.copy(f, os.path.join(client, key))
            sent.append(key)
        r = run("index", "photos", "--cluster", url, "--distribute", "--send-bytes", "--root", ".", "x", cwd=client)
        assert f"{len(sent)} written, 0 failed" in r.stderr and f"{len(sent)} sent as bytes" in r.stderr, r.stderr
        answers = jsonl(run("search", "photos", "--cluster", url, "-f", "cedd", "-k", "3", *sent, "--format", "json",
                            cwd=client).stdout)
        for key, a_ in zip(sent, answers):
            assert a_["coverage"]["references"] == NGOOD + len(sent), a_["coverage"]
            assert key in [h["key"] for h in a_["hits"] if h["distance"] == 0], (key, a_["hits"])
        # without --send-bytes the workers cannot read them: each reported, exit status 1
        r = run("index", "photos", "--cluster", url, "--distribute", "--root", ".", "x", cwd=client, ok=(1,))
        assert f"0 written, {len(sent)} failed" in r.stderr, r.stderr
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                    p.wait(30)
                except OSError:
                    pass
        nats.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        test_cluster_ingest()
    except Skip as e:
        print(f"skipped: {e}")
        sys.exit(77)
    print("test_cluster_ingest: OK")
