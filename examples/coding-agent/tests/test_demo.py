"""The demo end to end: the forge, the scripted model, ``rebuno dev`` (kernel and sandboxd,
as root) and ``agent.py`` as real processes, driven the way ``demo.py`` drives them.

What is checked, beyond "it completes": the sandbox is stopped while the run waits for
approval and after it; the branch reaches the forge through the egress proxy while the
token is nowhere in the sandbox; the session's second turn reuses the sandbox, branch and
pull request; a fork between checkpoints gets a new sandbox restored from the newest
earlier checkpoint and a branch of its own; a missing sandbox fails the execution; and an
agent killed mid-run is re-dispatched after its lease expires, replays what it recorded
(the write is not done again) and finds the files the first attempt changed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import model as scripted
import pytest
from conftest import EXAMPLE

sys.path.insert(0, str(EXAMPLE))
import demo  # noqa: E402
from stack_calls import run_in, running, sbx  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes need root")


@pytest.fixture
def stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[demo.Stack]:
    with running(demo.Stack(tmp_path / "demo", lease_seconds=getattr(request, "param", None))) as s:
        yield s


def state_of(stack: demo.Stack, sandbox: str, settles_to: str | None = None, timeout: float = 30.0) -> str:
    """The sandbox's state; with settles_to, once it is that (or timeout): the agent stops
    its sandbox as its turn ends, which may finish just after the kernel shows the result."""
    deadline = time.monotonic() + timeout
    while True:
        st, out = sbx(stack, "GET", f"/sandboxes/{sandbox}")
        assert st == 200, out
        if settles_to is None or out["state"] == settles_to or time.monotonic() > deadline:
            return out["state"]
        time.sleep(0.1)


def binding(story: demo.Story, eid: str) -> dict[str, Any]:
    [ws] = [r for r in story.client.resources(eid) if r.key == "workspace"]
    return ws.binding


def test_the_story(stack: demo.Stack) -> None:
    story = demo.Story(stack, echo=False)

    # turn 1: blocked on open_pr, with the sandbox stopped and the branch pushed
    first = story.create(demo.TASK_FIX, "fix-tests")
    story.pending_approval(first)
    b1 = binding(story, first)
    assert state_of(stack, b1["sandbox"], settles_to="stopped") == "stopped"
    branch = stack.forge_api(f"/branches/{b1['branch']}")
    assert branch["commit"]["message"] == scripted.COMMIT_FIX
    assert stack.forge_api("/pulls") == []          # open_pr has not run
    ex1 = story.approve_and_finish(first)
    assert "pull request #1 opened" in ex1.output["answer"]
    assert (ex1.output["sandbox"], ex1.output["branch"]) == (b1["sandbox"], b1["branch"])
    assert state_of(stack, b1["sandbox"], settles_to="stopped") == "stopped"
    [pr] = stack.forge_api("/pulls")
    assert pr["head"] == b1["branch"] and pr["base"] == "main"

    # the token never entered the sandbox: not in its environment, files or git config
    seen = run_in(stack, b1["sandbox"], "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'; git config -l; "
                                         "grep -rIl . /root /etc /tmp /home 2>/dev/null | xargs cat 2>/dev/null")
    assert "x-access-token" not in seen and stack.token not in seen
    assert "github.local" in run_in(stack, b1["sandbox"], "git remote -v")

    # turn 2 of the session: same sandbox and branch, the same pull request updated. The
    # forge token is rotated first: reopening the sandbox applies the one the agent holds now
    old_token = stack.token
    stack.rotate_token()
    stack.token = old_token
    with pytest.raises(urllib.error.HTTPError) as refused:
        stack.forge_api("/pulls")
    assert refused.value.code == 401
    stack.token = stack.token_file.read_text().strip()
    second = story.create(demo.TASK_EDGE, "fix-tests")
    ex2 = story.approve_and_finish(second)
    assert "pull request #1 updated" in ex2.output["answer"]
    assert (ex2.output["sandbox"], ex2.output["branch"]) == (b1["sandbox"], b1["branch"])
    [pr] = stack.forge_api("/pulls")
    assert pr["body"] == scripted.PR_BODY_EDGE
    assert stack.forge_api(f"/branches/{b1['branch']}")["commit"]["message"] == scripted.COMMIT_EDGE

    # a fork between two checkpoints: a new sandbox from the newest earlier checkpoint
    seq, cp = story.fork_point(first)
    fork = story.client.fork(first, seq, session="fix-tests-fork")
    restored = fork.restoration["workspace"]
    assert restored["checkpoint_ref"] == cp["checkpoint_ref"] and not restored["covered"]
    exf = story.approve_and_finish(fork.id)
    bf = binding(story, fork.id)
    assert bf["sandbox"] != b1["sandbox"] and bf["branch"] != b1["branch"]
    assert (exf.output["sandbox"], exf.output["branch"]) == (bf["sandbox"], bf["branch"])
    assert "pull request #2 opened" in exf.output["answer"]
    assert stack.forge_api(f"/branches/{bf['branch']}")["commit"]["message"] == scripted.COMMIT_FIX
    # the fork's sandbox holds the fix (it was in the checkpoint), not the second turn's test
    calc = run_in(stack, bf["sandbox"], "cat calc.py; git log --format=%s")
    assert scripted.FIXED in calc and scripted.COMMIT_EDGE not in calc
    assert scripted.EDGE_TEST_NAME not in run_in(stack, bf["sandbox"], "cat test_calc.py")
    # the first session's sandbox is untouched by the fork
    assert scripted.EDGE_TEST_NAME in run_in(stack, b1["sandbox"], "cat test_calc.py")

    # a fork whose checkpoint is gone fails instead of starting from a fresh checkout
    assert sbx(stack, "DELETE", f"/snapshots/{cp['checkpoint_ref']}")[0] == 204
    lost = story.client.fork(first, seq, session="fix-tests-fork-2")
    exl = story.wait_for(lost.id, ("failed",))
    assert "resource_unavailable" in exl.failure_reason and cp["checkpoint_ref"] in exl.failure_reason, \
        exl.failure_reason

    # a session whose sandbox is gone fails instead of starting over in an empty one
    assert sbx(stack, "DELETE", f"/sandboxes/{b1['sandbox']}")[0] == 204
    third = story.create("Fix anything else that fails.", "fix-tests")
    ex3 = story.wait_for(third, ("failed",))
    assert ex3.failure_reason.startswith("resource_unavailable"), ex3.failure_reason
    assert b1["sandbox"] in ex3.failure_reason


@pytest.mark.parametrize("stack", [3], indirect=True)   # a 3-second lease
def test_killed_agent_continues_after_the_lease_expires(stack: demo.Stack) -> None:
    story = demo.Story(stack, echo=False)
    eid = story.create(demo.TASK_FIX, "crash")

    def step_done(target: str) -> bool:
        return any(s.target == target and s.status == "succeeded" for s in story.client.steps(eid))

    deadline = time.monotonic() + 60
    while not step_done("write_file"):
        assert time.monotonic() < deadline, stack.procs["agent"].tail()
        time.sleep(0.02)
    stack.kill_agent()
    killed_at = story.client.get(eid).last_seq
    b = binding(story, eid)
    # the first attempt's change is in the sandbox while no agent runs
    assert scripted.FIXED in run_in(stack, b["sandbox"], "cat calc.py")
    assert story.client.get(eid).status == "running"

    stack.start_agent()
    ex = story.approve_and_finish(eid)
    assert "pull request #1 opened" in ex.output["answer"]
    assert binding(story, eid) == b and ex.output["sandbox"] == b["sandbox"]

    events = story.client.events(eid)
    claims = [e for e in events if e.type == "dispatch.claimed"]
    assert any(e.payload.get("attempt") == 2 for e in claims), [e.payload for e in claims]
    assert any(e.type == "dispatch.expired" for e in events if e.seq > killed_at), \
        [e.type for e in events if e.seq > killed_at]
    # recorded steps replayed: the write and the model calls before it ran once
    steps = story.client.steps(eid)
    write = [s for s in steps if s.target == "write_file"]
    assert len(write) == 1
    executing = [e for e in events if e.type == "step.executing" and e.payload.get("step_id") == write[0].step_id]
    assert len(executing) == 1, executing
    assert len([s for s in steps if s.kind == "llm_call"]) == 7
    assert stack.forge_api(f"/branches/{b['branch']}")["commit"]["message"] == scripted.COMMIT_FIX


def test_demo_script(tmp_path: Path) -> None:
    """``demo.py --crash`` itself (what ``make demo`` runs, plus the re-dispatch), as a
    newcomer would see it."""
    out = subprocess.run([sys.executable, str(EXAMPLE / "demo.py"), "--no-wait", "--crash",
                          "--dir", str(tmp_path / "d")],
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    for expected in ("$ rebuno exec create coding-agent", "approval.requested", "$ rebuno exec approve",
                     "pull request #1 opened", "pull request #1 updated", "$ rebuno exec fork",
                     "pull request #2 opened", "was restored from checkpoint", "Where to look",
                     "agent.py killed (SIGKILL)", "dispatch.expired", "dispatch.claimed    attempt 2"):
        assert expected in text, f"{expected!r} missing from:\n{text[-4000:]}"
    assert text.count("completed\noutput:") == 3
