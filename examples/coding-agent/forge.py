#!/usr/bin/env python3
"""A local git "forge" that plays GitHub's role in the coding-agent demo.

One HTTPS server (standard library only) that

* serves git's smart HTTP protocol (clone, fetch, push) by running
  ``git http-backend`` as a CGI program for each request, streaming the request and
  response bodies (``Transfer-Encoding: chunked`` request bodies from git included);
* requires a token on every request, git and API alike:
  ``Authorization: Basic base64("x-access-token:<token>")`` (any user name, like
  GitHub; the demo's egress proxy injects exactly this header) or
  ``Authorization: Bearer <token>``; anything else gets ``401`` with
  ``WWW-Authenticate: Basic realm="forge"``;
* has a small pull-request API (GitHub-like paths under ``/api``)::

      GET  /api/repos/{owner}/{repo}                      the repository
      GET  /api/repos/{owner}/{repo}/branches             its branches
      GET  /api/repos/{owner}/{repo}/branches/{branch}    {"name", "commit": {"sha", "message"}}
      GET  /api/repos/{owner}/{repo}/pulls[?state=&head=] the pull requests
      GET  /api/repos/{owner}/{repo}/pulls/{number}       one pull request
      POST /api/repos/{owner}/{repo}/pulls                {title, body?, head, base?}
      GET  /{owner}/{repo}/pull/{number}                  a pull request's ``url``

  ``POST .../pulls`` answers ``201`` with ``{number, url, title, body, head, base,
  state, head_sha, ...}``. Like GitHub there is one open pull request per head
  branch: posting again for the same head updates that one (title, body, base) and
  answers ``200``. Pull requests are kept in ``<data>/pulls.json``;
* makes its own TLS material with the ``openssl`` command on first start: a local CA
  (``<data>/tls/ca.crt``) and a server certificate for ``--hostname`` (default
  ``github.local``, plus ``localhost`` and ``127.0.0.1``). Clients must trust the CA:
  ``git -c http.sslCAInfo=<data>/tls/ca.crt ...``; the egress proxy trusts it as its
  "real upstream" CA.

Repositories live in ``<data>/repos/{owner}/{repo}.git``; ``--init-repo owner/name
--from DIR`` makes one from a folder (one commit on ``main``). The default branch
``main`` is protected by a ``pre-receive`` hook: changes reach it through pull
requests, so a token that can push can still only push other branches
(``--unprotected`` leaves it open).

Usage::

    FORGE_TOKEN=s3cret python3 forge.py --data /tmp/forge --init-repo acme/calc --from sample-repo
    FORGE_TOKEN=s3cret python3 forge.py --data /tmp/forge --listen 127.0.0.1:0
    # prints: forge: https://127.0.0.1:PORT ca=/tmp/forge/tls/ca.crt host=github.local

With no token given, one is generated into ``<data>/token`` (mode 0600) and that
file's path is printed (``token-file=...``); the token itself is never printed or
logged. Each request is logged to stderr as one line, without credentials.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hmac
import http.server
import io
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, cast

DEFAULT_HOSTNAME = "github.local"
DEFAULT_BRANCH = "main"
MAX_API_BODY = 64 * 1024          # bytes of a JSON request body
DRAIN_LIMIT = 1024 * 1024         # an oversize API body up to this is read and dropped before the 413
MAX_TITLE = 256                   # characters of a pull request title
MAX_PR_BODY = 32 * 1024           # characters of a pull request body
DEFAULT_MAX_PUSH = 256 * 1024 * 1024  # bytes of one git request body
MAX_CONNECTIONS = 64
CGI_TIMEOUT = 600.0               # seconds one git http-backend run may take
SOCKET_TIMEOUT = 120.0            # seconds of silence before a connection is dropped
COPY_CHUNK = 64 * 1024

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
BRANCH_RE = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")
HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME_RE = re.compile(rf"^{HOST_LABEL}(?:\.{HOST_LABEL})*$")
GIT_PATH_RE = re.compile(
    r"^/(?P<owner>[^/]+)/(?P<repo>[^/]+?)(?:\.git)?/(?P<rest>info/refs|git-upload-pack|git-receive-pack)$")
PULL_PAGE_RE = re.compile(r"^/(?P<owner>[^/]+)/(?P<repo>[^/]+)/pull/(?P<number>[0-9]{1,9})$")
GIT_SERVICES = ("git-upload-pack", "git-receive-pack")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "status"}
PR_FIELDS = {"title", "body", "head", "base"}


class ForgeError(Exception):
    """A setup or command-line problem, reported as one line and exit status 1."""


class HTTPError(Exception):
    """An error answer: ``status`` with a GitHub-style ``{"message": ...}`` body."""

    def __init__(self, status: int, message: str, *, close: bool = False):
        super().__init__(message)
        self.status = status
        self.message = message
        self.close = close


# --- names -----------------------------------------------------------------------------

def valid_name(name: str) -> bool:
    """An owner or repository name: letters, digits, ``.``, ``_``, ``-``; no ``..``,
    no leading dot or dash, not ending in ``.git`` or ``.lock``."""
    return (bool(NAME_RE.match(name)) and ".." not in name
            and not name.endswith((".git", ".lock")))


def valid_branch(name: str) -> bool:
    """A branch name git accepts and that cannot climb out of ``refs/heads``."""
    if not BRANCH_RE.match(name) or name in ("HEAD", "@"):
        return False
    if name.startswith(("-", "/")) or name.endswith(("/", ".", ".lock")):
        return False
    if ".." in name or "//" in name or "@{" in name:
        return False
    return not any(part.startswith(".") or part.endswith(".lock") for part in name.split("/"))


def split_repo(spec: str) -> tuple[str, str]:
    """``owner/name`` -> ``(owner, name)``, validated; raises :class:`ForgeError`."""
    owner, sep, name = spec.partition("/")
    if not sep or not valid_name(owner) or not valid_name(name):
        raise ForgeError(f"bad repository {spec!r}: expected owner/name (letters, digits, '.', '_', '-')")
    return owner, name


def now_iso() -> str:
    """The current UTC time, ``2024-01-02T03:04:05Z``."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def log(line: str) -> None:
    """One log line on stderr."""
    sys.stderr.write(f"forge: {line}\n")
    sys.stderr.flush()


# --- git ---------------------------------------------------------------------------------

def git_env(home: Path) -> dict[str, str]:
    """A hermetic environment for git commands: no user or system configuration."""
    return {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LANG": "C",
        "LC_ALL": "C",
    }


def run_git(args: list[str], home: Path, *, cwd: Path | None = None, check: bool = True,
            timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run ``git <args>`` (an argv list) and return the result; raise on failure if ``check``."""
    r = subprocess.run(["git", *args], cwd=cwd, env=git_env(home), capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise ForgeError(f"git {args[0]} failed: {(r.stderr or r.stdout).strip()[-500:]}")
    return r


def http_backend_path() -> str:
    """Where ``git http-backend`` is (``git --exec-path``/git-http-backend)."""
    try:
        exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True,
                                   timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        exec_path = ""
    for cand in (Path(exec_path) / "git-http-backend" if exec_path else None,
                 Path("/usr/lib/git-core/git-http-backend")):
        if cand is not None and cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    raise ForgeError("git http-backend not found (is git installed?)")


PRE_RECEIVE_HOOK = """#!/bin/sh
# Written by forge.py: the default branch takes changes through pull requests only.
while read -r old new ref; do
  if [ "$ref" = "refs/heads/{branch}" ]; then
    echo "forge: refs/heads/{branch} is protected: push another branch and open a pull request" >&2
    exit 1
  fi
done
exit 0
"""


# --- TLS ---------------------------------------------------------------------------------

@dataclass
class TLSFiles:
    """The forge's TLS material."""

    ca_cert: Path
    cert: Path
    key: Path


def _openssl(args: list[str], cwd: Path) -> None:
    try:
        r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ForgeError("the openssl command is needed to make the forge's certificates "
                         "(apt-get install openssl)") from None
    if r.returncode != 0:
        raise ForgeError(f"openssl {args[0]} failed: {r.stderr.strip()[-500:]}")


def ensure_tls(tls_dir: Path, hostname: str, extra_ips: list[str]) -> TLSFiles:
    """Make (once) a local CA and a server certificate for ``hostname`` in ``tls_dir``.

    The CA is kept across restarts; the server certificate is made again when the set
    of names it must cover changes.
    """
    if not HOSTNAME_RE.match(hostname) or len(hostname) > 253:
        raise ForgeError(f"bad --hostname {hostname!r}")
    tls_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(tls_dir, 0o700)
    files = TLSFiles(tls_dir / "ca.crt", tls_dir / "server.crt", tls_dir / "server.key")
    ca_key = tls_dir / "ca.key"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    if not (files.ca_cert.exists() and ca_key.exists()):
        (tls_dir / "ca.cnf").write_text(
            "[req]\ndistinguished_name = dn\nprompt = no\n"
            "[dn]\nCN = rebuno forge local CA\nO = rebuno demo\n"
            "[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
            "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n")
        _openssl(["req", "-x509", "-config", "ca.cnf", "-extensions", "v3_ca", *ec, "-sha256",
                  "-days", "3650", "-keyout", "ca.key.tmp", "-out", "ca.crt.tmp"], tls_dir)
        os.chmod(tls_dir / "ca.key.tmp", 0o600)
        os.replace(tls_dir / "ca.key.tmp", ca_key)
        os.replace(tls_dir / "ca.crt.tmp", files.ca_cert)
        files.cert.unlink(missing_ok=True)
    ips = ["127.0.0.1", *[ip for ip in extra_ips if ip != "127.0.0.1"]]
    names = [hostname, *(["localhost"] if hostname != "localhost" else [])]
    sans = ",".join([*(f"DNS:{n}" for n in names), *(f"IP:{ip}" for ip in ips)])
    marker = tls_dir / "server.sans"
    if files.cert.exists() and files.key.exists() and marker.exists() and marker.read_text() == sans:
        return files
    (tls_dir / "server.cnf").write_text(
        f"[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = {hostname}\n"
        "[v3_server]\nbasicConstraints = critical,CA:FALSE\n"
        "keyUsage = critical,digitalSignature,keyEncipherment\nextendedKeyUsage = serverAuth\n"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid,issuer\n"
        f"subjectAltName = {sans}\n")
    _openssl(["req", "-new", "-config", "server.cnf", *ec, "-keyout", "server.key.tmp",
              "-out", "server.csr"], tls_dir)
    os.chmod(tls_dir / "server.key.tmp", 0o600)
    _openssl(["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
              "-set_serial", "0x" + secrets.token_hex(16), "-sha256", "-days", "825",
              "-extfile", "server.cnf", "-extensions", "v3_server", "-out", "server.crt.tmp"], tls_dir)
    os.replace(tls_dir / "server.key.tmp", files.key)
    os.replace(tls_dir / "server.crt.tmp", files.cert)
    (tls_dir / "server.csr").unlink(missing_ok=True)
    marker.write_text(sans)
    return files


# --- the forge's state ---------------------------------------------------------------

class Forge:
    """Repositories, pull requests and credentials under one data directory."""

    def __init__(self, data: Path, token: str, *, public_url: str = "",
                 max_push: int = DEFAULT_MAX_PUSH):
        self.data = data
        self.repos = data / "repos"
        self.home = data / "home"
        self.pulls_file = data / "pulls.json"
        self._token = token.encode()
        self.public_url = public_url.rstrip("/")
        self.max_push = max_push
        self.lock = threading.Lock()
        self.backend = ""
        for d in (self.data, self.repos, self.home):
            d.mkdir(parents=True, exist_ok=True)
        os.chmod(self.data, 0o700)
        self._load_pulls()  # fail at start, not at the first request, if the store is broken

    # credentials
    def check_authorization(self, header: str | None) -> str | None:
        """The user name for a valid ``Authorization`` header, else None."""
        if not header:
            return None
        scheme, _, value = header.strip().partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer":
            return "token" if hmac.compare_digest(value.encode(), self._token) else None
        if scheme.lower() != "basic" or len(value) > 4096:
            return None
        try:
            user, sep, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if not sep or not hmac.compare_digest(password.encode(), self._token):
            return None
        return user if valid_name(user) else "user"

    # repositories
    def repo_dir(self, owner: str, name: str) -> Path:
        """The bare repository's folder (it may not exist)."""
        return self.repos / owner / f"{name}.git"

    def require_repo(self, owner: str, name: str) -> Path:
        """The bare repository's folder; 404 if the names are bad or it does not exist."""
        if not valid_name(owner) or not valid_name(name):
            raise HTTPError(404, "Not Found: bad repository name")
        path = self.repo_dir(owner, name)
        if not (path / "HEAD").is_file():
            raise HTTPError(404, f"Not Found: no repository {owner}/{name}")
        return path

    def init_repo(self, owner: str, name: str, source: Path, *, replace: bool = False,
                  protect: bool = True) -> str:
        """Create ``owner/name`` from the files in ``source`` (one commit on ``main``).

        Returns the commit id. ``.git`` and ``__pycache__`` folders are left out.
        """
        if not source.is_dir():
            raise ForgeError(f"--from {source}: not a directory")
        bare = self.repo_dir(owner, name)
        if bare.exists():
            if not replace:
                raise ForgeError(f"repository {owner}/{name} already exists in {self.repos} (use --replace)")
            shutil.rmtree(bare)
        bare.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix="forge-init-"))
        try:
            run_git(["init", "-q", "--bare", "-b", DEFAULT_BRANCH, str(bare)], self.home)
            work = tmp / "work"
            shutil.copytree(source, work, symlinks=True,
                            ignore=shutil.ignore_patterns(".git", "__pycache__", "*.pyc"))
            run_git(["init", "-q", "-b", DEFAULT_BRANCH], self.home, cwd=work)
            run_git(["add", "-A"], self.home, cwd=work)
            run_git(["-c", "user.name=forge", "-c", "user.email=forge@localhost",
                     "commit", "-q", "--allow-empty", "-m", "Initial commit"], self.home, cwd=work)
            run_git(["push", "-q", str(bare), f"{DEFAULT_BRANCH}:refs/heads/{DEFAULT_BRANCH}"],
                    self.home, cwd=work)
        except BaseException:
            shutil.rmtree(bare, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if protect:
            hook = bare / "hooks" / "pre-receive"
            hook.write_text(PRE_RECEIVE_HOOK.replace("{branch}", DEFAULT_BRANCH))
            hook.chmod(0o755)
        with self.lock:  # a re-created repository starts without pull requests
            pulls = self._load_pulls()
            if pulls.pop(f"{owner}/{name}", None) is not None:
                self._save_pulls(pulls)
        return self.branch_head(bare, DEFAULT_BRANCH) or ""

    def branch_head(self, bare: Path, branch: str) -> str | None:
        """The commit id at ``refs/heads/<branch>``, or None."""
        r = run_git(["--git-dir", str(bare), "rev-parse", "--verify", "--quiet",
                     f"refs/heads/{branch}^{{commit}}"], self.home, check=False)
        return r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else None

    def branch_info(self, bare: Path, branch: str) -> dict[str, Any] | None:
        """``{"name", "commit": {"sha", "message"}}`` for a branch, or None."""
        r = run_git(["--git-dir", str(bare), "log", "-1", "--format=%H%x00%s",
                     f"refs/heads/{branch}", "--"], self.home, check=False)
        if r.returncode != 0 or "\x00" not in r.stdout:
            return None
        sha, _, subject = r.stdout.strip().partition("\x00")
        return {"name": branch, "commit": {"sha": sha, "message": subject}}

    def branches(self, bare: Path) -> list[dict[str, Any]]:
        """All branches with their head commits."""
        r = run_git(["--git-dir", str(bare), "for-each-ref", "--format=%(refname:short)%00%(objectname)",
                     "refs/heads/"], self.home)
        out = []
        for line in r.stdout.splitlines():
            name, _, sha = line.partition("\x00")
            out.append({"name": name, "commit": {"sha": sha}})
        return out

    # pull requests
    def _load_pulls(self) -> dict[str, list[dict[str, Any]]]:
        """The pull-request store (read on every use, so an ``--init-repo --replace`` run
        next to a serving forge is seen)."""
        if not self.pulls_file.exists():
            return {}
        try:
            data = json.loads(self.pulls_file.read_text())
        except (OSError, ValueError) as e:
            raise ForgeError(f"cannot read {self.pulls_file}: {e}") from None
        if not isinstance(data, dict) or not all(isinstance(v, list) for v in data.values()):
            raise ForgeError(f"{self.pulls_file}: not a pull-request store")
        return data

    def _save_pulls(self, pulls: dict[str, list[dict[str, Any]]]) -> None:
        tmp = self.pulls_file.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(pulls, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.pulls_file)

    def pull_url(self, owner: str, name: str, number: int) -> str:
        """A pull request's ``url``."""
        return f"{self.public_url}/{owner}/{name}/pull/{number}"

    def open_pull(self, owner: str, name: str, fields: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Create a pull request, or update the open one with the same head.

        Returns ``(201, pr)`` or ``(200, pr)``; raises :class:`HTTPError` for bad input.
        """
        bare = self.require_repo(owner, name)
        unknown = sorted(set(fields) - PR_FIELDS)
        if unknown:
            raise HTTPError(422, f"Validation Failed: unknown field(s) {', '.join(unknown)}; "
                                 f"allowed: {', '.join(sorted(PR_FIELDS))}")
        title = fields.get("title")
        if not isinstance(title, str) or not title.strip() or len(title) > MAX_TITLE or "\x00" in title:
            raise HTTPError(422, f"Validation Failed: title must be a non-empty string of at most {MAX_TITLE} "
                                 "characters")
        body = fields.get("body", "")
        if body is None:
            body = ""
        if not isinstance(body, str) or len(body) > MAX_PR_BODY or "\x00" in body:
            raise HTTPError(422, f"Validation Failed: body must be a string of at most {MAX_PR_BODY} characters")
        head = fields.get("head")
        if isinstance(head, str) and ":" in head:  # GitHub's "owner:branch"
            head_owner, _, head = head.partition(":")
            if head_owner != owner:
                raise HTTPError(422, "Validation Failed: head must be a branch of this repository")
        base = fields.get("base", DEFAULT_BRANCH)
        for what, value in (("head", head), ("base", base)):
            if not isinstance(value, str) or not valid_branch(value):
                raise HTTPError(422, f"Validation Failed: {what} must be a valid branch name")
        assert isinstance(head, str) and isinstance(base, str)
        if head == base:
            raise HTTPError(422, "Validation Failed: head and base are the same branch")
        head_sha = self.branch_head(bare, head)
        if head_sha is None:
            raise HTTPError(422, f"Validation Failed: head branch {head!r} does not exist (push it first)")
        if self.branch_head(bare, base) is None:
            raise HTTPError(422, f"Validation Failed: base branch {base!r} does not exist")
        key = f"{owner}/{name}"
        with self.lock:
            store = self._load_pulls()
            pulls = store.setdefault(key, [])
            for pr in pulls:
                if pr["state"] == "open" and pr["head"] == head:
                    pr.update(title=title, body=body, base=base, head_sha=head_sha, updated_at=now_iso())
                    self._save_pulls(store)
                    return 200, dict(pr)
            number = max((p["number"] for p in pulls), default=0) + 1
            stamp = now_iso()
            pr = {"number": number, "url": self.pull_url(owner, name, number), "title": title, "body": body,
                  "head": head, "base": base, "state": "open", "head_sha": head_sha,
                  "created_at": stamp, "updated_at": stamp}
            pulls.append(pr)
            self._save_pulls(store)
            return 201, dict(pr)

    def list_pulls(self, owner: str, name: str, state: str = "open", head: str = "") -> list[dict[str, Any]]:
        """The repository's pull requests, oldest first."""
        self.require_repo(owner, name)
        if state not in ("open", "closed", "all"):
            raise HTTPError(422, "Validation Failed: state must be open, closed or all")
        with self.lock:
            pulls = self._load_pulls().get(f"{owner}/{name}", [])
        return [p for p in pulls if (state == "all" or p["state"] == state) and (not head or p["head"] == head)]

    def get_pull(self, owner: str, name: str, number: int) -> dict[str, Any]:
        """One pull request; 404 if there is none with that number."""
        for pr in self.list_pulls(owner, name, "all"):
            if pr["number"] == number:
                return pr
        raise HTTPError(404, f"Not Found: no pull request #{number}")


# --- HTTP -----------------------------------------------------------------------------------

class ForgeServer(http.server.ThreadingHTTPServer):
    """A threaded HTTPS server; TLS handshakes run in the connection's own thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], forge: Forge, context: ssl.SSLContext):
        super().__init__(address, ForgeHandler)
        self.forge = forge
        self.socket = context.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start a thread for the connection, or drop it when too many are open."""
        if not self._slots.acquire(blocking=False):
            log(f"{client_address[0]} dropped: more than {MAX_CONNECTIONS} connections")
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection, then free its slot."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line instead of a traceback (client resets, failed TLS handshakes)."""
        err = sys.exc_info()[1]
        log(f"{client_address[0]} connection error: {type(err).__name__}: {err}")


class ForgeHandler(http.server.BaseHTTPRequestHandler):
    """Routes requests to git http-backend or the pull-request API."""

    protocol_version = "HTTP/1.1"
    server_version = "rebuno-forge/1"
    timeout = SOCKET_TIMEOUT
    server: ForgeServer

    def setup(self) -> None:
        """Apply the socket timeout, then do the TLS handshake in this thread."""
        super().setup()
        self.request.do_handshake()

    # logging: one line per request, written by _finish_log
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silence the default access log (see :meth:`_finish_log`)."""

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002
        """Protocol errors (bad request lines, time-outs) as one line."""
        log(f"{self.client_address[0]} " + (format % args))

    def send_response(self, code: int, message: str | None = None) -> None:
        """Send the status line, remembering the status for the log."""
        self._status = code
        super().send_response(code, message)

    def _finish_log(self, started: float, sent: int) -> None:
        path, _, query = self.path.partition("?")
        service = urllib.parse.parse_qs(query).get("service", [""])[0]
        shown = path + (f"?service={service}" if service in GIT_SERVICES else "")
        log(f"{self.client_address[0]} {self.command} {shown[:300]} {getattr(self, '_status', 0)} "
            f"{sent}B {int((time.monotonic() - started) * 1000)}ms user={getattr(self, '_user', None) or '-'}"
            + (" body=chunked" if getattr(self, "_chunked", False) else ""))

    # plumbing
    def handle_expect_100(self) -> bool:
        """Check credentials before telling a client to send its body."""
        if self.server.forge.check_authorization(self.headers.get("Authorization")) is None:
            self.close_connection = True
            self._finish_log(time.monotonic(), self._unauthorized())
            return False
        return super().handle_expect_100()

    def do_GET(self) -> None:  # noqa: N802
        """GET: git info/refs, the API, a pull request page."""
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        """POST: git upload-pack/receive-pack, opening pull requests."""
        self._dispatch()

    def _dispatch(self) -> None:
        started = time.monotonic()
        self._status = 0
        self._chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        self._user: str | None = None
        sent = 0
        try:
            self._user = self.server.forge.check_authorization(self.headers.get("Authorization"))
            if self._user is None:
                if self.command == "POST" and not self._chunked:  # let the client see the 401
                    length = self.headers.get("Content-Length", "")
                    if length.isdigit() and int(length) <= MAX_API_BODY:
                        self._discard(int(length))
                sent = self._unauthorized()
                return
            path, _, query = self.path.partition("?")
            m = GIT_PATH_RE.match(path)
            if m:
                sent = self._git(m["owner"], m["repo"], m["rest"], query)
            elif path.startswith("/api/"):
                sent = self._api(path, query)
            elif (m := PULL_PAGE_RE.match(path)) and self.command == "GET":
                sent = self._json(200, self.server.forge.get_pull(m["owner"], m["repo"], int(m["number"])))
            else:
                raise HTTPError(404, "Not Found")
        except HTTPError as e:
            if e.close or self.command == "POST":
                self.close_connection = True  # the body may be unread
            sent = self._json(e.status, {"message": e.message})
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError) as e:
            self.close_connection = True
            self._status = self._status or 499
            log(f"{self.client_address[0]} client went away: {type(e).__name__}")
        except Exception as e:  # a bug: answer 500 if nothing was sent yet
            self.close_connection = True
            log(f"{self.client_address[0]} internal error: {type(e).__name__}: {e}")
            if not self._status:
                sent = self._json(500, {"message": "internal error"})
        finally:
            self._finish_log(started, sent)

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> int:
        raw = (json.dumps(obj, indent=2) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(raw)
        return len(raw)

    def _unauthorized(self) -> int:
        self.close_connection = True
        raw = b'{"message": "Requires authentication: Authorization: Basic (x-access-token:<token>) or Bearer"}\n'
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="forge"')
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(raw)
        return len(raw)

    def _read_json_body(self) -> dict[str, Any]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise HTTPError(411, "Length Required: send a Content-Length", close=True)
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise HTTPError(411, "Length Required: send a Content-Length", close=True) from None
        if length < 0:
            raise HTTPError(400, "Bad Request: negative Content-Length", close=True)
        if length > MAX_API_BODY:
            # read (and drop) a moderately large body so the client gets to see the answer
            drained = self._discard(length) if length <= DRAIN_LIMIT else False
            raise HTTPError(413, f"Payload Too Large: at most {MAX_API_BODY} bytes", close=not drained)
        raw = self.rfile.read(length)
        if len(raw) != length:
            raise HTTPError(400, "Bad Request: body shorter than Content-Length", close=True)
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise HTTPError(400, "Problems parsing JSON") from None
        if not isinstance(data, dict):
            raise HTTPError(400, "Problems parsing JSON: expected an object")
        return data

    def _discard(self, length: int) -> bool:
        """Read and drop ``length`` body bytes; False if the body ended early."""
        left = length
        while left > 0:
            block = self.rfile.read(min(left, COPY_CHUNK))
            if not block:
                return False
            left -= len(block)
        return True

    # the API
    def _api(self, path: str, query: str) -> int:
        forge = self.server.forge
        parts = path.split("/")  # "", "api", "repos", owner, repo, ...
        if len(parts) < 5 or parts[2] != "repos":
            raise HTTPError(404, "Not Found")
        owner, name = urllib.parse.unquote(parts[3]), urllib.parse.unquote(parts[4])
        rest = parts[5:]
        bare = forge.require_repo(owner, name)
        params = {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}
        if self.command == "POST":
            if rest != ["pulls"]:
                raise HTTPError(404, "Not Found")
            status, pr = forge.open_pull(owner, name, self._read_json_body())
            log(f"pull request {owner}/{name}#{pr['number']} {'opened' if status == 201 else 'updated'}: "
                f"{pr['head']} -> {pr['base']} at {pr['head_sha'][:12]}")
            return self._json(status, pr, {"Location": pr["url"]})
        if not rest:
            return self._json(200, {"full_name": f"{owner}/{name}", "name": name, "owner": owner,
                                    "default_branch": DEFAULT_BRANCH,
                                    "clone_url": f"{forge.public_url}/{owner}/{name}.git"})
        if rest == ["branches"]:
            return self._json(200, forge.branches(bare))
        if rest[0] == "branches" and len(rest) > 1:
            branch = urllib.parse.unquote("/".join(rest[1:]))
            info = forge.branch_info(bare, branch) if valid_branch(branch) else None
            if info is None:
                raise HTTPError(404, f"Branch not found: {branch[:200]}")
            return self._json(200, info)
        if rest == ["pulls"]:
            return self._json(200, forge.list_pulls(owner, name, params.get("state", "open"),
                                                    params.get("head", "")))
        if rest[0] == "pulls" and len(rest) == 2 and rest[1].isdigit() and len(rest[1]) < 10:
            return self._json(200, forge.get_pull(owner, name, int(rest[1])))
        raise HTTPError(404, "Not Found")

    # git smart HTTP through git http-backend
    def _git(self, owner: str, name: str, rest: str, query: str) -> int:
        forge = self.server.forge
        forge.require_repo(owner, name)
        params = urllib.parse.parse_qs(query)
        if rest == "info/refs":
            if self.command != "GET":
                raise HTTPError(405, "Method Not Allowed")
            if params.get("service", [""])[0] not in GIT_SERVICES:
                raise HTTPError(403, "Forbidden: only git's smart HTTP protocol is served")
        elif self.command != "POST":
            raise HTTPError(405, "Method Not Allowed")
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        length: int | None = None
        if self.command == "POST" and not chunked:
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                raise HTTPError(411, "Length Required", close=True) from None
            if length < 0:
                raise HTTPError(400, "Bad Request: negative Content-Length", close=True)
            if length > forge.max_push:
                raise HTTPError(413, f"Payload Too Large: at most {forge.max_push} bytes", close=True)
        env = git_env(forge.home)
        env.update({
            "GIT_PROJECT_ROOT": str(forge.repos),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": self._user or "user",
            "REMOTE_ADDR": str(self.client_address[0]),
            "REQUEST_METHOD": self.command,
            "PATH_INFO": f"/{owner}/{name}.git/{rest}",
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "SERVER_SOFTWARE": self.server_version,
        })
        if length is not None:
            env["CONTENT_LENGTH"] = str(length)
        for header, var in (("Git-Protocol", "HTTP_GIT_PROTOCOL"), ("Content-Encoding", "HTTP_CONTENT_ENCODING")):
            value = self.headers.get(header)
            if value and len(value) <= 256 and value.isprintable():
                env[var] = value
        return self._run_cgi(env, length, chunked)

    def _run_cgi(self, env: dict[str, str], length: int | None, chunked: bool) -> int:
        forge = self.server.forge
        proc = subprocess.Popen([forge.backend], env=env, cwd=str(forge.repos), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        watchdog = threading.Timer(CGI_TIMEOUT, proc.kill)
        watchdog.daemon = True
        watchdog.start()
        feed = _Feeder(self.rfile, proc.stdin, length if self.command == "POST" else 0, chunked, forge.max_push)
        feed.start()
        errors = _Tail(proc.stderr)
        errors.start()
        sent = 0
        finished = False
        try:
            stdout = cast(io.BufferedReader, proc.stdout)
            status, headers = _read_cgi_headers(stdout)
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while True:
                block = stdout.read1(COPY_CHUNK)
                if not block:
                    break
                self.wfile.write(f"{len(block):x}\r\n".encode() + block + b"\r\n")
                sent += len(block)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            finished = True
        except _CGIError as e:
            feed.join(5)
            raise HTTPError(502, f"Bad Gateway: git http-backend: {e}; {errors.text()}", close=True) from None
        finally:
            watchdog.cancel()
            if not finished:
                proc.kill()  # the client went away or the program misbehaved
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            feed.join(10)
            errors.join(5)
            proc.stdout.close()
            if not feed.complete:
                self.close_connection = True  # the request body was not read to its end
            if feed.error:
                log(f"{self.client_address[0]} request body: {feed.error}")
        if proc.returncode not in (0, None):
            log(f"{self.client_address[0]} git http-backend exited {proc.returncode}: {errors.text()}")
        return sent


class _CGIError(Exception):
    pass


def _read_cgi_headers(stdout: IO[bytes]) -> tuple[int, list[tuple[str, str]]]:
    """Read a CGI response's header block; returns the status and the headers to pass on."""
    status = 200
    headers: list[tuple[str, str]] = []
    total = 0
    while True:
        line = stdout.readline(8192)
        total += len(line)
        if not line:
            raise _CGIError("no response")
        if total > 65536 or len(headers) > 100:
            raise _CGIError("response headers too long")
        text = line.decode("latin-1").rstrip("\r\n")
        if not text:
            return status, headers
        key, sep, value = text.partition(":")
        if not sep:
            raise _CGIError(f"bad header line {text[:80]!r}")
        key, value = key.strip(), value.strip()
        if key.lower() == "status":
            try:
                status = int(value.split()[0])
            except (ValueError, IndexError):
                raise _CGIError(f"bad Status {value[:40]!r}") from None
        elif key.lower() not in HOP_BY_HOP:
            headers.append((key, value))


class _Feeder(threading.Thread):
    """Copies a request body (plain or chunked) into the CGI program's stdin."""

    def __init__(self, src: IO[bytes], dst: IO[bytes], length: int | None, chunked: bool, limit: int):
        super().__init__(daemon=True)
        self.src, self.dst, self.length, self.chunked, self.limit = src, dst, length, chunked, limit
        self.complete = False
        self.error = ""

    def run(self) -> None:
        """Copy, then close stdin (so the program sees the end of the body)."""
        try:
            blocks = self._chunked() if self.chunked else self._plain(self.length or 0)
            for block in blocks:
                try:
                    self.dst.write(block)
                except (BrokenPipeError, OSError):
                    # the program stopped reading: drain nothing more, the connection will close
                    self.error = "git http-backend stopped reading the body"
                    return
            self.complete = True
        except (OSError, ValueError, _BodyError) as e:
            self.error = str(e) or type(e).__name__
        finally:
            try:
                self.dst.close()
            except OSError:
                pass

    def _plain(self, length: int) -> Iterator[bytes]:
        left = length
        while left > 0:
            block = self.src.read(min(left, COPY_CHUNK))
            if not block:
                raise _BodyError("body shorter than Content-Length")
            left -= len(block)
            yield block

    def _chunked(self) -> Iterator[bytes]:
        total = 0
        while True:
            line = self.src.readline(1024)
            if not line.endswith(b"\n"):
                raise _BodyError("bad chunk size line")
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise _BodyError("bad chunk size") from None
            if size < 0:
                raise _BodyError("bad chunk size")
            if size == 0:
                for _ in range(100):  # trailers, up to the blank line
                    trailer = self.src.readline(8192)
                    if trailer in (b"\r\n", b"\n", b""):
                        return
                raise _BodyError("too many trailers")
            total += size
            if total > self.limit:
                raise _BodyError(f"body larger than {self.limit} bytes")
            yield from self._plain(size)
            if self.src.readline(8) not in (b"\r\n", b"\n"):
                raise _BodyError("chunk not followed by CRLF")


class _BodyError(Exception):
    pass


class _Tail(threading.Thread):
    """Reads a stream to its end, keeping the last 2 KiB (git http-backend's stderr)."""

    def __init__(self, stream: IO[bytes]):
        super().__init__(daemon=True)
        self.stream = stream
        self.buf = b""

    def run(self) -> None:
        """Read until EOF."""
        try:
            while block := self.stream.read(4096):
                self.buf = (self.buf + block)[-2048:]
        except (OSError, ValueError):
            pass

    def text(self) -> str:
        """The kept tail, as one line."""
        return " | ".join(self.buf.decode("utf-8", "replace").split("\n")).strip(" |")[-500:]


# --- command line ---------------------------------------------------------------------

def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(host, port)``; port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ForgeError(f"bad --listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:0")
    return host.strip("[]"), int(port)


def resolve_token(args: argparse.Namespace, data: Path) -> tuple[str, Path | None]:
    """The token from --token, $FORGE_TOKEN, --token-file or <data>/token (made if missing)."""
    token = args.token or os.environ.get("FORGE_TOKEN", "")
    token_file: Path | None = None
    if not token:
        token_file = Path(args.token_file) if args.token_file else data / "token"
        if token_file.exists():
            token = token_file.read_text().strip()
        elif args.token_file:
            raise ForgeError(f"--token-file {token_file} does not exist")
        else:
            data.mkdir(parents=True, exist_ok=True)
            fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                token = "forge_" + secrets.token_urlsafe(24)
                f.write(token + "\n")
    if len(token) < 8 or len(token) > 512 or any(c.isspace() for c in token) or not token.isprintable():
        raise ForgeError("the token must be 8 to 512 printable characters without spaces")
    return token, token_file


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="A local git forge (GitHub's role) for the coding-agent demo.")
    p.add_argument("--data", required=True, help="data directory (repositories, pull requests, TLS material)")
    p.add_argument("--listen", help="HOST:PORT to serve on (port 0 picks a free one); without it, "
                                    "--init-repo runs and the program exits")
    p.add_argument("--token", help="the access token (better: $FORGE_TOKEN, which ps does not show)")
    p.add_argument("--token-file", help="read the token from this file")
    p.add_argument("--hostname", default=DEFAULT_HOSTNAME, help="name on the server certificate "
                                                                 f"(default {DEFAULT_HOSTNAME})")
    p.add_argument("--public-url", help="base of pull request URLs (default https://HOSTNAME[:PORT])")
    p.add_argument("--init-repo", metavar="OWNER/NAME", help="create a bare repository ...")
    p.add_argument("--from", dest="source", metavar="DIR", help="... from the files in DIR")
    p.add_argument("--replace", action="store_true", help="with --init-repo: replace an existing repository")
    p.add_argument("--unprotected", action="store_true",
                   help="with --init-repo: allow pushes to the default branch")
    p.add_argument("--max-push-bytes", type=int, default=DEFAULT_MAX_PUSH, help="largest git request body")
    args = p.parse_args(argv)
    try:
        data = Path(args.data).resolve()
        if args.init_repo and not args.source:
            raise ForgeError("--init-repo needs --from DIR")
        if not args.init_repo and not args.listen:
            raise ForgeError("nothing to do: give --listen HOST:PORT and/or --init-repo OWNER/NAME --from DIR")
        token, token_file = resolve_token(args, data)
        forge = Forge(data, token, max_push=max(1024, args.max_push_bytes))
        if args.init_repo:
            owner, name = split_repo(args.init_repo)
            sha = forge.init_repo(owner, name, Path(args.source), replace=args.replace,
                                  protect=not args.unprotected)
            print(f"forge: created {owner}/{name} ({DEFAULT_BRANCH} at {sha[:12]}) in {forge.repo_dir(owner, name)}",
                  flush=True)
        if not args.listen:
            return 0
        host, port = parse_listen(args.listen)
        extra_ips = []
        try:
            socket.inet_pton(socket.AF_INET, host)
            extra_ips.append(host)
        except OSError:
            pass
        tls = ensure_tls(data / "tls", args.hostname, extra_ips)
        forge.backend = http_backend_path()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(tls.cert, tls.key)
        server = ForgeServer((host, port), forge, ctx)
    except (ForgeError, OSError, ssl.SSLError, subprocess.SubprocessError) as e:
        print(f"forge: error: {e}", file=sys.stderr)
        return 1
    bound = server.server_address[1]
    forge.public_url = (args.public_url or f"https://{args.hostname}:{bound}").rstrip("/")
    url_host = f"[{host}]" if ":" in host else host
    print(f"forge: https://{url_host}:{bound} ca={tls.ca_cert} host={args.hostname}"
          + (f" token-file={token_file}" if token_file else ""), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
