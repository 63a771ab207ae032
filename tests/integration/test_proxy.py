"""Integration tests for the sandbox egress proxy (`rebuno egress-proxy`).

Real processes over loopback, nothing mocked. Each test makes (or reuses) a local
"real world" PKI with the openssl CLI: a test CA and server certificates for
`github.example` / `api.example`, plus an untrusted self-signed certificate and one
for the wrong name. Local HTTPS and HTTP servers started by the test play the
upstreams; the proxy is pointed at them with --upstream-override, trusts the test
CA with --upstream-ca (and nothing else: --no-system-trust), and writes its
per-sandbox CA certificate to a file the client trusts.

The client side plays the sandbox: it connects to the proxy's 443-role (or
80-role) listener with the SNI / Host of the name it wants, exactly what a
redirected connection from a sandbox looks like once SO_ORIGINAL_DST has picked
the role. Each test stops its proxy with SIGTERM and fails on any sanitizer or
valgrind report in its log.
"""
import base64
import hashlib
import http.client
import http.server
import json
import os
import re
import select
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import BIN, git_http_backend

TOKEN = "ghs_" + "S3cr3tT0k3n" * 3
CREDENTIAL = "Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()


# ---------------------------------------------------------------- PKI (openssl CLI)

def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki():
    with tempfile.TemporaryDirectory(prefix="rebuno-pki-") as d:
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
                 "-subj", "/CN=rebuno test upstream CA",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)

        def leaf(name, sans):
            _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                     "-subj", f"/CN={sans[0]}", cwd=d)
            with open(os.path.join(d, f"{name}.ext"), "w") as f:
                f.write("subjectAltName=" + ",".join(f"DNS:{s}" for s in sans) +
                        "\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
                        "keyUsage=critical,digitalSignature\n")
            _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                     "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                     "-extfile", f"{name}.ext", cwd=d)

        leaf("server", ["github.example", "api.example", "plain.example"])
        leaf("wrongname", ["other.example"])
        _openssl("req", "-x509", *ec, "-keyout", "selfsigned.key", "-out", "selfsigned.pem",
                 "-days", "2", "-subj", "/CN=github.example",
                 "-addext", "subjectAltName=DNS:github.example", cwd=d)
        yield {k: os.path.join(d, k) for k in os.listdir(d)} | {"dir": d}


# ---------------------------------------------------------------- upstream servers

class Upstream:
    """A local HTTP(S) server that records every request it gets."""

    def __init__(self, pki=None, cert="server", handler=None, host="127.0.0.1"):
        self.requests = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _body(self):
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = b""
                    while True:
                        n = int(self.rfile.readline().split(b";")[0], 16)
                        if n == 0:
                            while self.rfile.readline() not in (b"\r\n", b""):
                                pass
                            return out
                        out += self.rfile.read(n)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length", "0")))

            def _any(self):
                body = self._body()
                with outer.lock:
                    outer.requests.append({"method": self.command, "path": self.path,
                                           "headers": list(self.headers.items()),
                                           "len": len(body),
                                           "sha": hashlib.sha256(body).hexdigest()})
                if handler:
                    return handler(self, body)
                reply = f"ok {self.command} {self.path} {len(body)}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST = do_PUT = do_TRACE = _any

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.server.daemon_threads = True
        if pki:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(pki[f"{cert}.pem"], pki[f"{cert}.key"])
            # handshake in the handler thread, not in accept()
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True,
                                                 do_handshake_on_connect=False)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def headers_of(self, i):
        return self.requests[i]["headers"]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstreams():
    made = []

    def make(*a, **kw):
        u = Upstream(*a, **kw)
        made.append(u)
        return u

    yield make
    for u in made:
        u.close()


# ---------------------------------------------------------------- the proxy process

class Proxy:
    def __init__(self, workdir, policy, pki, overrides=(), args=(), policy_file=True,
                 ca_out=True):
        self.dir = workdir
        self.ca = os.path.join(workdir, "sandbox-ca.pem")
        self.policy_path = os.path.join(workdir, "policy.json")
        self.log_path = os.path.join(workdir, "proxy.log")
        if policy_file:
            self.write_policy(policy)
            policy_arg = self.policy_path
        else:
            policy_arg = policy if isinstance(policy, str) else json.dumps(policy)
        cmd = [BIN, "egress-proxy", "--policy", policy_arg,
               "--listen-tls", "127.0.0.1:0", "--listen-http", "127.0.0.1:0",
               "--dns", "127.0.0.1:0", "--dns-answer", "10.200.0.1",
               "--control", "127.0.0.1:0", *(["--ca-cert-out", self.ca] if ca_out else []),
               "--upstream-ca", pki["ca.pem"], "--no-system-trust", "--log-level", "debug",
               *args]
        for o in overrides:
            cmd += ["--upstream-override", o]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log)
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.proc.kill()
            raise RuntimeError("proxy did not start:\n" + self.read_log())
        self.ports = json.loads(line)

    @property
    def tls(self):
        return self.ports["tls"]

    @property
    def http(self):
        return self.ports["http"]

    def write_policy(self, policy):
        tmp = self.policy_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(policy if isinstance(policy, str) else json.dumps(policy))
        os.replace(tmp, self.policy_path)

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def control(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.ports["control"], timeout=10)
        c.request(method, path, body=None if body is None else json.dumps(body).encode())
        r = c.getresponse()
        data = json.loads(r.read() or b"null")
        c.close()
        return r.status, data

    def stats(self):
        return self.control("GET", "/v0/stats")[1]

    def wait_stat(self, key, value, timeout=5):
        end = time.time() + timeout
        while time.time() < end:
            s = self.stats()
            if s[key] >= value:
                return s
            time.sleep(0.02)
        raise AssertionError(f"stat {key} never reached {value}: {self.stats()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def start_proxy(pki):
    started = []
    dirs = []

    def start(policy, **kw):
        d = tempfile.mkdtemp(prefix="rebuno-proxy-")
        dirs.append(d)
        p = Proxy(d, policy, pki, **kw)
        started.append(p)
        return p

    yield start
    problems = []
    for p in started:
        rc = p.stop()
        log = p.read_log()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            if marker in log:
                problems.append(f"{marker} in {p.log_path}:\n{log[-4000:]}")
        if re.search(r"^==\d+== ", log, re.M):
            problems.append(f"valgrind errors in {p.log_path}:\n{log[-4000:]}")
        if TOKEN in log or CREDENTIAL in log:
            problems.append(f"the token appears in the proxy log {p.log_path}")
        if rc != 0:
            problems.append(f"proxy exited with {rc}:\n{log[-2000:]}")
    for d in dirs:
        subprocess.run(["rm", "-rf", d], check=False)
    assert not problems, "\n".join(problems)


def rules(headers):
    return [{"transform": [{"headers": headers}]}]


def plain_http_rules(headers):
    return [dict(rules(headers)[0], plain_http=True)]


def doc_policy(**extra):
    """The document's shape: everything else passes, github.example gets the token."""
    p = {"*": [], "github.example": rules({"Authorization": CREDENTIAL})}
    p.update(extra)
    return p


# ---------------------------------------------------------------- sandbox-side clients

def tls_connect(port, sni, cafile, timeout=5, alpn=None, ragged_eofs=True):
    """ragged_eofs=False: an end without close_notify (a reset) raises, as in exchange()."""
    ctx = ssl.create_default_context(cafile=cafile)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        return ctx.wrap_socket(raw, server_hostname=sni, suppress_ragged_eofs=ragged_eofs)
    except BaseException:
        raw.close()
        raise


def send_request(sock, host, path="/", method="GET", headers=(), body=None):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    data = resp.read()
    return resp, data


def expect_reset(fn):
    """fn() must fail with a connection reset (or the TLS equivalent), quickly."""
    t0 = time.monotonic()
    with pytest.raises((ConnectionResetError, ssl.SSLError, BrokenPipeError,
                        ConnectionAbortedError)) as ei:
        fn()
    elapsed = time.monotonic() - t0
    assert elapsed < 2, f"took {elapsed:.2f}s to fail"
    return ei.value


# ---------------------------------------------------------------- tests: 443

def test_injects_configured_header_and_overwrites_the_sandbox_one(start_proxy, upstreams, pki):
    up = upstreams(pki)
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{up.port}"])
    s = tls_connect(px.tls, "github.example", px.ca, alpn=["h2", "http/1.1"])
    assert s.selected_alpn_protocol() == "http/1.1", "only http/1.1 is offered"
    # the leaf is minted by the sandbox CA for exactly this name
    cert = s.getpeercert()
    assert ("DNS", "github.example") in cert["subjectAltName"]
    r, body = send_request(s, "github.example", "/one")
    assert r.status == 200 and body == b"ok GET /one 0\n"
    # keep-alive: a second request carrying its own Authorization, in another case
    r, body = send_request(s, "github.example", "/two",
                           headers=[("authorization", "Bearer sandbox-made-this-up"),
                                    ("X-Other", "1")])
    assert r.status == 200
    s.close()
    for i in (0, 1):
        auth = [v for k, v in up.headers_of(i) if k.lower() == "authorization"]
        assert auth == [CREDENTIAL], f"request {i}: {up.headers_of(i)}"
    assert ("X-Other", "1") in up.headers_of(1)
    assert TOKEN.encode() not in body
    st = px.stats()
    assert st["intercepted"] == 1 and st["requests"] == 2 and st["injected"] == 2
    assert st["leaves_minted"] == 1


def test_large_chunked_and_fixed_bodies_stream_intact(start_proxy, upstreams, pki):
    up = upstreams(pki)
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{up.port}"])
    blob = os.urandom(3 * 1024 * 1024 + 17)
    s = tls_connect(px.tls, "github.example", px.ca)
    r, _ = send_request(s, "github.example", "/fixed", "POST", body=blob)
    assert r.status == 200
    # chunked, in odd-sized chunks
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(blob[i:i + 70001]), blob[i:i + 70001])
                      for i in range(0, len(blob), 70001)) + b"0\r\n\r\n"
    s.sendall(b"POST /chunked HTTP/1.1\r\nHost: github.example\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n" + chunks)
    resp = http.client.HTTPResponse(s)
    resp.begin()
    resp.read()
    assert resp.status == 200
    s.close()
    want = hashlib.sha256(blob).hexdigest()
    assert [(q["path"], q["len"], q["sha"]) for q in up.requests] == [
        ("/fixed", len(blob), want), ("/chunked", len(blob), want)]


def test_passthrough_host_sees_the_upstream_certificate(start_proxy, upstreams, pki):
    up = upstreams(pki)
    px = start_proxy(doc_policy(), overrides=[f"api.example=127.0.0.1:{up.port}"])
    # The sandbox's own TLS goes end to end: it sees the real server's certificate...
    s = tls_connect(px.tls, "api.example", pki["ca.pem"])
    with open(pki["server.pem"]) as f:
        assert s.getpeercert(binary_form=True) == ssl.PEM_cert_to_DER_cert(f.read())
    r, body = send_request(s, "api.example", "/x", headers=[("Authorization", "Bearer mine")])
    assert r.status == 200
    s.close()
    # ...its own header is untouched, nothing is added
    assert [v for k, v in up.headers_of(0) if k.lower() == "authorization"] == ["Bearer mine"]
    # ...and a client that trusts only the sandbox CA fails: nothing was minted for it
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_connect(px.tls, "api.example", px.ca)
    st = px.stats()
    assert st["passthrough"] == 2 and st["intercepted"] == 0 and st["leaves_minted"] == 0


def test_denied_host_is_reset_before_any_data(start_proxy, upstreams, pki):
    up = upstreams(pki)
    px = start_proxy({"github.example": []},
                     overrides=[f"denied.example=127.0.0.1:{up.port}"])
    expect_reset(lambda: tls_connect(px.tls, "denied.example", pki["ca.pem"]))

    # no SNI at all
    def no_sni():
        ctx = ssl.create_default_context(cafile=pki["ca.pem"])
        ctx.check_hostname = False
        with socket.create_connection(("127.0.0.1", px.tls), timeout=5) as raw:
            ctx.wrap_socket(raw)
    expect_reset(no_sni)

    # not TLS at all; the proxy sends nothing back
    def junk():
        with socket.create_connection(("127.0.0.1", px.tls), timeout=5) as raw:
            raw.sendall(b"GET / HTTP/1.1\r\nHost: github.example\r\n\r\n")
            data = raw.recv(100)
            assert data == b"", data
            raise ConnectionResetError("closed")
    expect_reset(junk)
    assert up.requests == []
    st = px.wait_stat("refused", 2)
    assert st["denied"] == 1 and st["active"] == 0


def test_forged_sni_with_another_host_is_refused_without_credential(start_proxy, upstreams, pki):
    up = upstreams(pki)
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{up.port}",
                                              f"api.example=127.0.0.1:{up.port}"])
    s = tls_connect(px.tls, "github.example", px.ca)
    r, body = send_request(s, "api.example", "/steal")
    assert r.status == 421
    assert TOKEN.encode() not in body
    s.close()
    # absolute-form target naming another host than Host: refused as well
    s = tls_connect(px.tls, "github.example", px.ca)
    r, _ = send_request(s, "github.example", "http://api.example/steal")
    assert r.status == 400
    s.close()
    assert up.requests == [], "nothing reached the upstream"
    assert px.stats()["host_mismatch"] == 1


def test_untrusted_upstream_certificate_is_refused(start_proxy, upstreams, pki):
    selfsigned = upstreams(pki, cert="selfsigned")
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{selfsigned.port}"])
    # the proxy verifies the upstream before it answers the sandbox's handshake
    expect_reset(lambda: tls_connect(px.tls, "github.example", px.ca))
    assert selfsigned.requests == []
    assert "self-signed certificate" in px.read_log()
    st = px.stats()
    assert st["verify_failed"] == 1 and st["injected"] == 0


def test_upstream_hostname_mismatch_is_refused(start_proxy, upstreams, pki):
    wrongname = upstreams(pki, cert="wrongname")
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{wrongname.port}"])
    expect_reset(lambda: send_request(tls_connect(px.tls, "github.example", px.ca),
                                      "github.example"))
    assert wrongname.requests == []
    assert "hostname mismatch" in px.read_log()
    assert px.stats()["verify_failed"] == 1


def test_live_policy_update_via_control(start_proxy, upstreams, pki):
    up = upstreams(pki)
    px = start_proxy(doc_policy(**{"api.example": []}),
                     overrides=[f"github.example=127.0.0.1:{up.port}",
                                f"api.example=127.0.0.1:{up.port}"])
    passthru = tls_connect(px.tls, "api.example", pki["ca.pem"])
    assert send_request(passthru, "api.example", "/before")[0].status == 200
    inter = tls_connect(px.tls, "github.example", px.ca)
    assert send_request(inter, "github.example", "/before")[0].status == 200

    # rotate the credential and drop everything but github.example
    new_cred = "Basic " + base64.b64encode(b"x-access-token:rotated").decode()
    st, out = px.control("PUT", "/v0/policy",
                         {"github.example": rules({"Authorization": new_cred})})
    assert st == 200 and out["generation"] == 2

    # the open passthrough connection to a host no longer allowed is closed at once
    passthru.settimeout(3)
    t0 = time.monotonic()
    try:
        assert passthru.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        pass
    assert time.monotonic() - t0 < 2
    # the intercepted one stays, and its next request carries the new credential
    assert send_request(inter, "github.example", "/after")[0].status == 200
    assert [v for k, v in up.requests[-1]["headers"] if k == "Authorization"] == [new_cred]
    inter.close()
    # the next connection follows the new policy
    expect_reset(lambda: tls_connect(px.tls, "api.example", pki["ca.pem"]))
    s = px.stats()
    assert s["policy_closed"] == 1 and s["generation"] == 2

    # a policy change that turns a passthrough host into an intercepted one closes it too
    px.control("PUT", "/v0/policy", doc_policy(**{"api.example": []}))
    passthru = tls_connect(px.tls, "api.example", pki["ca.pem"])
    assert send_request(passthru, "api.example", "/x")[0].status == 200
    px.control("PUT", "/v0/policy", doc_policy(**{"api.example": rules({"X-K": "v"})}))
    passthru.settimeout(3)
    try:
        assert passthru.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        pass
    s = tls_connect(px.tls, "api.example", px.ca)
    assert send_request(s, "api.example", "/y")[0].status == 200
    assert ("X-K", "v") in up.requests[-1]["headers"]
    s.close()
    # invalid policies are refused, and the message never quotes a value
    st, out = px.control("PUT", "/v0/policy",
                         {"github.example": rules({"Authorization": TOKEN + "\r\nX: 1"})})
    assert st == 400 and TOKEN not in json.dumps(out)
    assert px.stats()["generation"] == 4


def test_sighup_reloads_the_policy_file(start_proxy, upstreams, pki):
    up = upstreams(pki)
    px = start_proxy({"api.example": []}, overrides=[f"api.example=127.0.0.1:{up.port}"])
    s = tls_connect(px.tls, "api.example", pki["ca.pem"])
    assert send_request(s, "api.example")[0].status == 200
    px.write_policy({"github.example": []})
    px.proc.send_signal(signal.SIGHUP)
    px.wait_stat("generation", 2)
    s.settimeout(3)
    try:
        assert s.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        pass
    expect_reset(lambda: tls_connect(px.tls, "api.example", pki["ca.pem"]))
    # a broken file is ignored (logged); the policy in force stays
    px.write_policy("{broken")
    px.proc.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    assert px.stats()["generation"] == 2
    assert "egress policy reload failed" in px.read_log()


def test_timeouts_and_limits(start_proxy, upstreams, pki):
    px = start_proxy(doc_policy(), args=["--handshake-timeout", "300", "--max-conns", "2"])
    # a client that never sends its ClientHello is reset after the handshake timeout
    a = socket.create_connection(("127.0.0.1", px.tls), timeout=5)
    b = socket.create_connection(("127.0.0.1", px.tls), timeout=5)
    time.sleep(0.05)
    # the third connection is over the limit: reset at once
    def third():
        with socket.create_connection(("127.0.0.1", px.tls), timeout=5) as c:
            c.sendall(b"x" * 10)
            c.recv(1)
    with pytest.raises(ConnectionError):
        third()
    t0 = time.monotonic()
    with pytest.raises(ConnectionResetError):
        a.recv(1)
    assert 0.1 < time.monotonic() - t0 < 2
    a.close()
    b.close()
    st = px.wait_stat("timeouts", 2)
    assert st["limit_rejected"] == 1


def test_names_resolving_to_private_addresses_are_refused(start_proxy, upstreams, pki):
    # "localhost" is allowed by policy but resolves (getaddrinfo, /etc/hosts) to loopback:
    # a sandbox must not reach the host's own services through the proxy.
    px = start_proxy({"localhost": []})
    expect_reset(lambda: tls_connect(px.tls, "localhost", pki["ca.pem"]))
    st = px.wait_stat("upstream_failed", 1)
    assert st["passthrough"] == 1
    assert "only private or local addresses" in px.read_log()


# ---------------------------------------------------------------- tests: 80

def test_plain_http_host_decides_and_headers_are_set(start_proxy, upstreams, pki):
    up = upstreams()
    # plain_http: the rule asks for its headers over port 80 too (cleartext)
    px = start_proxy(doc_policy(**{"github.example": plain_http_rules({"Authorization": CREDENTIAL})}),
                     overrides=[f"github.example:80=127.0.0.1:{up.port}",
                                f"api.example:80=127.0.0.1:{up.port}"])
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    c.request("GET", "/a", headers={"Host": "github.example", "Authorization": "mine"})
    assert c.getresponse().read() == b"ok GET /a 0\n"
    c.request("POST", "/b", body=b"x" * 100000, headers={"Host": "github.example"})
    assert c.getresponse().read() == b"ok POST /b 100000\n"
    # the same connection may not switch hosts (the credential is bound to the first)
    c.request("GET", "/c", headers={"Host": "api.example"})
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
        c.getresponse()
    c.close()
    assert [[v for k, v in r["headers"] if k.lower() == "authorization"]
            for r in up.requests] == [[CREDENTIAL], [CREDENTIAL]]
    # passthrough host on 80: forwarded, headers untouched
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    c.request("GET", "/d", headers={"Host": "api.example", "Authorization": "mine"})
    assert c.getresponse().status == 200
    c.close()
    assert ("Authorization", "mine") in up.requests[-1]["headers"]

    # denied Host: reset, nothing forwarded
    px.control("PUT", "/v0/policy", {"github.example": []})
    n = len(up.requests)

    def denied():
        c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
        c.request("GET", "/", headers={"Host": "api.example"})
        c.getresponse()
    expect_reset(denied)
    assert len(up.requests) == n
    st = px.stats()
    assert st["plain_http"] == 2 and st["denied"] == 1 and st["host_mismatch"] == 1


# ---------------------------------------------------------------- hostile requests (issue 13)

def exchange(sock, data, timeout=3):
    """One write, then everything the proxy sends back until it closes (or goes quiet
    for `timeout`: the connection was kept open); reset is True when it ended with a
    reset rather than a clean close."""
    sock.settimeout(timeout)
    sock.sendall(data)
    out, reset = b"", False
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (ConnectionResetError, ssl.SSLError, BrokenPipeError):
        reset = True
    except TimeoutError:
        pass
    sock.close()
    return out, reset


def tls_strict(px):
    return tls_connect(px.tls, "github.example", px.ca, ragged_eofs=False)


def plain_connect(port):
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def keepalive_ok(conn, host):
    conn.request("GET", "/alive", headers={"Host": host})
    r = conn.getresponse()
    return r.status == 200 and r.read() == b"ok GET /alive 0\n"


def test_upgrade_with_more_bytes_in_one_write_keeps_the_proxy_up(start_proxy, upstreams, pki):
    """Issue 13 #2: the head was drained from the input, then the rest copied from the
    freed chain; the ASan proxy aborted, ending every sandbox's sessions."""
    up, up_tls = upstreams(), upstreams(pki)
    px = start_proxy(doc_policy(), overrides=[f"api.example:80=127.0.0.1:{up.port}",
                                              f"github.example=127.0.0.1:{up_tls.port}"])
    other = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    assert keepalive_ok(other, "api.example")
    repro = (b"GET / HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
             + b"x" * 3000)
    for _ in range(3):
        # the upstream declines the Upgrade, so "xxx..." is parsed as a request: refused,
        # and as a response is in flight, with a reset
        _, reset = exchange(plain_connect(px.http), repro % b"api.example")
        assert reset
        _, reset = exchange(tls_strict(px),
                            repro % b"github.example")
        assert reset
    assert px.proc.poll() is None, "the proxy died:\n" + px.read_log()[-3000:]
    # a session opened before, and new ones, keep working
    assert keepalive_ok(other, "api.example")
    other.close()
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    assert keepalive_ok(c, "api.example")
    c.close()
    assert [r["path"] for r in up.requests] == ["/alive", "/", "/", "/", "/alive", "/alive"]
    assert [r["path"] for r in up_tls.requests] == ["/", "/", "/"]


def _reflect(h, body):
    """Apache's default TRACE: the request, headers included, comes back as the body."""
    if h.command != "TRACE":
        reply = f"ok {h.command} {h.path} {len(body)}\n".encode()
    else:
        reply = (h.requestline + "\r\n" + str(h.headers)).encode()
    h.send_response(200)
    h.send_header("Content-Type", "message/http")
    h.send_header("Content-Length", str(len(reply)))
    h.end_headers()
    h.wfile.write(reply)


def test_trace_is_refused_where_credentials_are_set(start_proxy, upstreams, pki):
    """Issue 13 #3: TRACE to an intercepted host came back with the credential in it."""
    up, plain = upstreams(pki, handler=_reflect), upstreams(handler=_reflect)
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{up.port}",
                                              f"api.example=127.0.0.1:{up.port}",
                                              f"old.example:80=127.0.0.1:{plain.port}"])

    def refused(sock, method, host):
        out, _ = exchange(sock, f"{method} / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        want = b"HTTP/1.1 405 Method Not Allowed" if method == "TRACE" else b"HTTP/1.1 400"
        assert out.startswith(want), out
        assert b"TRACE" in out or b"invalid HTTP method" in out, out  # the body says why
        assert TOKEN.encode() not in out and b"Authorization" not in out

    for method in ("TRACE", "TRACK"):
        refused(tls_strict(px), method, "github.example")
    # a TRACE on a later request of an intercepted connection: reset, nothing forwarded
    s = tls_strict(px)
    assert send_request(s, "github.example", "/first")[0].status == 200
    out, reset = exchange(s, b"TRACE / HTTP/1.1\r\nHost: github.example\r\n\r\n")
    assert reset and out == b""
    # port 80, where the rule allows plain HTTP: the same
    st, out = px.control("PUT", "/v0/policy", doc_policy(**{
        "old.example": plain_http_rules({"Authorization": CREDENTIAL})}))
    assert st == 200, out
    for method in ("TRACE", "TRACK"):
        refused(plain_connect(px.http), method, "old.example")
    assert [r["path"] for r in up.requests] == ["/first"] and plain.requests == []
    # a host without rules gets nothing added: TRACE there reflects only the sandbox's bytes
    s = tls_connect(px.tls, "api.example", pki["ca.pem"])
    r, body = send_request(s, "api.example", method="TRACE")
    s.close()
    assert r.status == 200 and body.startswith(b"TRACE / HTTP/1.1") and TOKEN.encode() not in body


def test_plain_http_is_refused_unless_the_rule_allows_it(start_proxy, upstreams, pki):
    """Issue 13 #6: the credential was set on port 80, crossing the network in cleartext."""
    up = upstreams()
    px = start_proxy(doc_policy(), overrides=[f"github.example:80=127.0.0.1:{up.port}"])
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    c.request("GET", "/a", headers={"Host": "github.example"})
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 403 and b"plain_http" in body and b"https://" in body, body
    assert up.requests == [], "nothing reached the upstream, no credential in cleartext"
    assert px.stats()["injected"] == 0
    # the rule asks for it by name: now it is set on port 80 too
    st, out = px.control("PUT", "/v0/policy",
                         doc_policy(**{"github.example": plain_http_rules(
                             {"Authorization": CREDENTIAL})}))
    assert st == 200, out
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    c.request("GET", "/b", headers={"Host": "github.example"})
    assert c.getresponse().read() == b"ok GET /b 0\n"
    # and a live change back refuses the next request on the same connection
    px.control("PUT", "/v0/policy", doc_policy())
    c.request("GET", "/c", headers={"Host": "github.example"})
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected)):
        c.getresponse()
    c.close()
    assert [r["path"] for r in up.requests] == ["/b"]
    assert [v for k, v in up.requests[0]["headers"] if k == "Authorization"] == [CREDENTIAL]
    # a bad value is refused, naming the field
    st, out = px.control("PUT", "/v0/policy", {"github.example": [
        dict(rules({"Authorization": CREDENTIAL})[0], plain_http="yes")]})
    assert st == 400 and out["error"]["field"] == "github.example[0].plain_http", out


SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: evil.example\r\nX-Pad: "
SMUGGLED += b"p" * (60 - len(SMUGGLED) - 4) + b"\r\n\r\n"
SHAPES = [
    # the reproduction: "Content-Length : 60" was honoured by the proxy and
    # forwarded verbatim, so an upstream that ignores it read the body as a request
    b"POST / HTTP/1.1\r\nHost: %(h)s\r\nContent-Length : 60\r\n\r\n" + SMUGGLED,
    b"GET / HTTP/1.1\r\nHost: %(h)s\r\nHost : evil.example\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost : evil.example\r\nHost: %(h)s\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: %(h)s\r\nX-A: 1\r\n Host: evil.example\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: %(h)s\r\nX-A: 1\nHost: evil.example\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: %(h)s\r\nX-A: 1\rHost: evil.example\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: %(h)s\r\nX-A: \x00\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: %(h)s\r\nX A: 1\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: %(h)s\r\nContent-Length: 60\r\nContent-Length: 0\r\n\r\n" + SMUGGLED,
    b"POST / HTTP/1.1\r\nHost: %(h)s\r\nContent-Length: 60, 60\r\n\r\n" + SMUGGLED,
    b"POST / HTTP/1.1\r\nHost: %(h)s\r\nTransfer-Encoding: chunked\r\nContent-Length: 60\r\n\r\n"
    b"0\r\n\r\n" + SMUGGLED,
    b"POST / HTTP/1.1\r\nHost: %(h)s\r\nTransfer-Encoding: identity\r\nContent-Length: 60\r\n\r\n"
    + SMUGGLED,
    b"POST / HTTP/1.1\r\nHost: %(h)s\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"
    + SMUGGLED,
    b"POST / HTTP/1.1\r\nHost: %(h)s\r\nTransfer-Encoding: chunked\r\n"
    b"Transfer-Encoding: identity\r\n\r\n0\r\n\r\n" + SMUGGLED,
]


def test_smuggling_shapes_are_refused_before_anything_is_forwarded(start_proxy, upstreams, pki):
    """Issue 13 #7: Debian's http-parser is lenient; the proxy checks each head itself."""
    up, plain = upstreams(pki), upstreams()
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{up.port}",
                                              f"api.example:80=127.0.0.1:{plain.port}"])
    for i, shape in enumerate(SHAPES):
        for where in ("tls", "http"):
            host = b"github.example" if where == "tls" else b"api.example"
            sock = (tls_strict(px) if where == "tls"
                    else plain_connect(px.http))
            out, _ = exchange(sock, shape % {b"h": host})
            assert out.startswith(b"HTTP/1.1 400 Bad Request\r\n"), (i, where, out)
            assert TOKEN.encode() not in out
    # the same shapes after a good request on a keep-alive connection: reset, nothing more
    for i, shape in enumerate(SHAPES):
        s = tls_strict(px)
        assert send_request(s, "github.example", f"/ok{i}")[0].status == 200
        out, reset = exchange(s, shape % {b"h": b"github.example"})
        assert reset and out == b"", (i, out)
    assert [r["path"] for r in up.requests] == [f"/ok{i}" for i in range(len(SHAPES))]
    assert plain.requests == []
    assert "whitespace before the colon" in px.read_log()


def _ws_upstream(h, body):
    """A WebSocket-ish server: /ws switches (101) and then echoes raw bytes; anything
    else is a plain HTTP answer, so an Upgrade elsewhere is declined."""
    if h.path == "/ws" and h.headers.get("Upgrade", "").lower() == "websocket":
        h.send_response(101)
        h.send_header("Upgrade", "websocket")
        h.send_header("Connection", "Upgrade")
        h.end_headers()
        h.wfile.flush()
        while data := h.rfile.read1(65536):
            h.wfile.write(b"echo:" + data)
        h.close_connection = True
        return
    reply = f"ok {h.command} {h.path} {len(body)}\n".encode()
    h.send_response(200)
    h.send_header("Content-Length", str(len(reply)))
    h.end_headers()
    h.wfile.write(reply)


def _read_until(sock, marker, timeout=5):
    sock.settimeout(timeout)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_upgrade_relays_raw_only_after_the_upstreams_101(start_proxy, upstreams, pki):
    """Issue 13 #8: after an Upgrade request everything was relayed raw at once, so a
    request for another host that followed it skipped the Host checks."""
    up, plain = upstreams(pki, handler=_ws_upstream), upstreams(handler=_ws_upstream)
    px = start_proxy(doc_policy(), overrides=[f"github.example=127.0.0.1:{up.port}",
                                              f"api.example:80=127.0.0.1:{plain.port}"])
    upgrade = (b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    evil = b"GET /evil HTTP/1.1\r\nHost: evil.example\r\n\r\n"

    def tls():
        return tls_strict(px)

    for connect, host, server in ((tls, b"github.example", up),
                                  (lambda: plain_connect(px.http), b"api.example", plain)):
        # the upstream declines: the bytes after the Upgrade are HTTP, checked as such
        out, reset = exchange(connect(), upgrade % (b"/declined", host) + evil)
        assert reset and b"evil" not in out, out  # refused with a response in flight: reset
        # ... and with the same Host they are simply the next request, credential set
        out, _ = exchange(connect(), upgrade % (b"/declined", host) +
                          b"GET /next HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host)
        assert out.count(b"HTTP/1.1 200 OK") == 2 and b"ok GET /next 0" in out, out
        # the upstream switches: bytes sent before its 101 arrived were held, then relayed raw
        s = connect()
        s.sendall(upgrade % (b"/ws", host) + b"early")
        got = _read_until(s, b"echo:early")
        assert got.startswith(b"HTTP/1.1 101 ") and got.endswith(b"echo:early"), got
        s.sendall(evil)  # opaque now: it reaches the WebSocket server as data, not as a request
        assert _read_until(s, b"evil.example\r\n\r\n").startswith(b"echo:" + evil[:10])
        s.close()
        paths = [(r["path"], dict(r["headers"]).get("Host")) for r in server.requests]
        assert ("/evil", "evil.example") not in paths, paths
        assert paths == [("/declined", host.decode()), ("/declined", host.decode()),
                         ("/next", host.decode()), ("/ws", host.decode())], paths
    assert [v for k, v in up.requests[2]["headers"] if k == "Authorization"] == [CREDENTIAL]


def test_fair_share_of_connection_slots(start_proxy, upstreams, pki):
    """Issue 13 #9: four sandboxes at the per-sandbox cap filled the global table and
    every other sandbox's egress failed. Five sandboxes (source addresses 127.0.0.2-6),
    4 slots each, 16 in all: the same shape at a small scale."""
    up = upstreams()
    hogs = [f"127.0.0.{i}" for i in range(2, 6)]
    late = "127.0.0.6"
    srcs = [a for ip in hogs + [late] for a in ("--source", ip)]
    px = start_proxy({"*": []}, overrides=[f"api.example:80=127.0.0.1:{up.port}"], ca_out=False,
                     args=["--max-conns", "16", "--max-conns-per-sandbox", "4", *srcs])

    def conn(src):
        c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5, source_address=(src, 0))
        assert keepalive_ok(c, "api.example")
        return c

    def alive(c):
        try:
            return keepalive_ok(c, "api.example")
        except (ConnectionError, http.client.HTTPException, OSError):
            return False

    held = {ip: [conn(ip) for _ in range(4)] for ip in hogs}
    for ip in hogs:  # the first connection of each sandbox is its quietest
        for c in held[ip][1:]:
            assert keepalive_ok(c, "api.example")
    time.sleep(0.05)
    # a hog at its cap is refused (its own limit), and so is one more for anybody at or
    # above a fair share (16 / 4 = 4) once the table is full
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn(hogs[0])
    # the fifth sandbox is below its share (16 / 5 = 3): each of its first 3 connections
    # resets the quietest connection of a sandbox holding the most
    mine = [conn(late) for _ in range(3)]
    st = px.stats()
    assert st["evicted"] == 3 and st["active"] == 16, st
    lost = [(ip, i) for ip in hogs for i, c in enumerate(held[ip]) if not alive(c)]
    assert len(lost) == 3 and len({ip for ip, _ in lost}) == 3, lost
    assert all(i == 0 for _, i in lost), f"not the quietest ones: {lost}"
    # at its share now: refused, and nobody else loses a connection for it
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        conn(late)
    assert all(alive(c) for c in mine)
    st = px.stats()
    assert st["evicted"] == 3, st
    per = st["sandboxes"]
    assert per[late]["active"] == 3 and per[late]["evicted"] == 0
    assert sorted(per[ip]["active"] for ip in hogs) == [3, 3, 3, 4]
    assert sum(per[ip]["evicted"] for ip in hogs) == 3
    assert per[late]["limit_rejected"] == 1 and per[hogs[0]]["limit_rejected"] == 1
    for cs in list(held.values()) + [mine]:
        for c in cs:
            c.close()


# ---------------------------------------------------------------- DNS

def _dns_query(port, name, qtype=1):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\x00" + qtype.to_bytes(2, "big") + b"\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(q, ("127.0.0.1", port))
        r = s.recv(512)
    return r[3] & 0x0f, r[6] << 8 | r[7], r


def test_dns_resolves_only_allowed_names(start_proxy, pki):
    px = start_proxy({"github.example": [], "*.pkg.example": []})
    rcode, an, r = _dns_query(px.ports["dns"], "github.example")
    assert (rcode, an) == (0, 1) and r[-4:] == socket.inet_aton("10.200.0.1")
    assert _dns_query(px.ports["dns"], "deep.mirror.pkg.example")[:2] == (0, 1)
    assert _dns_query(px.ports["dns"], "github.example", qtype=28)[:2] == (0, 0)  # no AAAA set
    assert _dns_query(px.ports["dns"], "evil.example")[:2] == (3, 0)
    assert _dns_query(px.ports["dns"], "pkg.example")[:2] == (3, 0)
    st = px.stats()
    assert st["dns_queries"] == 5 and st["dns_nxdomain"] == 2


# ---------------------------------------------------------------- git push

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", "GIT_ASKPASS": "/bin/false",
           "SSH_ASKPASS": "/bin/false"}


def _git_server(upstreams, pki, root):
    """git http-backend behind an HTTPS server that requires the token."""
    return upstreams(pki, handler=lambda h, body: git_http_backend(h, body, root, CREDENTIAL))


def _git(*args, cwd, check=True, env=None):
    env = dict(os.environ, **GIT_ENV, HOME=cwd, **(env or {}))
    p = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_git_push_succeeds_only_through_the_injected_credential(start_proxy, upstreams, pki,
                                                                tmpdir_path):
    server_root = os.path.join(tmpdir_path, "srv")
    os.makedirs(server_root)
    _git("init", "-q", "--bare", "-b", "main", "repo.git", cwd=server_root)
    gitsrv = _git_server(upstreams, pki, server_root)

    work = os.path.join(tmpdir_path, "work")
    os.makedirs(work)
    _git("init", "-q", "-b", "main", cwd=work)
    with open(os.path.join(work, "README"), "w") as f:
        f.write("hello\n")
    with open(os.path.join(work, "blob.bin"), "wb") as f:
        f.write(os.urandom(2 * 1024 * 1024))  # > http.postBuffer: a chunked upload
    _git("add", ".", cwd=work)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first", cwd=work)

    def push(px):
        # the sandbox trusts its own CA plus the usual public roots (here: the test CA)
        bundle = os.path.join(px.dir, "trust.pem")
        with open(bundle, "w") as out:
            for path in (px.ca, pki["ca.pem"]):
                with open(path) as f:
                    out.write(f.read())
        url = f"https://github.example:{px.tls}/repo.git"
        return _git("-c", f"http.curloptResolve=github.example:{px.tls}:127.0.0.1", "push", url,
                    "main", cwd=work, check=False, env={"GIT_SSL_CAINFO": bundle})

    # without the rule: github.example passes untouched, the server wants a token: refused
    px = start_proxy({"github.example": []},
                     overrides=[f"github.example=127.0.0.1:{gitsrv.port}"])
    p = push(px)
    assert p.returncode != 0
    assert "could not read Username" in p.stderr or "Authentication failed" in p.stderr, p.stderr
    # with the rule: the proxy adds the credential, git never sees it
    px.control("PUT", "/v0/policy", doc_policy())
    p = push(px)
    assert p.returncode == 0, p.stderr
    assert TOKEN not in p.stdout + p.stderr
    log = subprocess.run(["git", "--git-dir", os.path.join(server_root, "repo.git"), "log",
                          "--format=%s", "main"], capture_output=True, text=True, check=True)
    assert log.stdout.strip() == "first"
    # nothing on the sandbox side holds the token
    for dirpath, _, files in os.walk(work):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                assert TOKEN.encode() not in f.read(), os.path.join(dirpath, name)
    st = px.stats()
    assert st["injected"] >= 2 and st["intercepted"] >= 1
    posts = [r for r in gitsrv.requests if r["method"] == "POST"]
    assert posts and max(r["len"] for r in posts) > 2 * 1024 * 1024


# ---------------------------------------------------------------- tests: per-request rules

def _hdr(req, name):
    return [v for k, v in req["headers"] if k.lower() == name.lower()]


def _silent_listener():
    """A TCP socket that would take a connection if anything were sent its way."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    return s


def _accepted(s):
    try:
        c, _ = s.accept()
        c.close()
        return True
    except BlockingIOError:
        return False


ROUTED = {
    "api.example": [
        {"match": {"path": {"startsWith": "/fwd/"}}, "forwardURL": "http://fwd.example/base/"},
        {"match": {"method": ["DELETE"]},
         "response": {"statusCode": 403, "body": "blocked here", "contentType": "text/plain",
                      "headers": {"X-Policy": "deny-delete"}}},
        {"match": {"queryString": [{"key": {"exact": "mode"}, "value": {"exact": "local"}}]},
         "response": {"statusCode": 200, "body": "{\"local\":true}",
                      "contentType": "application/json"}},
        {"match": {"headers": [{"key": {"exact": "x-use-key"}}]},
         "transform": [{"headers": {"Authorization": CREDENTIAL}}]},
    ],
    "only.example": [{"response": {"statusCode": 200, "body": "canned"}}],
    "dead.example": [{"forwardURL": "http://gone.example/"}],
}


def _closing(h, body):
    """Answer, then close the connection (the proxy must connect again for the next)."""
    reply = f"ok {h.command} {h.path} {len(body)}\n".encode()
    h.send_response(200)
    h.send_header("Content-Length", str(len(reply)))
    h.send_header("Connection", "close")
    h.end_headers()
    h.wfile.write(reply)
    h.close_connection = True


def test_per_request_rules_forward_answer_and_match(start_proxy, upstreams, pki):
    up, fwd = upstreams(pki), upstreams(handler=_closing)
    silent = _silent_listener()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    try:
        px = start_proxy(ROUTED, overrides=[
            f"api.example=127.0.0.1:{up.port}", f"fwd.example:80=127.0.0.1:{fwd.port}",
            f"only.example=127.0.0.1:{silent.getsockname()[1]}",
            f"gone.example:80=127.0.0.1:{closed.getsockname()[1]}"])
        # one keep-alive TLS connection: each request is decided on its own
        s = tls_connect(px.tls, "api.example", px.ca)
        r, body = send_request(s, "api.example", "/plain", headers=[("X-Api-Key", "mine")])
        assert (r.status, body) == (200, b"ok GET /plain 0\n")
        r, body = send_request(s, "api.example", "/fwd/x?y=1&z",
                               headers=[("vercel-forwarded-host", "spoofed.example")])
        assert (r.status, body) == (200, b"ok GET /base/fwd/x?y=1&z 0\n")
        r, body = send_request(s, "api.example", "/thing", method="DELETE", body=b"gone?")
        assert (r.status, body, r.getheader("X-Policy")) == (403, b"blocked here", "deny-delete")
        assert r.getheader("Content-Type") == "text/plain"
        r, body = send_request(s, "api.example", "/q?mode=local")
        assert (r.status, json.loads(body)) == (200, {"local": True})
        r, body = send_request(s, "api.example", "/q?mode=remote")  # no rule matches: upstream
        assert body == b"ok GET /q?mode=remote 0\n"
        r, body = send_request(s, "api.example", "/k", headers=[("X-Use-Key", "1")])
        assert body == b"ok GET /k 0\n"
        r, body = send_request(s, "api.example", "/fwd/y", method="POST", body=b"p" * 70000)
        assert body == b"ok POST /base/fwd/y 70000\n"
        r, body = send_request(s, "api.example", "/again")
        assert body == b"ok GET /again 0\n"
        s.close()

        assert [q["path"] for q in up.requests] == ["/plain", "/q?mode=remote", "/k", "/again"]
        assert [_hdr(q, "Authorization") for q in up.requests] == [[], [], [CREDENTIAL], []]
        assert [q["path"] for q in fwd.requests] == ["/base/fwd/x?y=1&z", "/base/fwd/y"]
        f = fwd.requests[0]
        assert _hdr(f, "Host") == ["fwd.example"]
        assert _hdr(f, "vercel-forwarded-host") == ["api.example"]
        assert _hdr(f, "vercel-forwarded-scheme") == ["https"]
        assert _hdr(f, "vercel-forwarded-port") == ["443"]
        assert _hdr(f, "vercel-forwarded-path") == ["/fwd/x?y=1&z"]
        assert fwd.requests[1]["len"] == 70000

        # a domain whose every request is answered: no upstream connection at all
        s = tls_connect(px.tls, "only.example", px.ca)
        for path in ("/", "/a?b"):
            r, body = send_request(s, "only.example", path)
            assert (r.status, body) == (200, b"canned")
            assert r.getheader("Content-Type") == "text/plain; charset=utf-8"
        s.close()
        c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
        c.request("POST", "/x", body=b"data", headers={"Host": "only.example"})
        assert c.getresponse().read() == b"canned"
        c.request("HEAD", "/x", headers={"Host": "only.example"})
        r = c.getresponse()
        assert (r.status, r.getheader("Content-Length"), r.read()) == (200, "6", b"")
        c.close()
        # port 80: forwarded with the plain scheme and port
        c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
        c.request("GET", "/fwd/plain", headers={"Host": "api.example"})
        assert c.getresponse().read() == b"ok GET /base/fwd/plain 0\n"
        c.close()
        assert _hdr(fwd.requests[-1], "vercel-forwarded-scheme") == ["http"]
        assert _hdr(fwd.requests[-1], "vercel-forwarded-port") == ["80"]
        assert not _accepted(silent), "an answered request contacted the upstream"

        # the forwarding server is unreachable: that request gets a 502, in order
        s = tls_connect(px.tls, "dead.example", px.ca)
        r, body = send_request(s, "dead.example", "/")
        assert r.status == 502 and b"unreachable" in body
        s.close()

        st = px.stats()
        assert st["forwarded"] == 4 and st["responded"] == 6, st  # dead.example's counts
        assert "egress request routed" in px.read_log()
    finally:
        silent.close()
        closed.close()


def test_per_request_rules_are_validated_and_follow_live_updates(start_proxy, upstreams, pki):
    up, fwd = upstreams(pki), upstreams()
    px = start_proxy({"api.example": []}, overrides=[
        f"api.example=127.0.0.1:{up.port}", f"fwd.example:80=127.0.0.1:{fwd.port}"])
    st, out = px.control("PUT", "/v0/policy", {"api.example": [
        {"match": {"path": {"regex": "^/a"}}, "forwardURL": "http://fwd.example/"}]})
    assert st == 400 and out["error"]["field"] == "api.example[0].match.path.regex", out
    st, out = px.control("PUT", "/v0/policy", {"api.example": [
        {"forwardURL": "http://fwd.example/?q=1"}]})
    assert st == 400 and out["error"]["field"] == "api.example[0].forwardURL", out
    st, out = px.control("PUT", "/v0/policy", {"api.example": [
        {"response": {"statusCode": 200, "body": "x" * 70000}}]})
    assert st == 400 and out["error"]["field"] == "api.example[0].response.body", out
    # a passthrough connection open when the domain gets routing rules is closed; the
    # next one follows them
    s = tls_connect(px.tls, "api.example", pki["ca.pem"])
    r, body = send_request(s, "api.example", "/before")
    assert body == b"ok GET /before 0\n"
    st, _ = px.control("PUT", "/v0/policy", {"api.example": [
        {"match": {"method": ["GET"]}, "forwardURL": "http://fwd.example/"}]})
    assert st == 200
    px.wait_stat("policy_closed", 1)
    s.close()
    s = tls_connect(px.tls, "api.example", px.ca)
    r, body = send_request(s, "api.example", "/after")
    assert body == b"ok GET /after 0\n"
    r, body = send_request(s, "api.example", "/after", method="PUT", body=b"1")
    assert body == b"ok PUT /after 1\n"
    s.close()
    assert [q["path"] for q in fwd.requests] == ["/after"]
    assert [q["path"] for q in up.requests] == ["/before", "/after"]


def _read_responses(sock, n):
    """n HTTP responses read off one socket, in order: [(status, body), ...] (every one
    here has a Content-Length)."""
    return _read_responses_from(sock.makefile("rb"), n)


def _read_responses_from(f, n):
    out = []
    for _ in range(n):
        status = int(f.readline().split()[1])
        length = 0
        while (line := f.readline()) not in (b"\r\n", b""):
            k, _, v = line.decode().partition(":")
            if k.strip().lower() == "content-length":
                length = int(v)
        out.append((status, f.read(length)))
    return out, f


def test_per_request_rules_keep_pipelined_answers_in_order(start_proxy, upstreams, pki):
    up, fwd = upstreams(pki), upstreams()
    plain = upstreams()
    px = start_proxy(ROUTED, overrides=[
        f"api.example:443=127.0.0.1:{up.port}", f"api.example:80=127.0.0.1:{plain.port}",
        f"fwd.example:80=127.0.0.1:{fwd.port}"])
    reqs = (b"GET /fwd/1 HTTP/1.1\r\nHost: api.example\r\n\r\n"
            b"DELETE /2 HTTP/1.1\r\nHost: api.example\r\nContent-Length: 3\r\n\r\nabc"
            b"GET /3 HTTP/1.1\r\nHost: api.example\r\n\r\n"
            b"GET /q?mode=local HTTP/1.1\r\nHost: api.example\r\n\r\n"
            b"POST /fwd/5 HTTP/1.1\r\nHost: api.example\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\nhi\r\n0\r\n\r\n")
    want = [(200, b"ok GET /base/fwd/1 0\n"), (403, b"blocked here"), (200, b"ok GET /3 0\n"),
            (200, b'{"local":true}'), (200, b"ok POST /base/fwd/5 2\n")]
    # TLS: all five in one write, answered in order across three upstream switches
    s = tls_connect(px.tls, "api.example", px.ca)
    s.sendall(reqs)
    got, f = _read_responses(s, 5)
    assert got == want
    f.close()
    s.close()
    # port 80, then the sandbox half-closes: every answer still comes, then the end
    s = socket.create_connection(("127.0.0.1", px.http), timeout=5)
    s.sendall(reqs)
    s.shutdown(socket.SHUT_WR)
    got, f = _read_responses(s, 5)
    assert [g[0] for g in got] == [w[0] for w in want]
    assert got[2] == (200, b"ok GET /3 0\n")
    assert f.read() == b"", "the proxy closes once every answer is out"
    f.close()
    s.close()
    assert [q["path"] for q in fwd.requests] == ["/base/fwd/1", "/base/fwd/5"] * 2
    assert [q["path"] for q in up.requests] == ["/3"]
    assert [q["path"] for q in plain.requests] == ["/3"]


def test_per_request_rules_answer_refusals_in_order(start_proxy, upstreams, pki):
    up, plain = upstreams(pki), upstreams()
    px = start_proxy(ROUTED, overrides=[
        f"api.example:443=127.0.0.1:{up.port}", f"api.example:80=127.0.0.1:{plain.port}"])
    # a routed connection has nothing in flight when it reads a head, so a refused one
    # is answered after the earlier answers instead of resetting them away
    s = tls_connect(px.tls, "api.example", px.ca)
    s.sendall(b"GET /ok HTTP/1.1\r\nHost: api.example\r\n\r\n"
              b"DELETE /x HTTP/1.1\r\nHost: api.example\r\n\r\n"
              b"GET /bad HTTP/1.1\r\nHost : api.example\r\n\r\n")
    got, f = _read_responses(s, 3)
    assert [g[0] for g in got] == [200, 403, 400], got
    assert got[2][1].startswith(b"egress proxy: ")
    assert f.read() == b""
    f.close()
    s.close()
    # the first request on port 80 would get a credential in cleartext: 403, answered
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    c.request("GET", "/k", headers={"Host": "api.example", "X-Use-Key": "1"})
    r = c.getresponse()
    assert r.status == 403 and b"plain_http" in r.read()
    c.close()
    assert [q["path"] for q in up.requests] == ["/ok"] and plain.requests == []


def test_per_request_answers_continue_and_close(start_proxy, pki):
    px = start_proxy(ROUTED)
    for tls in (False, True):
        if tls:
            s = tls_connect(px.tls, "only.example", px.ca)
        else:
            s = socket.create_connection(("127.0.0.1", px.http), timeout=5)
        # a client that waits for 100 Continue before its body gets it from the proxy
        s.sendall(b"POST /up HTTP/1.1\r\nHost: only.example\r\nExpect: 100-continue\r\n"
                  b"Content-Length: 5\r\n\r\n")
        f = s.makefile("rb")
        assert f.readline() == b"HTTP/1.1 100 Continue\r\n" and f.readline() == b"\r\n"
        s.sendall(b"hello")
        got, _ = _read_responses_from(f, 1)
        assert got == [(200, b"canned")]
        # Connection: close: the answer, then the end of the connection
        s.sendall(b"GET / HTTP/1.1\r\nHost: only.example\r\nConnection: close\r\n\r\n"
                  b"GET /ignored HTTP/1.1\r\nHost: only.example\r\n\r\n")
        got, _ = _read_responses_from(f, 1)
        assert got == [(200, b"canned")]
        assert f.read() == b""
        f.close()
        s.close()
    assert px.stats()["responded"] == 4


# ---------------------------------------------------------------- address ranges (subnets)
#
# The overrides stand in for DNS: the proxy connects to the override's address, so that
# is the address the ranges judge ("the address actually connected"). 127.0.0.2 has no
# listener: a name sent there is refused by the ranges before any connect is tried
# (counted as denied), or fails upstream when the ranges let it through. A name that only
# a range could admit is never looked up: its upstream is the address the sandbox dialled,
# which these role listeners do not know, so here only IP-literal Hosts can show it (the
# transparent flow is in test_e2b_compat.py and test_vercel_compat.py).

def _refused_tls(px, name, cafile):
    expect_reset(lambda: tls_connect(px.tls, name, cafile))


def _get80(px, host, path):
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    try:
        c.request("GET", path, headers={"Host": host})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_subnets_deny_wins_and_allow_needs_no_domain(start_proxy, upstreams, pki):
    up = upstreams(pki)
    plain = upstreams()
    ov = [f"github.example=127.0.0.1:{up.port}", f"api.example=127.0.0.1:{up.port}",
          f"203.0.113.9:80=127.0.0.1:{plain.port}", f"203.0.113.10:80=127.0.0.2:{plain.port}"]
    # Vercel's precedence: subnets.deny beats an allowed domain
    px = start_proxy({"allow": ["github.example"], "subnets": {"deny": ["127.0.0.1"]}},
                     overrides=ov)
    _refused_tls(px, "github.example", pki["ca.pem"])
    st = px.wait_stat("denied", 1)
    assert st["upstream_failed"] == 0 and up.requests == []
    assert "address denied by subnets" in px.read_log()

    # subnets.allow: a host no domain names is reached through its address alone
    st, _ = px.control("PUT", "/v0/policy", {"allow": [], "subnets": {"allow": ["127.0.0.0/31"]}})
    assert st == 200
    assert _get80(px, "203.0.113.9", "/by-range") == (200, b"ok GET /by-range 0\n")
    # ... but not one whose address is outside the range
    expect_reset(lambda: _get80(px, "203.0.113.10", "/outside"))
    assert px.wait_stat("denied", 2)["upstream_failed"] == 0
    # a name no domain allows is never looked up (no DNS query leaves for it): without a
    # dialled address there is nothing to judge, and it is refused
    _refused_tls(px, "api.example", pki["ca.pem"])
    assert px.wait_stat("denied", 3)["upstream_failed"] == 0
    assert "address dialled is unknown" in px.read_log()
    # deny beats allow for the same address
    px.control("PUT", "/v0/policy",
               {"subnets": {"allow": ["127.0.0.0/8"], "deny": ["127.0.0.1/32"]}})
    expect_reset(lambda: _get80(px, "203.0.113.9", "/both"))
    assert px.wait_stat("denied", 4)["upstream_failed"] == 0
    assert [r["path"] for r in plain.requests] == ["/by-range"] and up.requests == []
    # DNS still answers only names a domain allows: a range does not make names resolve
    assert _dns_query(px.ports["dns"], "api.example")[:2] == (3, 0)


def test_subnets_allow_precedence_is_e2b(start_proxy, upstreams, pki):
    up = upstreams(pki)
    ov = [f"github.example=127.0.0.1:{up.port}", f"api.example=127.0.0.1:{up.port}"]
    # E2B: allowOut (a domain or a range) wins over denyOut; "*" does not
    px = start_proxy({"allow": {"*": [], "github.example": []},
                      "subnets": {"deny": ["127.0.0.0/8"], "precedence": "allow"}},
                     overrides=ov)
    s = tls_connect(px.tls, "github.example", pki["ca.pem"])
    assert send_request(s, "github.example", "/named")[0].status == 200
    s.close()
    _refused_tls(px, "api.example", pki["ca.pem"])
    px.control("PUT", "/v0/policy", {"allow": {"*": []},
                                     "subnets": {"allow": ["127.0.0.1"], "deny": ["127.0.0.0/8"],
                                                 "precedence": "allow"}})
    s = tls_connect(px.tls, "api.example", pki["ca.pem"])
    assert send_request(s, "api.example", "/range-wins")[0].status == 200
    s.close()
    assert [r["path"] for r in up.requests] == ["/named", "/range-wins"]


def test_subnets_on_port_80_live_updates_and_validation(start_proxy, upstreams, pki):
    up = upstreams()
    tup = upstreams(pki)
    px = start_proxy({"allow": ["api.example"], "subnets": {"allow": ["127.0.0.1"]}},
                     overrides=[f"203.0.113.9:80=127.0.0.1:{up.port}",
                                f"api.example:443=127.0.0.1:{tup.port}"])
    # port 80: an IP-literal Host no domain allows, admitted by its address
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    c.request("GET", "/plain", headers={"Host": "203.0.113.9"})
    r = c.getresponse()
    assert r.status == 200 and r.read() == b"ok GET /plain 0\n"
    # an open connection whose address a live update denies is closed at once
    s = tls_connect(px.tls, "api.example", pki["ca.pem"])
    assert send_request(s, "api.example", "/open")[0].status == 200
    st, _ = px.control("PUT", "/v0/policy", {"allow": ["api.example"],
                                             "subnets": {"allow": ["127.0.0.1"],
                                                         "deny": ["127.0.0.0/24"]}})
    assert st == 200
    s.settimeout(3)
    try:
        assert s.recv(1) == b""
    except (ConnectionResetError, ssl.SSLError):
        pass
    s.close()
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError)):
        c.request("GET", "/after", headers={"Host": "203.0.113.9"})
        c.getresponse()
    c.close()
    assert px.stats()["policy_closed"] == 2
    assert [q["path"] for q in up.requests] == ["/plain"]
    # a connection admitted by its address alone is closed when a live change allows (and
    # sets a credential for) its name: the credential must never go to the address the
    # sandbox chose
    px.control("PUT", "/v0/policy", {"subnets": {"allow": ["127.0.0.1"]}})
    c = http.client.HTTPConnection("127.0.0.1", px.http, timeout=5)
    c.request("GET", "/by-addr", headers={"Host": "203.0.113.9"})
    assert c.getresponse().read() == b"ok GET /by-addr 0\n"
    px.control("PUT", "/v0/policy", {"203.0.113.9": plain_http_rules({"Authorization": CREDENTIAL}),
                                     "subnets": []})
    with pytest.raises((ConnectionResetError, http.client.RemoteDisconnected, BrokenPipeError)):
        c.request("GET", "/cred", headers={"Host": "203.0.113.9"})
        c.getresponse()
    c.close()
    assert px.stats()["policy_closed"] == 3
    assert [q["path"] for q in up.requests] == ["/plain", "/by-addr"]
    # bad ranges: 400 naming the element
    for body, field in [({"subnets": {"deny": ["10.0.0.0/8", "10.1.2.3/8"]}}, "subnets.deny[1]"),
                        ({"subnets": {"allow": ["2001:db8::/32"]}}, "subnets.allow[0]"),
                        ({"subnets": {"allow": ["1.2.3.4/33"]}}, "subnets.allow[0]"),
                        ({"subnets": {"allow": ["a"] * 257}}, "subnets.allow")]:
        st, out = px.control("PUT", "/v0/policy", body)
        assert st == 400 and field in json.dumps(out), (body, out)


def test_subnets_allow_never_opens_private_upstreams(start_proxy, pki):
    # the private-address refusal stands whatever the ranges say: an IP-literal Host on
    # loopback, admitted by the range, is still refused when the proxy connects
    px = start_proxy({"subnets": {"allow": ["127.0.0.0/8", "0.0.0.0/0"]}})
    expect_reset(lambda: _get80(px, "127.0.0.1", "/"))
    st = px.wait_stat("upstream_failed", 1)
    assert st["denied"] == 0
    assert "only private or local addresses" in px.read_log()
