"""A real OCI registry on loopback for the pull tests, and images to push to it.

- Registry: Debian's docker-registry (`docker-registry serve CONFIG`), its own config and
  storage in a temp dir, on a free port: plain HTTP, with TLS (a CA made with openssl),
  and/or with token auth (TokenServer: Python's http.server issuing RS256 JWTs, signed
  with `openssl dgst`, that the registry verifies through its rootcertbundle).
- Images: OCI image layouts written with tarfile (layers plain or gzip), pushed with
  `skopeo copy oci:DIR:tag docker://HOST/name:tag` (recompressed to zstd when asked).
- FakeRegistry: a small server for what a real registry will not do on demand (answer
  429/500, stall mid-blob). Only these error paths use it.
Every process started here is stopped, and every temp dir removed, by the caller's
fixture (Registry.stop, TokenServer.stop, FakeRegistry.stop).
"""
import base64
import gzip
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.request

from conftest import free_port

REGISTRY_BIN = "/usr/bin/docker-registry"
SKOPEO = "/usr/bin/skopeo"


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def openssl(*args, **kw):
    subprocess.run(["openssl", *args], check=True, capture_output=True, **kw)


def make_ca(d, name="ca"):
    """A self-signed CA (key, cert) in d; returns (key, cert) paths."""
    key, crt = os.path.join(d, f"{name}.key"), os.path.join(d, f"{name}.crt")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt,
            "-days", "2", "-subj", f"/CN=rebuno test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,digitalSignature")
    return key, crt


def make_server_cert(d, ca_key, ca_crt):
    """A certificate for 127.0.0.1 signed by the CA; returns (key, cert) paths."""
    key, csr, crt = (os.path.join(d, n) for n in ("srv.key", "srv.csr", "srv.crt"))
    ext = os.path.join(d, "srv.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr,
            "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
            "-out", crt, "-days", "2", "-extfile", ext)
    return key, crt


class TokenServer:
    """The token endpoint of a registry's `auth: token:` (Docker's token spec): GET
    /token?service=&scope= with basic credentials -> {"token": JWT}. Without (or with
    wrong) credentials: 401. Counts the tokens it issued."""

    def __init__(self, d, user="puller", password="s3cret"):
        self.dir = d
        self.user, self.password = user, password
        self.key, self.crt = make_ca(d, "token")
        der = subprocess.run(["openssl", "x509", "-in", self.crt, "-outform", "DER"],
                             check=True, capture_output=True).stdout
        self.x5c = base64.b64encode(der).decode()
        self.issued = 0
        self.port = free_port()
        self.service = "rebuno-test-registry"
        self.issuer = "rebuno-test-issuer"
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                q = urllib.parse.urlparse(self.path)
                params = urllib.parse.parse_qs(q.query)
                want = f"{outer.user}:{outer.password}".encode()
                got = self.headers.get("Authorization", "")
                if not got.startswith("Basic ") or base64.b64decode(got[6:]) != want:
                    self.send_response(401)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                    self.wfile.write(b'{"details":"credentials required"}')
                    return
                access = []
                for sc in params.get("scope", []):
                    parts = sc.split(":")
                    if len(parts) == 3 and parts[0] == "repository":
                        access.append({"type": "repository", "name": parts[1],
                                       "actions": parts[2].split(",")})
                tok = outer.jwt(params.get("service", [""])[0], access)
                outer.issued += 1
                body = json.dumps({"token": tok, "access_token": tok, "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        import urllib.parse  # noqa: F401 (used by the handler)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def realm(self):
        return f"http://127.0.0.1:{self.port}/token"

    def jwt(self, service, access):
        now = int(time.time())
        head = {"typ": "JWT", "alg": "RS256", "x5c": [self.x5c]}
        claims = {"iss": self.issuer, "sub": self.user, "aud": service, "exp": now + 300,
                  "nbf": now - 10, "iat": now, "jti": f"{now}-{self.issued}", "access": access}
        signing = f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(claims).encode())}"
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", self.key],
                             input=signing.encode(), check=True, capture_output=True).stdout
        return f"{signing}.{b64url(sig)}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Registry:
    """docker-registry on 127.0.0.1:<free port>; tls and token are optional."""

    def __init__(self, root, tls=False, token=None):
        self.root = root
        self.storage = os.path.join(root, "storage")
        os.makedirs(self.storage)
        self.port = free_port()
        self.tls = tls
        self.token = token
        self.log_path = os.path.join(root, "registry.log")
        cfg = [
            "version: 0.1",
            "log:",
            "  level: info",
            "  accesslog:",
            "    disabled: false",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.storage}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: 127.0.0.1:{self.port}",
            f"  secret: test-{self.port}",
        ]
        if tls:
            self.ca_key, self.ca_crt = make_ca(root, "registry-ca")
            key, crt = make_server_cert(root, self.ca_key, self.ca_crt)
            cfg += ["  tls:", f"    certificate: {crt}", f"    key: {key}"]
        if token:
            cfg += ["auth:", "  token:", f"    realm: {token.realm}",
                    f"    service: {token.service}", f"    issuer: {token.issuer}",
                    f"    rootcertbundle: {token.crt}"]
        self.config = os.path.join(root, "config.yml")
        with open(self.config, "w") as f:
            f.write("\n".join(cfg) + "\n")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", self.config], stdout=self.log,
                                     stderr=self.log)
        end = time.time() + 15
        while time.time() < end:
            if self.proc.poll() is not None:
                raise RuntimeError("docker-registry exited:\n" + self.read_log())
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("docker-registry did not start:\n" + self.read_log())

    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    def read_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def blob_gets(self, digest):
        """How many GETs of this blob the registry served (its access log)."""
        pat = re.compile(r'"GET /v2/[^ ]*/blobs/' + re.escape(digest) + r' HTTP')
        return sum(1 for line in self.read_log().splitlines() if pat.search(line))

    def blob_data_path(self, digest):
        algo, hexd = digest.split(":")
        return os.path.join(self.storage, "docker", "registry", "v2", "blobs", algo, hexd[:2],
                            hexd, "data")

    def push(self, layout, tag, dest, zstd=False, creds=None):
        """skopeo copy oci:layout:tag docker://host/dest (dest: "name:tag")."""
        cmd = [SKOPEO, "copy", "--quiet", "--insecure-policy", "--dest-tls-verify=false"]
        if zstd:
            cmd += ["--dest-compress", "--dest-compress-format", "zstd"]
        if creds:
            cmd += ["--dest-creds", creds]
        cmd += [f"oci:{layout}:{tag}", f"docker://{self.host}/{dest}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr

    def push_index(self, layout, dest, creds=None):
        """Push a whole multi-platform index (skopeo --all)."""
        cmd = [SKOPEO, "copy", "--quiet", "--all", "--insecure-policy", "--dest-tls-verify=false"]
        if creds:
            cmd += ["--dest-creds", creds]
        cmd += [f"oci:{layout}:latest", f"docker://{self.host}/{dest}"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------- OCI layouts


def tar_bytes(entries):
    """entries: list of (name, spec); spec is bytes (a file), "dir", ("link", target),
    ("hard", target), ("exec", bytes) (a 0755 file). Deterministic (mtime 0, root-owned)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, spec in entries:
            ti = tarfile.TarInfo(name)
            ti.mtime = 0
            ti.uid = ti.gid = 0
            if spec == "dir":
                ti.type = tarfile.DIRTYPE
                ti.mode = 0o755
                t.addfile(ti)
            elif isinstance(spec, tuple) and spec[0] == "link":
                ti.type = tarfile.SYMTYPE
                ti.linkname = spec[1]
                t.addfile(ti)
            elif isinstance(spec, tuple) and spec[0] == "exec":
                ti.size = len(spec[1])
                ti.mode = 0o755
                t.addfile(ti, io.BytesIO(spec[1]))
            elif isinstance(spec, tuple) and spec[0] == "hard":
                ti.type = tarfile.LNKTYPE
                ti.linkname = spec[1]
                t.addfile(ti)
            else:
                ti.size = len(spec)
                ti.mode = 0o644
                t.addfile(ti, io.BytesIO(spec))
    return out.getvalue()


class Layout:
    """An OCI image layout being written: blobs, then images, then index.json."""

    def __init__(self, path):
        self.path = path
        os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(path, "oci-layout"), "w") as f:
            f.write('{"imageLayoutVersion":"1.0.0"}')
        self.entries = []

    def blob(self, data):
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        with open(os.path.join(self.path, "blobs", "sha256", d[7:]), "wb") as f:
            f.write(data)
        return {"digest": d, "size": len(data)}

    def image(self, layers, arch="amd64", env=None, compress=True):
        """layers: list of entry lists (tar_bytes). Returns the manifest descriptor."""
        descs, diff_ids = [], []
        for entries in layers:
            raw = entries if isinstance(entries, bytes) else tar_bytes(entries)
            diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
            data = gzip.compress(raw, mtime=0) if compress else raw
            mt = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
            descs.append({"mediaType": mt, **self.blob(data)})
        config = {"architecture": arch, "os": "linux",
                  "config": {"Env": env or ["PATH=/usr/bin:/bin"]},
                  "rootfs": {"type": "layers", "diff_ids": diff_ids}}
        cdesc = {"mediaType": "application/vnd.oci.image.config.v1+json",
                 **self.blob(json.dumps(config).encode())}
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": cdesc, "layers": descs}
        mdesc = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                 **self.blob(json.dumps(manifest).encode()),
                 "platform": {"architecture": arch, "os": "linux"}}
        return mdesc

    def tag(self, desc, tag):
        e = dict(desc)
        e["annotations"] = {"org.opencontainers.image.ref.name": tag}
        self.entries.append(e)
        self.write()

    def tag_index(self, descs, tag):
        """An image index of several platforms, tagged."""
        idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
               "manifests": descs}
        d = {"mediaType": "application/vnd.oci.image.index.v1+json",
             **self.blob(json.dumps(idx).encode())}
        self.tag(d, tag)
        return d

    def write(self):
        with open(os.path.join(self.path, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": self.entries}, f)


# ---------------------------------------------------------------- a misbehaving registry


class FakeRegistry:
    """Answers /v2/ 200 and then, for manifests and blobs, what `mode` says:
    ("status", 429|500): that status with a registry error body;
    ("manifest", bytes, content_type): that body for every manifest;
    ("stall", manifest_bytes, blob_digest, size): serves manifest_bytes, then the blob's
    first 100 bytes and nothing more (the connection stays open)."""

    def __init__(self, mode):
        self.mode = mode
        self.port = free_port()
        self.requests = []
        self.stop_event = threading.Event()
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.requests.append(self.path)
                m = outer.mode
                if self.path == "/v2/":
                    self.reply(200, b"{}", "application/json")
                elif m[0] == "status":
                    body = json.dumps({"errors": [{"code": "TOOMANYREQUESTS" if m[1] == 429
                                                   else "UNKNOWN", "message": "test says no"}]})
                    self.reply(m[1], body.encode(), "application/json")
                elif m[0] == "manifest" and "/manifests/" in self.path:
                    self.reply(200, m[1], m[2])
                elif m[0] == "stall" and "/manifests/" in self.path:
                    self.reply(200, m[1], "application/vnd.oci.image.manifest.v1+json")
                elif m[0] == "stall" and "/blobs/" in self.path:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(m[3]))
                    self.end_headers()
                    self.wfile.write(b"x" * 100)
                    self.wfile.flush()
                    outer.stop_event.wait(120)
                else:
                    self.reply(404, b'{"errors":[]}', "application/json")

            def reply(self, st, body, ct):
                self.send_response(st)
                self.send_header("Content-Type", ct)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        self.stop_event.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class RedirectingRegistry:
    """A registry that wants a bearer token (from its own /token) and sends every blob
    GET, with 307, to a separate blob server on another port (as registries backed by
    object storage do). The blob server records the Authorization headers it got, so a
    test can check that credentials never follow the redirect. Serves the images of an
    OCI layout directory (tags from its index.json)."""

    TOKEN = "sekret-token"

    def __init__(self, layout_dir):
        self.layout = layout_dir
        self.port, self.blob_port = free_port(), free_port()
        self.blob_auth = []  # Authorization headers the blob server saw ("" when none)
        self.registry_auth = []
        idx = json.load(open(os.path.join(layout_dir, "index.json")))
        self.tags = {m["annotations"]["org.opencontainers.image.ref.name"]: m
                     for m in idx["manifests"]}
        outer = self

        def blob(digest):
            p = os.path.join(outer.layout, "blobs", "sha256", digest.split(":")[1])
            return open(p, "rb").read() if os.path.isfile(p) else None

        class Reg(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, st, body, ct="application/json", extra=()):
                self.send_response(st)
                self.send_header("Content-Type", ct)
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.startswith("/token"):
                    return self.reply(200, json.dumps({"token": outer.TOKEN}).encode())
                got = self.headers.get("Authorization", "")
                outer.registry_auth.append(got)
                if got != f"Bearer {outer.TOKEN}":
                    chal = (f'Bearer realm="http://127.0.0.1:{outer.port}/token",'
                            f'service="redirecting",scope="repository:r/x:pull"')
                    return self.reply(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}',
                                      extra=[("WWW-Authenticate", chal)])
                m = re.match(r"^/v2/r/x/(manifests|blobs)/(.+)$", self.path)
                if not m:
                    return self.reply(404, b'{"errors":[]}')
                kind, ref = m.groups()
                if kind == "blobs":
                    loc = f"http://127.0.0.1:{outer.blob_port}/storage/{ref}"
                    return self.reply(307, b"", extra=[("Location", loc)])
                desc = outer.tags.get(ref) or {"digest": ref}
                data = blob(desc["digest"])
                if data is None:
                    return self.reply(404, b'{"errors":[]}')
                mt = json.loads(data).get("mediaType", "application/vnd.oci.image.manifest.v1+json")
                self.reply(200, data, mt)

        class Store(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.blob_auth.append(self.headers.get("Authorization", ""))
                data = blob(self.path.rsplit("/", 1)[-1])
                self.send_response(200 if data is not None else 404)
                self.send_header("Content-Length", str(len(data or b"")))
                self.end_headers()
                self.wfile.write(data or b"")

        self.servers = [http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Reg),
                        http.server.ThreadingHTTPServer(("127.0.0.1", self.blob_port), Store)]
        for s in self.servers:
            s.daemon_threads = True
            threading.Thread(target=s.serve_forever, daemon=True).start()

    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        for s in self.servers:
            s.shutdown()
            s.server_close()
