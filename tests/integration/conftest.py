"""Fixtures for integration tests: start the real rebuno binary on loopback.

Every kernel gets its own temporary state folder and a free port, and is killed
when the test ends (pass or fail). Tests talk plain HTTP with http.client so
nothing is mocked. Requests carry the daemon's local token, found as every client of
the user who started it finds it (the SDK's rebuno._localauth), unless a test says
otherwise (auth=False, or its own Authorization header).
"""
import glob
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python"))
from rebuno import _localauth  # noqa: E402  (the SDK of this checkout)

# `rebuno dev` starts the sandbox service too when run as root; kernel tests don't need it
# (tests that do pass --sandboxes on).
os.environ.setdefault("REBUNO_SANDBOXES", "off")

# REBUNO_TEST_STORE=postgres runs every kernel on a real PostgreSQL (pgserver.py), one
# schema per state folder; the default is the embedded SQLite store.
TEST_STORE = os.environ.get("REBUNO_TEST_STORE", "sqlite")

BIN = os.environ.get("REBUNO_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "asan", "rebuno")


def local_auth(port, service="kernel"):
    """{"Authorization": "Bearer <token>"} for the daemon (kernel or sandboxd) on port, found
    as its user's clients find it; {} when there is none (a kernel with api_keys)."""
    state_file = _localauth.KERNEL_STATE_FILE if service == "kernel" else _localauth.SANDBOXD_STATE_FILE
    token = _localauth.find(f"http://127.0.0.1:{port}", state_file)[0]
    return {"Authorization": f"Bearer {token}"} if token else {}


def free_port():
    """A loopback port to hand a server we start. Picked below the kernel's ephemeral
    range (net.ipv4.ip_local_port_range), because a port the kernel handed out for a
    bind to port 0 can be handed out again to the server's own helpers (sandboxd's egress
    proxy and DNS bind port 0), which then hold it when the server binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(10000, max(low, 10001))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded range: any free port
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def npm_ci_pinned(compat, package, version):
    """npm ci in tests/compat/<x> when its node_modules is missing or older than the lock;
    asserts the pinned SDK (package at version) is what got installed. Returns compat."""
    mod = os.path.join(compat, "node_modules", *package.split("/"), "package.json")
    stamp = os.path.join(compat, "node_modules", ".package-lock.json")
    lock = os.path.join(compat, "package-lock.json")
    if not os.path.exists(mod) or not os.path.exists(stamp) or \
            os.path.getmtime(stamp) < os.path.getmtime(lock):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=compat, check=True,
                       capture_output=True, timeout=600)
    with open(mod) as f:
        assert json.load(f)["version"] == version
    return compat


def start_with_extra_endpoint(make_sandboxd, flag):
    """A started sandboxd that also serves a compatible API (flag: --e2b-listen,
    --vercel-listen) on a free port; returns (the daemon, that port)."""
    port = free_port()
    return make_sandboxd(args=[flag, f"127.0.0.1:{port}"]).start(), port


class Kernel:
    """A running `rebuno dev|server` process."""

    def __init__(self, state_dir, config=None, mode="dev", env=None, args=()):
        self.state_dir = state_dir
        self.config = config
        self.config_path = None
        self.mode = mode
        self.env = env or {}
        self.args = list(args)
        if config is not None:
            self.config_path = os.path.join(state_dir, "rebuno.yaml")
            with open(self.config_path, "w") as f:
                f.write(config)
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(state_dir, "kernel.log")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait=True, new_session=False):
        """new_session: in a process group of its own (as a shell starts a job), so a test
        can signal the whole group as Ctrl-C or systemd would."""
        cmd = [BIN, self.mode, "--listen", f"127.0.0.1:{self.port}", "--state-dir",
               os.path.join(self.state_dir, "state"), *self.args]
        if TEST_STORE == "postgres" and not any(a.startswith("--store") for a in self.args) \
                and "REBUNO_STORE" not in self.env and "store:" not in (self.config or ""):
            import pgserver
            pg = pgserver.shared()
            cmd += ["--store", pg.schema_uri(pg.schema_for(os.path.realpath(self.state_dir)))]
        if self.config_path:
            cmd += ["--config", self.config_path]
        env = dict(os.environ, **self.env)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=env,
                                     start_new_session=new_session)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=10):
        end = time.time() + timeout
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kernel exited with {self.proc.returncode}:\n{self.read_log()}")
            try:
                if self.request("GET", "/v0/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("kernel did not become ready:\n" + self.read_log())

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=10):
        if self.proc and self.proc.returncode is not None and self.log.closed:
            return self.proc.returncode
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        return self.proc.returncode if self.proc else None

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def request(self, method, path, body=None, headers=None, raw=None, timeout=70, key=None, auth=True):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        if key:
            h["Authorization"] = f"Bearer {key}"
        elif auth and "Authorization" not in h:
            h.update(local_auth(self.port))
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        parsed = None
        if payload:
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = payload.decode(errors="replace")
        return resp.status, parsed

    # --- conveniences ---
    def ok(self, method, path, body=None, status=(200, 201, 204), **kw):
        st, out = self.request(method, path, body, **kw)
        assert st in (status if isinstance(status, tuple) else (status,)), (st, out)
        return out

    def create(self, agent="hello", input=None, **extra):
        body = {"agent_id": agent}
        if input is not None:
            body["input"] = input
        body.update(extra)
        return self.ok("POST", "/v0/executions", body, status=201)

    def worker(self, agent="hello"):
        return self.ok("POST", f"/v0/agents/{agent}/workers", {}, status=201)["worker_id"]

    def claim(self, agent, worker_id, wait=0):
        st, out = self.request("POST", f"/v0/agents/{agent}/claim",
                               {"worker_id": worker_id, "wait_seconds": wait})
        assert st in (200, 204), (st, out)
        return out if st == 200 else None

    def events(self, exec_id, after=0):
        return self.ok("GET", f"/v0/executions/{exec_id}/events?after_seq={after}&limit=1000")


class Dispatch:
    """An agent's view of one claim: submits steps under its dispatch headers."""

    def __init__(self, kernel, claim):
        self.k = kernel
        self.exec_id = claim["execution"]["id"]
        self.id = claim["dispatch"]["id"]
        self.attempt = claim["dispatch"]["attempt"]
        self.claim = claim

    @property
    def headers(self):
        return {"Rebuno-Dispatch-Id": self.id, "Rebuno-Dispatch-Attempt": str(self.attempt)}

    def call(self, method, path, body=None):
        return self.k.request(method, f"/v0/executions/{self.exec_id}{path}", body, headers=self.headers)

    def submit(self, target, args=None, kind="tool_call", idempotency=None, resources=None):
        body = {"kind": kind, "target": target}
        if args is not None:
            body["args"] = args
        if idempotency:
            body["idempotency"] = idempotency
        if resources is not None:
            body["resources"] = resources
        st, out = self.call("POST", "/steps", body)
        assert st == 200, (st, out)
        return out

    def finish(self, step_id, result=None, error=None):
        if error is not None:
            st, out = self.call("POST", f"/steps/{step_id}/fail", {"error": error})
        else:
            st, out = self.call("POST", f"/steps/{step_id}/complete", {"result": result})
        assert st == 200, (st, out)
        return out

    def complete(self, output=None, state=None):
        body = {"output": output}
        if state is not None:
            body["state"] = state
        return self.call("POST", "/complete", body)


def pytest_sessionfinish(session, exitstatus):
    import pgserver
    pgserver.shutdown_shared()


@pytest.fixture
def tmpdir_path():
    with tempfile.TemporaryDirectory(prefix="rebuno-test-") as d:
        yield d


@pytest.fixture
def make_kernel(tmpdir_path):
    started = []

    def make(config=None, mode="dev", **kw):
        d = tempfile.mkdtemp(dir=tmpdir_path)
        k = Kernel(d, config=config, mode=mode, **kw)
        started.append(k)
        return k

    yield make
    problems = []
    for k in started:
        if k.proc is None:
            continue
        k.stop(signal.SIGTERM)  # graceful, so LeakSanitizer checks the exit
        log = k.read_log()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            if marker in log:
                problems.append(f"{marker} in {k.log_path}:\n{log[-4000:]}")
        if re.search(r"^==\d+== ", log, re.M):  # valgrind (REBUNO_BIN may wrap it) reports errors like this
            problems.append(f"valgrind errors in {k.log_path}:\n{log[-4000:]}")
    assert not problems, "\n".join(problems)


@pytest.fixture
def kernel(make_kernel):
    return make_kernel().start()


# ---------------------------------------------------------------------------
# sandboxd: the sandbox service (`rebuno sandboxd`), run for real as root.
# ---------------------------------------------------------------------------

CGROUP_V1 = ("memory", "pids", "cpu", "freezer")


def _fnv1a(s):
    h = 1469598103934665603
    for b in s.encode():
        h ^= b
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def cgroup_name(state):
    """The parent cgroup of the daemon on state (src/sandbox/core/daemons.h)."""
    return "rebuno-%012x" % (_fnv1a(os.path.realpath(state)) & 0xFFFFFFFFFFFF)


def cgroup_dirs(state):
    return [os.path.join("/sys/fs/cgroup", c, cgroup_name(state)) for c in CGROUP_V1]


class Sandboxd:
    """A running `rebuno sandboxd` with its own state folder and port."""

    def __init__(self, state_dir, args=()):
        self.root = state_dir
        self.state = os.path.join(state_dir, "state")
        self.args = list(args)
        self.port = free_port()
        self.proc = None
        self.log = None
        self.log_path = os.path.join(state_dir, "sandboxd.log")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def cgroup_name(self):
        return cgroup_name(self.state)

    def cgroup_dirs(self):
        return cgroup_dirs(self.state)

    def start(self, wait=True):
        cmd = [BIN, "sandboxd", "--listen", f"127.0.0.1:{self.port}", "--state-dir", self.state,
               *self.args]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        if wait:
            end = time.time() + 20
            while time.time() < end:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sandboxd exited with {self.proc.returncode}:\n"
                                       + self.read_log())
                try:
                    if self.request("GET", "/v1/health")[0] == 200:
                        return self
                except OSError:
                    pass
                time.sleep(0.02)
            raise RuntimeError("sandboxd did not become ready:\n" + self.read_log())
        return self

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log and not self.log.closed:
            self.log.close()
        return self.proc.returncode if self.proc else None

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def request(self, method, path, body=None, raw=None, headers=None, timeout=120, auth=True):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if auth and "Authorization" not in h:
            h.update(local_auth(self.port, "sandboxd"))
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        payload = resp.read()
        hdrs = dict(resp.getheaders())
        conn.close()
        parsed = payload
        if payload and resp.getheader("Content-Type", "").startswith("application/json"):
            parsed = json.loads(payload)
        self.last_headers = hdrs
        return resp.status, parsed

    def ok(self, method, path, body=None, status=(200, 201, 204), **kw):
        st, out = self.request(method, path, body, **kw)
        assert st in (status if isinstance(status, tuple) else (status,)), (method, path, st, out)
        return out

    # --- conveniences ---
    def create(self, name=None, **fields):
        body = dict(fields)
        if name is not None:
            body["name"] = name
        return self.ok("POST", "/v1/sandboxes", body, status=201)

    def get(self, ref):
        return self.ok("GET", f"/v1/sandboxes/{ref}")

    def run(self, ref, cmd, args=(), **fields):
        """Run to completion; returns the result object (asserts the call succeeded)."""
        body = {"cmd": cmd, "args": list(args), "wait": True, **fields}
        return self.ok("POST", f"/v1/sandboxes/{ref}/commands", body, status=200)

    def sh(self, ref, script, **fields):
        return self.run(ref, "bash", ["-c", script], **fields)

    def write(self, ref, path, data, **query):
        q = "&".join(f"{k}={v}" for k, v in query.items())
        p = f"/v1/sandboxes/{ref}/files/content?path={urllib.parse.quote(path)}"
        return self.ok("PUT", p + ("&" + q if q else ""), raw=data)

    def read(self, ref, path):
        st, out = self.request(
            "GET", f"/v1/sandboxes/{ref}/files/content?path={urllib.parse.quote(path)}")
        return st, out


def processes_mentioning(text):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def network_tag(state_dir):
    """The tag in a daemon's nftables table and veth names (src/sandbox/net/netpool.h)."""
    return "%06x" % (_fnv1a(os.path.realpath(state_dir)) & 0xFFFFFF)


def network_leftovers(sandboxd):
    """The nftables table and veths of a daemon (a Sandboxd, or its state folder)."""
    tag = network_tag(getattr(sandboxd, "state", sandboxd))
    out = []
    try:
        tables = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
        if f"rebuno_{tag}" in tables:
            out.append(f"nftables table rebuno_{tag}")
    except OSError:
        pass
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    out += [f"veth {ln.split(':')[1].strip()}" for ln in links.splitlines()
            if ln.split(":")[1].strip().startswith(f"rb{tag}")]
    return out


def host_mounts_mentioning(path):
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if path in line]


def loop_devices_backed_by(path):
    """Loop devices whose backing file is under path (sandboxd's btrfs store image)."""
    found = []
    for dev in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(dev) as f:
                if f.read().strip().startswith(path):
                    found.append("/dev/" + dev.split("/")[3])
        except OSError:
            pass
    return found


def force_cleanup_storage(state):
    """Unmount what a daemon left under state (lazily) and detach its loop devices, so a
    failed test does not leak mounts or loop devices into the next."""
    real = os.path.realpath(state)
    for line in reversed(host_mounts_mentioning(real)):
        mnt = line.split()[4]
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    for dev in loop_devices_backed_by(real):
        subprocess.run(["losetup", "-d", dev], capture_output=True)


def _cgroup_procs(d):
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def daemon_leftovers(state):
    """Everything a sandboxd on state may leave on the host: its cgroups (and the processes
    in them), mounts, loop devices, nftables table and veths, and processes naming it."""
    real = os.path.realpath(state)
    out = []
    for d in cgroup_dirs(real):
        if os.path.exists(d):
            procs = []
            for sub, _, _ in os.walk(d):
                procs += _cgroup_procs(sub)
            out.append(f"cgroup {d} (processes {sorted(set(procs))})")
    out += [f"mount {line.split()[4]}" for line in host_mounts_mentioning(real)]
    out += [f"loop device {dev}" for dev in loop_devices_backed_by(real)]
    out += network_leftovers(real)
    out += [f"process {p}" for p in processes_mentioning(real)]
    return out


def force_cleanup_daemon(state):
    """Undo by force what a sandboxd on state left, so a failed test does not leak into the
    next: thaw and kill the processes of its cgroups and remove them, unmount its store
    and detach its loop devices, delete its nftables table and veths."""
    real = os.path.realpath(state)
    groups = [sub for d in cgroup_dirs(real) for sub, _, _ in os.walk(d, topdown=False)]
    end = time.time() + 10
    while time.time() < end:
        pids = set()
        for g in groups:
            try:
                with open(os.path.join(g, "freezer.state"), "w") as f:
                    f.write("THAWED")
            except OSError:
                pass
            pids.update(_cgroup_procs(g))
        if not pids:
            break
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.05)
    for g in groups:
        try:
            os.rmdir(g)
        except OSError:
            pass
    force_cleanup_storage(real)
    tag = network_tag(real)
    subprocess.run(["nft", "delete", "table", "inet", f"rebuno_{tag}"], capture_output=True)
    for what in network_leftovers(real):
        if what.startswith("veth "):
            subprocess.run(["ip", "link", "del", what.split()[1]], capture_output=True)


@pytest.fixture
def make_sandboxd(tmpdir_path):
    started = []

    def make(args=()):
        d = tempfile.mkdtemp(dir=tmpdir_path)
        s = Sandboxd(d, args=args)
        started.append(s)
        return s

    yield make
    problems = []
    for s in started:
        if s.proc is None:
            continue
        s.stop(signal.SIGTERM)  # graceful: stops every session, LeakSanitizer checks the exit
        log = s.read_log()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            if marker in log:
                problems.append(f"{marker} in {s.log_path}:\n{log[-4000:]}")
        # nothing may be left behind: cgroups, mounts (all lived in private namespaces)
        for d in s.cgroup_dirs():
            if os.path.exists(d):
                problems.append(f"cgroup left behind: {d}: {os.listdir(d)[:5]}")
        if host_mounts_mentioning(os.path.realpath(s.state)):
            problems.append(f"mounts left behind under {s.state}")
        # nor networking: the daemon's nftables table and veths (sandbox networking)
        for what in network_leftovers(s):
            problems.append(f"{what} left behind")
        loops = loop_devices_backed_by(os.path.realpath(s.state))
        if loops:
            problems.append(f"loop devices left behind for {s.state}: {loops}")
        force_cleanup_daemon(s.state)
        # the daemon's zygote carries its command line; inits are in the cgroups above
        time.sleep(0.05)
        left = processes_mentioning(s.state)
        if left:
            problems.append(f"processes left behind: {left}")
    assert not problems, "\n".join(problems)


@pytest.fixture
def sandboxd(make_sandboxd):
    return make_sandboxd().start()


def git_http_backend(h, body, root, credential):
    """Answer one request of a BaseHTTPRequestHandler ``h`` (``body``: its request body)
    with ``git http-backend`` over the repositories in ``root``, as the forges the network
    tests push to do: 401 unless ``Authorization`` is exactly ``credential``."""
    if h.headers.get("Authorization") != credential:
        h.send_response(401)
        h.send_header("WWW-Authenticate", 'Basic realm="git"')
        h.send_header("Content-Length", "0")
        h.end_headers()
        return
    path, _, query = h.path.partition("?")
    env = {"GIT_PROJECT_ROOT": root, "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": path,
           "QUERY_STRING": query, "REQUEST_METHOD": h.command,
           "CONTENT_TYPE": h.headers.get("Content-Type", ""),
           "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "x-access-token",
           "REMOTE_ADDR": "127.0.0.1", "PATH": os.environ["PATH"]}
    p = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, check=True)
    head, _, out = p.stdout.partition(b"\r\n\r\n")
    status, hdrs = 200, []
    for line in head.split(b"\r\n"):
        k, _, v = line.decode().partition(":")
        if k.lower() == "status":
            status = int(v.split()[0])
        else:
            hdrs.append((k, v.strip()))
    h.send_response(status)
    for k, v in hdrs:
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(out)))
    h.end_headers()
    h.wfile.write(out)
