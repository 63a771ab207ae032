"""The demo's two turns end to end, without the kernel or the sandbox: the SDK's
``ChatClient.run_tools`` drives model.py, whose tool calls run for real in a local
checkout cloned from forge.py, and ``open_pr`` calls the forge's API.

The checkout's git configuration carries the token header here; in the demo the egress
proxy adds it instead, so the token never enters the sandbox.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import model as scripted
from conftest import TOKEN, Forge, Model, git_env
from rebuno import ChatClient, ToolSet

BRANCH = "rebuno/fix-tests"


def make_tools(forge: Forge, spec: str, checkout: Path) -> ToolSet:
    """shell, read_file and write_file in the checkout; open_pr against the forge's API."""
    env = git_env(forge.home)

    async def shell(command: str) -> str:
        """Run a shell command in the repository and return its exit code and output.

        Args:
            command: A bash command line.
        """
        proc = await asyncio.create_subprocess_exec("bash", "-c", command, cwd=checkout, env=env,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return f"exit code {proc.returncode}\n{out.decode(errors='replace')}"[-10000:]

    async def read_file(path: str) -> str:
        """Return a file's contents. The path is relative to the repository root.

        Args:
            path: The file, relative to the repository root.
        """
        target = (checkout / path).resolve()
        if not target.is_relative_to(checkout.resolve()) or not target.is_file():
            return f"{path} does not exist"
        return target.read_text()

    async def write_file(path: str, content: str) -> str:
        """Replace a file's contents, creating it if needed. The path is relative to the repository root.

        Args:
            path: The file, relative to the repository root.
            content: The whole new contents.
        """
        target = (checkout / path).resolve()
        if not target.is_relative_to(checkout.resolve()):
            return f"error: {path} is outside the repository"
        target.write_text(content)
        return f"wrote {path}"

    async def open_pr(title: str, body: str) -> str:
        """Open a pull request from the pushed branch.

        Args:
            title: The pull request's title.
            body: Its description.
        """
        req = urllib.request.Request(
            f"{forge.url}/api/repos/{spec}/pulls", method="POST",
            data=json.dumps({"title": title, "body": body, "head": BRANCH, "base": "main"}).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        ctx = ssl.create_default_context(cafile=str(forge.ca))
        try:
            with await asyncio.to_thread(urllib.request.urlopen, req, context=ctx, timeout=10) as resp:
                pr = json.loads(resp.read())
                verb = "opened" if resp.status == 201 else "updated"
        except urllib.error.HTTPError as e:
            return f"error: the forge answered {e.code}: {e.read().decode(errors='replace')[:300]}"
        return f"pull request #{pr['number']} {verb}: {pr['url']}"

    return ToolSet([shell, read_file, write_file, open_pr])


def test_fix_then_edge_case(forge: Forge, model: Model, tmp_path: Path) -> None:
    """Streamed, as the demo shows it live (test_model.py covers plain answers too)."""
    spec = forge.new_repo()
    checkout = tmp_path / "checkout"
    forge.git("clone", "-q", f"{forge.url}/{spec}.git", str(checkout))
    # the egress proxy's part: the header (and the forge's CA) for every request to the forge
    forge.git("config", "http.extraHeader", f"Authorization: Bearer {TOKEN}", cwd=checkout)
    forge.git("config", "http.sslCAInfo", str(forge.ca), cwd=checkout)
    main_before = forge.request("GET", f"/api/repos/{spec}/branches/main")[1]["commit"]["sha"]
    tools = make_tools(forge, spec, checkout)
    system = {"role": "system", "content": f"You work in a git checkout of {spec}.\nbranch: {BRANCH}"}
    deltas: list[str] = []

    async def both_turns() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        llm = ChatClient(base_url=model.base_url, model="scripted-coder", api_key="unused")
        extra: dict[str, Any] = {"stream": True, "on_delta": deltas.append}
        try:
            first = await llm.run_tools([system, {"role": "user", "content": "The tests are failing. Fix the bug "
                                                                             "and open a pull request."}],
                                        tools, **extra)
            second = await llm.run_tools([*first, {"role": "user", "content": "Also add a test for the edge case."}],
                                         tools, **extra)
            return first, second
        finally:
            await llm.aclose()

    first, second = asyncio.run(both_turns())

    # turn 1: fixed, pushed to the branch, pull request #1 opened
    assert "pull request #1 opened" in first[-1]["content"], first[-1]
    tool_names = [tc["function"]["name"] for m in first if m.get("tool_calls") for tc in m["tool_calls"]]
    assert tool_names == ["shell", "read_file", "write_file", "shell", "shell", "open_pr"]
    # turn 2: the edge-case test, pushed to the same branch, the same pull request updated
    assert "pull request #1 updated" in second[-1]["content"], second[-1]
    turn2 = second[len(first) + 1:]
    assert [tc["function"]["name"] for m in turn2 if m.get("tool_calls") for tc in m["tool_calls"]] == [
        "read_file", "write_file", "shell", "shell", "open_pr"]

    status, branch, _ = forge.request("GET", f"/api/repos/{spec}/branches/{BRANCH}")
    assert status == 200 and branch["commit"]["message"] == scripted.COMMIT_EDGE
    status, pulls, _ = forge.request("GET", f"/api/repos/{spec}/pulls")
    assert len(pulls) == 1 and pulls[0]["number"] == 1 and pulls[0]["body"] == scripted.PR_BODY_EDGE
    assert pulls[0]["head"] == BRANCH and pulls[0]["head_sha"] == branch["commit"]["sha"]
    assert forge.request("GET", f"/api/repos/{spec}/branches/main")[1]["commit"]["sha"] == main_before

    # the pushed branch, cloned afresh: two commits on main's, and all five tests pass
    fresh = tmp_path / "fresh"
    forge.git("clone", "-q", "-b", BRANCH, f"{forge.url}/{spec}.git", str(fresh))
    log = forge.git("log", "--format=%s", cwd=fresh).stdout.split("\n")[:3]
    assert log == [scripted.COMMIT_EDGE, scripted.COMMIT_FIX, "Initial commit"]
    run = subprocess.run(["python3", "-m", "unittest", "-q"], cwd=fresh, env=git_env(forge.home),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "Ran 5 tests" in run.stderr, run.stderr

    # one model request per assistant message, nothing else
    stats = model.stats()
    assistant = sum(1 for m in second if m["role"] == "assistant")
    assert stats["chat_completions"] == assistant == 13
    assert stats["streamed"] == assistant
    assert "".join(deltas).startswith("Let me run the tests")
