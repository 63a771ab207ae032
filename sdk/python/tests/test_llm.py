"""Model calls as llm_call steps: recorded once, replayed after a re-dispatch, plain and
streamed (SSE chunks assembled into one completion), through ChatClient and through
rebuno.http_client() (httpx, when it is installed)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from typing import Any

import pytest
from conftest import PYTHON, SDK, wait_status

CONFIG = """
agents:
  - name: llm
    lease_timeout_seconds: 1
    policy: |
      default_action: deny
      rules:
        - id: no-banned-model
          when: {target: banned-model}
          then: {decision: deny, reason: that model is not allowed}
        - id: allow-llm
          when: {step_kind: llm_call}
          then: {decision: allow}
        - id: gate-deploy
          when: {target: deploy}
          then: {decision: require_approval, reason: deploys need a person}
"""


def scripted(body: dict[str, Any]) -> dict[str, Any]:
    """First ask for `deploy`, then answer with what the tool said."""
    tool_msgs = [m for m in body["messages"] if m.get("role") == "tool"]
    if not tool_msgs:
        return {"tool_calls": [{"id": "call_1", "type": "function",
                                "function": {"name": "deploy", "arguments": json.dumps({"env": "prod"})}}]}
    return {"content": f"done: {tool_msgs[-1]['content']}"}


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_model_call_is_recorded_once_and_replayed_after_redispatch(make_kernel, start_agent, llm_server,
                                                                   tmp_path, stream):
    from rebuno import SyncClient

    server = llm_server(scripted)
    k = make_kernel(CONFIG)
    work = tmp_path / "work"
    work.mkdir()
    start_agent("llm_agent.py", k, env={"WORKDIR": str(work), "LLM_BASE_URL": server.base_url,
                                        "LLM_MODEL": "scripted-1"})
    with SyncClient(k.url) as c:
        ex = c.create("llm", {"task": "ship it", "stream": stream})
        wait_status(c, ex.id, "blocked")  # the model asked for deploy, which needs approval
        assert len(server.calls) == 1
        k.cli("exec", "approve", ex.id, "--by", "alice")
        done = wait_status(c, ex.id, timeout=15)
        assert done.status == "completed", done
        assert done.output["answer"] == "done: deployed to prod"
        assert done.output["messages"] == 4
        # the first request was answered from the record on the second dispatch
        assert len(server.calls) == 2
        assert [len(b["messages"]) for b in server.calls] == [1, 3]
        assert all(bool(b.get("stream")) == stream for b in server.calls)
        assert server.calls[0]["tools"][0]["function"] == {
            "name": "deploy", "description": "Deploy the service.",
            "parameters": {"type": "object", "properties": {
                "env": {"type": "string", "description": "Where to deploy (prod or staging)."}},
                "required": ["env"]}}
        steps = c.steps(ex.id)
        assert [(s.kind, s.target) for s in steps] == [("llm_call", "scripted-1"), ("tool_call", "deploy"),
                                                       ("llm_call", "scripted-1")]
        first = steps[0]
        assert "stream" not in first.args and first.args["messages"] == [{"role": "user", "content": "ship it"}]
        msg = first.result["choices"][0]["message"]
        assert msg["tool_calls"] == [{"id": "call_1", "type": "function",
                                      "function": {"name": "deploy", "arguments": '{"env": "prod"}'}}]
        assert first.result["choices"][0]["finish_reason"] == "tool_calls"
        assert first.result["usage"]["total_tokens"] == 15
        assert first.result["object"] == "chat.completion"
        if stream:
            assert done.output["streamed_deltas"] >= 5  # "done: deployed to prod" in 4-char chunks
        assert (work / "effects.log").read_text().split()[0] == "deploy"


def test_chat_client_outside_an_execution_and_errors(llm_server):
    from rebuno import ChatClient, LLMError

    answers = iter([{"content": "hello there, friend"}, {"_status": 500}, {"_status": 500},
                    {"content": "recovered"}, {"_status": 400, "content": "bad request body"}])
    server = llm_server(lambda body: next(answers))

    async def main() -> None:
        llm = ChatClient(server.base_url, model="m", max_retries=2)
        seen: list[str] = []
        r = await llm.chat([{"role": "user", "content": "hi"}], stream=True, on_delta=seen.append)
        assert r["choices"][0]["message"]["content"] == "hello there, friend"
        assert "".join(seen) == "hello there, friend" and len(seen) > 1
        r = await llm.chat([{"role": "user", "content": "again"}], temperature=0)
        assert r["choices"][0]["message"]["content"] == "recovered"  # two 500s retried
        assert server.calls[-1]["temperature"] == 0
        with pytest.raises(LLMError) as ei:
            await llm.chat([{"role": "user", "content": "x"}])
        assert ei.value.status_code == 400 and "bad request body" in str(ei.value)
        await llm.aclose()

    asyncio.run(main())
    assert len(server.calls) == 5


def test_assembler_joins_content_and_tool_call_deltas():
    from rebuno import CompletionAssembler

    a = CompletionAssembler()
    chunks = [
        {"id": "c1", "created": 1, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant"}}]},
        {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
        {"choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "id": "t0", "type": "function", "function": {"name": "sh", "arguments": '{"c'}},
            {"index": 1, "id": "t1", "type": "function", "function": {"name": "ls", "arguments": ""}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'md": 1}'}}]}}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"total_tokens": 3}},
    ]
    added = [a.add(ch) for ch in chunks]
    assert added[1:3] == ["Hel", "lo"]
    out = a.result()
    assert out == {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "usage": {"total_tokens": 3},
                   "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                       "role": "assistant", "content": "Hello", "tool_calls": [
                           {"id": "t0", "type": "function", "function": {"name": "sh", "arguments": '{"cmd": 1}'}},
                           {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": ""}}]}}]}


def test_request_identity_drops_streaming_flags():
    from rebuno.llm import request_identity

    assert request_identity({"model": "m", "messages": [], "stream": True, "stream_options": {"x": 1},
                             "temperature": 0}) == {"model": "m", "messages": [], "temperature": 0}




def _have_httpx() -> bool:
    try:
        import httpx  # noqa: F401
    except ImportError:
        return False
    return True


needs_httpx = pytest.mark.skipif(not _have_httpx(), reason="httpx is not installed (Debian: python3-httpx)")


@needs_httpx
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_http_client_calls_are_recorded_once_and_replayed_after_redispatch(make_kernel, start_agent,
                                                                         llm_server, tmp_path, stream):
    from rebuno import SyncClient

    server = llm_server(scripted)
    k = make_kernel(CONFIG)
    work = tmp_path / "work"
    work.mkdir()
    start_agent("httpx_agent.py", k, env={"WORKDIR": str(work), "LLM_BASE_URL": server.base_url,
                                          "LLM_MODEL": "scripted-1"})
    with SyncClient(k.url) as c:
        ex = c.create("llm", {"task": "ship it", "stream": stream})
        wait_status(c, ex.id, "blocked")
        assert len(server.calls) == 1  # the denied model was never called
        k.cli("exec", "approve", ex.id, "--by", "alice")
        done = wait_status(c, ex.id, timeout=15)
        assert done.status == "completed", done
        out = done.output
        assert out["answer"] == "done: deployed to prod" and out["messages"] == 4
        assert len(server.calls) == 2  # the first request was replayed on the second dispatch
        assert [len(b["messages"]) for b in server.calls] == [1, 3]
        ctype = "text/event-stream" if stream else "application/json"
        assert [m["status"] for m in out["seen"]] == [200, 200]
        assert [m["type"] for m in out["seen"]] == [ctype, ctype]
        if stream:
            # the replayed stream was parsed chunk by chunk like the live one
            assert all(m["chunks"] >= 5 for m in out["seen"])
        refused = out["refused"]
        assert refused["status"] == 403 and refused["error"]["type"] == "rebuno_refusal"
        assert refused["error"]["message"] == "rebuno_refusal: denied reason=that model is not allowed"
        steps = c.steps(ex.id)
        assert [(s.kind, s.target, s.status) for s in steps] == [
            ("llm_call", "banned-model", "denied"), ("llm_call", "scripted-1", "succeeded"),
            ("tool_call", "deploy", "succeeded"), ("llm_call", "scripted-1", "succeeded")]
        first = steps[1]
        assert first.args["model"] == "scripted-1" and bool(first.args.get("stream")) == stream
        assert first.args["messages"] == [{"role": "user", "content": "ship it"}]
        assert set(first.result) == {"status", "headers", "body"}
        assert first.result["status"] == 200 and first.result["headers"] == {"content-type": ctype}
        if stream:
            assert first.result["body"].rstrip().endswith("data: [DONE]")
            assert first.result["body"].count("data: ") >= 5
        else:
            body = json.loads(first.result["body"])
            assert body["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "deploy"


@needs_httpx
def test_http_client_outside_an_execution_passes_through(llm_server):
    import httpx

    from rebuno import RebunoTransport, http_client

    server = llm_server(lambda body: {"content": "plain"})

    async def main() -> None:
        async with http_client(base_url=server.base_url) as http:
            assert isinstance(http, httpx.AsyncClient)
            r = await http.post("/chat/completions", json={"model": "m", "messages": []})
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "plain"
        inner = httpx.AsyncHTTPTransport()
        async with httpx.AsyncClient(transport=RebunoTransport(inner, model_field="engine"),
                                     base_url=server.base_url) as http:
            r = await http.post("/chat/completions", json={"engine": "e", "messages": []})
            assert r.status_code == 200
        with pytest.raises(TypeError):
            http_client(proxies="http://127.0.0.1:1")

    asyncio.run(main())
    assert len(server.calls) == 2


def test_package_imports_without_httpx_and_says_what_to_do(tmp_path):
    """`import rebuno` never needs httpx; http_client()/RebunoTransport say how to get it."""
    code = """
import sys
sys.modules["httpx"] = None          # as if it were not installed
import rebuno
from rebuno import Agent, ChatClient, tool
for use in (lambda: rebuno.http_client(), lambda: rebuno.RebunoTransport):
    try:
        use()
    except ImportError as e:
        print("ImportError:", e)
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(SDK)
    p = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=30, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("ImportError:") and "rebuno.ChatClient" in line
        assert "apt-get install python3-httpx" in line
