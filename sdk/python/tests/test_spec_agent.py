"""Agent code written the way the product documents write it (E2B page), cloud parts
replaced by local stand-ins, against the real kernel and a scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import wait_status

POLICY_CONFIG = """
agents:
  - name: e2b
    lease_timeout_seconds: 1
    policy: |
      default_action: deny
      rules:
        - id: allow-llm
          when:
            step_kind: llm_call
          then:
            decision: allow

        - id: allow-sandbox
          when:
            targets: [shell, read_file, write_file]
          then:
            decision: allow

        - id: open-pr
          when:
            target: open_pr
          then:
            decision: require_approval
            reason: opening a pull request needs approval
"""


def model(body: dict[str, Any]) -> dict[str, Any]:
    """Fix a file, check it, open a PR, answer; a follow-up turn answers at once."""
    msgs = body["messages"]
    last_user = max(i for i, m in enumerate(msgs) if m["role"] == "user")
    done = [m for m in msgs[last_user:] if m["role"] == "tool"]
    script = [("write_file", {"path": "fix.txt", "content": "fixed\n"}), ("shell", {"command": "cat fix.txt"}),
              ("open_pr", {"title": "Fix", "body": "Fixes the bug."})]
    if "Also" in msgs[last_user]["content"]:
        return {"content": f"follow-up with {len(msgs)} messages of history"}
    if len(done) < len(script):
        name, args = script[len(done)]
        return {"tool_calls": [{"id": f"call_{len(done)}", "type": "function",
                                "function": {"name": name, "arguments": json.dumps(args)}}]}
    return {"content": f"opened {done[-1]['content']}"}


def test_e2b_document_agent_with_approval_and_session(make_kernel, start_agent, llm_server, tmp_path):
    from rebuno import SyncClient

    server = llm_server(model)
    k = make_kernel(POLICY_CONFIG)
    work = tmp_path / "work"
    work.mkdir()
    start_agent("coder.py", k, env={"WORKDIR": str(work), "LLM_BASE_URL": server.base_url, "LLM_MODEL": "coder-1",
                                    "CONCURRENCY": "1"})

    def effects() -> list[str]:
        return [line.split()[0] for line in (work / "effects.log").read_text().splitlines()]

    with SyncClient(k.url) as c:
        ex = c.create("e2b", {"task": "The tests are failing. Fix the bug and open a pull request."})
        wait_status(c, ex.id, "blocked")
        paused = (work / "paused.log").read_text().split()
        assert paused[1] == "Blocked"  # the finally block saw the suspension and paused the sandbox
        assert effects() == ["find_sandbox", "write_file", "shell"]
        k.cli("exec", "approve", ex.id, "--by", "alice")
        done = wait_status(c, ex.id, timeout=15)
        assert done.status == "completed", done
        session = ex.id[-12:]
        assert done.output == {"answer": "opened https://git.local/pulls/1", "session": session}
        assert effects() == ["find_sandbox", "write_file", "shell", "open_pr"]  # nothing ran twice
        assert len(server.calls) == 4  # three recorded model calls replayed, one new
        assert (Path(work / "sandboxes" / session / "fix.txt")).read_text() == "fixed\n"
        assert len((work / "paused.log").read_text().splitlines()) == 2
        kinds = [(s.kind, s.target) for s in c.steps(ex.id)]
        assert kinds[:2] == [("local", "find_sandbox"), ("local", "load_conversation")]
        assert kinds[-1] == ("local", "save_conversation")

        follow = c.create("e2b", {"session": session, "task": "Also add a test for the edge case."})
        done2 = wait_status(c, follow.id, timeout=15)
        assert done2.status == "completed", done2
        assert done2.output["answer"] == "follow-up with 9 messages of history"
        assert effects().count("find_sandbox") == 2  # found the same sandbox folder again
