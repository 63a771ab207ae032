"""Sandbox networking end to end: the egress proxy embedded in sandboxd, the veth and
nftables wiring, credentials injected outside the sandbox, private networks and
exposed ports (docs/sandbox.md, "Network").

Everything is real: a `rebuno sandboxd` (as root) whose proxy is pointed at local
HTTPS and HTTP servers started here through --upstream-override, trusting a local
test CA (--upstream-ca). Those servers listen on host loopback, which a sandbox
cannot reach except through the proxy's override table. Inside the sandboxes the
tools are the default image's (the host's /usr): curl, git, python3.

The token is never sent into a sandbox: scanners that run inside look for the
token's *shape* (ghs_..., Basic ...) and print what they find; the test compares on
the host. Every daemon is stopped at the end and must leave no nftables table, veth,
cgroup or process behind (conftest checks the rest).
"""
import base64
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import Sandboxd, git_http_backend, network_tag, processes_mentioning
from test_proxy import Upstream

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("nft"), reason="needs root and nft")

TOKEN = "ghs_" + "N3tw0rkT0k3n" * 3
CREDENTIAL = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
ROTATED = "Basic " + base64.b64encode(b"x-access-token:ghs_rotatedRotatedRotated").decode()


def rules(headers):
    return [{"transform": [{"headers": headers}]}]


# ---------------------------------------------------------------- PKI and upstreams

def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_pki(d):
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=rebuno test upstream CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=github.example", cwd=d)
    with open(os.path.join(d, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:github.example,DNS:api.example,DNS:git.example\n"
                "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                "keyUsage=critical,digitalSignature\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "server.ext",
             cwd=d)
    return {k: os.path.join(d, k) for k in os.listdir(d)} | {"dir": d}



@contextlib.contextmanager
def near_far_upstreams(tmp_path):
    """Two TLS upstreams at two loopback addresses, near (127.0.0.1) and far (127.0.0.2),
    for the address-range tests of the E2B and Vercel endpoints: yields (pki, near, far,
    overrides), where overrides(near=[names], far=[names]) gives the sandboxd arguments
    that send those names (or IP literals) to them, standing in for DNS."""
    pki_dir = tmp_path / "pki"
    pki_dir.mkdir()
    pki = _make_pki(str(pki_dir))
    near, far = Upstream(pki), Upstream(pki, host="127.0.0.2")

    def overrides(near_names=(), far_names=()):
        args = []
        for names, ip, up in ((near_names, "127.0.0.1", near), (far_names, "127.0.0.2", far)):
            for n in names:
                args += ["--upstream-override", f"{n}:443={ip}:{up.port}"]
        return args
    try:
        yield pki, near, far, overrides
    finally:
        near.close()
        far.close()


def _git_server(pki, root):
    """git http-backend behind an HTTPS server that requires the token."""
    return Upstream(pki, handler=lambda h, body: git_http_backend(h, body, root, CREDENTIAL))


def _host_address():
    """An address of this host other than loopback (the default route's source)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return None


def _nft_tables():
    p = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True)
    return p.stdout


def _links():
    p = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True)
    return [line.split(":")[1].strip().split("@")[0] for line in p.stdout.splitlines()]


# ---------------------------------------------------------------- the environment

class Env:
    pass


@pytest.fixture(scope="module")
def env():
    e = Env()
    e.tmp = tempfile.mkdtemp(prefix="rebuno-net-test-")
    e.pki = _make_pki(tempfile.mkdtemp(dir=e.tmp))
    e.github = Upstream(e.pki)          # intercepted: the credential is set here
    e.api = Upstream(e.pki)             # passthrough: the sandbox's own TLS
    e.plain = Upstream()                # port 80
    e.git_root = os.path.join(e.tmp, "srv")
    os.makedirs(e.git_root)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", "repo.git"], cwd=e.git_root,
                   check=True)
    e.git = _git_server(e.pki, e.git_root)
    args = ["--upstream-ca", e.pki["ca.pem"],
            "--upstream-override", f"github.example:443=127.0.0.1:{e.github.port}",
            "--upstream-override", f"github.example:80=127.0.0.1:{e.plain.port}",
            "--upstream-override", f"api.example=127.0.0.1:{e.api.port}",
            "--upstream-override", f"git.example=127.0.0.1:{e.git.port}"]
    e.d = Sandboxd(tempfile.mkdtemp(dir=e.tmp), args=args).start()
    real = os.path.realpath(e.d.state)
    h = 1469598103934665603
    for b in real.encode():
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    e.tag = "%06x" % (h & 0xFFFFFF)
    try:
        yield e
    finally:
        e.d.stop(signal.SIGTERM)
        log = e.d.read_log()
        for u in (e.github, e.api, e.plain, e.git):
            u.close()
        problems = []
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            if marker in log:
                problems.append(f"{marker} in the sandboxd log:\n{log[-4000:]}")
        if TOKEN in log or CREDENTIAL in log:
            problems.append("the token appears in the sandboxd log")
        if f"rebuno_{e.tag}" in _nft_tables():
            problems.append(f"nftables table rebuno_{e.tag} left behind")
        left = [n for n in _links() if n.startswith(f"rb{e.tag}")]
        if left:
            problems.append(f"veths left behind: {left}")
        time.sleep(0.05)
        if processes_mentioning(e.d.state):
            problems.append("processes left behind")
        subprocess.run(["rm", "-rf", e.tmp], check=False)
        assert not problems, "\n".join(problems)


def run(d, name, script, *, timeout_ms=60000, **kw):
    """bash -c script inside; returns (exit_code, stdout, stderr)."""
    r = d.run(name, "bash", ["-c", script], timeout_ms=timeout_ms, **kw)
    return r["exit_code"], r["stdout"], r["stderr"]


def py(d, name, code, *args, **kw):
    r = d.run(name, "python3", ["-c", code, *args], timeout_ms=60000, **kw)
    return r["exit_code"], r["stdout"], r["stderr"]


def auth_of(upstream, i=-1):
    return [v for k, v in upstream.requests[i]["headers"] if k.lower() == "authorization"]


# Runs inside: looks for anything shaped like the token in every process's environ,
# cmdline and readable memory, and in files (the tmpfs mounts and the writable tree
# outside /usr; the host checks the sandbox's upper layer, which holds the rest).
SCANNER = r'''
import os, re, sys, json
pat = re.compile(rb"ghs_[A-Za-z0-9]{16,}|Basic [A-Za-z0-9+/=]{24,}")
found, scanned, skipped = [], 0, []
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    for what in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{what}", "rb") as f:
                for m in pat.findall(f.read()):
                    found.append([f"/proc/{pid}/{what}", m.decode(errors="replace")])
        except OSError:
            skipped.append(f"{pid}/{what}")
    if pid == str(os.getpid()):
        continue
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb")
    except OSError:
        skipped.append(f"{pid}/mem")
        continue
    for line in maps:
        addr, perms = line.split()[:2]
        if "r" not in perms:
            continue
        lo, hi = (int(x, 16) for x in addr.split("-"))
        if hi - lo > 256 << 20:
            continue
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, ValueError, OverflowError):
            continue
        scanned += len(data)
        for m in pat.findall(data):
            found.append([f"/proc/{pid}/mem", m.decode(errors="replace")])
for top in ("/etc", "/root", "/home", "/tmp", "/var", "/run", "/opt", "/srv", "/dev/shm",
            "/usr/local"):
    for dp, dns, fns in os.walk(top):
        for fn in fns:
            p = os.path.join(dp, fn)
            try:
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                with open(p, "rb") as f:
                    for m in pat.findall(f.read(64 << 20)):
                        found.append([p, m.decode(errors="replace")])
            except OSError:
                pass
print(json.dumps({"found": found, "scanned": scanned, "skipped": skipped}))
'''

# Runs inside, in the background: holds a connection's data in memory.
HOLDER = r'''
import subprocess, time
out = subprocess.run(["curl", "-sS", "-D", "-", "https://github.example/held",
                      "-H", "Authorization: held-by-the-sandbox"], capture_output=True).stdout
print("ready", len(out), flush=True)
time.sleep(120)
'''


# ---------------------------------------------------------------- the credential

def test_credential_is_injected_and_nowhere_inside(env):
    d = env.d
    policy = {"github.example": rules({"Authorization": CREDENTIAL}), "api.example": []}
    sb = d.create("cred", network_policy=policy)
    assert sb["network"]["address"] and sb["network"]["gateway"]
    # the API never returns the value
    assert TOKEN not in json.dumps(sb) and CREDENTIAL not in json.dumps(d.get("cred"))
    assert sb["network_policy"]["github.example"][0]["transform"][0]["headers"] == {
        "Authorization": "<redacted>"}

    # the header arrives upstream with the configured value; the sandbox's own one is
    # replaced, not duplicated; the sandbox sees nothing of it
    n = len(env.github.requests)
    code, out, err = run(d, "cred", "curl -sS -v https://github.example/one "
                                    "-H 'Authorization: Bearer made-up-inside' 2>&1")
    assert code == 0, out + err
    assert "ok GET /one 0" in out
    assert auth_of(env.github) == [CREDENTIAL]
    assert len(env.github.requests) == n + 1
    assert TOKEN not in out and CREDENTIAL not in out
    # curl trusted the proxy's leaf through the sandbox's own trust store and variables
    code, out, _ = run(d, "cred", "echo $SSL_CERT_FILE $CURL_CA_BUNDLE $GIT_SSL_CAINFO "
                                  "$REQUESTS_CA_BUNDLE $NODE_EXTRA_CA_CERTS; "
                                  "grep -c 'BEGIN CERTIFICATE' $NODE_EXTRA_CA_CERTS; "
                                  "ls /usr/local/share/ca-certificates/")
    assert out.split()[:5] == ["/etc/ssl/certs/ca-certificates.crt"] * 4 + [
        "/usr/local/share/ca-certificates/rebuno-egress-ca.crt"]
    assert "rebuno-egress-ca.crt" in out
    # python's default context trusts it too (system store), without any variable
    code, out, err = py(d, "cred", "import ssl,urllib.request,os;"
                        "[os.environ.pop(k, None) for k in list(os.environ) if 'CA' in k or 'CERT' in k];"
                        "print(urllib.request.urlopen('https://github.example/py').read())")
    assert code == 0 and "ok GET /py" in out, err
    assert auth_of(env.github) == [CREDENTIAL]

    # port 80: the credential would cross the network in cleartext, so the request is
    # refused (403, saying how to opt in) unless the rule asks for plain HTTP by name
    n = len(env.plain.requests)
    code, out, err = run(d, "cred", "curl -sS -i http://github.example/plain")
    assert code == 0 and out.startswith("HTTP/1.1 403") and "plain_http" in out, out + err
    assert len(env.plain.requests) == n, "nothing reached the upstream"
    d.ok("PATCH", "/v1/sandboxes/cred", {"network_policy": dict(
        policy, **{"github.example": [dict(rules({"Authorization": CREDENTIAL})[0],
                                           plain_http=True)]})})
    code, out, err = run(d, "cred", "curl -sS http://github.example/plain")
    assert code == 0 and "ok GET /plain" in out, err
    assert auth_of(env.plain) == [CREDENTIAL]
    assert d.get("cred")["network_policy"]["github.example"][0]["plain_http"] is True

    # a process that talked through the proxy stays alive while everything is scanned
    holder = d.ok("POST", "/v1/sandboxes/cred/commands",
                  {"cmd": "python3", "args": ["-c", HOLDER]}, status=201)
    end = time.time() + 20
    while time.time() < end:
        st, o = d.request("GET", f"/v1/sandboxes/cred/commands/{holder['id']}/output?stream=stdout")
        if b"ready" in (o or b""):
            break
        time.sleep(0.1)
    assert b"ready" in o
    # environ, cmdline and memory of every process, and the files, from inside (as root)
    code, out, err = py(d, "cred", SCANNER)
    assert code == 0, err
    res = json.loads(out)
    assert res["scanned"] > 1 << 20, res  # the memory of the sandbox's processes was read
    for where, value in res["found"]:
        assert TOKEN not in value and CREDENTIAL.split()[1] not in value, (where, value)
    # ... and from the host: everything the sandbox wrote is in its upper layer
    sid = sb["id"]
    uppers = glob.glob(f"{d.state}/**/{sid}/upper", recursive=True)
    assert uppers, f"no upper layer found for {sid}"
    for dirpath, _, files in os.walk(uppers[0]):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    data = f.read()
                assert TOKEN.encode() not in data and CREDENTIAL.encode() not in data, p
    # the environment of a fresh command
    code, out, _ = run(d, "cred", "env; cat /proc/self/environ | tr '\\0' '\\n'")
    assert TOKEN not in out and "Basic" not in out
    d.ok("POST", f"/v1/sandboxes/cred/commands/{holder['id']}/signal", {"signal": "KILL"})
    stats = d.get("cred")["network"]["egress"]
    assert stats["intercepted"] >= 3 and stats["injected"] >= 4, stats


def test_denied_hosts_fail_fast_and_passthrough_is_untouched(env):
    d = env.d
    d.create("deny", network_policy={"github.example": rules({"Authorization": CREDENTIAL}),
                                     "api.example": []})
    d.write("deny", "/tmp/upstream-ca.pem", open(env.pki["ca.pem"], "rb").read())
    # a denied name does not resolve: curl fails at once (6: could not resolve)
    code, out, err = run(d, "deny", "s=$(date +%s%N); curl -sS https://evil.example/; "
                                    "echo rc=$? ms=$(( ($(date +%s%N) - s) / 1000000 ))")
    m = re.search(r"rc=(\d+) ms=(\d+)", out)
    assert m and m.group(1) == "6", out + err
    # even when dialled directly, a denied SNI is reset before any data (35)
    gw = d.get("deny")["network"]["gateway"]
    code, out, err = run(d, "deny", f"s=$(date +%s%N); curl -sS --resolve evil.example:443:{gw} "
                                    "https://evil.example/; "
                                    "echo rc=$? ms=$(( ($(date +%s%N) - s) / 1000000 ))")
    m = re.search(r"rc=(\d+) ms=(\d+)", out)
    assert m and m.group(1) == "35", out + err
    assert int(m.group(2)) < 1000, out  # typically a few ms (a reset, never a timeout)
    # the same from python, timed around the connection alone
    code, out, err = py(d, "deny", r'''
import socket, ssl, sys, time
t = time.monotonic()
try:
    s = socket.create_connection((sys.argv[1], 443), timeout=5)
    ssl.create_default_context().wrap_socket(s, server_hostname="evil.example")
    print("connected")
except OSError as e:
    print(type(e).__name__, round((time.monotonic() - t) * 1000, 1))
''', gw)
    name, ms = out.split()
    print("denied SNI dialled directly:", name, ms, "ms")
    assert name in ("ConnectionResetError", "SSLError", "SSLEOFError"), out
    assert float(ms) < 300, out

    # passthrough: the sandbox's own TLS end to end, with the upstream's certificate
    code, out, err = py(d, "deny", r'''
import socket, ssl
ctx = ssl.create_default_context(cafile="/tmp/upstream-ca.pem")
with socket.create_connection(("api.example", 443), timeout=5) as raw:
    with ctx.wrap_socket(raw, server_hostname="api.example") as s:
        issuer = dict(x[0] for x in s.getpeercert()["issuer"])["commonName"]
        s.sendall(b"GET /pass HTTP/1.1\r\nHost: api.example\r\nAuthorization: mine\r\n"
                  b"Connection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
print(issuer, data.split(b"\r\n")[0].decode())
try:  # the sandbox's system store (with its CA) does not know the real upstream's CA
    with socket.create_connection(("api.example", 443), timeout=5) as raw:
        ssl.create_default_context().wrap_socket(raw, server_hostname="api.example")
    print("trusted")
except ssl.SSLCertVerificationError:
    print("untrusted")
''')
    assert code == 0, err
    assert out.splitlines() == ["rebuno test upstream CA HTTP/1.1 200 OK", "untrusted"], out
    assert auth_of(env.api) == ["mine"]  # untouched: not intercepted


def test_bypass_attempts_are_refused(env):
    d = env.d
    d.create("bypass", network_policy={"github.example": rules({"Authorization": CREDENTIAL}),
                                       "*": []})
    net = d.get("bypass")["network"]
    n_git = len(env.github.requests)
    code, out, err = py(d, "bypass", r'''
import json, socket, ssl, sys, time
gw, up_port, host_addr = sys.argv[1], int(sys.argv[2]), sys.argv[3]
res = {}
def attempt(name, fn):
    t = time.monotonic()
    try:
        fn()
        res[name] = "ok"
    except OSError as e:
        res[name] = type(e).__name__
    res[name + "_ms"] = round((time.monotonic() - t) * 1000)
def tcp(addr, port, family=socket.AF_INET):
    def f():
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect((addr, port))
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            if not s.recv(100):
                raise ConnectionResetError("closed")
    return f
def udp(addr, port, payload):
    def f():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            s.connect((addr, port))
            s.send(payload)
            s.recv(512)
    return f
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06github\x07example\x00\x00\x01\x00\x01"
# the upstream's real address and port: loopback here is the sandbox's own
attempt("direct_loopback", tcp("127.0.0.1", up_port))
# the host's addresses: the gateway and the host's own address, on the upstream's port
attempt("direct_gateway", tcp(gw, up_port))
if host_addr != "-":
    attempt("direct_host", tcp(host_addr, up_port))
    attempt("host_ssh", tcp(host_addr, 22))
# other ports anywhere
attempt("other_port", tcp("198.51.100.7", 8443))
attempt("smtp", tcp("203.0.113.5", 25))
# the metadata service, even on port 80
attempt("metadata", tcp("169.254.169.254", 80))
# UDP, and DNS to a server of its own choosing
attempt("udp", udp("198.51.100.7", 4000, b"x"))
attempt("dns_other", udp("8.8.8.8", 53, q))
attempt("dns_tcp", tcp("8.8.8.8", 53))
# IPv6
attempt("ipv6", tcp("2001:db8::1", 443, socket.AF_INET6))
# the proxy's own DNS still answers
def dns_ok():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(q, (gw, 53))
        r = s.recv(512)
        res["dns_answer"] = socket.inet_ntoa(r[-4:])
attempt("dns_own", dns_ok)
# a forged SNI with a different Host: the credential is not sent
def forged():
    ctx = ssl.create_default_context()
    with socket.create_connection((gw, 443), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="github.example") as s:
            s.sendall(b"GET /forged HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            res["forged_status"] = data.split(b"\r\n")[0].decode()
attempt("forged", forged)
print(json.dumps(res))
''', net["gateway"], str(env.github.port), _host_address() or "-")
    assert code == 0, err
    res = json.loads(out)
    print("bypass attempts:", res)
    refused = ("ConnectionRefusedError", "ConnectionResetError", "OSError")
    for k in ("direct_loopback", "direct_gateway", "other_port", "smtp", "dns_tcp"):
        assert res[k] in refused, (k, res)
        assert res[k + "_ms"] < 1000, (k, res)  # refused at once, never a timeout
    if "direct_host" in res:
        assert res["direct_host"] in refused and res["host_ssh"] in refused, res
        assert res["direct_host_ms"] < 1000, res
    assert res["metadata"] in refused, res
    assert res["udp"] in refused, res
    assert res["dns_other"] in refused, res
    assert res["dns_other_ms"] < 1000, res
    assert res["ipv6"] in ("OSError", "ConnectionRefusedError"), res  # no IPv6 route at all
    assert res["dns_own"] == "ok" and res["dns_answer"] == net["gateway"], res
    assert res["forged"] == "ok" and res["forged_status"].startswith("HTTP/1.1 421"), res
    assert len(env.github.requests) == n_git  # nothing reached the upstream


# Runs inside: issue 13's one-write shapes after an Upgrade request, on port 80.
HOSTILE = r"""
import socket
head = (b"GET /up HTTP/1.1\r\nHost: github.example\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\n\r\n")
for extra in (b"x" * 3000, b"GET /evil HTTP/1.1\r\nHost: evil.example\r\n\r\n"):
    s = socket.create_connection(("github.example", 80), timeout=5)
    s.sendall(head + extra)
    try:
        while s.recv(65536):
            pass
    except OSError:
        pass
    s.close()
print("sent")
"""


def test_hostile_upgrades_leave_the_daemon_and_other_sandboxes_working(env):
    """Issue 13 #2 (the ASan daemon aborted: use-after-free after an Upgrade request with
    more bytes in the same write) and #8 (the bytes after an Upgrade were relayed raw at
    once, skipping the Host checks), from inside a real sandbox."""
    d = env.d
    d.create("bystander", network_policy={"github.example": []})
    code, out, err = run(d, "bystander", "curl -sS http://github.example/before")
    assert code == 0 and "ok GET /before" in out, err
    d.create("hostile", network_policy={"github.example": []})
    n = len(env.plain.requests)
    code, out, err = py(d, "hostile", HOSTILE)
    assert code == 0 and "sent" in out, err
    # the upstream declined both Upgrades; what followed was refused as a request
    got = [(r["path"], dict(r["headers"]).get("Host")) for r in env.plain.requests[n:]]
    assert got == [("/up", "github.example")] * 2, got
    # the daemon is up, and the other sandbox's egress still works
    code, out, err = run(d, "bystander", "curl -sS http://github.example/after")
    assert code == 0 and "ok GET /after" in out, err
    assert "AddressSanitizer" not in d.read_log()


# ---------------------------------------------------------------- live updates

def test_live_policy_change_closes_old_connections(env):
    d = env.d
    d.create("live", network_policy={"github.example": rules({"Authorization": CREDENTIAL}),
                                     "api.example": []})
    d.write("live", "/tmp/upstream-ca.pem", open(env.pki["ca.pem"], "rb").read())
    keeper = d.ok("POST", "/v1/sandboxes/live/commands", {"cmd": "python3", "args": ["-c", r'''
import http.client, os, socket, ssl, time
def ask(s, host, path):
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    r = http.client.HTTPResponse(s)
    r.begin()
    r.read()
    return f"{r.status} {r.reason}"
ctx = ssl.create_default_context(cafile="/tmp/upstream-ca.pem")
s = ctx.wrap_socket(socket.create_connection(("api.example", 443), timeout=10),
                    server_hostname="api.example")
print("first", ask(s, "api.example", "/keep"), flush=True)
g = ssl.create_default_context().wrap_socket(
    socket.create_connection(("github.example", 443), timeout=10), server_hostname="github.example")
print("g1", ask(g, "github.example", "/g1"), flush=True)
while not os.path.exists("/tmp/go"):
    time.sleep(0.02)
try:
    s.settimeout(5)
    print("second", ask(s, "api.example", "/again"), flush=True)
except (OSError, http.client.HTTPException) as e:
    print("second", type(e).__name__, flush=True)
print("g2", ask(g, "github.example", "/g2"), flush=True)
''']}, status=201)
    cid = keeper["id"]
    end = time.time() + 20
    out = b""
    while time.time() < end and b"g1" not in out:
        time.sleep(0.05)
        out = d.request("GET", f"/v1/sandboxes/live/commands/{cid}/output?stream=stdout")[1] or b""
    assert b"first 200 OK" in out and b"g1 200 OK" in out, out
    assert auth_of(env.github) == [CREDENTIAL]
    # drop api.example and rotate the credential, live
    sb = d.ok("PATCH", "/v1/sandboxes/live",
              {"network_policy": {"github.example": rules({"Authorization": ROTATED})}})
    assert "api.example" not in sb["network_policy"]
    d.write("live", "/tmp/go", b"1")
    r = d.ok("GET", f"/v1/sandboxes/live/commands/{cid}/wait?timeout_ms=20000")
    out = d.request("GET", f"/v1/sandboxes/live/commands/{cid}/output?stream=stdout")[1].decode()
    # the open connection to a host no longer allowed was closed by the change
    assert re.search(r"second (RemoteDisconnected|ConnectionResetError|BrokenPipeError|SSL)",
                     out), out
    # the intercepted one stays open and its next request carries the new credential
    assert "g2 200 OK" in out, out
    assert auth_of(env.github) == [ROTATED]
    # the next connection follows the new policy
    code, _, err = run(d, "live", "curl -sS --cacert /tmp/upstream-ca.pem https://api.example/")
    assert code in (6, 35), err
    assert d.get("live")["network"]["egress"]["policy_closed"] >= 1


def test_git_push_from_inside_works_only_through_the_injected_credential(env):
    d = env.d
    d.create("gitbox", network_policy={"git.example": []})
    d.write("gitbox", "/tmp/upstream-ca.pem", open(env.pki["ca.pem"], "rb").read())
    code, out, err = run(d, "gitbox", r'''
set -e
export GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=/bin/false
cat /etc/ssl/certs/ca-certificates.crt /tmp/upstream-ca.pem > /tmp/trust.pem
mkdir -p /root/work && cd /root/work
git init -q -b main
git config user.email t@t && git config user.name t
echo hello > README
head -c 2097152 /dev/urandom > blob.bin
git add . && git commit -q -m first
''')
    assert code == 0, out + err
    # the sandbox's trust (its CA included) plus the "public" CA the real server uses
    push = ("cd /root/work && GIT_TERMINAL_PROMPT=0 GIT_ASKPASS=/bin/false "
            "GIT_SSL_CAINFO=/tmp/trust.pem git push https://git.example/repo.git main 2>&1")
    # without the rule the host is only passed through: the server wants a token
    code, out, err = run(d, "gitbox", push)
    assert code != 0 and ("could not read Username" in out or "Authentication failed" in out), out
    # with it (a live update), the proxy adds the credential and git never sees it
    d.ok("PATCH", "/v1/sandboxes/gitbox",
         {"network_policy": {"git.example": rules({"Authorization": CREDENTIAL})}})
    code, out, err = run(d, "gitbox", push)
    assert code == 0, out + err
    assert TOKEN not in out and CREDENTIAL not in out
    log = subprocess.run(["git", "--git-dir", os.path.join(env.git_root, "repo.git"), "log",
                          "--format=%s", "main"], capture_output=True, text=True, check=True)
    assert log.stdout.strip() == "first"
    posts = [r for r in env.git.requests if r["method"] == "POST"]
    assert posts and max(r["len"] for r in posts) > 2 * 1024 * 1024
    code, out, _ = run(d, "gitbox", "grep -rl ghs_ /root /tmp /etc 2>/dev/null; "
                                    "git -C /root/work config --list")
    assert TOKEN not in out


# ---------------------------------------------------------------- networks and ports

def test_private_networks_and_exposed_ports(env):
    d = env.d
    a1 = d.create("a1", network_id="net-a")
    a2 = d.create("a2", network_id="net-a")
    b1 = d.create("b1", network_id="net-b")
    assert a1["network_id"] == "net-a" and b1["network_id"] == "net-b"
    assert a1["network_policy"] == "deny-all"  # the default: no egress at all
    addr2 = a2["network"]["address"]
    srv = d.ok("POST", "/v1/sandboxes/a2/commands",
               {"cmd": "python3", "args": ["-m", "http.server", "8000", "--bind", "0.0.0.0"]},
               status=201)
    probe = (f"for i in $(seq 50); do curl -s -o /dev/null -w '%{{http_code}}' -m 5 "
             f"http://{addr2}:8000/ && exit 0; sleep 0.1; done; exit 1")
    code, out, err = run(d, "a1", probe)
    assert code == 0 and out.endswith("200"), out + err  # same network: reachable directly
    code, out, err = run(d, "b1", f"s=$(date +%s%N); curl -sS -m 5 http://{addr2}:8000/; "
                                  "echo rc=$? ms=$(( ($(date +%s%N) - s) / 1000000 ))")
    m = re.search(r"rc=(\d+) ms=(\d+)", out)
    assert m and m.group(1) == "7" and int(m.group(2)) < 1000, out + err  # refused at once
    # b1 joins net-a live: now it reaches a2; leaving again cuts it off
    d.ok("PATCH", "/v1/sandboxes/b1", {"network_id": "net-a"})
    code, out, err = run(d, "b1", probe)
    assert code == 0 and out.endswith("200"), out + err
    d.ok("PATCH", "/v1/sandboxes/b1", {"network_id": None})
    code, out, _ = run(d, "b1", f"curl -sS -m 5 http://{addr2}:8000/; echo rc=$?")
    assert "rc=7" in out, out
    d.ok("POST", f"/v1/sandboxes/a2/commands/{srv['id']}/signal", {"signal": "KILL"})

    # exposed ports: host loopback reaches a server inside
    p = d.create("ports", ports=[3000])
    assert p["ports"][0]["port"] == 3000 and p["ports"][0]["host_port"]
    host_port = p["ports"][0]["host_port"]
    d.ok("POST", "/v1/sandboxes/ports/commands",
         {"cmd": "bash", "args": ["-c", "echo served-from-inside > /tmp/index.html; cd /tmp; "
                                  "exec python3 -m http.server 3000 --bind 0.0.0.0"]},
         status=201)
    body = None
    end = time.time() + 20
    while time.time() < end:
        try:
            with socket.create_connection(("127.0.0.1", host_port), timeout=5) as s:
                s.sendall(b"GET /index.html HTTP/1.0\r\n\r\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
            if data.startswith(b"HTTP/1.0 200"):
                body = data
                break
        except OSError:
            pass
        time.sleep(0.1)
    assert body and body.endswith(b"served-from-inside\n"), body
    # a big transfer through the relay, both ways
    big = os.urandom(3 << 20)
    d.write("ports", "/tmp/big.bin", big)
    with socket.create_connection(("127.0.0.1", host_port), timeout=10) as s:
        s.sendall(b"GET /big.bin HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(1 << 20):
            data += chunk
    assert data.split(b"\r\n\r\n", 1)[1] == big
    # ports change live; the port is not reachable from other interfaces
    p = d.ok("PATCH", "/v1/sandboxes/ports", {"ports": []})
    assert p["ports"] == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", host_port), timeout=2).close()
    # validation
    st, err = d.request("POST", "/v1/sandboxes", {"ports": list(range(1, 20))})
    assert st == 400 and err["error"]["field"] == "ports"
    st, err = d.request("POST", "/v1/sandboxes", {"network_id": "bad id!"})
    assert st == 400 and err["error"]["field"] == "network_id"
    st, err = d.request("POST", "/v1/sandboxes", {
        "network_policy": {"github.example": rules({"Authorization": TOKEN + "\r\nX: 1"})}})
    assert st == 400 and err["error"]["field"].startswith("network_policy")
    assert TOKEN not in json.dumps(err)
    # per-request rules (issue 17) are /v1 policy too, validated by field
    st, err = d.request("POST", "/v1/sandboxes", {"network_policy": {"github.example": [
        {"match": {"path": {"regex": ".*"}}, "response": {"statusCode": 200}}]}})
    assert st == 400 and err["error"]["field"] == \
        "network_policy.github.example[0].match.path.regex", err
    st, err = d.request("POST", "/v1/sandboxes", {"network_policy": {"github.example": [
        {"forwardURL": "ftp://x.example/"}]}})
    assert st == 400 and err["error"]["field"] == "network_policy.github.example[0].forwardURL"


def test_settings_persist_restart_and_forks_keep_them(env, make_sandboxd):
    """Policies survive a daemon restart (state is kept) and a stopped sandbox's next
    session gets a fresh CA; deny-all sandboxes have loopback only."""
    d = make_sandboxd(args=["--upstream-ca", env.pki["ca.pem"], "--upstream-override",
                            f"github.example:443=127.0.0.1:{env.github.port}"]).start()
    d.create("keep", network_policy={"github.example": rules({"Authorization": CREDENTIAL})},
             ports=[8080])
    code, out, err = run(d, "keep", "curl -sS https://github.example/k1")
    assert code == 0 and "ok GET /k1" in out, err
    ca1 = d.read("keep", "/usr/local/share/ca-certificates/rebuno-egress-ca.crt")[1]
    d.ok("POST", "/v1/sandboxes/keep/stop", {})
    d.stop()
    d.start()
    sb = d.get("keep")
    assert sb["network_policy"]["github.example"][0]["transform"][0]["headers"][
        "Authorization"] == "<redacted>"
    assert [p["port"] for p in sb["ports"]] == [8080]
    code, out, err = run(d, "keep", "curl -sS https://github.example/k2")  # lazy resume
    assert code == 0 and "ok GET /k2" in out, err
    assert auth_of(env.github) == [CREDENTIAL]
    ca2 = d.read("keep", "/usr/local/share/ca-certificates/rebuno-egress-ca.crt")[1]
    assert ca1 != ca2  # a new session, a new CA
    # a fork inherits the policy (credential included) and the ports, with its own CA
    st, child = d.request("POST", "/v1/sandboxes/keep/fork", {"name": "keep-fork"})
    if st != 404:  # the fork route (snapshots) is there
        assert st == 201, child
        assert child["network_policy"] == sb["network_policy"]
        assert [p["port"] for p in child["ports"]] == [8080]
        n = len(env.github.requests)
        code, out, err = run(d, "keep-fork", "curl -sS https://github.example/forked")
        assert code == 0 and "ok GET /forked" in out, err
        assert len(env.github.requests) == n + 1 and auth_of(env.github) == [CREDENTIAL]
        assert d.read("keep-fork", "/usr/local/share/ca-certificates/rebuno-egress-ca.crt")[1] != ca2
    # a sandbox without network settings has loopback only
    d.create("plain")
    code, out, _ = run(d, "plain", "ip -o link | grep -c eth0; curl -sS -m 3 https://github.example/ "
                                   "2>&1; echo rc=$?")
    assert out.startswith("0") and "rc=6" in out, out
    # ... until an update asks for egress: the running session is attached live
    d.write("plain", "/tmp/upstream-ca.pem", open(env.pki["ca.pem"], "rb").read())
    sb = d.ok("PATCH", "/v1/sandboxes/plain", {"network_policy": "allow-all"})
    assert sb["network"]["address"] and sb["session"]
    code, out, err = run(d, "plain", "ip -o link | grep -c eth0; curl -sS --cacert "
                                     "/tmp/upstream-ca.pem https://github.example/live")
    assert code == 0 and out.startswith("1") and "ok GET /live" in out, out + err
    assert auth_of(env.github) == []  # allow-all passes bytes untouched


def test_a_killed_daemon_leaves_nothing_behind(make_sandboxd):
    """kill -9: the sandboxes' veths go with their namespaces, and the next daemon to start
    (any daemon) removes the dead one's nftables table."""
    x = make_sandboxd().start()
    x.create("k", network_policy="allow-all", ports=[5000])
    tag = network_tag(x.state)
    assert f"rebuno_{tag}" in _nft_tables()
    assert [n for n in _links() if n.startswith(f"rb{tag}h")]
    x.kill9()
    end = time.time() + 10
    while time.time() < end and [n for n in _links() if n.startswith(f"rb{tag}h")]:
        time.sleep(0.05)
    assert not [n for n in _links() if n.startswith(f"rb{tag}h")]
    assert f"rebuno_{tag}" in _nft_tables()  # nobody removed it yet
    make_sandboxd().start()  # another daemon
    assert f"rebuno_{tag}" not in _nft_tables()
    x.start()  # the same daemon again: it sweeps its cgroups and works
    code, out, err = run(x, "k", "ip -o link | grep -c eth0")
    assert code == 0 and out.strip() == "1", out + err
