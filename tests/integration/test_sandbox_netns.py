"""Network namespaces of sandboxes (docs/sandbox.md, "Where create time goes"): the
zygote keeps a small pool of ready namespaces (src/sandbox/runtime/spawn.c) and a session's
init is cloned into one of them, or into a new one when the pool is empty.

Seen from the host, through /proc: every running sandbox has its own namespace,
distinct from the host's and from every other sandbox's; loopback works inside and is
the only interface (unless a network policy adds eth0); the zygote is back in the
host's namespace after each spawn and holds only its unused pool, never a namespace
that a sandbox got; nothing else keeps a sandbox's namespace alive once it is gone.
"""
import os
import re
import shutil
import threading
import time

import pytest

from test_proxy import Upstream

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxd needs root")

POOL = 4  # NETNS_POOL in src/sandbox/runtime/spawn.c

# Inside: this process's network namespace, the interfaces, no namespace descriptor
# open, and a TCP round trip over 127.0.0.1.
PROBE = r'''
import os, socket, threading
ns = os.readlink("/proc/self/ns/net")
ifaces = sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:])
nsfds = []
for f in os.listdir("/proc/self/fd"):
    try:
        if os.readlink(f"/proc/self/fd/{f}").startswith("net:"):
            nsfds.append(f)
    except OSError:  # the descriptor listdir used
        pass
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
def serve():
    c, _ = srv.accept()
    c.sendall(c.recv(100).upper())
    c.close()
t = threading.Thread(target=serve)
t.start()
with socket.create_connection(srv.getsockname(), timeout=5) as c:
    c.sendall(b"ping")
    echo = c.recv(100).decode()
t.join()
print(ns, ",".join(ifaces), len(nsfds), echo)
'''


def probe(d, name):
    r = d.run(name, "python3", ["-c", PROBE], timeout_ms=30000)
    assert r["exit_code"] == 0, r["stderr"]
    ns, ifaces, nsfds, echo = r["stdout"].split()
    m = re.fullmatch(r"net:\[(\d+)\]", ns)
    assert m, ns
    return {"ns": int(m.group(1)), "ifaces": ifaces.split(","), "nsfds": int(nsfds),
            "echo": echo}


def ns_of(pid):
    return os.stat(f"/proc/{pid}/ns/net").st_ino


def children(pid, comm):
    out = []
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        for c in f.read().split():
            try:
                with open(f"/proc/{c}/comm") as g:
                    if g.read().strip() == comm:
                        out.append(int(c))
            except OSError:
                pass
    return out


def zygote_of(d):
    z = children(d.proc.pid, "rebuno-zygote")
    assert len(z) == 1, z
    return z[0]


def netns_fds(pid):
    """The network namespace inodes pid holds open as descriptors."""
    out = []
    for f in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.fullmatch(r"net:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{f}"))
        except OSError:
            continue
        if m:
            out.append(int(m.group(1)))
    return out


def wait_pool_full(zyg):
    """The pool's namespaces (the zygote also holds one of its own home, the host's)."""
    host = ns_of("self")
    end = time.time() + 10
    while time.time() < end:
        held = netns_fds(zyg)
        if held.count(host) == 1 and len(held) == POOL + 1:
            return [x for x in held if x != host]
        time.sleep(0.02)
    raise AssertionError(f"the zygote's pool never refilled: {netns_fds(zyg)}")


def check_namespaces(d, names):
    """Each sandbox's namespace is its own; returns {name: inode}."""
    host = ns_of("self")
    zyg = zygote_of(d)
    seen = {n: probe(d, n) for n in names}
    for n, p in seen.items():
        assert p["echo"] == "PING", (n, p)   # loopback is up and works
        assert p["nsfds"] == 0, (n, p)       # no pooled descriptor leaked in
    inodes = {n: p["ns"] for n, p in seen.items()}
    assert len(set(inodes.values())) == len(names), inodes
    assert host not in inodes.values()
    # the same from the host: the inits (the zygote's children) are in exactly these
    inits = children(zyg, "rebuno-init")
    assert sorted(ns_of(p) for p in inits) == sorted(inodes.values())
    for p in inits:
        assert not netns_fds(p), p   # inits hold no namespace descriptor either
    # the zygote went home after each spawn, and holds only unused namespaces
    assert ns_of(zyg) == host
    held = wait_pool_full(zyg)
    assert len(set(held)) == POOL
    assert not set(held) & set(inodes.values()), (held, inodes)
    return inodes


def check_gone(d, inodes):
    """Nothing of ours refers to these namespaces any more."""
    zyg = zygote_of(d)
    wait_pool_full(zyg)
    for pid in [d.proc.pid, zyg] + children(zyg, "rebuno-init"):
        assert ns_of(pid) not in inodes
        assert not set(netns_fds(pid)) & set(inodes), pid


def test_each_sandbox_has_its_own_network_namespace(sandboxd):
    d = sandboxd
    names = [f"ns{i}" for i in range(POOL + 3)]  # more than the pool holds
    # a sandbox gets a namespace out of the pool, which the pool then no longer holds
    pool = wait_pool_full(zygote_of(d))
    d.create(names[0])
    first = probe(d, names[0])["ns"]
    assert first in pool
    assert first not in wait_pool_full(zygote_of(d))
    for n in names[1:]:
        d.create(n)
    inodes = check_namespaces(d, names)
    assert all(probe(d, n)["ifaces"] == ["lo"] for n in names[:2])

    # a new session (stop, then a lazy resume) gets a namespace of its own again
    d.ok("POST", "/v1/sandboxes/ns0/stop")
    assert probe(d, "ns0")["echo"] == "PING"
    inodes = check_namespaces(d, names)

    for n in names:
        d.ok("DELETE", f"/v1/sandboxes/{n}")
    check_gone(d, list(inodes.values()))


def test_parallel_creates_get_namespaces_of_their_own(sandboxd):
    d = sandboxd
    wait_pool_full(zygote_of(d))
    names = [f"burst{i}" for i in range(3 * POOL)]
    errors = []

    def create(n):
        try:
            d.create(n)
        except Exception as e:  # reported below, with the others
            errors.append((n, e))

    threads = [threading.Thread(target=create, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    inodes = check_namespaces(d, names)
    for n in names:
        d.ok("DELETE", f"/v1/sandboxes/{n}")
    check_gone(d, list(inodes.values()))


@pytest.mark.skipif(not shutil.which("nft"), reason="needs nft")
def test_a_network_policy_still_gets_its_veth(make_sandboxd):
    up = Upstream()
    try:
        d = make_sandboxd(["--upstream-override", f"plain.example:80=127.0.0.1:{up.port}"])
        d.start()
        wait_pool_full(zygote_of(d))
        for i in range(POOL + 1):  # past the pool, so both kinds of namespace get one
            d.create(f"net{i}", network_policy={"plain.example": []})
        d.create("local")
        names = [f"net{i}" for i in range(POOL + 1)] + ["local"]
        inodes = check_namespaces(d, names)
        for i in range(POOL + 1):
            assert probe(d, f"net{i}")["ifaces"] == ["eth0", "lo"]
            r = d.run(f"net{i}", "curl", ["-sS", f"http://plain.example/from{i}"],
                      timeout_ms=30000)
            assert (r["exit_code"], r["stdout"]) == (0, f"ok GET /from{i} 0\n"), r
            r = d.run(f"net{i}", "curl", ["-sS", "http://other.example/"], timeout_ms=30000)
            assert r["exit_code"] != 0, r  # not in the policy
        assert probe(d, "local")["ifaces"] == ["lo"]
        for n in names:
            d.ok("DELETE", f"/v1/sandboxes/{n}")
        check_gone(d, list(inodes.values()))
    finally:
        up.close()
