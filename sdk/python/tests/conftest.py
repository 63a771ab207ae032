"""Fixtures for the SDK tests: the real kernel binary, real agent worker processes, and a
scripted OpenAI-compatible model server. Nothing of the kernel is mocked.

* ``kernel`` / ``make_kernel``: ``rebuno dev`` on a free loopback port with a temporary
  state dir (binary from ``$REBUNO_BIN``, else ``build/asan/rebuno``, else
  ``build/rebuno``); stopped with SIGTERM at the end, and its log checked for
  sanitizer reports.
* ``start_agent``: ``/usr/bin/python3 <script>`` as a subprocess (``PYTHONPATH`` points
  at ``sdk/python``), so killing a worker is a real SIGKILL; every process is killed at
  the end of the test, pass or fail.
* ``inprocess_agent``: an ``Agent`` serving on a thread of the test process, for handlers
  defined in the test itself.
* ``llm_server``: a threaded ``http.server`` answering ``/v1/chat/completions`` from a
  script, plain or as SSE, counting calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# `rebuno dev` starts the sandbox service too when run as root; these tests don't need it.
os.environ.setdefault("REBUNO_SANDBOXES", "off")

TESTS = Path(__file__).resolve().parent
SDK = TESTS.parent
REPO = SDK.parent.parent
AGENTS = TESTS / "agents"
sys.path.insert(0, str(SDK))

from rebuno import _localauth  # noqa: E402  (the SDK from this checkout)
from rebuno.testing import free_port  # noqa: E402

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _find_bin() -> str:
    env = os.environ.get("REBUNO_BIN")
    if env:
        return env
    for cand in (REPO / "build" / "asan" / "rebuno", REPO / "build" / "rebuno"):
        if cand.exists():
            return str(cand)
    pytest.exit("no kernel binary: run `make -j2` (or `make asan`) first, or set REBUNO_BIN", 2)
    return ""


BIN = _find_bin()


def wait_for(pred: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "condition") -> Any:
    """Poll ``pred`` until it returns something truthy; fail the test after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Kernel:
    """A running ``rebuno dev`` process."""

    def __init__(self, state_dir: Path, config: str | None = None, config_file: Path | None = None):
        self.dir = state_dir
        self.config_path: Path | None = config_file
        if config is not None:
            self.config_path = state_dir / "rebuno.yaml"
            self.config_path.write_text(config)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = state_dir / "kernel.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Kernel:
        cmd = [BIN, "dev", "--listen", f"127.0.0.1:{self.port}", "--state-dir", str(self.dir / "state")]
        if self.config_path:
            cmd += ["--config", str(self.config_path)]
        env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0"))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, stdin=subprocess.DEVNULL)
        wait_for(self._ready, 15, what=f"kernel on {self.url}")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"kernel exited with {self.proc.returncode}:\n{self.read_log()}")
        try:
            return self.request("GET", "/v0/health")[0] == 200
        except OSError:
            return False

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10) -> tuple[int, Any]:
        """One request with the kernel's local token, found as its user's clients find it."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        token = _localauth.find(self.url, _localauth.KERNEL_STATE_FILE)[0]
        try:
            data = json.dumps(body).encode() if body is not None else None
            h = {"Content-Type": "application/json"} if data else {}
            if token:
                h["Authorization"] = f"Bearer {token}"
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
        finally:
            conn.close()

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``rebuno <args> --url <this kernel>``."""
        p = subprocess.run([BIN, *args, "--url", self.url], capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        if check and p.returncode != 0:
            raise AssertionError(f"rebuno {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p


@pytest.fixture
def make_kernel(tmp_path: Path) -> Iterator[Callable[..., Kernel]]:
    started: list[Kernel] = []

    def make(config: str | None = None, start: bool = True, config_file: Path | None = None) -> Kernel:
        d = tmp_path / f"kernel{len(started)}"
        d.mkdir()
        k = Kernel(d, config, config_file)
        started.append(k)
        return k.start() if start else k

    yield make
    problems = []
    for k in started:
        k.stop()
        log = k.read_log()
        for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            if marker in log:
                problems.append(f"{marker} in {k.log_path}:\n{log[-3000:]}")
    assert not problems, "\n".join(problems)


@pytest.fixture
def kernel(make_kernel: Callable[..., Kernel]) -> Kernel:
    return make_kernel()


class AgentProc:
    """A worker process running one of the agent scripts."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path):
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the worker dies mid-whatever, as in a crash."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def terminate(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 10) -> int:
        return self.proc.wait(timeout)

    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., AgentProc]]:
    procs: list[AgentProc] = []

    def start(script: str | Path, kernel: Kernel, *args: str, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> AgentProc:
        path = Path(script)
        if not path.is_absolute():
            path = AGENTS / path
        log_path = tmp_path / f"agent{len(procs)}-{path.stem}.log"
        e = dict(os.environ)
        e.update({"REBUNO_URL": kernel.url, "PYTHONPATH": str(SDK), "PYTHONUNBUFFERED": "1"})
        e.pop("REBUNO_API_KEY", None)
        e.update(env or {})
        with open(log_path, "ab") as log:
            p = subprocess.Popen([PYTHON, str(path), *args], stdout=log, stderr=log, env=e,
                                 cwd=str(cwd or tmp_path), stdin=subprocess.DEVNULL)
        ap = AgentProc(p, log_path)
        procs.append(ap)
        return ap

    yield start
    for p in procs:
        p.kill()


@contextlib.contextmanager
def inprocess_agent(url: str, name: str, handler: Callable[..., Any], **kw: Any) -> Iterator[Any]:
    """Run ``Agent(name).serve(handler)`` on a thread of the test process; stop it at the end."""
    from rebuno import Agent

    kw.setdefault("grace_period", 5)
    agent = Agent(name, base_url=url, handle_signals=False, claim_wait=1, **kw)
    errors: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(agent.serve(handler))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    t = threading.Thread(target=main, daemon=True)
    t.start()
    wait_for(lambda: agent.worker_id or errors, 10, what="the in-process agent to register")
    try:
        yield agent
    finally:
        agent.stop()
        t.join(15)
        assert not t.is_alive(), "the agent did not stop"
        assert not errors, errors


@pytest.fixture
def client(kernel: Kernel) -> Iterator[Any]:
    from rebuno import SyncClient

    c = SyncClient(kernel.url)
    yield c
    c.close()


def wait_status(client: Any, execution_id: str, statuses: str | tuple[str, ...] = ("completed", "failed", "cancelled"),
                timeout: float = 15.0) -> Any:
    """Wait until the execution has one of ``statuses``; return it."""
    if isinstance(statuses, str):
        statuses = (statuses,)
    box: dict[str, Any] = {}

    def check() -> bool:
        box["ex"] = client.get(execution_id)
        return box["ex"].status in statuses

    try:
        wait_for(check, timeout, interval=0.05, what=f"execution {execution_id} to be {'/'.join(statuses)}")
    except AssertionError as e:
        raise AssertionError(f"{e}; it is {box.get('ex') and box['ex'].status}: {box.get('ex')}") from None
    return box["ex"]


# --- scripted OpenAI-compatible server ------------------------------------------------------

class ScriptedLLM:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint answering from ``respond``.

    ``respond(body) -> message dict`` (``{"content": ...}`` or ``{"tool_calls": [...]}``;
    ``{"_status": 500}`` answers with that HTTP error and ``Retry-After: 0``).
    Every request body is kept in ``calls``. Streaming requests get SSE chunks that split
    content and tool-call arguments into several deltas.
    """

    def __init__(self, respond: Callable[[dict[str, Any]], dict[str, Any]]):
        self.respond = respond
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": "no such route"}})
                    return
                with outer.lock:
                    outer.calls.append(body)
                    number = len(outer.calls)
                msg = outer.respond(body)
                if msg.get("_status"):
                    self._send(msg["_status"], {"error": {"message": msg.get("content") or "scripted failure"}},
                               {"Retry-After": "0"})
                    return
                if body.get("stream"):
                    self._stream(body, msg, number)
                else:
                    finish = "tool_calls" if msg.get("tool_calls") else "stop"
                    self._send(200, {"id": f"chatcmpl-{number}", "object": "chat.completion", "created": 1700000000,
                                     "model": body.get("model"),
                                     "choices": [{"index": 0, "finish_reason": finish,
                                                  "message": {"role": "assistant", "content": msg.get("content"),
                                                              **({"tool_calls": msg["tool_calls"]}
                                                                 if msg.get("tool_calls") else {})}}],
                                     "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

            def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                raw = json.dumps(obj).encode()
                self.send_response(status)
                for hk, hv in (headers or {}).items():
                    self.send_header(hk, hv)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _stream(self, body: dict[str, Any], msg: dict[str, Any], number: int) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                base = {"id": f"chatcmpl-{number}", "object": "chat.completion.chunk", "created": 1700000000,
                        "model": body.get("model")}

                def send(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> None:
                    chunk = dict(base, choices=[{"index": 0, "delta": delta, "finish_reason": finish}])
                    if usage:
                        chunk = dict(base, choices=[], usage=usage)
                    data = f"data: {json.dumps(chunk)}\n\n".encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()

                send({"role": "assistant", "content": ""})
                text = msg.get("content") or ""
                for i in range(0, len(text), 4):
                    send({"content": text[i:i + 4]})
                for idx, tc in enumerate(msg.get("tool_calls") or []):
                    args = tc["function"]["arguments"]
                    send({"tool_calls": [{"index": idx, "id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}}]})
                    for i in range(0, len(args), 5):
                        send({"tool_calls": [{"index": idx, "function": {"arguments": args[i:i + 5]}}]})
                send({}, "tool_calls" if msg.get("tool_calls") else "stop")
                send({}, usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
                done = b"data: [DONE]\n\n"
                self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
                self.wfile.flush()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def llm_server() -> Iterator[Callable[..., ScriptedLLM]]:
    servers: list[ScriptedLLM] = []

    def make(respond: Callable[[dict[str, Any]], dict[str, Any]]) -> ScriptedLLM:
        s = ScriptedLLM(respond)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.close()
