"""rebuno.sandbox.SandboxResource, the workspace driver, against a real sandboxd (as root).

The whole story (kernel, agent, forge, egress proxy, forks, re-dispatch) is
examples/coding-agent/tests/test_demo.py; here each driver operation on its own: create
fresh and from a snapshot, the branch per sandbox, open re-applying the network policy,
checkpoint without stopping, pause (stop or freeze), and the failures that must fail an
execution (a sandbox or snapshot that is gone).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest
from test_sandbox_snapshots import StorageDaemon, daemon, sbx_url  # noqa: F401  (fixtures: leak checks at the end)

from rebuno.errors import CheckpointUnavailable
from rebuno.sandbox import (
    NetworkPolicy,
    NetworkPolicyRule,
    NetworkPolicyTransform,
    SandboxClient,
    SandboxNotFoundError,
    SandboxResource,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxd needs root")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def git(ws: Any, *args: str) -> str:
    r = await ws.run_command("git", list(args), cwd=ws.workdir, capture_output=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_create_checkpoint_fork_open_and_pause(daemon: StorageDaemon) -> None:
    async def go() -> None:
        calls: list[int] = []

        def policy() -> NetworkPolicy:
            calls.append(1)
            return NetworkPolicy.custom({"forge.example": [NetworkPolicyRule(transform=[
                NetworkPolicyTransform(headers={"Authorization": f"Bearer token-{len(calls)}"})])]})

        async with SandboxClient(daemon.url) as client:
            driver = SandboxResource(client=client, network_policy=policy, name_prefix="t")
            assert driver.configuration == {"repo_url": None, "workdir": "/root/repo", "branch_prefix": "rebuno/"}
            ws, binding = await driver.create(None)
            try:
                assert binding == {"sandbox": ws.name, "branch": f"rebuno/{ws.name}"}
                assert ws.name.startswith("t-") and len(ws.name) == 10 and ws.branch == binding["branch"]
                assert await git(ws, "symbolic-ref", "--short", "HEAD") == ws.branch
                assert await git(ws, "config", "user.email") == "agent@rebuno.local"
                assert calls == [1]
                # the policy is in place, its header redacted
                await ws.refresh()
                assert "forge.example" in str(ws.network_policy)

                await ws.fs.write_text(f"{ws.workdir}/a.txt", "one")
                proc = await ws.create_command("sleep", ["300"])
                ref = await driver.checkpoint(ws)
                await ws.refresh()
                assert ws.status.value == "running" and (await proc.refresh()).status.value == "running"
                await ws.fs.write_text(f"{ws.workdir}/a.txt", "two")

                # a fork: the checkpoint's files, uncommitted changes kept, a branch of its own
                fork, fb = await driver.create(ref)
                try:
                    assert fb["sandbox"] != binding["sandbox"] and fb["branch"] == f"rebuno/{fork.name}"
                    assert await fork.fs.read_text(f"{fork.workdir}/a.txt") == "one"
                    assert await git(fork, "symbolic-ref", "--short", "HEAD") == fork.branch
                    assert calls == [1, 1]
                finally:
                    await fork.delete()

                # pause stops it; open resumes it with the policy built again
                await driver.pause(ws)
                await ws.refresh()
                assert ws.status.value == "stopped"
                again = await driver.open(binding)
                assert again.name == ws.name and again.branch == ws.branch and again.status.value == "running"
                assert calls == [1, 1, 1]
                assert await again.fs.read_text(f"{again.workdir}/a.txt") == "two"

                # pause="freeze" freezes instead
                frozen = SandboxResource(client=client, pause="freeze")
                await frozen.pause(again)
                await again.refresh()
                assert again.status.value == "paused"
            finally:
                await ws.sandbox.delete()

            # what must fail the execution
            with pytest.raises(SandboxNotFoundError, match="no longer exists"):
                await driver.open(binding)
            with pytest.raises(CheckpointUnavailable, match="does not exist"):
                await driver.create("01a00000-0000-7000-8000-000000000000")
            assert [b.name for b in await client.list_sandboxes()] == []

    run(go())


def test_bad_arguments_are_refused() -> None:
    for kwargs, field in [({"workdir": "relative"}, "workdir"), ({"workdir": "/a/../b"}, "workdir"),
                          ({"branch_prefix": "-x"}, "branch_prefix"), ({"branch_prefix": "a..b"}, "branch_prefix"),
                          ({"name_prefix": "a/b"}, "name_prefix"), ({"pause": "sleep"}, "pause")]:
        with pytest.raises(ValueError, match=field):
            SandboxResource(**kwargs)
    with pytest.raises(ValueError, match="binding"):
        asyncio.run(SandboxResource(base_url="http://127.0.0.1:9").open({"box": "x"}))
