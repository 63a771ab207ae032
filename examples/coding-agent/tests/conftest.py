"""Fixtures for the coding-agent demo's servers: ``forge.py`` and ``model.py`` run as real
subprocesses on free loopback ports (port 0) with temporary data directories, and are
stopped (SIGTERM, then SIGKILL) and their directories removed at the end, pass or fail.

Run: ``/usr/bin/python3 -m pytest -q examples/coding-agent/tests``
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# `rebuno dev` starts the sandbox service too when run as root; these tests don't need it.
os.environ.setdefault("REBUNO_SANDBOXES", "off")

TESTS = Path(__file__).resolve().parent
EXAMPLE = TESTS.parent
REPO = EXAMPLE.parent.parent
SAMPLE = EXAMPLE / "sample-repo"
PYTHON = sys.executable
TOKEN = "forge-test-token-0123456789"
sys.path.insert(0, str(EXAMPLE))
sys.path.insert(0, str(REPO / "sdk" / "python"))


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A temporary folder removed when the test ends (pytest's own keeps the last runs)."""
    path = Path(tempfile.mkdtemp(prefix="coding-agent-test-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Server:
    """A started server process and what it printed."""

    proc: subprocess.Popen[bytes]
    line: str
    log: Path
    workdir: Path
    url: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def log_text(self) -> str:
        """Everything the server logged so far."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_server(argv: list[str], prefix: str, workdir: Path, env: dict[str, str] | None = None,
                 timeout: float = 15.0) -> Server:
    """Start ``argv`` and wait for its first stdout line starting with ``prefix``."""
    out, log = workdir / f"{prefix}.out", workdir / f"{prefix}.log"
    with open(out, "wb") as so, open(log, "wb") as se:
        proc = subprocess.Popen(argv, stdout=so, stderr=se, stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace")
        for line in text.splitlines():
            if line.startswith(f"{prefix}: ") and "://" in line:
                return Server(proc, line, log, workdir)
        if proc.poll() is not None:
            raise AssertionError(f"{argv[1]} exited {proc.returncode}: {log.read_text(errors='replace')}")
        time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise AssertionError(f"{argv[1]} printed no '{prefix}:' line in {timeout}s: {log.read_text(errors='replace')}")


def git_env(home: Path) -> dict[str, str]:
    """An environment for git without the user's or the machine's settings (no
    GIT_SSL_CAINFO, which would override ``http.sslCAInfo``) and without prompts."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GIT_", "SSL_CERT", "CURL_CA")) and k not in ("REQUESTS_CA_BUNDLE",)}
    env.update(HOME=str(home), GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="/bin/false",
               SSH_ASKPASS="/bin/false", LANG="C", LC_ALL="C")
    return env


def basic_auth(token: str = TOKEN) -> str:
    """The header value git sends through the egress proxy: Basic x-access-token:<token>."""
    return "Basic " + base64.b64encode(f"x-access-token:{token}".encode()).decode()


@dataclass
class Forge:
    """A running forge.py."""

    server: Server
    url: str
    ca: Path
    data: Path
    home: Path
    _context: ssl.SSLContext | None = None

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1])

    def git(self, *args: str, cwd: Path | None = None, auth: bool = True, check: bool = True,
            timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run git trusting the forge's CA, with the token header unless ``auth=False``."""
        cfg = ["-c", f"http.sslCAInfo={self.ca}"]
        if auth:
            cfg += ["-c", f"http.extraHeader=Authorization: {basic_auth()}"]
        r = subprocess.run(["git", *cfg, *args], cwd=cwd, env=git_env(self.home), capture_output=True,
                           text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def init_repo(self, spec: str, source: Path = SAMPLE, *extra: str) -> subprocess.CompletedProcess[str]:
        """``forge.py --init-repo spec --from source`` on this forge's data dir."""
        return subprocess.run([PYTHON, str(EXAMPLE / "forge.py"), "--data", str(self.data), "--init-repo", spec,
                               "--from", str(source), *extra], env={**os.environ, "FORGE_TOKEN": TOKEN},
                              capture_output=True, text=True, timeout=30)

    def new_repo(self) -> str:
        """A fresh copy of ``acme/calc`` (made by the fixture with ``--init-repo``), with
        the same protected ``main``; returns ``owner/name``. Copying is faster than
        another ``--init-repo`` run."""
        spec = f"acme/calc-{uuid.uuid4().hex[:8]}"
        repos = self.data / "repos"
        shutil.copytree(repos / "acme" / "calc.git", repos / f"{spec}.git", symlinks=True)
        return spec

    def context(self) -> ssl.SSLContext:
        """A client TLS context trusting the forge's CA (made once)."""
        if self._context is None:
            self._context = ssl.create_default_context(cafile=str(self.ca))
        return self._context

    def request(self, method: str, path: str, body: Any = None, *, auth: str | None = "bearer",
                raw: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any, dict[str, str]]:
        """One HTTPS request (the path is sent as is); returns status, JSON (or text) and headers."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context(), timeout=10)
        h = dict(headers or {})
        if auth == "bearer":
            h["Authorization"] = f"Bearer {TOKEN}"
        elif auth == "basic":
            h["Authorization"] = basic_auth()
        elif auth:
            h["Authorization"] = auth
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        if data is not None:
            h.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            text = resp.read().decode(errors="replace")
            try:
                parsed: Any = json.loads(text)
            except ValueError:
                parsed = text
            return resp.status, parsed, {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()


@pytest.fixture(scope="module")
def forge() -> Iterator[Forge]:
    """One forge for a test module, with the sample repository as ``acme/calc``."""
    tmp = Path(tempfile.mkdtemp(prefix="forge-test-"))
    data, home = tmp / "data", tmp / "home"
    home.mkdir()
    env = {**os.environ, "FORGE_TOKEN": TOKEN}
    init = subprocess.run([PYTHON, str(EXAMPLE / "forge.py"), "--data", str(data), "--init-repo", "acme/calc",
                           "--from", str(SAMPLE)], env=env, capture_output=True, text=True, timeout=30)
    assert init.returncode == 0, init.stderr
    server = start_server([PYTHON, str(EXAMPLE / "forge.py"), "--data", str(data), "--listen", "127.0.0.1:0"],
                          "forge", tmp, env)
    m = re.match(r"forge: (https://\S+) ca=(\S+)", server.line)
    assert m, server.line
    try:
        yield Forge(server, m[1], Path(m[2]), data, home)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass
class Model:
    """A running model.py."""

    server: Server
    base_url: str

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.base_url.split(":")[2].split("/")[0])

    def request(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
        """One HTTP request; returns status, body bytes and headers."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        try:
            conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, resp.read(), {k.lower(): v for k, v in resp.getheaders()}
        finally:
            conn.close()

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/chat/completions; the JSON answer (asserting 200)."""
        status, raw, _ = self.request("POST", "/v1/chat/completions", body)
        assert status == 200, raw
        out: dict[str, Any] = json.loads(raw)
        return out

    def stats(self) -> dict[str, Any]:
        """GET /stats."""
        status, raw, _ = self.request("GET", "/stats")
        assert status == 200
        out: dict[str, Any] = json.loads(raw)
        return out


def start_model(tmp: Path, *extra: str) -> Model:
    """Start model.py on a free port."""
    server = start_server([PYTHON, str(EXAMPLE / "model.py"), "--listen", "127.0.0.1:0", *extra], "model", tmp)
    m = re.match(r"model: (http://\S+)", server.line)
    assert m, server.line
    return Model(server, m[1])


@pytest.fixture
def model() -> Iterator[Model]:
    """A fresh model.py (fresh counters) for each test."""
    tmp = Path(tempfile.mkdtemp(prefix="model-test-"))
    m = start_model(tmp)
    try:
        yield m
    finally:
        m.server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
