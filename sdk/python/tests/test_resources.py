"""Resources with checkpoints, sessions and forks against the real kernel, with a real
driver that needs no sandbox (rebuno.testing.DirectoryWorkspace: a directory per
workspace, a directory copy per checkpoint) and real worker processes
(tests/agents/workspace.py)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for, wait_status

CONFIG = """
agents:
  - name: ws
    lease_timeout_seconds: 1
  - name: wsgate
    lease_timeout_seconds: 1
    policy: |
      default_action: allow
      rules:
        - id: gate-pr
          when: {target: open_pr}
          then: {decision: require_approval, reason: opening a pull request needs approval}
"""


# --- helpers ---------------------------------------------------------------------------

def start_ws(make_kernel, start_agent, tmp_path: Path) -> tuple[Any, Path, Any]:
    k = make_kernel(CONFIG)
    work = tmp_path / "work"
    work.mkdir()
    agent = start_agent("workspace.py", k, env={"WORKDIR": str(work)})
    return k, work, agent


def effects(work: Path) -> list[str]:
    p = work / "effects.log"
    return [line.split()[0] for line in p.read_text().splitlines()] if p.exists() else []


def snapshot(work: Path, ref: str) -> list[str]:
    """The files in a checkpoint's snapshot directory."""
    d = work / "wsroot" / "snapshots" / ref
    assert d.is_dir(), f"no snapshot {ref}"
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def workspace_files(work: Path, name: str) -> list[str]:
    d = work / "wsroot" / "workspaces" / name
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())


def timeline(c: Any, eid: str) -> list[tuple[Any, ...]]:
    """The resource events, settled steps, claims and the end of an execution, in order:
    ``("ok", target)``, ``("cp", generation, ref)``, ``("cp_failed", generation, error)``,
    ``("bound", binding)``, ``("registered", key)``, ``("claimed",)``, ``("end", type)``."""
    out: list[tuple[Any, ...]] = []
    for e in c.events(eid, limit=1000):
        p = e.payload
        if e.type == "step.succeeded":
            out.append(("ok", p["target"]))
        elif e.type == "resource.checkpointed":
            out.append(("cp", p["generation"], p["checkpoint_ref"]))
        elif e.type == "resource.checkpoint_failed":
            out.append(("cp_failed", p["generation"], p["error"]))
        elif e.type == "resource.bound":
            out.append(("bound", p["binding"]))
        elif e.type == "resource.registered":
            out.append(("registered", p["key"]))
        elif e.type == "dispatch.claimed":
            out.append(("claimed",))
        elif e.type in ("execution.completed", "execution.failed"):
            out.append(("end", e.type))
    return out


def shape(tl: list[tuple[Any, ...]]) -> list[str]:
    """A timeline without ids: ``ok:write_file``, ``cp``, ``bound``..."""
    return [t[0] if t[0] in ("cp", "bound", "registered", "claimed") else
            f"{t[0]}:{t[1]}" for t in tl]


def refs(tl: list[tuple[Any, ...]]) -> list[str]:
    return [t[2] for t in tl if t[0] == "cp"]


def seq_of(c: Any, eid: str, etype: str, target: str, nth: int = 0) -> int:
    seqs = [e.seq for e in c.events(eid, limit=1000) if e.type == etype and e.payload.get("target") == target]
    return seqs[nth]


# --- checkpoint cadence ------------------------------------------------------------------

def test_baseline_every_n_and_completion_checkpoints(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k, work, _ = start_ws(make_kernel, start_agent, tmp_path)
    with SyncClient(k.url) as c:
        # every 2nd write checkpoints; read_file declares nothing and never counts
        ex = c.create("ws", {"writes": ["a", "b", "c", "d", "e"], "every": 2, "read": True})
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        assert done.output["files"] == ["a", "b", "c", "d", "e"]
        tl = timeline(c, ex.id)
        w, r = "ok:write_file", "ok:read_file"
        assert shape(tl) == ["claimed", "registered", "bound", "cp",     # baseline at creation
                             w, r, w, "cp", r,                            # after the 2nd write
                             w, r, w, "cp", r,                            # after the 4th write
                             w, r, "cp",                                  # on completion
                             "end:execution.completed"]
        cps = refs(tl)
        assert [snapshot(work, ref) for ref in cps] == [[], ["a", "b"], ["a", "b", "c", "d"],
                                                        ["a", "b", "c", "d", "e"]]
        assert [t[1] for t in tl if t[0] == "cp"] == [0, 3, 7, 10]      # the generations captured
        assert tl[2] == ("bound", {"dir": done.output["dir"]})
        fp = c.fork_points(ex.id)
        assert [cp["checkpoint_ref"] for cp in fp.checkpoints] == cps
        views = c.resources(ex.id)
        assert len(views) == 1 and views[0].driver_id == "rebuno.directory" and views[0].every_steps == 2
        assert views[0].configuration == {"root": str(work / "wsroot")} and views[0].count == 5
        assert views[0].covered
        assert (work / "wsroot" / "paused" / done.output["dir"]).read_text().count("\n") == 1  # pause()

        # The last declaring call was due and nothing ran after it: already covered, so no
        # separate completion checkpoint.
        ex2 = c.create("ws", {"writes": ["a", "b"], "every": 2})
        assert wait_status(c, ex2.id).status == "completed"
        assert shape(timeline(c, ex2.id)) == ["claimed", "registered", "bound", "cp", w, w, "cp",
                                              "end:execution.completed"]
        # on_completion=False: baseline and cadence only
        ex3 = c.create("ws", {"writes": ["a"], "every": 2, "on_completion": False})
        assert wait_status(c, ex3.id).status == "completed"
        assert shape(timeline(c, ex3.id)) == ["claimed", "registered", "bound", "cp", w,
                                              "end:execution.completed"]


def test_redispatch_reopens_the_same_directory_and_replays_do_not_count(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k, work, first = start_ws(make_kernel, start_agent, tmp_path)
    with SyncClient(k.url) as c:
        ex = c.create("ws", {"writes": ["a", "b", "c"], "every": 2, "hold": True})
        wait_for(lambda: list(work.glob("started-hold-*")), 15, what="the hold tool to start")
        first.kill()  # SIGKILL while `hold` (a declared change) is running
        name = (work / f"opened-{first.pid}").read_text()
        assert workspace_files(work, name) == ["a", "b", "c"]
        (work / "go").touch()
        second = start_agent("workspace.py", k, env={"WORKDIR": str(work)})
        done = wait_status(c, ex.id, timeout=20)
        assert done.status == "completed", done
        out = done.output
        assert out["pid"] == second.pid and out["attempt"] >= 2
        assert out["dir"] == name and (work / f"opened-{second.pid}").read_text() == name  # same binding
        assert out["files"] == ["a", "b", "c", "held"]  # the first attempt's files are still there
        assert sorted(list((work / "wsroot" / "workspaces").iterdir())) == [work / "wsroot" / "workspaces" / name]
        # completed tools ran once; hold was interrupted and ran again
        assert effects(work) == ["write:a", "write:b", "write:c", "hold-start", "hold-start", "hold"]
        tl = timeline(c, ex.id)
        w = "ok:write_file"
        assert shape(tl) == [
            "claimed", "registered", "bound", "cp", w, w, "cp", w,      # attempt 1: killed in hold
            "claimed",                                                  # attempt 2 reopens (no bound)
            "cp",                                                       # and takes a new baseline
            "ok:hold", "cp",                                            # replays of a, b, c add nothing
            "end:execution.completed"]
        # The killed worker's `hold` (still `executing` from attempt 1) is an orphan, not a
        # running writer: it does not block the re-dispatch's baseline, which sees the
        # workspace as the first attempt left it.
        assert "resource.checkpoint_failed" not in [e.type for e in c.events(ex.id, limit=1000)]
        # hold is the 4th declaring call (the replays were not counted again): due
        cps = refs(tl)
        assert [snapshot(work, r) for r in cps] == [[], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "held"]]
        assert [s.runs for s in c.steps(ex.id)] == [1, 1, 1, 2]


# --- sessions ---------------------------------------------------------------------------

def test_session_second_turn_sees_previous_state_and_the_same_workspace(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k, work, _ = start_ws(make_kernel, start_agent, tmp_path)
    with SyncClient(k.url) as c:
        one = c.create("ws", {"writes": ["a"], "every": 2}, session="fix-tests")
        two = c.create("ws", {"writes": ["b"], "every": 2}, session="fix-tests")  # waits its turn
        d1 = wait_status(c, one.id)
        d2 = wait_status(c, two.id)
        assert d1.status == d2.status == "completed", (d1, d2)
        assert d1.output["prior"] is None
        assert d2.output["prior"] == {"files": ["a"], "dir": d1.output["dir"]}  # turn 1's Result.state
        assert c.previous(two.id) == d1.state and d2.parent_execution_id == one.id
        assert d2.output["dir"] == d1.output["dir"] and d2.output["files"] == ["a", "b"]
        assert len(list((work / "wsroot" / "workspaces").iterdir())) == 1  # never created a second one
        tl = timeline(c, two.id)
        # inherited at admission (registered + bound before the claim) with turn 1's completion
        # checkpoint, which still covers the reopened workspace: no new baseline
        assert shape(tl) == ["registered", "bound", "cp", "claimed", "ok:write_file", "cp",
                             "end:execution.completed"]
        assert refs(tl)[0] == refs(timeline(c, one.id))[-1]
        assert snapshot(work, refs(tl)[0]) == ["a"] and snapshot(work, refs(tl)[1]) == ["a", "b"]
        inherited = [e for e in c.events(two.id) if e.type == "resource.registered"][0]
        assert inherited.payload["inherited_from"] == one.id


# --- forks ------------------------------------------------------------------------------

def test_fork_between_checkpoints_restores_the_earlier_one_and_replays(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k, work, _ = start_ws(make_kernel, start_agent, tmp_path)
    with SyncClient(k.url) as c:
        src = c.create("ws", {"writes": ["a", "b", "c", "d"], "every": 2})
        done = wait_status(c, src.id)
        assert done.status == "completed", done
        cp0, cp_b, cp_d = refs(timeline(c, src.id))
        assert snapshot(work, cp_b) == ["a", "b"] and snapshot(work, cp_d) == ["a", "b", "c", "d"]
        assert effects(work) == ["write:a", "write:b", "write:c", "write:d"]

        # Between the two checkpoints: after `write c` succeeded. Its run ended cp_b's coverage,
        # so no checkpoint covers this point and the fork restores the newest earlier one.
        at = seq_of(c, src.id, "step.succeeded", "write_file", 2)
        points = {e["event_seq"]: e for e in c.fork_points(src.id).events}
        assert points[at]["covered"] is False
        fork = c.fork(src.id, at, session="fix-tests-fork")
        assert fork.forked_from == src.id and fork.fork_seq == at and fork.session == "fix-tests-fork"
        assert fork.restoration["workspace"]["checkpoint_ref"] == cp_b
        assert fork.restoration["workspace"]["covered"] is False
        fdone = wait_status(c, fork.id)
        assert fdone.status == "completed", fdone
        # a, b, c replayed (their bodies did not run again); d ran live in the fork
        assert effects(work) == ["write:a", "write:b", "write:c", "write:d", "write:d"]
        assert fdone.output["dir"] != done.output["dir"]
        # restored from cp_b: `c` is missing although its copied result says "wrote c"
        assert fdone.output["files"] == ["a", "b", "d"]
        steps = c.steps(fork.id)
        assert [(s.args["path"], s.runs) for s in steps] == [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
        ftl = timeline(c, fork.id)
        # the resource the fork starts with (unbound until the agent creates it from cp_b), the
        # copied step events, the source's checkpoints by the fork point (cp0, cp_b), and cp_b
        # once more covering the fork's start (no second snapshot of what was just restored);
        # then the live `write d` (4th declaring call: due)
        assert shape(ftl) == ["registered"] + ["ok:write_file"] * 3 + ["cp", "cp", "cp", "claimed", "bound",
                                                                       "ok:write_file", "cp",
                                                                       "end:execution.completed"]
        fcps = refs(ftl)
        assert fcps[:3] == [cp0, cp_b, cp_b]
        restored = [e.payload for e in c.events(fork.id, limit=1000) if e.payload.get("restored")]
        assert [p["checkpoint_ref"] for p in restored] == [cp_b]
        assert snapshot(work, fcps[3]) == ["a", "b", "d"]

        # At a covered point (right after cp_b was taken) the fork restores exactly cp_b.
        at_b = seq_of(c, src.id, "step.succeeded", "write_file", 1)
        assert {e["event_seq"]: e for e in c.fork_points(src.id).events}[at_b]["covered"] is True
        fork2 = c.fork(src.id, at_b)
        assert fork2.restoration["workspace"] == {"checkpoint_ref": cp_b, "covered": True,
                                                  "checkpoint_seq": at_b}
        f2 = wait_status(c, fork2.id)
        assert f2.status == "completed" and f2.output["files"] == ["a", "b", "c", "d"]
        assert effects(work)[5:] == ["write:c", "write:d"]

        # The snapshot is gone: the fork fails clearly instead of running in an empty directory.
        shutil.rmtree(work / "wsroot" / "snapshots" / cp_b)
        fork3 = c.fork(src.id, at)
        f3 = wait_status(c, fork3.id)
        assert f3.status == "failed", f3
        assert f3.failure_reason.startswith(f"resource_unavailable: workspace: cannot create it from checkpoint "
                                            f"'{cp_b}': snapshot {cp_b} does not exist"), f3.failure_reason
        assert effects(work)[7:] == []
        assert c.steps(fork3.id) and all(s.runs == 1 for s in c.steps(fork3.id))  # only the copies


def test_no_policy_no_checkpoints_turns_reopen_and_forks_start_fresh(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k, work, _ = start_ws(make_kernel, start_agent, tmp_path)
    with SyncClient(k.url) as c:
        one = c.create("ws", {"writes": ["a", "b"], "every": None, "read": True}, session="plain")
        two = c.create("ws", {"writes": ["c"], "every": None}, session="plain")
        d1, d2 = wait_status(c, one.id), wait_status(c, two.id)
        assert d1.status == d2.status == "completed", (d1, d2)
        for eid in (one.id, two.id):
            types = [e.type for e in c.events(eid, limit=1000)]
            assert "resource.checkpointed" not in types and "resource.checkpoint_failed" not in types
        assert d2.output["dir"] == d1.output["dir"] and d2.output["files"] == ["a", "b", "c"]
        assert not (work / "wsroot" / "snapshots").exists()
        view = c.resources(one.id)[0]
        assert view.every_steps == 0 and view.on_completion is False
        assert c.fork_points(one.id).checkpoints == []

        at = seq_of(c, one.id, "step.succeeded", "write_file", 0)  # after `write a`
        fork = c.fork(one.id, at)
        assert fork.restoration == {"workspace": {"checkpoint_ref": None, "checkpoint_seq": None,
                                                  "covered": False}}
        f = wait_status(c, fork.id)
        assert f.status == "completed", f
        assert f.output["dir"] not in (d1.output["dir"],)
        assert f.output["files"] == ["b"]  # a fresh directory: `a` replayed but is not there
        assert effects(work).count("write:a") == 1 and effects(work).count("write:b") == 2


# --- missing resources -----------------------------------------------------------------

def test_missing_binding_fails_the_execution_clearly(make_kernel, start_agent, tmp_path):
    from rebuno import SyncClient

    k, work, first = start_ws(make_kernel, start_agent, tmp_path)
    with SyncClient(k.url) as c:
        ex = c.create("ws", {"writes": ["a"], "every": 2, "hold": True})
        wait_for(lambda: list(work.glob("started-hold-*")), 15, what="the hold tool to start")
        first.kill()
        name = (work / f"opened-{first.pid}").read_text()
        shutil.rmtree(work / "wsroot" / "workspaces" / name)  # the workspace disappeared
        (work / "go").touch()
        start_agent("workspace.py", k, env={"WORKDIR": str(work)})
        done = wait_status(c, ex.id, timeout=20)
        assert done.status == "failed", done
        path = work / "wsroot" / "workspaces" / name
        assert done.failure_reason == (f'resource_unavailable: workspace: cannot reopen {{"dir": "{name}"}}: '
                                       f"workspace directory {path} does not exist")
        assert effects(work) == ["write:a", "hold-start"]  # nothing ran in an empty directory
        assert not path.exists()


# --- in-process: async drivers, sync handlers, the spec's handle usage, the step lock ---

class SandboxLike:
    """An async driver whose handle looks like the spec's sandbox: ``run_process`` and
    ``fs.read_text`` coroutines; it wraps a DirectoryWorkspace."""

    driver_id = "sandbox-like"

    def __init__(self, root: Path):
        from rebuno.testing import DirectoryWorkspace

        self.dirs = DirectoryWorkspace(root)
        self.configuration = {"image": "python:3.12"}
        self.paused: list[str] = []
        self.active = 0
        self.overlap = False

    class Handle:
        def __init__(self, inner: Any):
            self.inner = inner
            outer = self

            class Fs:
                async def read_text(self, path: str) -> str:
                    return outer.inner.read_text(path)

                async def write_text(self, path: str, content: str) -> None:
                    outer.inner.write_text(path, content)
            self.fs = Fs()

        async def run_process(self, cmd: str, args: list[str], cwd: str | None = None) -> Any:
            code, out = await self.inner.run(" ".join([cmd, *args]))
            return type("Done", (), {"returncode": code, "stdout": out})()

    async def create(self, checkpoint_ref: str | None = None) -> tuple[Any, Any]:
        await asyncio.sleep(0)
        inner, binding = self.dirs.create(checkpoint_ref)
        return self.Handle(inner), binding

    async def open(self, binding: Any) -> Any:
        return self.Handle(self.dirs.open(binding))

    async def checkpoint(self, handle: Any) -> str:
        if self.active:
            self.overlap = True
        return self.dirs.checkpoint(handle.inner)

    async def pause(self, handle: Any) -> None:
        self.paused.append(handle.inner.name)


def test_async_driver_spec_usage_and_tools_run_one_at_a_time(make_kernel, tmp_path):
    from test_inprocess import inprocess_agent

    from rebuno import Blocked, CheckpointPolicy, SyncClient, execution, resource, step, tool

    k = make_kernel(CONFIG)
    driver = SandboxLike(tmp_path / "sbx")
    log: list[str] = []
    ws: dict[str, Any] = {}

    @tool("shell", resources=["workspace"])
    async def shell(command: str) -> str:
        driver.active += 1
        try:
            log.append(f"start {command}")
            result = await ws["w"].run_process("bash", ["-c", repr(command)])
            await asyncio.sleep(0.02)
            log.append(f"end {command}")
            return f"exit code {result.returncode}\n{result.stdout}"
        finally:
            driver.active -= 1

    @tool("read_file")
    async def read_file(path: str) -> str:
        return await ws["w"].fs.read_text(path)

    async def handler(task: str) -> dict[str, Any]:
        workspace = await resource("workspace", driver=driver, checkpoints=CheckpointPolicy(every_steps=1))
        again = await resource("workspace", driver=driver)
        ws["w"] = workspace
        result = None
        try:
            # concurrent calls are serialized while the execution has a resource
            outs = await asyncio.gather(*(shell(f"echo {i} > f{i}") for i in range(3)))
            mark = await step("mark", lambda: "m", resources=["workspace"])
            result = [outs, mark, await read_file("f1")]
        finally:
            if result is not None or isinstance(execution().suspension, Blocked):
                await workspace.pause()
        return {"same": again is workspace, "result": result, "key": workspace.resource_key,
                "binding": workspace.resource_binding}

    with inprocess_agent(k.url, "ws", handler), SyncClient(k.url) as c:
        ex = c.create("ws", {"task": "x"})
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        out = done.output
        assert out["same"] is True and out["key"] == "workspace" and out["binding"]["dir"].startswith("ws-")
        assert out["result"][0] == ["exit code 0\n"] * 3 and out["result"][1:] == ["m", "1\n"]
        # one at a time: every start is followed by its own end
        assert [line.split()[0] for line in log] == ["start", "end"] * 3
        assert not driver.overlap
        tl = timeline(c, ex.id)
        # baseline, then after each of the 4 declaring steps; read_file ended coverage: completion
        assert shape(tl).count("cp") == 6 and "cp_failed" not in " ".join(shape(tl))
        assert driver.paused == [out["binding"]["dir"]]
        view = c.resources(ex.id)[0]
        assert view.driver_id == "sandbox-like" and view.configuration == {"image": "python:3.12"}


def test_pause_while_waiting_for_approval_and_resume_the_same_workspace(make_kernel, tmp_path):
    from test_inprocess import inprocess_agent

    from rebuno import Blocked, CheckpointPolicy, SyncClient, execution, resource, tool

    k = make_kernel(CONFIG)
    driver = SandboxLike(tmp_path / "sbx")
    calls: list[str] = []
    for name in ("create", "open"):
        def wrap(fn: Any, name: str = name) -> Any:
            async def call(arg: Any = None) -> Any:
                calls.append(name)
                return await fn(arg)
            return call
        setattr(driver, name, wrap(getattr(driver, name)))
    ws: dict[str, Any] = {}

    @tool("write_file", resources=["workspace"])
    async def write_file(path: str, content: str) -> str:
        await ws["w"].fs.write_text(path, content)
        return f"wrote {path}"

    @tool("open_pr", idempotency="at_most_once")
    async def open_pr(title: str) -> str:
        return f"opened {title}"

    async def handler(task: str) -> dict[str, Any]:
        workspace = await resource("workspace", driver=driver, checkpoints=CheckpointPolicy(every_steps=5))
        ws["w"] = workspace
        result = None
        try:
            await write_file("fix.py", "fixed")
            pr = await open_pr("fix")  # waits for approval: the dispatch ends here
            result = {"pr": pr, "fix": await workspace.fs.read_text("fix.py")}
        finally:
            if result is not None or isinstance(execution().suspension, Blocked):
                await workspace.pause()
        return result

    with inprocess_agent(k.url, "wsgate", handler), SyncClient(k.url) as c:
        ex = c.create("wsgate", {"task": "fix"})
        wait_status(c, ex.id, "blocked")
        wait_for(lambda: len(driver.paused) == 1, 5, what="the workspace to be paused")
        assert calls == ["create"]
        c.approve(c.approvals(execution_id=ex.id)[0].id, by="alice")
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        assert done.output == {"pr": "opened fix", "fix": "fixed"}
        assert calls == ["create", "open"]  # the next dispatch resumed the same workspace
        assert len(driver.paused) == 2 and len(set(driver.paused)) == 1
        # every_steps=5 is never due here: a baseline at creation, another when the resumed
        # dispatch reopens it (write_file changed it since), and one at completion
        assert shape(timeline(c, ex.id)) == ["claimed", "registered", "bound", "cp", "ok:write_file", "claimed",
                                             "cp", "ok:open_pr", "cp", "end:execution.completed"]


def test_sync_handler_and_capture_failures_do_not_fail_steps(make_kernel, tmp_path):
    from test_inprocess import inprocess_agent

    from rebuno import CheckpointPolicy, SyncClient, resource, tool
    from rebuno.testing import DirectoryWorkspace

    class Flaky(DirectoryWorkspace):
        calls = 0

        def checkpoint(self, handle: Any) -> str:
            Flaky.calls += 1
            if Flaky.calls == 2:
                raise OSError("disk full")
            return super().checkpoint(handle)

    k = make_kernel(CONFIG)
    driver = Flaky(tmp_path / "root")
    ws: dict[str, Any] = {}

    @tool("touch", resources=["workspace"])
    def touch(name: str) -> str:
        ws["w"].write_text(name, name)
        if name == "bad":
            raise RuntimeError("touch failed")
        return name

    def handler(names: list[str]) -> dict[str, Any]:  # a synchronous handler
        ws["w"] = resource("workspace", driver=driver, checkpoints=CheckpointPolicy(every_steps=1))
        out = []
        for n in names:
            try:
                out.append(touch(n))
            except Exception as e:  # noqa: BLE001
                out.append(f"error: {e}")
        ws["w"].pause()
        return {"out": out, "files": ws["w"].files()}

    with inprocess_agent(k.url, "ws", handler), SyncClient(k.url) as c:
        ex = c.create("ws", {"names": ["x", "bad", "y"]})
        done = wait_status(c, ex.id)
        assert done.status == "completed", done
        assert done.output == {"out": ["x", "error: touch: touch failed", "y"], "files": ["bad", "x", "y"]}
        tl = timeline(c, ex.id)
        # baseline; x's capture failed (recorded, the step still succeeded); the failed
        # step was still captured; y captured; covered at the end: no completion capture
        assert shape(tl) == ["claimed", "registered", "bound", "cp", "ok:touch",
                             f"cp_failed:{tl[5][1]}", "cp", "ok:touch", "cp", "end:execution.completed"]
        assert tl[5][2] == "OSError: disk full"
        assert [s.status for s in c.steps(ex.id)] == ["succeeded", "failed", "succeeded"]
        assert driver.pauses(c.resources(ex.id)[0].binding) == 1


# --- pure Python ------------------------------------------------------------------------

def test_checkpoint_policy_and_resource_argument_checks():
    from rebuno import CheckpointPolicy, resource
    from rebuno.testing import DirectoryWorkspace

    assert CheckpointPolicy() == CheckpointPolicy(every_steps=1, on_completion=True)
    for bad in (0, -3):
        with pytest.raises(ValueError):
            CheckpointPolicy(every_steps=bad)
    with pytest.raises(TypeError):
        CheckpointPolicy(every_steps=True)
    with pytest.raises(ValueError):
        resource("bad key", driver=DirectoryWorkspace("/tmp/x"))
    with pytest.raises(TypeError):
        resource("ws", driver=object())
    with pytest.raises(RuntimeError, match="outside an active execution"):
        resource("ws", driver=DirectoryWorkspace("/tmp/x"))


def test_directory_workspace_driver(tmp_path):
    from rebuno import CheckpointUnavailable, ResourceUnavailable, failure_reason
    from rebuno.testing import DirectoryWorkspace

    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "README").write_text("hi")
    d = DirectoryWorkspace(tmp_path / "root", seed=seed)
    assert d.configuration == {"root": str(tmp_path / "root"), "seed": str(seed)}
    h, binding = d.create()
    assert h.files() == ["README"] and binding == {"dir": h.name}
    h.write_text("src/a.py", "x = 1\n")
    ref = d.checkpoint(h)
    h.write_text("src/a.py", "x = 2\n")
    assert (d.snapshots / ref / "src" / "a.py").read_text() == "x = 1\n"  # copy on checkpoint
    h2, b2 = d.create(ref)
    assert b2 != binding and h2.read_text("src/a.py") == "x = 1\n"
    assert d.open(binding).read_text("src/a.py") == "x = 2\n"
    with pytest.raises(ValueError):
        h.resolve("../escape")
    with pytest.raises(ValueError):
        d.open({"dir": "../../etc"})
    with pytest.raises(CheckpointUnavailable, match="snapshot cp-gone does not exist"):
        d.create("cp-gone")
    shutil.rmtree(h2.path)
    with pytest.raises(ResourceUnavailable, match="does not exist"):
        d.open(b2)
    d.pause(h)
    assert d.pauses(binding) == 1 and d.pauses(h) == 1
    assert asyncio.run(h.run("cat README; exit 3")) == (3, "hi")
    assert failure_reason(ResourceUnavailable("gone", key="ws")) == "resource_unavailable: ws: gone"


def test_resource_handle_forwards_to_the_driver_handle(tmp_path):
    from rebuno._kernel import DispatchLease
    from rebuno.execution import ExecutionContext
    from rebuno.resource import Resource

    driver = SandboxLike(tmp_path / "r")

    async def main() -> None:
        inner, binding = await driver.create()
        ctx = ExecutionContext(kernel=None, execution_id="e", agent="a", input={},  # type: ignore[arg-type]
                               lease=DispatchLease("d", 1))
        res = Resource(ctx, "workspace", driver, None, {"driver_id": "sandbox-like"}, inner, binding, True)
        w = res.proxy
        await w.fs.write_text("f", "content")
        assert await w.fs.read_text("f") == "content"
        done = await w.run_process("cat", ["f"])
        assert done.returncode == 0 and done.stdout == "content"
        assert w.driver_handle is inner and w.resource_key == "workspace" and w.resource_binding == binding
        w.note = "set on the handle"
        assert inner.note == "set on the handle"
        await w.pause()
        assert driver.paused == [binding["dir"]]
        assert "run_process" in dir(w) and "workspace" in repr(w)
        with pytest.raises(AttributeError):
            w.nope  # noqa: B018

    asyncio.run(main())

