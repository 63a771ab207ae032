"""The E2B-document agent end to end (as root): the forge, the scripted model, `rebuno dev`
(kernel and sandboxd) and agent.py as real processes.

Checked: the session is derived from the execution id and its sandbox is found by metadata
through a recorded step; the sandbox is paused while open_pr waits for approval and after
the run; the branch reaches the forge through the egress proxy, the token nowhere inside;
the second turn of the session (session passed in the input) reuses the sandbox, branch,
conversation and pull request; an agent killed mid-run is re-dispatched after its lease,
replays what it recorded (find_sandbox and the write ran once) and finds the first
attempt's files.
"""
from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLE

import demo  # noqa: E402  (examples/coding-agent/demo.py, on the path by conftest)
import model as scripted  # noqa: E402
from stack_calls import run_in, running, sbx  # noqa: E402  (examples/coding-agent/tests)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root")


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[demo.Stack]:
    os.environ["SESSIONS_DIR"] = str(tmp_path / "sessions")  # the agent inherits it
    try:
        with running(demo.Stack(tmp_path / "demo", lease_seconds=getattr(request, "param", None),
                                agent_script=EXAMPLE / "agent.py",
                                config_file=EXAMPLE / "rebuno.yaml")) as s:
            yield s
    finally:
        os.environ.pop("SESSIONS_DIR", None)


def by_session(stack: demo.Stack, session: str) -> list[dict]:
    q = urllib.request.quote(json.dumps({"session": session}))
    st, out = sbx(stack, "GET", f"/sandboxes?metadata={q}")
    assert st == 200, out
    return out["sandboxes"]


def create(stack: demo.Stack, task: str, session: str | None = None) -> str:
    body = {"task": task} | ({"session": session} if session else {})
    return stack.cli("exec", "create", "e2b", json.dumps(body), echo=False).split()[1]


def steps_named(story: demo.Story, eid: str, target: str) -> list:
    return [s for s in story.client.steps(eid) if s.target == target]


def test_two_turns_approval_and_pause(stack: demo.Stack) -> None:
    story = demo.Story(stack, echo=False)
    first = create(stack, demo.TASK_FIX)
    session = first[-12:]
    story.pending_approval(first)
    [box] = by_session(stack, session)
    assert box["state"] == "paused"          # paused while the approval is pending
    assert box["on_timeout"] == "pause" and box["timeout_ms"] == 600_000
    branch = f"rebuno/{session}"
    assert stack.forge_api(f"/branches/{branch}")["commit"]["message"] == scripted.COMMIT_FIX
    assert stack.forge_api("/pulls") == []
    ex1 = story.approve_and_finish(first)
    assert "pull request #1 opened" in ex1.output["answer"]
    assert ex1.output == ex1.output | {"session": session, "sandbox": box["id"], "branch": branch}
    assert sbx(stack, "GET", f"/sandboxes/{box['id']}")[1]["state"] == "paused"
    assert [s.status for s in steps_named(story, first, "find_sandbox")] == ["succeeded"]
    assert [s.status for s in steps_named(story, first, "save_conversation")] == ["succeeded"]

    # the token never entered the sandbox
    seen = run_in(stack, box["id"], "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; git config -l; "
                                    "grep -rIl . /root /etc /tmp /home 2>/dev/null | xargs cat 2>/dev/null")
    assert stack.token not in seen and "x-access-token" not in seen

    # turn 2, the session passed in: same sandbox and branch, the conversation continued,
    # the same pull request updated
    second = create(stack, demo.TASK_EDGE, session)
    ex2 = story.approve_and_finish(second)
    assert "pull request #1 updated" in ex2.output["answer"]
    assert (ex2.output["sandbox"], ex2.output["branch"]) == (box["id"], branch)
    assert len(by_session(stack, session)) == 1
    assert stack.forge_api(f"/branches/{branch}")["commit"]["message"] == scripted.COMMIT_EDGE
    [pr] = stack.forge_api("/pulls")
    assert pr["head"] == branch and pr["body"] == scripted.PR_BODY_EDGE
    saved = json.loads((Path(os.environ["SESSIONS_DIR"]) / f"{session}.json").read_text())
    assert [m["content"] for m in saved if m["role"] == "user"] == [demo.TASK_FIX, demo.TASK_EDGE]

    # the session's sandbox deleted: the next execution's find_sandbox (a new step) makes
    # a fresh one, found by metadata from then on
    assert sbx(stack, "DELETE", f"/sandboxes/{box['id']}")[0] == 204
    third = create(stack, "What can you do?", session)
    ex3 = story.wait_for(third, ("completed",))
    [again] = by_session(stack, session)
    assert ex3.output["sandbox"] == again["id"] != box["id"]


@pytest.mark.parametrize("stack", [3], indirect=True)   # a 3-second lease
def test_killed_agent_continues_after_the_lease_expires(stack: demo.Stack) -> None:
    story = demo.Story(stack, echo=False)
    eid = create(stack, demo.TASK_FIX, "crash")
    deadline = time.monotonic() + 90
    while not any(s.status == "succeeded" for s in steps_named(story, eid, "write_file")):
        assert time.monotonic() < deadline, stack.procs["agent"].tail()
        time.sleep(0.02)
    stack.kill_agent()
    [box] = by_session(stack, "crash")
    assert scripted.FIXED in run_in(stack, box["id"], "cat calc.py")
    stack.start_agent()
    ex = story.approve_and_finish(eid)
    assert "pull request #1 opened" in ex.output["answer"] and ex.output["sandbox"] == box["id"]
    events = story.client.events(eid)
    assert any(e.type == "dispatch.claimed" and e.payload.get("attempt") == 2 for e in events)
    # replayed, not run again: one sandbox found, one write
    assert len(steps_named(story, eid, "find_sandbox")) == 1
    [write] = steps_named(story, eid, "write_file")
    executing = [e for e in events if e.type == "step.executing" and e.payload.get("step_id") == write.step_id]
    assert len(executing) == 1
    assert len(by_session(stack, "crash")) == 1
