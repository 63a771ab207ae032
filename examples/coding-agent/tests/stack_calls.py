"""What the end-to-end tests of both coding-agent examples (this one's test_demo.py and
examples/coding-agent-e2b/tests/test_e2e.py) do with a running demo stack: run it for a
test (printing its processes' logs on failure), and call its sandboxd's /v1 API the way
its user's clients do (the local token found as they find it)."""
from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import demo  # examples/coding-agent/demo.py, on the path by conftest
from rebuno import _localauth


@contextlib.contextmanager
def running(stack: demo.Stack) -> Iterator[demo.Stack]:
    """Start stack, yield it, stop it; on a failure, show the tail of each process's log."""
    try:
        stack.start()
        yield stack
    except BaseException:
        for p in stack.procs.values():
            print(f"--- {p.name}\n{p.tail(60)}")
        raise
    finally:
        stack.stop()


def sbx(stack: demo.Stack, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request to the demo's sandboxd, with its local token found as its user's clients
    find it."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    token = _localauth.find(stack.sandbox_url, _localauth.SANDBOXD_STATE_FILE)[0]
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(stack.sandbox_url + "/v1" + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def run_in(stack: demo.Stack, sandbox: str, script: str) -> str:
    """bash -c script in the sandbox's checkout; its stdout and stderr."""
    st, out = sbx(stack, "POST", f"/sandboxes/{sandbox}/commands",
                  {"cmd": "bash", "args": ["-c", script], "cwd": "/root/repo", "wait": True})
    assert st == 200, out
    return out["stdout"] + out["stderr"]
