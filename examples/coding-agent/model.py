#!/usr/bin/env python3
"""A scripted OpenAI-compatible chat model that fixes the sample repository's failing test.

It plays the model of the coding-agent demo. Every answer is a pure function of the
request: the model reads the conversation it is sent and decides its next message
with a small state machine, never from a counter, so a replayed or re-dispatched run,
or a second turn of a session, gets the same answer for the same conversation
(``id``, ``created`` and tool-call ids included).

Endpoints::

    POST /v1/chat/completions   (also /chat/completions)  plain JSON or, with
                                "stream": true, Server-Sent Events of
                                chat.completion.chunk objects, then "data: [DONE]"
    GET  /v1/models             (also /models)
    GET  /stats                 {"requests", "chat_completions", "streamed", "errors", "states"}

``python3 model.py --listen 127.0.0.1:0`` prints one line
``model: http://127.0.0.1:PORT/v1 name=scripted-coder`` (use the URL as
``LLM_BASE_URL``). ``--api-key`` / ``$MODEL_API_KEY`` makes it require
``Authorization: Bearer <key>``; any model name is accepted.

The contract with the agent
===========================

**Tools.** The request's ``tools`` must offer the ones the model calls (OpenAI
function tools): ``shell(command: str)``, ``read_file(path: str)``,
``write_file(path: str, content: str)``, ``open_pr(title: str, body: str)``. A tool
that is not offered is never called: the model answers with text saying what is
missing.

**Tool results.** Each assistant ``tool_calls`` entry must be answered by a
``{"role": "tool", "tool_call_id": ..., "content": ...}`` message (as the SDK's
``ToolSet.run`` does), else the request is rejected with 400, as OpenAI does.
``shell`` results are read as ``"exit code N\\n<output>"`` (N = 0 is success; without
that first line, ``FAILED``/``fatal:``/``error:``/``rejected`` in the output mean
failure). A result reading ``"<tool> not allowed. reason: ..."`` (a policy refusal)
or starting with ``"error:"`` (a failed tool) ends the turn with a message that
quotes it.

**The task** is the text of the *last* ``user`` message; only the messages after it
are this turn's work, so a session's next turn can carry the whole previous
conversation before its new task:

* mentions "edge case"  -> the edge-case turn (below);
* mentions "fail", "fix" or "bug" -> the fix turn;
* anything else -> a short answer saying what this scripted model can do.

**The branch.** A ``system`` (or ``developer``) message should carry a line
``branch: <name>``, e.g. ``branch: rebuno/fix-tests`` (backticks allowed). The model
then commits on that branch (``git checkout -B <name>``) and pushes it with
``git push origin <name>``; the agent's ``open_pr`` tool, which knows the branch
itself, opens the pull request from it. With no such line, the model commits on the
branch that is checked out and pushes ``HEAD`` (a checkout of ``main`` is then
refused by the forge, which protects ``main``). The last ``branch:`` line wins.
The shell commands run in the repository's root.

**The fix turn** ("The tests are failing. Fix the bug and open a pull request.")::

    start                      -> shell  "python3 -m unittest -q"
    tests failed, not fixed    -> read_file calc.py
      (tests passed)           -> answer: nothing to fix
    read calc.py, bug found    -> write_file calc.py   (floor division -> true division)
      (bug not found)          -> answer: could not find it
    wrote calc.py              -> shell  "python3 -m unittest -q"
    tests passed after the fix -> shell  "[git checkout -B <branch> && ]git add -A &&
                                          (git diff --cached --quiet || git commit ...) &&
                                          git push origin <branch|HEAD>"
      (tests still fail)       -> read_file calc.py again and rewrite it if the bug is
                                  back (a fork's workspace can predate the fix); after
                                  a second failed fix -> answer: still failing
    pushed                     -> open_pr(title, body)
      (push failed)            -> answer: quoting the push output
    open_pr answered           -> answer: summary with the open_pr result

**The edge-case turn** ("Also add a test for the edge case.")::

    start                      -> read_file test_calc.py
    read it                    -> write_file test_calc.py  (+ a test that average([])
                                                            raises ValueError)
    wrote it                   -> shell  "python3 -m unittest -q"
    tests passed               -> shell  commit and push (as above, same branch)
    pushed                     -> open_pr(title, body)  (same head: the forge updates
                                                         the same pull request)
    open_pr answered           -> answer: summary

The commit command is safe to run twice (an empty index skips the commit), since an
agent may re-run a shell command after a crash.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import http.server
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_BODY = 8 * 1024 * 1024      # bytes of a request body
DRAIN_LIMIT = 4 * MAX_BODY      # an oversize body up to this is read and dropped before the 413
MAX_MESSAGES = 2000
CREATED = 1_700_000_000          # a fixed "created": answers are a function of the request
FINGERPRINT = "scripted-coder-v1"
DEFAULT_MODEL_NAME = "scripted-coder"

TEST_COMMAND = "python3 -m unittest -q"
SOURCE_FILE = "calc.py"
TEST_FILE = "test_calc.py"
BUG = "return sum(values) // len(values)"
FIXED = "return sum(values) / len(values)"
TEST_CLASS = "class AverageTest(unittest.TestCase):\n"
EDGE_TEST_NAME = "test_average_of_empty_list_raises"
EDGE_TEST = (f"    def {EDGE_TEST_NAME}(self) -> None:\n"
             "        with self.assertRaises(ValueError):\n"
             "            average([])\n\n")
PR_TITLE = "Fix average() to use true division"
PR_BODY_FIX = ("average() used floor division (`//`), so `average([1, 2])` was 1 instead of 1.5. "
               "It now uses true division. `python3 -m unittest` passes.")
PR_BODY_EDGE = PR_BODY_FIX + "\n\nAlso adds a test that `average([])` raises ValueError."
COMMIT_FIX = "Fix average() to use true division"
COMMIT_EDGE = "Test that average() of an empty list raises ValueError"
GIT_IDENTITY = ["-c", "user.name=rebuno-agent", "-c", "user.email=agent@rebuno.local"]

BRANCH_LINE = re.compile(r"(?im)\bbranch:[ \t]*`?([^\s`]{1,200})`?[ \t]*$")
BRANCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
REFUSAL = re.compile(r"^\S+ not allowed\. reason: ")
EXIT_CODE = re.compile(r"^\s*exit code (-?\d+)")
FAILURE_WORDS = re.compile(r"FAILED|Traceback|^fatal:|^error:|\[rejected\]|\[remote rejected\]", re.M)
ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


class BadRequest(Exception):
    """A request the server answers with 400 and an OpenAI-style error body."""


# --- reading the conversation ----------------------------------------------------------

def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


@dataclass
class Action:
    """One tool call the model made in this turn, with the agent's result."""

    call_id: str
    name: str
    args: dict[str, Any]
    result: str | None = None

    @property
    def kind(self) -> str:
        """``tests``, ``push``, ``shell``, ``read``, ``write``, ``open_pr`` or ``other``."""
        if self.name == "shell":
            command = str(self.args.get("command", ""))
            if "unittest" in command:
                return "tests"
            return "push" if "git push" in command else "shell"
        return {"read_file": "read", "write_file": "write", "open_pr": "open_pr"}.get(self.name, "other")

    @property
    def path(self) -> str:
        """The ``path`` argument, normalised (``./calc.py`` -> ``calc.py``)."""
        p = str(self.args.get("path", ""))
        return p[2:] if p.startswith("./") else p

    @property
    def ok(self) -> bool:
        """Whether a shell result reports success."""
        out = self.result or ""
        m = EXIT_CODE.match(out)
        if m:
            return int(m.group(1)) == 0
        return not FAILURE_WORDS.search(out)

    @property
    def refused(self) -> bool:
        """A policy refusal or a tool failure."""
        out = (self.result or "").lstrip()
        return bool(REFUSAL.match(out)) or out.startswith("error:")


@dataclass
class Conversation:
    """What the model needs from a request: the task, the branch, this turn's actions."""

    task: str
    branch: str | None
    actions: list[Action]
    tools: set[str]
    fingerprint: str = ""
    prompt_chars: int = 0

    @property
    def last(self) -> Action | None:
        """The most recent action of this turn."""
        return self.actions[-1] if self.actions else None

    def did(self, kind: str, path: str | None = None) -> bool:
        """Whether an action of ``kind`` (on ``path``) happened in this turn."""
        return any(a.kind == kind and (path is None or a.path == path) for a in self.actions)


def parse_conversation(body: dict[str, Any]) -> Conversation:
    """Validate a chat request body and extract the :class:`Conversation`."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array")
    if len(messages) > MAX_MESSAGES:
        raise BadRequest(f"at most {MAX_MESSAGES} messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            raise BadRequest(f"messages[{i}]: expected an object with a role in {sorted(ROLES)}")
    tools: set[str] = set()
    raw_tools = body.get("tools") or []
    if not isinstance(raw_tools, list):
        raise BadRequest("'tools' must be an array")
    for t in raw_tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            tools.add(fn["name"])
    if body.get("tool_choice") == "none":
        tools = set()
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    if not users:
        raise BadRequest("no user message: nothing to do")
    start = users[-1]
    branch = None
    for m in messages:
        if m["role"] in ("system", "developer"):
            for found in BRANCH_LINE.findall(text_of(m.get("content"))):
                branch = found
    actions: list[Action] = []
    by_id: dict[str, Action] = {}
    for i, m in enumerate(messages[start + 1:], start + 1):
        if m["role"] == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise BadRequest(f"messages[{i}].tool_calls must be an array")
            for tc in calls:
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict) or not isinstance(tc.get("id"), str):
                    raise BadRequest(f"messages[{i}]: a tool call needs an id and a function")
                raw = fn.get("arguments")
                try:
                    args = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
                except ValueError:
                    args = {}
                a = Action(tc["id"], str(fn.get("name", "")), args if isinstance(args, dict) else {})
                actions.append(a)
                by_id[a.call_id] = a
        elif m["role"] == "tool":
            answered = by_id.get(str(m.get("tool_call_id", "")))
            if answered is None:
                raise BadRequest(f"messages[{i}]: tool message for unknown tool_call_id "
                                 f"{str(m.get('tool_call_id'))[:60]!r}")
            answered.result = text_of(m.get("content"))
    missing = [a.call_id for a in actions if a.result is None]
    if missing:
        raise BadRequest("An assistant message with 'tool_calls' must be followed by tool messages responding "
                         f"to each 'tool_call_id'. Missing: {', '.join(missing)[:200]}")
    canonical = json.dumps([messages, sorted(tools)], sort_keys=True, ensure_ascii=False)
    return Conversation(task=text_of(messages[start].get("content")), branch=branch, actions=actions,
                        tools=tools, fingerprint=hashlib.sha256(canonical.encode()).hexdigest(),
                        prompt_chars=len(canonical))


# --- deciding -------------------------------------------------------------------------------

@dataclass
class Decision:
    """The model's next message: text, and optionally one tool call."""

    state: str
    content: str
    tool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)


def say(state: str, content: str) -> Decision:
    """A final answer (no tool call)."""
    return Decision(state, content)


def call(state: str, text: str, tool: str, /, **args: Any) -> Decision:
    """A tool call, with a short sentence of what the model is doing (``args`` may
    include ``content``: the parameters before it are positional-only)."""
    return Decision(state, text, tool, args)


def push_command(branch: str | None, message: str) -> str:
    """The shell command that commits everything and pushes the branch (safe to re-run)."""
    identity = " ".join(GIT_IDENTITY)
    checkout = f"git checkout -B {branch} && " if branch else ""
    return (f"{checkout}git add -A && "
            f"(git diff --cached --quiet || git {identity} commit -q -m '{message}') && "
            f"git push origin {branch or 'HEAD'}")


def first_line(text: str, limit: int = 300) -> str:
    """The first non-empty line of a tool result, shortened."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def stopped(c: Conversation, a: Action) -> Decision | None:
    """An answer that ends the turn when a tool call was refused or failed."""
    if not a.refused:
        return None
    out = (a.result or "").strip()[:500]
    if a.kind == "open_pr":
        where = f"branch {c.branch}" if c.branch else "the branch"
        return say("stop/open_pr_refused",
                   f"The change is committed and pushed to {where}, but the pull request was not opened: {out}")
    return say("stop/tool_refused", f"I stopped because the {a.name} call came back with: {out}")


def decide(c: Conversation) -> Decision:
    """The state machine: the next message for this conversation."""
    if c.branch is not None and not _safe_branch(c.branch):
        return say("stop/bad_branch", f"The branch name {c.branch!r} from the system message is not a valid "
                                      "git branch name, so I cannot push to it.")
    task = c.task.lower()
    if "edge case" in task:
        d = _edge_turn(c)
    elif any(w in task for w in ("fail", "fix", "bug")):
        d = _fix_turn(c)
    else:
        return say("unknown_task", "I am a scripted model. I can fix the failing tests (\"The tests are failing. "
                                   "Fix the bug and open a pull request.\") and then add a test for the edge case "
                                   "(\"Also add a test for the edge case.\").")
    if d.tool is not None and d.tool not in c.tools:
        return say("stop/tool_missing", f"I need the {d.tool} tool for the next step, but the request does not "
                                        f"offer it (tools offered: {', '.join(sorted(c.tools)) or 'none'}).")
    return d


def _safe_branch(name: str) -> bool:
    """A branch name that is valid for git and safe to put in a shell command as is."""
    return (bool(BRANCH_NAME.match(name)) and not name.startswith(("-", "/"))
            and not name.endswith(("/", ".", ".lock")) and ".." not in name and "//" not in name
            and not any(p.startswith(".") for p in name.split("/")))


def _fix_turn(c: Conversation) -> Decision:
    a = c.last
    if a is None:
        return call("fix/run_tests", "Let me run the tests to see what fails.", "shell", command=TEST_COMMAND)
    if (d := stopped(c, a)) is not None:
        return d
    fixed = c.did("write", SOURCE_FILE)
    if a.kind == "tests" and not fixed:
        if a.ok:
            return say("fix/already_passing", "The tests already pass; there is nothing to fix.")
        return call("fix/read_source", f"test_average_with_a_fraction fails. Let me read {SOURCE_FILE}.",
                    "read_file", path=SOURCE_FILE)
    if a.kind == "read" and a.path == SOURCE_FILE:
        source = a.result or ""
        if BUG not in source:
            return say("fix/bug_not_found", f"I could not find the floor division in {SOURCE_FILE}, so I did not "
                                            "change it.")
        return call("fix/write_fix", "average() uses floor division (//). I'll switch it to true division.",
                    "write_file", path=SOURCE_FILE, content=source.replace(BUG, FIXED, 1))
    if a.kind == "write" and a.path == SOURCE_FILE:
        return call("fix/rerun_tests", "Let me run the tests again.", "shell", command=TEST_COMMAND)
    if a.kind == "tests":
        if not a.ok:
            if sum(1 for x in c.actions if x.kind == "write" and x.path == SOURCE_FILE) < 2:
                # e.g. a fork whose workspace came from a checkpoint taken before the fix
                return call("fix/reread_source", f"The tests still fail. Let me read {SOURCE_FILE} again.",
                            "read_file", path=SOURCE_FILE)
            return say("fix/still_failing", "The tests still fail after my change:\n" + (a.result or "")[-800:])
        return call("fix/push", "The tests pass. Committing and pushing the branch.", "shell",
                    command=push_command(c.branch, COMMIT_FIX))
    if a.kind == "push":
        if not a.ok:
            return say("fix/push_failed", "The push failed:\n" + (a.result or "")[-800:])
        return call("fix/open_pr", "Opening a pull request.", "open_pr", title=PR_TITLE, body=PR_BODY_FIX)
    if a.kind == "open_pr":
        where = f"branch `{c.branch}`" if c.branch else "the branch"
        return say("fix/done", "Fixed the bug in average(): calc.py used floor division (`//`), so "
                               "average([1, 2]) was 1 instead of 1.5. The tests pass. I pushed "
                               f"{where} and opened a pull request: {first_line(a.result or '')}")
    return say("fix/unexpected", f"I did not expect the result of {a.name}; stopping here.")


def _edge_turn(c: Conversation) -> Decision:
    a = c.last
    if a is None:
        return call("edge/read_tests", f"Let me look at {TEST_FILE}.", "read_file", path=TEST_FILE)
    if (d := stopped(c, a)) is not None:
        return d
    if a.kind == "read" and a.path == TEST_FILE:
        tests = a.result or ""
        if EDGE_TEST_NAME in tests:
            return say("edge/already_tested", "The edge case (average of an empty list) is already tested.")
        if TEST_CLASS not in tests:
            return say("edge/no_test_class", f"I could not find the AverageTest class in {TEST_FILE}.")
        return call("edge/write_test", "The edge case is an empty list: average([]) must raise ValueError. "
                                       "Adding a test for it.",
                    "write_file", path=TEST_FILE, content=tests.replace(TEST_CLASS, TEST_CLASS + EDGE_TEST, 1))
    if a.kind == "write" and a.path == TEST_FILE:
        return call("edge/run_tests", "Running the tests.", "shell", command=TEST_COMMAND)
    if a.kind == "tests":
        if not a.ok:
            return say("edge/tests_failing", "The tests fail with the new test:\n" + (a.result or "")[-800:])
        return call("edge/push", "The tests pass. Committing and pushing to the same branch.", "shell",
                    command=push_command(c.branch, COMMIT_EDGE))
    if a.kind == "push":
        if not a.ok:
            return say("edge/push_failed", "The push failed:\n" + (a.result or "")[-800:])
        return call("edge/open_pr", "Updating the pull request.", "open_pr", title=PR_TITLE, body=PR_BODY_EDGE)
    if a.kind == "open_pr":
        return say("edge/done", "Added test_average_of_empty_list_raises (average([]) raises ValueError); the "
                                f"tests pass and the pull request is updated: {first_line(a.result or '')}")
    return say("edge/unexpected", f"I did not expect the result of {a.name}; stopping here.")


# --- responses --------------------------------------------------------------------------------

def completion(c: Conversation, d: Decision, model: str) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` for a decision (deterministic)."""
    message: dict[str, Any] = {"role": "assistant", "content": d.content}
    if d.tool is not None:
        message["tool_calls"] = [{"id": "call_" + c.fingerprint[:24], "type": "function",
                                  "function": {"name": d.tool, "arguments": json.dumps(d.args)}}]
    out_chars = len(d.content) + (len(json.dumps(d.args)) if d.tool else 0)
    return {
        "id": "chatcmpl-" + c.fingerprint[:29],
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": "tool_calls" if d.tool else "stop"}],
        "usage": {"prompt_tokens": c.prompt_chars // 4 + 1, "completion_tokens": out_chars // 4 + 1,
                  "total_tokens": c.prompt_chars // 4 + out_chars // 4 + 2},
    }


def chunks(full: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` sequence that assembles into ``full``."""
    base = {k: full[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"
    choice = full["choices"][0]
    msg = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    out = [chunk({"role": "assistant", "content": ""})]
    text = msg.get("content") or ""
    out += [chunk({"content": text[i:i + 12]}) for i in range(0, len(text), 12)]
    for idx, tc in enumerate(msg.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": idx, "id": tc["id"], "type": "function",
                                          "function": {"name": tc["function"]["name"], "arguments": ""}}]}))
        args = tc["function"]["arguments"]
        out += [chunk({"tool_calls": [{"index": idx, "function": {"arguments": args[i:i + 24]}}]})
                for i in range(0, len(args), 24)]
    out.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        out.append({**base, "choices": [], "usage": full["usage"]})
    return out


# --- the server ---------------------------------------------------------------------------------

class Stats:
    """Request counters for ``GET /stats``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.chat_completions = 0
        self.streamed = 0
        self.errors = 0
        self.states: Counter[str] = Counter()

    def snapshot(self) -> dict[str, Any]:
        """The counters as JSON."""
        with self.lock:
            return {"requests": self.requests, "chat_completions": self.chat_completions,
                    "streamed": self.streamed, "errors": self.errors, "states": dict(self.states)}


class ModelServer(http.server.ThreadingHTTPServer):
    """The threaded HTTP server, with the model's settings and counters."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], *, model_name: str = DEFAULT_MODEL_NAME,
                 api_key: str = "", stream_delay: float = 0.0):
        super().__init__(address, ModelHandler)
        self.model_name = model_name
        self.api_key = api_key
        self.stream_delay = stream_delay
        self.stats = Stats()


class ModelHandler(http.server.BaseHTTPRequestHandler):
    """``/v1/chat/completions``, ``/v1/models`` and ``/stats``."""

    protocol_version = "HTTP/1.1"
    server_version = "rebuno-scripted-model/1"
    timeout = 120
    server: ModelServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Silence the default access log (one line per request is written instead)."""

    def _log(self, status: int, extra: str = "") -> None:
        sys.stderr.write(f"model: {self.command} {self.path.split('?')[0][:200]} {status}{extra}\n")
        sys.stderr.flush()

    def _authorized(self) -> bool:
        key = self.server.api_key
        if not key:
            return True
        got = self.headers.get("Authorization", "")
        return got.startswith("Bearer ") and hmac.compare_digest(got[7:].strip().encode(), key.encode())

    def _send_json(self, status: int, obj: Any, *, close: bool = False) -> None:
        raw = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        if close:
            self.close_connection = True
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error", *, close: bool = False) -> None:
        with self.server.stats.lock:
            self.server.stats.errors += 1
        self._send_json(status, {"error": {"message": message, "type": kind, "param": None, "code": None}},
                        close=close)
        self._log(status, f" error={message[:120]!r}")

    def _discard(self, length: int) -> bool:
        left = length
        while left > 0:
            block = self.rfile.read(min(left, 65536))
            if not block:
                return False
            left -= len(block)
        return True

    def do_GET(self) -> None:  # noqa: N802
        """``/v1/models``, ``/stats``, ``/healthz``."""
        with self.server.stats.lock:
            self.server.stats.requests += 1
        path = self.path.split("?")[0].rstrip("/")
        if path == "/stats":
            self._send_json(200, self.server.stats.snapshot())
        elif path == "/healthz":
            self._send_json(200, {"ok": True})
        elif path in ("/v1/models", "/models"):
            if not self._authorized():
                self._error(401, "Incorrect API key provided", "invalid_api_key")
                return
            self._send_json(200, {"object": "list", "data": [
                {"id": self.server.model_name, "object": "model", "created": CREATED, "owned_by": "rebuno-demo"}]})
        else:
            self._error(404, f"no route {path[:100]}", "not_found")
            return
        self._log(200)

    def do_POST(self) -> None:  # noqa: N802
        """``/v1/chat/completions``."""
        with self.server.stats.lock:
            self.server.stats.requests += 1
        path = self.path.split("?")[0].rstrip("/")
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {path[:100]}", "not_found", close=True)
            return
        if not self._authorized():
            self._error(401, "Incorrect API key provided", "invalid_api_key", close=True)
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(411, "send a Content-Length", close=True)
            return
        if length < 0 or length > MAX_BODY:
            # read and drop a moderately large body first, so the client sees the answer
            drained = 0 < length <= DRAIN_LIMIT and self._discard(length)
            self._error(413, f"the request body must be at most {MAX_BODY} bytes", close=not drained)
            return
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
            model = body.get("model")
            if not isinstance(model, str) or not model:
                raise BadRequest("'model' must be a non-empty string")
            conversation = parse_conversation(body)
        except BadRequest as e:
            self._error(400, str(e))
            return
        except (ValueError, UnicodeDecodeError):
            self._error(400, "the body must be a JSON object")
            return
        try:
            decision = decide(conversation)
            full = completion(conversation, decision, model)
        except Exception as e:  # a bug in the script: say so instead of dropping the connection
            self._error(500, f"scripted model failed: {type(e).__name__}: {e}", "server_error")
            return
        stream = body.get("stream") is True
        with self.server.stats.lock:
            self.server.stats.chat_completions += 1
            self.server.stats.streamed += int(stream)
            self.server.stats.states[decision.state] += 1
        if stream:
            opts = body.get("stream_options")
            self._stream(chunks(full, isinstance(opts, dict) and opts.get("include_usage") is True))
        else:
            self._send_json(200, full)
        self._log(200, f" state={decision.state}{' stream' if stream else ''}")

    def _stream(self, events: list[dict[str, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def write(data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        for i, ev in enumerate(events):
            if i and self.server.stream_delay > 0:
                time.sleep(self.server.stream_delay)
            write(f"data: {json.dumps(ev)}\n\n".encode())
        write(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` -> ``(host, port)``; port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise SystemExit(f"model: error: bad --listen {value!r}: expected HOST:PORT, e.g. 127.0.0.1:0")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description="A scripted OpenAI-compatible model for the coding-agent demo.")
    p.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT (port 0 picks a free one)")
    p.add_argument("--model-name", default=DEFAULT_MODEL_NAME, help="the name GET /v1/models lists")
    p.add_argument("--api-key", default=os.environ.get("MODEL_API_KEY", ""),
                   help="require Authorization: Bearer <key> (default $MODEL_API_KEY; none: no check)")
    p.add_argument("--stream-delay", type=float, default=0.0,
                   help="seconds between streamed chunks (to watch a run live)")
    args = p.parse_args(argv)
    host, port = parse_listen(args.listen)
    try:
        server = ModelServer((host, port), model_name=args.model_name, api_key=args.api_key,
                             stream_delay=max(0.0, min(args.stream_delay, 1.0)))
    except OSError as e:
        print(f"model: error: cannot listen on {args.listen}: {e}", file=sys.stderr)
        return 1
    url_host = f"[{host}]" if ":" in host else host
    print(f"model: http://{url_host}:{server.server_address[1]}/v1 name={args.model_name}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
