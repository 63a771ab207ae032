"""The rebuno CLI against a real kernel: exec, approval and policy commands."""
import datetime
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
    assert ex["agent_id"] == "hello" and ex["input"] == {"name": "world"}
    text = cli(kernel, "exec", "create", "hello").stdout
    assert text.startswith("created ") and "(agent hello, pending)" in text
    got = cli(kernel, "exec", "get", ex["id"]).stdout
    assert ex["id"] in got and "pending" in got
    listing = cli(kernel, "exec", "ls", "--agent", "hello").stdout
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
    assert [json.loads(l)["event_seq"] for l in lines] == list(range(1, len(lines) + 1))


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
    assert d.call("POST", "/fail", {"error": "agent_error: ValueError: boom"})[0] == 204
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
        assert d2.exec_id == ex["id"] and d2.complete("done")[0] == 204


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


UNKNOWN = "0192f1a0-0000-7000-8000-000000000000"


def finished_execution(k, steps=2):
    """A completed execution with a few steps; returns (id, last_seq)."""
    ex = k.create("hello", {"n": steps})
    d = Dispatch(k, k.claim("hello", k.worker("hello")))
    for i in range(steps):
        d.finish(d.submit("tool", {"i": i})["step_id"], result=i)
    assert d.complete({"done": True})[0] == 204
    return ex["id"], k.ok("GET", f"/v0/executions/{ex['id']}")["last_seq"]


def seqs(text):
    """The seq column of `exec events` / `exec watch` text lines."""
    return [int(line.split()[0]) for line in text.splitlines() if line.strip()[:1].isdigit()]


def test_create_with_deadline(kernel):
    ex = json.loads(cli(kernel, "exec", "create", "hello", "{}", "--deadline", "90", "--json").stdout)
    created = datetime.datetime.strptime(ex["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
    deadline = datetime.datetime.strptime(ex["deadline_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
    assert deadline - created == datetime.timedelta(seconds=90)
    assert kernel.ok("GET", f"/v0/executions/{ex['id']}")["deadline_at"] == ex["deadline_at"]
    assert ex["deadline_at"] in cli(kernel, "exec", "get", ex["id"]).stdout
    # Without --deadline there is none.
    assert json.loads(cli(kernel, "exec", "create", "hello", "--json").stdout).get("deadline_at") is None
    before = kernel.ok("GET", "/v0/executions?limit=200")["executions"]
    for bad in ("0", "soon", "31536001"):
        p = cli(kernel, "exec", "create", "hello", "--deadline", bad, check=False)
        assert p.returncode == 2 and "--deadline must be" in p.stderr, p.stderr
    assert kernel.ok("GET", "/v0/executions?limit=200")["executions"] == before


def test_list_status_and_cursor(kernel):
    ids = [kernel.create("pager", {"i": i})["id"] for i in range(3)]
    kernel.create("other", {})
    kernel.ok("POST", f"/v0/executions/{ids[1]}/cancel", {})
    out = cli(kernel, "exec", "ls", "--agent", "pager", "--status", "cancelled").stdout
    assert ids[1] in out and ids[0] not in out and ids[2] not in out, out
    page = json.loads(cli(kernel, "exec", "ls", "--status", "pending", "--agent", "pager", "--json").stdout)
    assert [e["id"] for e in page["executions"]] == [ids[2], ids[0]]
    assert "no executions" in cli(kernel, "exec", "list", "--agent", "pager", "--status", "failed").stdout
    # Pages: newest first, the last line says how to get the next one, --cursor gets it.
    first = cli(kernel, "exec", "list", "--agent", "pager", "--limit", "2").stdout.splitlines()
    assert ids[2] in first[1] and ids[1] in first[2], first
    assert first[-1].startswith("next: --cursor "), first
    cursor = first[-1].split()[-1]
    second = cli(kernel, "exec", "list", "--agent", "pager", "--limit", "2", "--cursor", cursor).stdout
    assert ids[0] in second and ids[1] not in second and ids[2] not in second, second
    assert "next:" not in second
    p = cli(kernel, "exec", "list", "--status", "done", check=False)
    assert p.returncode == 2 and "--status must be one of" in p.stderr
    p = cli(kernel, "exec", "list", "--cursor", "xyz", check=False)
    assert p.returncode == 1 and "cursor" in p.stderr


def test_events_after_and_limit(kernel):
    ex_id, last = finished_execution(kernel)
    out = cli(kernel, "exec", "events", ex_id, "--after", "2", "--limit", "3").stdout
    assert seqs(out) == [3, 4, 5], out
    assert out.splitlines()[-1] == "next: --after 5", out
    rest = cli(kernel, "exec", "events", ex_id, "--after", "5").stdout
    assert seqs(rest) == list(range(6, last + 1)) and "next:" not in rest, rest
    lines = cli(kernel, "exec", "events", ex_id, "--json", "--after", "1", "--limit", "2").stdout.splitlines()
    assert [json.loads(line)["event_seq"] for line in lines] == [2, 3]
    assert "no events" in cli(kernel, "exec", "events", ex_id, "--after", str(last)).stdout
    for opt, bad in (("--after", "-1"), ("--limit", "0"), ("--limit", "1001")):
        p = cli(kernel, "exec", "events", ex_id, opt, bad, check=False)
        assert p.returncode == 2 and f"{opt} must be" in p.stderr, p.stderr


def test_watch_json_and_after_on_a_finished_execution(kernel):
    ex_id, last = finished_execution(kernel)
    # --json: the events after --after as NDJSON, nothing else; exit 0 for completed.
    p = cli(kernel, "exec", "watch", ex_id, "--json", "--after", "3", timeout=60)
    events = [json.loads(line) for line in p.stdout.splitlines()]
    assert [e["event_seq"] for e in events] == list(range(4, last + 1))
    assert events[-1]["type"] == "execution.completed" and events[-1]["execution_id"] == ex_id
    # Text with --after: only later events, then the outcome.
    p = cli(kernel, "exec", "watch", ex_id, "--after", str(last - 1), timeout=60)
    assert seqs(p.stdout) == [last] and "execution.completed" in p.stdout
    assert f"execution {ex_id} completed" in p.stdout
    # Nothing after --after: just the outcome (and with --json, nothing at all).
    p = cli(kernel, "exec", "watch", ex_id, "--after", str(last), timeout=60)
    assert seqs(p.stdout) == [] and f"execution {ex_id} completed" in p.stdout, p.stdout
    p = cli(kernel, "exec", "watch", ex_id, "--after", str(last), "--json", timeout=60)
    assert p.stdout == ""
    # A failed execution: exit 1 with --json too.
    ex = kernel.create("hello", {})
    d = Dispatch(kernel, kernel.claim("hello", kernel.worker("hello")))
    assert d.call("POST", "/fail", {"error": "agent_error: boom"})[0] == 204
    p = cli(kernel, "exec", "watch", ex["id"], "--json", check=False, timeout=60)
    assert p.returncode == 1
    assert json.loads(p.stdout.splitlines()[-1])["type"] == "execution.failed"


def test_approval_get_approve_deny(make_kernel):
    k = make_kernel(POLICY, mode="server").start()
    blocked = []
    for _ in range(2):
        ex = k.create("coder", {})
        d = Dispatch(k, k.claim("coder", k.worker("coder")))
        dec = d.submit("open_pr", {"title": "x"}, idempotency="at_most_once")
        assert dec["decision"] == "blocked"
        blocked.append((ex["id"], dec["approval_id"]))
    (ex1, a1), (ex2, a2) = blocked
    text = cli(k, "approval", "get", a1).stdout
    for want in (f"id:          {a1}", f"execution:   {ex1}", "call:        tool_call open_pr",
                 "status:      pending", "rule:        open-pr", f"grant with: rebuno approval grant {a1}",
                 f"deny with: rebuno approval deny {a1}"):
        assert want in text, (want, text)
    got = json.loads(cli(k, "approval", "get", a1, "--json").stdout)
    assert got["id"] == a1 and got["status"] == "pending" and got["args"] == {"title": "x"}
    out = cli(k, "approval", "approve", a1, "--by", "alice", "--reason", "looks fine").stdout
    assert out.startswith(f"granted {a1} (execution {ex1}, tool_call open_pr) by alice"), out
    decided = cli(k, "approval", "get", a1).stdout
    assert "status:      granted" in decided and "decided by:  alice" in decided
    assert "rationale:   looks fine" in decided and "approve with" not in decided
    done = json.loads(cli(k, "approval", "deny", a2, "--by", "bob", "--json").stdout)
    assert done["id"] == a2 and done["status"] == "denied" and done["decided_by"] == "bob"
    assert k.ok("GET", f"/v0/approvals/{a2}")["status"] == "denied"
    # A decided approval is not decided again.
    for verb in ("approve", "deny"):
        p = cli(k, "approval", verb, a1, "--by", "carol", check=False)
        assert p.returncode == 1 and f"approval {a1} is already granted by alice" in p.stderr, p.stderr
    assert k.ok("GET", f"/v0/approvals/{a1}")["decided_by"] == "alice"
    p = cli(k, "approval", "get", check=False)
    assert p.returncode == 2 and "missing ID" in p.stderr


def test_not_found_errors_say_what_to_do(make_kernel):
    k = make_kernel(POLICY, mode="server").start()
    exec_hint = f'error: no execution with id "{UNKNOWN}"; list executions with \'rebuno exec ls\''
    for args in (("exec", "get", UNKNOWN), ("exec", "events", UNKNOWN), ("exec", "watch", UNKNOWN),
                 ("exec", "cancel", UNKNOWN), ("exec", "get", "not-an-id")):
        p = cli(k, *args, check=False, timeout=60)
        want = exec_hint.replace(UNKNOWN, args[2])
        assert p.returncode == 1 and want in p.stderr, (args, p.stderr)
    p = cli(k, "approval", "get", UNKNOWN, check=False)
    assert p.returncode == 1, p.stderr
    assert (f'error: no approval with id "{UNKNOWN}"; list approvals with '
            "'rebuno approval ls --status all'") in p.stderr, p.stderr
    # Other errors are left as the kernel wrote them.
    p = cli(k, "exec", "create", "nobody", check=False)
    assert p.returncode == 1 and "add it under agents:" in p.stderr and "rebuno exec ls" not in p.stderr
