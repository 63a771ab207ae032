"""The rebuno CLI against a real kernel: exec, approval and policy commands."""
import json
import os
import subprocess
import threading
import time

from conftest import BIN, Dispatch
from test_approvals import POLICY


def cli(k, *args, check=True, timeout=30):
    env = dict(os.environ, REBUNO_URL=k.url if k else "http://127.0.0.1:9")
    p = subprocess.run([BIN, *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def test_create_get_list_cancel(kernel):
    out = cli(kernel, "exec", "create", "hello", '{"name": "world"}', "--json").stdout
    ex = json.loads(out)
    assert ex["agent"] == "hello" and ex["input"] == {"name": "world"}
    text = cli(kernel, "exec", "create", "hello").stdout
    assert text.startswith("created ") and "(agent hello, pending)" in text
    got = cli(kernel, "exec", "get", ex["id"]).stdout
    assert ex["id"] in got and "pending" in got
    listing = cli(kernel, "exec", "list", "--agent", "hello").stdout
    assert ex["id"] in listing
    cli(kernel, "exec", "cancel", ex["id"], "--reason", "changed my mind")
    assert kernel.ok("GET", f"/v0/executions/{ex['id']}")["failure_reason"] == "changed my mind"
    p = cli(kernel, "exec", "cancel", ex["id"], check=False)
    assert p.returncode == 1 and "already cancelled" in p.stderr


def test_usage_errors_say_what_to_do(kernel):
    p = cli(kernel, "exec", "create", "hello", "{task: hi}", check=False)
    assert p.returncode == 2 and "not valid JSON" in p.stderr
    p = cli(kernel, "exec", "get", "0192f1a0-0000-7000-8000-000000000000", check=False)
    assert p.returncode == 1 and "no execution" in p.stderr
    p = cli(None, "exec", "list", check=False)
    assert p.returncode == 1 and "cannot reach the kernel" in p.stderr and "rebuno dev" in p.stderr


def test_watch_follows_to_completion(kernel):
    ex = kernel.create("hello", {})
    result = {}

    def watch():
        result["p"] = cli(kernel, "exec", "watch", ex["id"], check=False)

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.3)
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    d.finish(d.submit("greet", {"name": "world"})["step_id"], result="hi")
    d.complete({"greeting": "hi"})
    t.join(20)
    p = result["p"]
    assert p.returncode == 0, p.stderr
    for text in ("execution.created", "step.proposed", "greet", "step.succeeded", "execution.completed"):
        assert text in p.stdout, (text, p.stdout)
    # --json prints one event per line with gap-free seqs
    lines = cli(kernel, "exec", "events", ex["id"], "--json").stdout.strip().splitlines()
    assert [json.loads(l)["seq"] for l in lines] == list(range(1, len(lines) + 1))


def test_events_summarize_model_calls(kernel):
    """A model call's event shows the request's last message and what the model answered,
    not the start of a whole OpenAI request or response."""
    ex = kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    request = {"model": "m", "messages": [{"role": "system", "content": "x" * 500},
                                          {"role": "user", "content": "Fix the bug."}]}
    tool_call = {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": '{"command": "make"}'}}]}}]}
    d.finish(d.submit("m", request, kind="llm_call")["step_id"], result=tool_call)
    request["messages"].append({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    text = {"choices": [{"message": {"role": "assistant", "content": "All done."}}]}
    d.finish(d.submit("m", request, kind="llm_call")["step_id"], result=text)
    d.complete({})
    out = cli(kernel, "exec", "events", ex["id"]).stdout
    assert 'llm_call m  2 messages, last user: "Fix the bug."' in out, out
    assert 'llm_call m  -> shell({"command": "make"})' in out, out
    assert 'llm_call m  3 messages, last tool: "ok"' in out, out
    assert 'llm_call m  -> "All done."' in out, out
    assert "xxxxxxxx" not in out


def test_watch_exits_nonzero_on_failure(kernel):
    ex = kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    assert d.call("POST", "/fail", {"error": "agent_error: ValueError: boom"})[0] == 200
    p = cli(kernel, "exec", "watch", ex["id"], check=False)
    assert p.returncode == 1 and "boom" in p.stdout + p.stderr


def test_approve_and_deny_by_execution_id(make_kernel):
    k = make_kernel(POLICY, mode="server").start()
    for verb, expect in (("approve", "granted"), ("deny", "denied")):
        ex = k.create("coder", {})
        d = Dispatch(k, k.claim("coder", k.worker("coder")))
        dec = d.submit("open_pr", {"title": "x"}, idempotency="at_most_once")
        assert dec["decision"] == "blocked"
        ls = cli(k, "approval", "ls").stdout
        assert dec["approval_id"] in ls and "open_pr" in ls
        cli(k, "exec", verb, ex["id"], "--by", "alice", "--reason", "because")
        a = k.ok("GET", f"/v0/approvals/{dec['approval_id']}")
        assert a["status"] == expect and a["decided_by"] == "alice" and a["rationale"] == "because"
        p = cli(k, "exec", verb, ex["id"], check=False)
        assert p.returncode == 1 and "no pending approval" in p.stderr
        # The decision re-queued the execution; finish it so the next round claims its own.
        d2 = Dispatch(k, k.claim("coder", k.worker("coder")))
        assert d2.exec_id == ex["id"] and d2.complete("done")[0] == 200


def test_policy_check(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("default_action: deny\nrules:\n  - id: a\n    when: {target: shell}\n    then: {decision: allow}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("default_action: deny\nrules:\n  - id: a\n    when: {targett: shell}\n    then: {decision: allow}\n")
    p = subprocess.run([BIN, "policy", "check", str(good)], capture_output=True, text=True)
    assert p.returncode == 0 and "ok" in p.stdout
    p = subprocess.run([BIN, "policy", "check", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1 and f"{bad}:4:" in p.stderr and "targett" in p.stderr
    p = subprocess.run([BIN, "policy", "eval", str(good), "--target", "shell"], capture_output=True, text=True)
    assert p.returncode == 0 and "decision=allow rule=a" in p.stdout
