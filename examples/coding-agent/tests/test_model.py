"""model.py: the scripted conversation (plain and streamed), determinism, errors, stats."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import model as scripted
from conftest import SAMPLE, Model, start_model
from rebuno.llm import CompletionAssembler

TOOLS = [
    {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": {p: {"type": "string"} for p in params}, "required": list(params)}}}
    for name, params in (("shell", ["command"]), ("read_file", ["path"]), ("write_file", ["path", "content"]),
                         ("open_pr", ["title", "body"]))
]
SYSTEM = {"role": "system", "content": "You fix bugs in a git checkout.\nbranch: `rebuno/fix-tests`\nBe brief."}
FIX_TASK = {"role": "user", "content": "The tests are failing. Fix the bug and open a pull request."}
EDGE_TASK = {"role": "user", "content": "Also add a test for the edge case."}
FAILING = ("exit code 1\nF...\nFAIL: test_average_with_a_fraction (test_calc.AverageTest)\nAssertionError: 1 != 1.5\n"
           "Ran 4 tests\nFAILED (failures=1)\n")
PASSING = "exit code 0\n----\nRan 4 tests in 0.001s\n\nOK\n"
PUSHED = "exit code 0\nTo https://github.local/acme/calc.git\n * [new branch]      rebuno/fix-tests -> rebuno/fix-tests\n"
PR_RESULT = "pull request #1 opened: https://github.local/acme/calc/pull/1"


def body(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A chat request as the SDK's ChatClient sends it."""
    return {"model": "scripted-coder", "messages": messages, "tools": TOOLS, **extra}


def read_sse(raw: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of an SSE body; asserts it ends with [DONE]."""
    events = [line[len("data: "):] for line in raw.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def ask(model: Model, messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    """One model turn, plain or streamed (streams are assembled by the SDK's assembler)."""
    if not stream:
        return model.chat(body(messages))
    status, raw, headers = model.request("POST", "/v1/chat/completions",
                                         body(messages, stream=True, stream_options={"include_usage": True}))
    assert status == 200 and headers["content-type"] == "text/event-stream"
    asm = CompletionAssembler()
    chunks = read_sse(raw)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    for c in chunks:
        asm.add(c)
    return asm.result()


def step(model: Model, convo: list[dict[str, Any]], stream: bool, expect_tool: str | None,
         result: str | None = None) -> dict[str, Any]:
    """Ask the model, check which tool it calls, append its message and ``result``."""
    reply = ask(model, convo, stream)
    choice = reply["choices"][0]
    msg = choice["message"]
    if expect_tool is None:
        assert "tool_calls" not in msg and choice["finish_reason"] == "stop", msg
        convo.append({"role": "assistant", "content": msg["content"]})
        return msg
    assert choice["finish_reason"] == "tool_calls" and len(msg["tool_calls"]) == 1, msg
    tc = msg["tool_calls"][0]
    assert tc["function"]["name"] == expect_tool, msg
    convo.append({"role": "assistant", "content": msg["content"], "tool_calls": msg["tool_calls"]})
    convo.append({"role": "tool", "tool_call_id": tc["id"], "content": result or ""})
    args: dict[str, Any] = json.loads(tc["function"]["arguments"])
    return args


def run_fix_turn(model: Model, stream: bool) -> list[dict[str, Any]]:
    """The whole first turn, the agent's side played with canned tool results."""
    convo = [SYSTEM, FIX_TASK]
    assert step(model, convo, stream, "shell", FAILING) == {"command": "python3 -m unittest -q"}
    source = (SAMPLE / "calc.py").read_text()
    assert step(model, convo, stream, "read_file", source) == {"path": "calc.py"}
    args = step(model, convo, stream, "write_file", "wrote calc.py")
    assert args["path"] == "calc.py"
    assert args["content"] == source.replace("sum(values) // len(values)", "sum(values) / len(values)")
    assert step(model, convo, stream, "shell", PASSING) == {"command": "python3 -m unittest -q"}
    push = step(model, convo, stream, "shell", PUSHED)["command"]
    assert push.startswith("git checkout -B rebuno/fix-tests && git add -A && ")
    assert push.endswith("git push origin rebuno/fix-tests")
    pr = step(model, convo, stream, "open_pr", PR_RESULT)
    assert pr == {"title": scripted.PR_TITLE, "body": scripted.PR_BODY_FIX}
    final = step(model, convo, stream, None)
    assert "pull request #1 opened" in final["content"] and "rebuno/fix-tests" in final["content"]
    return convo


def test_fix_turn_plain(model: Model) -> None:
    run_fix_turn(model, stream=False)
    stats = model.stats()
    assert stats["chat_completions"] == 7 and stats["streamed"] == 0 and stats["errors"] == 0
    assert stats["states"] == {s: 1 for s in ("fix/run_tests", "fix/read_source", "fix/write_fix", "fix/rerun_tests",
                                               "fix/push", "fix/open_pr", "fix/done")}


def test_fix_turn_streamed_matches_plain(model: Model) -> None:
    streamed = run_fix_turn(model, stream=True)
    plain = run_fix_turn(model, stream=False)
    assert streamed == plain  # same messages, same tool-call ids
    stats = model.stats()
    assert stats["chat_completions"] == 14 and stats["streamed"] == 7


def test_stream_chunks_shape(model: Model) -> None:
    status, raw, _ = model.request("POST", "/v1/chat/completions", body([SYSTEM, FIX_TASK], stream=True))
    chunks = read_sse(raw)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tool_deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
                   if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert tool_deltas[0]["function"] == {"name": "shell", "arguments": ""} and tool_deltas[0]["id"].startswith("call_")
    assert len(tool_deltas) > 2  # the arguments arrive in pieces
    assert json.loads("".join(d["function"]["arguments"] for d in tool_deltas)) == {"command": "python3 -m unittest -q"}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert not any("usage" in c for c in chunks)  # only with stream_options.include_usage


def test_same_conversation_same_answer(model: Model) -> None:
    convo = [SYSTEM, FIX_TASK]
    first = model.chat(body(convo))
    again = model.chat(body(convo))
    assert first == again and first["id"].startswith("chatcmpl-")
    assert first["choices"][0]["message"]["tool_calls"][0]["id"] == again["choices"][0]["message"]["tool_calls"][0]["id"]
    other = model.chat(body([{**SYSTEM, "content": "branch: other"}, FIX_TASK]))
    assert other["id"] != first["id"]
    # a fresh server (a "re-dispatch" elsewhere) answers the same
    tmp = Path(tempfile.mkdtemp(prefix="model-test-"))
    second = start_model(tmp)
    try:
        assert second.chat(body(convo)) == first
    finally:
        second.server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def test_stats_count_requests(model: Model) -> None:
    assert model.stats() == {"requests": 1, "chat_completions": 0, "streamed": 0, "errors": 0, "states": {}}
    model.chat(body([SYSTEM, FIX_TASK]))
    model.request("POST", "/v1/chat/completions", body([SYSTEM, FIX_TASK], stream=True))
    model.request("POST", "/chat/completions", body([SYSTEM, FIX_TASK]))
    model.request("POST", "/v1/chat/completions", {"model": "m", "messages": []})
    stats = model.stats()
    assert stats == {"requests": 6, "chat_completions": 3, "streamed": 1, "errors": 1,
                     "states": {"fix/run_tests": 3}}


def test_edge_case_turn_continues_the_session(model: Model) -> None:
    convo = run_fix_turn(model, stream=False)
    convo.append(EDGE_TASK)
    tests = (SAMPLE / "test_calc.py").read_text()
    assert step(model, convo, False, "read_file", tests) == {"path": "test_calc.py"}
    args = step(model, convo, False, "write_file", "wrote test_calc.py")
    assert args["path"] == "test_calc.py"
    assert "def test_average_of_empty_list_raises(self)" in args["content"]
    assert "with self.assertRaises(ValueError):\n            average([])" in args["content"]
    assert args["content"].replace(scripted.EDGE_TEST, "") == tests
    assert step(model, convo, False, "shell", PASSING.replace("4 tests", "5 tests")) == {
        "command": "python3 -m unittest -q"}
    push = step(model, convo, False, "shell", PUSHED)["command"]
    assert "git checkout -B rebuno/fix-tests" in push and push.endswith("git push origin rebuno/fix-tests")
    assert scripted.COMMIT_EDGE in push
    assert step(model, convo, False, "open_pr", "pull request #1 updated") == {
        "title": scripted.PR_TITLE, "body": scripted.PR_BODY_EDGE}
    final = step(model, convo, False, None)
    assert "test_average_of_empty_list_raises" in final["content"]


def test_refusals_and_failures_end_the_turn(model: Model) -> None:
    convo: list[dict[str, Any]] = [SYSTEM, FIX_TASK]
    step(model, convo, False, "shell", "shell not allowed. reason: no shell today")
    msg = step(model, convo, False, None)
    assert "no shell today" in msg["content"]

    convo = run_fix_turn(model, stream=False)[:-3]  # back to just before open_pr's result
    reply = model.chat(body(convo))
    tc = reply["choices"][0]["message"]["tool_calls"][0]
    assert tc["function"]["name"] == "open_pr"
    convo += [{"role": "assistant", "content": None, "tool_calls": [tc]},
              {"role": "tool", "tool_call_id": tc["id"], "content": "open_pr not allowed. reason: not today"}]
    msg = step(model, convo, False, None)
    assert "not opened" in msg["content"] and "not today" in msg["content"]

    convo = [SYSTEM, FIX_TASK]
    step(model, convo, False, "shell", FAILING)
    step(model, convo, False, "read_file", (SAMPLE / "calc.py").read_text())
    step(model, convo, False, "write_file", "wrote calc.py")
    # tests still failing after the fix (a fork's workspace without it): read, fix again, then give up
    assert step(model, convo, False, "shell", FAILING) == {"command": "python3 -m unittest -q"}
    assert step(model, convo, False, "read_file", (SAMPLE / "calc.py").read_text()) == {"path": "calc.py"}
    assert step(model, convo, False, "write_file", "wrote calc.py")["path"] == "calc.py"
    step(model, convo, False, "shell", FAILING)
    assert "still fail" in step(model, convo, False, None)["content"]

    convo = [SYSTEM, FIX_TASK]
    step(model, convo, False, "shell", PASSING)
    assert "already pass" in step(model, convo, False, None)["content"]


def test_without_branch_line_pushes_head(model: Model) -> None:
    convo = [{"role": "system", "content": "You fix bugs."}, FIX_TASK]
    step(model, convo, False, "shell", FAILING)
    step(model, convo, False, "read_file", (SAMPLE / "calc.py").read_text())
    step(model, convo, False, "write_file", "wrote calc.py")
    assert step(model, convo, False, "shell", PASSING) == {"command": "python3 -m unittest -q"}
    reply = model.chat(body(convo))
    command = json.loads(reply["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])["command"]
    assert "checkout" not in command and command.endswith("git push origin HEAD")


def test_unknown_task_missing_tool_and_bad_branch(model: Model) -> None:
    reply = model.chat(body([{"role": "user", "content": "Write me a poem."}]))
    assert "scripted model" in reply["choices"][0]["message"]["content"]
    reply = model.chat({"model": "m", "messages": [FIX_TASK], "tools": TOOLS[1:]})
    msg = reply["choices"][0]["message"]
    assert "tool_calls" not in msg and "shell tool" in msg["content"]
    reply = model.chat(body([FIX_TASK], tool_choice="none"))
    assert "tool_calls" not in reply["choices"][0]["message"]
    reply = model.chat(body([{"role": "system", "content": "branch: ../x"}, FIX_TASK]))
    assert "not a valid" in reply["choices"][0]["message"]["content"]


def test_bad_requests(model: Model) -> None:
    convo = [SYSTEM, FIX_TASK]
    reply = model.chat(body(convo))
    tc = reply["choices"][0]["message"]["tool_calls"][0]
    cases: list[tuple[Any, int, str]] = [
        (body(convo + [{"role": "assistant", "content": None, "tool_calls": [tc]}]), 400, tc["id"]),
        (body(convo + [{"role": "tool", "tool_call_id": "nope", "content": "x"}]), 400, "unknown tool_call_id"),
        ({"model": "m", "messages": []}, 400, "non-empty"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
        ({"model": "m", "messages": [{"role": "system", "content": "x"}]}, 400, "no user message"),
        ({"messages": convo}, 400, "model"),
        ([1, 2], 400, "JSON object"),
    ]
    for req, status, words in cases:
        got, raw, _ = model.request("POST", "/v1/chat/completions", req)
        err = json.loads(raw)["error"]
        assert got == status and words in err["message"] and err["type"] == "invalid_request_error", (req, raw)
    assert model.request("POST", "/v1/chat/completions", raw=b"{oops")[0] == 400
    assert model.request("POST", "/v1/other", body(convo))[0] == 404
    assert model.request("GET", "/nothing")[0] == 404
    big = b'{"model": "m", "messages": [{"role": "user", "content": "' + b"x" * (9 * 1024 * 1024) + b'"}]}'
    assert model.request("POST", "/v1/chat/completions", raw=big)[0] == 413


def test_models_list_and_api_key(tmp_path: Path) -> None:
    m = start_model(tmp_path, "--api-key", "sk-local-123", "--model-name", "coder-x")
    try:
        assert m.request("GET", "/v1/models")[0] == 401
        status, raw, _ = m.request("GET", "/v1/models", headers={"Authorization": "Bearer sk-local-123"})
        assert status == 200 and [d["id"] for d in json.loads(raw)["data"]] == ["coder-x"]
        assert m.request("POST", "/v1/chat/completions", body([FIX_TASK]))[0] == 401
        status, raw, _ = m.request("POST", "/v1/chat/completions", body([FIX_TASK]),
                                   headers={"Authorization": "Bearer sk-local-123"})
        assert status == 200 and json.loads(raw)["model"] == "scripted-coder"
        assert "sk-local-123" not in m.server.log_text()
    finally:
        m.server.stop()
