"""natsctl: NATS JetStream servers for the cluster's tests, on loopback, and faults to inject.

    with natsctl.Cluster(3) as c:          # 3 servers, one JetStream cluster, R3 possible
        c.urls                             # "nats://127.0.0.1:P0,nats://127.0.0.1:P1,..."
        leader = c.meta_leader()           # the server that leads the JetStream meta group
        c.kill(leader)                     # kill -9
        c.wait_meta_leader(exclude=leader) # a new one elected
        c.restart(leader)                  # same ports, same store: it catches up
        c.stream_leader("KV_patina_x_p0000")

Each server gets free loopback ports (client, cluster routes, HTTP monitoring), a store folder of
its own under one temporary folder and `sync_interval: always` (every JetStream write fsynced
before its acknowledgement: what the cluster relies on, docs/cluster.md). Leaders are read from
the monitoring endpoint (/jsz). stop() (or leaving the `with`, also on an exception; an atexit
hook and a parent-death signal cover a test runner that dies) kills every server and removes
the folder. Python's standard library only.

The server is $PATINA_NATS_SERVER, else .venv-nats/bin/nats-server of this checkout
(scripts/bootstrap.sh nats); find_server() says why when there is none. Debian's nats-server
(2.9) is refused: it has no `sync_interval`.
"""
import atexit
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MIN_VERSION = (2, 10, 0)  # sync_interval


class NatsError(Exception):
    pass


def find_server():
    """(path, None) of a usable nats-server, or (None, why not)."""
    path = os.environ.get("PATINA_NATS_SERVER") or os.path.join(ROOT, ".venv-nats", "bin", "nats-server")
    if not os.access(path, os.X_OK):
        return None, f"no NATS server at {path} (scripts/bootstrap.sh nats installs it, or set PATINA_NATS_SERVER)"
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{path} --version failed: {e}"
    m = re.search(r"v(\d+)\.(\d+)\.(\d+)", out)
    if not m:
        return None, f"{path} --version said {out.strip()!r}"
    if tuple(int(x) for x in m.groups()) < MIN_VERSION:
        return None, f"{path} is {out.strip()}: the cluster needs 2.10+ (sync_interval: always)"
    return path, None


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel's choice; a server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # In the child before exec: SIGKILL when the process that started it dies (prctl
    # PR_SET_PDEATHSIG = 1), so that no server outlives a test runner killed with -9.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def http_json(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    """One nats-server: its name, ports, store, config file, log and process."""

    def __init__(self, index, base):
        self.index = index
        self.name = f"n{index}"
        self.port = free_port()
        self.cluster_port = free_port()
        self.http_port = free_port()
        self.store = os.path.join(base, self.name, "store")
        self.conf = os.path.join(base, self.name, "nats.conf")
        self.log = os.path.join(base, self.name, "server.log")
        self.proc = None
        os.makedirs(self.store)

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    @property
    def monitor(self):
        return f"http://127.0.0.1:{self.http_port}"

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def jsz(self, query="", timeout=2.0):
        return http_json(f"{self.monitor}/jsz{'?' + query if query else ''}", timeout)

    def healthy(self):
        """GET /healthz is 200: JetStream is up, the meta group has a leader and this server is current."""
        try:
            with urllib.request.urlopen(f"{self.monitor}/healthz", timeout=2.0) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False


class Cluster:
    """n JetStream servers (1, or 3+ forming one cluster) on loopback; see the module's doc."""

    def __init__(self, n=3, name="patina-test", start=True, timeout=30.0):
        self.binary, why = find_server()
        if not self.binary:
            raise NatsError(why)
        self.n = n
        self.cluster_name = name
        self.base = tempfile.mkdtemp(prefix="patina-nats-")
        self.servers = [Server(i, self.base) for i in range(n)]
        atexit.register(self.stop)
        for s in self.servers:
            self._write_conf(s)
        if start:
            for attempt in range(3):
                try:
                    self.start(timeout=timeout)
                    break
                except NatsError:
                    # a port taken between free_port() and the server's bind (another test's
                    # server): new ports for all, then again
                    if attempt == 2 or not self._lost_a_port():
                        self.stop()
                        raise
                    self._kill_all()
                    for s in self.servers:
                        s.port, s.cluster_port, s.http_port = free_port(), free_port(), free_port()
                    for s in self.servers:
                        self._write_conf(s)
                except BaseException:
                    self.stop()
                    raise

    # ---------------------------------------------------------------- config and processes
    def _write_conf(self, s):
        lines = [
            f"server_name: {s.name}",
            f"listen: 127.0.0.1:{s.port}",
            f"http: 127.0.0.1:{s.http_port}",
            "jetstream {",
            f'  store_dir: "{s.store}"',
            "  sync_interval: always",
            "  max_memory_store: 256MB",
            "  max_file_store: 4GB",
            "}",
        ]
        if self.n > 1:
            routes = ", ".join(f"nats-route://127.0.0.1:{o.cluster_port}" for o in self.servers if o is not s)
            lines += [
                "cluster {",
                f"  name: {self.cluster_name}",
                f"  listen: 127.0.0.1:{s.cluster_port}",
                f"  routes: [{routes}]",
                "}",
            ]
        with open(s.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _spawn(self, s):
        assert not s.alive(), f"{s.name} is running"
        logf = open(s.log, "ab")
        try:
            s.proc = subprocess.Popen([self.binary, "-c", s.conf], stdin=subprocess.DEVNULL, stdout=logf,
                                      stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        finally:
            logf.close()

    @property
    def urls(self):
        """Every server's client URL, comma-separated (the form of `--cluster`)."""
        return ",".join(s.url for s in self.servers)

    def server(self, name):
        for s in self.servers:
            if s.name == name:
                return s
        raise KeyError(name)

    def start(self, timeout=30.0):
        for s in self.servers:
            if not s.alive():
                self._spawn(s)
        self.wait_healthy(timeout=timeout)

    def wait_healthy(self, servers=None, timeout=30.0):
        """Until every (running) server answers /healthz 200 and, with several, a meta leader is known that
        counts every other running server as a current peer (peers_current)."""
        servers = servers or [s for s in self.servers if s.proc is not None]
        deadline = time.monotonic() + timeout
        while True:
            for s in servers:
                if s.proc is not None and s.proc.poll() is not None:
                    raise NatsError(f"{s.name} exited with {s.proc.returncode}; its log:\n{self.log_tail(s)}")
            if all(s.healthy() for s in servers) and (self.n == 1 or self.peers_current()):
                return
            if time.monotonic() > deadline:
                raise NatsError(f"servers not healthy within {timeout} s; logs:\n" +
                                "\n".join(f"--- {s.name}\n{self.log_tail(s)}" for s in servers))
            time.sleep(0.1)

    def kill(self, name, sig=signal.SIGKILL):
        """kill -9 (or sig) one server and reap it. Returns the Server."""
        s = self.server(name) if isinstance(name, str) else name
        if s.alive():
            s.proc.send_signal(sig)
            s.proc.wait(timeout=30)
        return s

    def restart(self, name, timeout=30.0):
        """Start a stopped server again: same ports, same store; waits until it is healthy (caught up)."""
        s = self.server(name) if isinstance(name, str) else name
        if s.alive():
            self.kill(s)
        self._spawn(s)
        self.wait_healthy([s], timeout=timeout)
        return s

    def _kill_all(self):
        for s in getattr(self, "servers", []):
            if s.proc is not None and s.proc.poll() is None:
                s.proc.kill()
                try:
                    s.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass

    def _lost_a_port(self):
        """Whether a server's log says it could not listen (its port was taken)."""
        for s in self.servers:
            try:
                with open(s.log, errors="replace") as f:
                    if "address already in use" in f.read():
                        return True
            except OSError:
                pass
        return False

    def stop(self):
        """Kill every server and remove the folder. Safe to call twice."""
        self._kill_all()
        base = getattr(self, "base", None)
        if base and os.path.isdir(base):
            shutil.rmtree(base, ignore_errors=True)
        try:
            atexit.unregister(self.stop)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def log_tail(self, s, n=30):
        try:
            with open(s.log, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return "(no log)"

    # ---------------------------------------------------------------- monitoring
    def _alive_jsz(self, query=""):
        """/jsz of the first running server that answers, else None."""
        for s in self.servers:
            if s.alive():
                try:
                    return s.jsz(query)
                except (urllib.error.URLError, OSError, ValueError):
                    continue
        return None

    def meta_leader(self):
        """The name of the JetStream meta group's leader as the running servers see it (they must
        agree), or None. With one server: that server."""
        if self.n == 1:
            return self.servers[0].name if self.servers[0].alive() else None
        seen = set()
        for s in self.servers:
            if not s.alive():
                continue
            try:
                meta = s.jsz().get("meta_cluster") or {}
            except (urllib.error.URLError, OSError, ValueError):
                return None
            seen.add(meta.get("leader") or None)
        if len(seen) != 1:
            return None
        leader = seen.pop()
        return leader if leader and self.server(leader).alive() else None

    def peers_current(self):
        """A meta leader is known and it counts every other running server as a current, online peer
        (what JetStream's placement of a new replicated stream needs: before that, creating an R3
        bucket can fail with "no suitable peers for placement, peer offline")."""
        lead = self.meta_leader()
        if lead is None:
            return False
        try:
            meta = self.server(lead).jsz().get("meta_cluster") or {}
        except (urllib.error.URLError, OSError, ValueError):
            return False
        seen = {r.get("name"): r for r in meta.get("replicas") or []}
        for s in self.servers:
            if s.name == lead or not s.alive():
                continue
            r = seen.get(s.name)
            if not r or not r.get("current") or r.get("offline"):
                return False
        return True

    def wait_meta_leader(self, exclude=None, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lead = self.meta_leader()
            if lead and lead != exclude:
                return lead
            time.sleep(0.1)
        raise NatsError(f"no JetStream meta leader (other than {exclude}) within {timeout} s")

    def streams(self):
        """{stream name: its /jsz detail (config, state, cluster)} over every account."""
        out = {}
        for s in self.servers:
            if not s.alive():
                continue
            try:
                j = s.jsz("accounts=1&streams=1&config=1")
            except (urllib.error.URLError, OSError, ValueError):
                continue
            for acc in j.get("account_details") or []:
                for st in acc.get("stream_detail") or []:
                    out.setdefault(st["name"], st)
        return out

    def stream_leader(self, stream):
        """The server leading stream (a KV bucket B is stream KV_B), or None. Asked of every running
        server: a replica that is not the leader still reports the group's leader; the answer is
        the leader a majority of them names, and only while that server runs."""
        if self.n == 1:
            return self.servers[0].name if stream in self.streams() else None
        votes = {}
        for s in self.servers:
            if not s.alive():
                continue
            try:
                j = s.jsz("accounts=1&streams=1")
            except (urllib.error.URLError, OSError, ValueError):
                continue
            for acc in j.get("account_details") or []:
                for st in acc.get("stream_detail") or []:
                    if st.get("name") == stream:
                        lead = (st.get("cluster") or {}).get("leader")
                        if lead:
                            votes[lead] = votes.get(lead, 0) + 1
        if not votes:
            return None
        lead = max(votes, key=votes.get)
        return lead if self.server(lead).alive() else None

    def wait_stream_leader(self, stream, exclude=None, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lead = self.stream_leader(stream)
            if lead and lead != exclude:
                return lead
            time.sleep(0.1)
        raise NatsError(f"stream {stream}: no leader (other than {exclude}) within {timeout} s")

    def routes(self, name):
        """The number of route connections of one server (/routez)."""
        return http_json(f"{self.server(name).monitor}/routez").get("num_routes", 0)


if __name__ == "__main__":
    # python3 tests/cluster/natsctl.py [N]: start N servers, print their URLs, run until Ctrl-C.
    import sys
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with Cluster(n) as c:
        print(c.urls, "meta leader:", c.meta_leader(), "folder:", c.base, flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
