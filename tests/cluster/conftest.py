"""Fixtures of the cluster's tests: NATS servers (natsctl), patina processes in the background.

    def test_x(nats3, procs, patina_cluster_cli):
        shard = procs.start("s1", [patina_cluster_cli, "shard", "c", "--cluster", nats3.urls, ...])
        shard.kill()                       # kill -9; every process left is killed at teardown

A test that needs the server skips (saying why) when natsctl.find_server() finds none; one that
needs the CLI's cluster commands (`patina_cluster_cli`) skips while the CLI has none.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import natsctl  # noqa: E402


@pytest.fixture(scope="session")
def nats_server():
    path, why = natsctl.find_server()
    if not path:
        pytest.skip(why)
    return path


@pytest.fixture
def nats1(nats_server):
    with natsctl.Cluster(1) as c:
        yield c


@pytest.fixture
def nats3(nats_server):
    with natsctl.Cluster(3) as c:
        yield c


@pytest.fixture(scope="session")
def patina_cli():
    path = os.environ.get("PATINA_CLI") or os.path.join(natsctl.ROOT, "build", "patina")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no patina CLI at {path} (set PATINA_CLI)")
    return path


@pytest.fixture(scope="session")
def patina_cluster_cli(patina_cli):
    """The CLI, when it has the cluster commands (`patina cluster`, `patina shard`): a build with
    PATINA_CLUSTER (libnats found). Otherwise the test skips."""
    for cmd in ("cluster", "shard"):
        r = subprocess.run([patina_cli, cmd, "--help"], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            pytest.skip(f"{patina_cli} has no `{cmd}` command (a build without PATINA_CLUSTER / libnats): "
                        + (r.stderr.strip().splitlines() or [""])[0])
    return patina_cli


class Proc:
    """One background process: its argv, log file (stdout and stderr) and Popen."""

    def __init__(self, name, argv, log, env=None):
        self.name, self.argv, self.log = name, list(argv), log
        with open(log, "ab") as f:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                         env=env, preexec_fn=natsctl._die_with_parent)

    def alive(self):
        return self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL, timeout=30):
        """Send sig (default kill -9) and wait for the exit; returns the exit status."""
        if self.alive():
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)

    def stop(self, timeout=60):
        """SIGTERM (a clean exit: a shard hands its partitions over), then wait."""
        return self.kill(signal.SIGTERM, timeout)

    def tail(self, n=40):
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"


def _text(what):
    return what() if callable(what) else what


class Procs:
    """The background processes of one test; all killed (-9) at its end."""

    def __init__(self, folder):
        self.folder = folder
        self.all = []

    def start(self, name, argv, env=None):
        p = Proc(name, argv, os.path.join(self.folder, f"{name}.{len(self.all)}.log"), env)
        self.all.append(p)
        return p

    def wait_for(self, pred, what, timeout=60.0, watch=()):
        """Poll pred() until true; fail naming what (a string, or a function giving one: the
        last reason), with the logs of the processes in watch, when it is not within timeout or
        one of them exits."""
        deadline = time.monotonic() + timeout
        while True:
            if pred():
                return
            for p in watch:
                if not p.alive():
                    pytest.fail(f"{p.name} exited ({p.proc.returncode}) while waiting for {_text(what)}:\n{p.tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"not within {timeout} s: {_text(what)}\n" +
                            "\n".join(f"--- {p.name}\n{p.tail()}" for p in watch))
            time.sleep(0.1)

    def kill_all(self):
        for p in self.all:
            if p.alive():
                p.kill()


@pytest.fixture
def procs(tmp_path):
    ps = Procs(str(tmp_path))
    try:
        yield ps
    finally:
        ps.kill_all()


@pytest.fixture
def nats_py():
    """The nats-py module (tests/cluster/run.sh installs it into .venv-cluster), else skip."""
    return pytest.importorskip("nats", reason="nats-py is not installed (tests/cluster/run.sh installs it from PyPI)")
