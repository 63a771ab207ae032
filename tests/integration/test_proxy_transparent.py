"""The egress proxy in transparent mode: nftables redirect + SO_ORIGINAL_DST.

This is the production path without the sandbox runtime: a child process of the
test enters a fresh network namespace (the "host" side, so nothing on the real
host changes), runs the upstreams and the proxy there, and links a second fresh
namespace (the "sandbox") to it with a veth pair. An nftables `redirect` rule on
the host side of the veth sends TCP 80/443 (and 8443, to see it refused) into the
proxy's transparent listener; the sandbox side then connects the way sandboxed
code would: to some address, port 80 or 443, with the SNI / Host of the name it
wants, after asking the proxy's DNS. The proxy must take the role
(80 or 443) from the original destination port, reset anything else, and find
the upstream from the name (override table), never from the address dialled.

Needs root, `unshare`-capable kernel and the `nft` tool; skipped otherwise.
"""
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

import pytest

from conftest import BIN
from test_proxy import CREDENTIAL, TOKEN, Upstream, pki, rules  # noqa: F401 (pki is a fixture)

CLONE_NEWNET = 0x40000000

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("nft") or not shutil.which("ip"),
    reason="needs root, ip and nft")


def _sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def _reset(fn):
    try:
        fn()
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
        return "reset"
    except OSError as e:
        return f"error {e}"
    return "no reset"


def _unshare_net():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET)")


def _read_all(fd):
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    os.close(fd)
    return data


def _sandbox_side(ca, pki, dns_port, tport):
    """The client, in the "sandbox" namespace: only a veth to the host side."""
    out = {}
    q = b"\x00\x01\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06github\x07example\x00" \
        b"\x00\x01\x00\x01"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3)
        s.sendto(q, ("10.77.0.1", dns_port))
        r = s.recv(512)
    out["dns"] = socket.inet_ntoa(r[-4:])

    # 443, a host with a rule: intercepted, the credential is set upstream
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("198.51.100.7", 443), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="github.example") as s:
            s.sendall(b"GET /t HTTP/1.1\r\nHost: github.example\r\nAuthorization: mine\r\n"
                      b"Connection: close\r\n\r\n")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    out["https_status"] = data.split(b"\r\n", 1)[0].decode()
    out["token_in_response"] = TOKEN.encode() in data

    # 443, a host without rules: the sandbox's own TLS, end to end
    ctx2 = ssl.create_default_context(cafile=pki["ca.pem"])
    with socket.create_connection(("203.0.113.5", 443), timeout=5) as raw:
        with ctx2.wrap_socket(raw, server_hostname="api.example") as s:
            out["pass_issuer"] = dict(x[0] for x in s.getpeercert()["issuer"])["commonName"]

    # 80: Host decides, the credential is set in plain HTTP too
    with socket.create_connection(("198.51.100.9", 80), timeout=5) as s:
        s.sendall(b"GET /p HTTP/1.1\r\nHost: github.example\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    out["http_status"] = data.split(b"\r\n", 1)[0].decode()

    def tls_to(host):
        with socket.create_connection(("198.51.100.7", 443), timeout=5) as raw:
            ctx.wrap_socket(raw, server_hostname=host)

    def raw_to(addr, port):
        with socket.create_connection((addr, port), timeout=5) as s:
            s.sendall(b"hello\r\n\r\n")
            if s.recv(10) == b"":
                raise ConnectionResetError("closed")

    out["denied_sni"] = _reset(lambda: tls_to("evil.example"))
    out["other_port"] = _reset(lambda: raw_to("198.51.100.7", 8443))
    out["direct_to_proxy"] = _reset(lambda: raw_to("10.77.0.1", tport))
    return out


def _scenario(pki, workdir):
    """Runs in a child of the test, in its own network namespace (the "host" side)."""
    _unshare_net()
    _sh("ip", "link", "set", "lo", "up")
    _sh("ip", "link", "add", "rbvh", "type", "veth", "peer", "name", "rbvs")
    _sh("ip", "addr", "add", "10.77.0.1/30", "dev", "rbvh")
    _sh("ip", "link", "set", "rbvh", "up")
    up_tls, up_plain = Upstream(pki), Upstream()
    ca = os.path.join(workdir, "sandbox-ca.pem")
    log = open(os.path.join(workdir, "proxy.log"), "ab")
    # plain_http: the test also sends the credential over port 80
    policy = {"github.example": [dict(rules({"Authorization": CREDENTIAL})[0], plain_http=True)],
              "api.example": []}
    proc = subprocess.Popen(
        [BIN, "egress-proxy", "--policy", json.dumps(policy),
         "--listen-transparent", "0.0.0.0:0", "--dns", "10.77.0.1:0",
         "--dns-answer", "198.51.100.7", "--ca-cert-out", ca,
         "--upstream-override", f"github.example:443=127.0.0.1:{up_tls.port}",
         "--upstream-override", f"github.example:80=127.0.0.1:{up_plain.port}",
         "--upstream-override", f"api.example=127.0.0.1:{up_tls.port}",
         "--upstream-ca", pki["ca.pem"], "--no-system-trust"],
        stdout=subprocess.PIPE, stderr=log)
    out = {}
    try:
        ports = json.loads(proc.stdout.readline())
        tport = ports["transparent"]
        # the pattern the sandbox wiring uses: redirect 80/443 arriving on the veth
        _sh("nft", "add", "table", "ip", "sbx")
        _sh("nft", "add chain ip sbx pre { type nat hook prerouting priority dstnat; }")
        _sh("nft", "add", "rule", "ip", "sbx", "pre", "iifname", "rbvh", "tcp", "dport",
            "{ 80, 443, 8443 }", "redirect", "to", f":{tport}")

        # the "sandbox": a grandchild in a second namespace holding the other veth end
        go_r, go_w = os.pipe()
        res_r, res_w = os.pipe()
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.close(res_r)
            os.close(ready_r)
            try:
                _unshare_net()
                os.write(ready_w, b"1")
                os.read(go_r, 1)
                _sh("ip", "link", "set", "lo", "up")
                _sh("ip", "addr", "add", "10.77.0.2/30", "dev", "rbvs")
                _sh("ip", "link", "set", "rbvs", "up")
                _sh("ip", "route", "add", "default", "via", "10.77.0.1")
                r = _sandbox_side(ca, pki, ports["dns"], tport)
            except BaseException as e:
                r = {"crash": "sandbox side: " + repr(e)}
            os.write(res_w, json.dumps(r).encode())
            os._exit(0)
        os.close(go_r)
        os.close(res_w)
        os.close(ready_w)
        os.read(ready_r, 1)
        os.close(ready_r)
        _sh("ip", "link", "set", "rbvs", "netns", str(pid))
        os.write(go_w, b"1")
        os.close(go_w)
        out = json.loads(_read_all(res_r) or b"{}")
        os.waitpid(pid, 0)
        if up_tls.requests:
            out["https_auth"] = [v for k, v in up_tls.requests[0]["headers"]
                                 if k.lower() == "authorization"]
        if up_plain.requests:
            out["http_auth"] = [v for k, v in up_plain.requests[-1]["headers"]
                                if k.lower() == "authorization"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out["exit"] = proc.returncode
        log.close()
        up_tls.close()
        up_plain.close()
    return out


def test_transparent_redirect_uses_the_original_port(pki):  # noqa: F811
    workdir = tempfile.mkdtemp(prefix="rebuno-tproxy-")
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        os.close(rfd)
        try:
            res = _scenario(pki, workdir)
        except BaseException as e:  # report, do not raise into the forked pytest
            res = {"crash": repr(e)}
        os.write(wfd, json.dumps(res).encode())
        os._exit(0)
    os.close(wfd)
    data = b""
    end = time.time() + 120
    while time.time() < end:
        chunk = os.read(rfd, 65536)
        if not chunk:
            break
        data += chunk
    os.close(rfd)
    os.waitpid(pid, 0)
    try:
        res = json.loads(data or b"{}")
        if "skip" in res:
            pytest.skip(res["skip"])
        assert "crash" not in res, res
        with open(os.path.join(workdir, "proxy.log"), errors="replace") as f:
            log = f.read()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            assert marker not in log, log[-4000:]
        assert TOKEN not in log
        assert res["exit"] == 0, log[-2000:]
        assert res["dns"] == "198.51.100.7"
        assert res["https_status"] == "HTTP/1.1 200 OK"
        assert res["https_auth"] == [CREDENTIAL]
        assert res["token_in_response"] is False
        assert res["pass_issuer"] == "rebuno test upstream CA"
        assert res["http_status"] == "HTTP/1.1 200 OK" and res["http_auth"] == [CREDENTIAL]
        assert res["denied_sni"] == "reset"
        assert res["other_port"] == "reset"
        assert res["direct_to_proxy"] == "reset"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
