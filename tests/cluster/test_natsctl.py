"""The harness itself (natsctl.py): servers start with the settings the cluster relies on, three
form one JetStream cluster, an R3 KV bucket survives kill -9 of its leader and of the whole
cluster, a restarted server catches up, and nothing is left behind."""
import asyncio
import os
import shutil
import subprocess
import time

import pytest

import natsctl


def test_one_server(nats1):
    s = nats1.servers[0]
    assert s.healthy()
    cfg = s.jsz()["config"]
    assert cfg["sync_always"] is True, cfg
    assert nats1.meta_leader() == "n0"
    assert nats1.urls == s.url


def test_three_servers_form_one_cluster(nats3):
    leaders = set()
    for s in nats3.servers:
        j = s.jsz()
        assert j["config"]["sync_always"] is True
        meta = j["meta_cluster"]
        assert meta["cluster_size"] == 3, meta
        leaders.add(meta["leader"])
        assert nats3.routes(s.name) >= 2
    assert len(leaders) == 1 and leaders.pop() in {"n0", "n1", "n2"}
    assert len(nats3.urls.split(",")) == 3


def test_meta_leader_killed_and_restarted(nats3):
    old = nats3.meta_leader()
    nats3.kill(old)
    assert not nats3.server(old).alive()
    new = nats3.wait_meta_leader(exclude=old)
    assert new != old
    nats3.restart(old)
    assert nats3.server(old).alive() and nats3.server(old).healthy()
    assert nats3.meta_leader() in {"n0", "n1", "n2"}


def test_cleanup_on_exception(nats_server):
    procs = []
    with pytest.raises(RuntimeError):
        with natsctl.Cluster(3) as c:
            base = c.base
            procs = [s.proc for s in c.servers]
            raise RuntimeError("a failing test")
    assert not os.path.exists(base)
    assert all(p.poll() is not None for p in procs)
    c.stop()  # twice is harmless


def test_missing_server_is_explained(monkeypatch, tmp_path):
    monkeypatch.setenv("PATINA_NATS_SERVER", str(tmp_path / "nope"))
    path, why = natsctl.find_server()
    assert path is None and "bootstrap.sh nats" in why
    with pytest.raises(natsctl.NatsError):
        natsctl.Cluster(1)


def test_old_server_is_refused(monkeypatch, tmp_path):
    fake = tmp_path / "nats-server"
    fake.write_text("#!/bin/sh\necho 'nats-server: v2.9.10'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATINA_NATS_SERVER", str(fake))
    path, why = natsctl.find_server()
    assert path is None and "2.10+" in why


# ------------------------------------------------------------------ JetStream through nats-py
async def _connect(nats, urls):
    return await nats.connect(servers=urls.split(","), connect_timeout=2, reconnect_time_wait=0.2,
                              max_reconnect_attempts=-1, allow_reconnect=True)


async def _retry(fn, what, tries=150):
    """fn() until it succeeds: a leader election makes JetStream calls fail or time out a while."""
    last = None
    for _ in range(tries):
        try:
            return await fn()
        except Exception as e:  # nats-py raises several kinds (timeouts, no responders, API errors)
            last = e
            await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: still failing: {last!r}")


def test_kv_r3_survives_killing_its_leader(nats3, nats_py):
    async def main():
        nc = await _connect(nats_py, nats3.urls)
        js = nc.jetstream(timeout=5)
        # the three servers may still be electing their meta leader (seconds on a loaded machine): a create
        # that times out is retried (the same config again is accepted)
        kv = await _retry(lambda: js.create_key_value(bucket="harness", replicas=3, history=1), "create KV", tries=20)
        for i in range(50):  # a new R3 stream may still be electing its first leader
            await _retry(lambda i=i: kv.put(f"k{i}", f"v{i}".encode()), f"put k{i}")
        lead = nats3.wait_stream_leader("KV_harness")
        nats3.kill(lead)
        new = nats3.wait_stream_leader("KV_harness", exclude=lead)
        assert new != lead
        for i in range(50):
            e = await _retry(lambda i=i: kv.get(f"k{i}"), f"get k{i}")
            assert e.value == f"v{i}".encode()
        for i in range(50, 100):
            await _retry(lambda i=i: kv.put(f"k{i}", f"v{i}".encode()), f"put k{i}")
        # the killed server comes back and catches up: then it can be one of a quorum of two
        nats3.restart(lead)
        await nc.close()
        return lead

    lead = asyncio.run(main())

    def caught_up():
        st = nats3.server(lead).jsz("accounts=1&streams=1")
        for acc in st.get("account_details") or []:
            for d in acc.get("stream_detail") or []:
                if d["name"] == "KV_harness":
                    return d["state"]["messages"] == 100
        return False

    deadline = time.monotonic() + 30
    while not caught_up():
        assert time.monotonic() < deadline, "the restarted server did not catch up"
        time.sleep(0.1)
    other = next(s.name for s in nats3.servers if s.name != lead)
    nats3.kill(other)

    async def check():
        nc = await _connect(nats_py, nats3.urls)
        kv = await _retry(lambda: nc.jetstream(timeout=5).key_value("harness"), "bind the bucket")
        for i in range(100):
            e = await _retry(lambda i=i: kv.get(f"k{i}"), f"get k{i} after the second kill")
            assert e.value == f"v{i}".encode()
        await nc.close()

    asyncio.run(check())


def test_acknowledged_writes_survive_killing_every_server(nats3, nats_py):
    # sync_interval: always: a write acknowledged is on the disks of a quorum, so kill -9 of every
    # server at once loses none of them.
    async def write():
        nc = await _connect(nats_py, nats3.urls)
        js = nc.jetstream(timeout=5)
        # as above: the meta leader and then the new stream's first leader may still be being elected
        # (CI saw "no responders" on the first put); a put that failed was not acknowledged, and putting
        # the same value again after a timeout is harmless
        kv = await _retry(lambda: js.create_key_value(bucket="durable", replicas=3, history=1), "create KV", tries=20)
        for i in range(200):
            await _retry(lambda i=i: kv.put(f"k{i}", str(i).encode()), f"put k{i}")
        await nc.close()

    asyncio.run(write())
    for s in nats3.servers:
        nats3.kill(s)
    nats3.start()

    async def read():
        nc = await _connect(nats_py, nats3.urls)
        kv = await _retry(lambda: nc.jetstream(timeout=5).key_value("durable"), "bind the bucket")
        for i in range(200):
            e = await _retry(lambda i=i: kv.get(f"k{i}"), f"get k{i}")
            assert e.value == str(i).encode()
        await nc.close()

    asyncio.run(read())


def test_no_server_left_after_the_runner_dies(nats_server, tmp_path):
    # A runner killed with -9 takes its servers with it (parent-death signal).
    code = ("import sys, time; sys.path.insert(0, %r); import natsctl; c = natsctl.Cluster(1); "
            "print(c.servers[0].proc.pid, c.base, flush=True); time.sleep(60)") % os.path.dirname(natsctl.__file__)
    runner = subprocess.Popen([os.sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid, base = runner.stdout.readline().split()
    pid = int(pid)
    runner.kill()
    runner.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.1)
    alive = os.path.exists(f"/proc/{pid}")
    if alive:
        with open(f"/proc/{pid}/stat") as f:
            alive = f.read().split()[2] != "Z"
    shutil.rmtree(base, ignore_errors=True)  # the runner's atexit did not run
    assert not alive, f"nats-server {pid} outlived its runner"
