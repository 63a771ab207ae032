"""The examples in examples/python, run the way their README says."""

from __future__ import annotations

import re
import subprocess

from conftest import BIN, REPO, wait_for, wait_status

EXAMPLES = REPO / "examples" / "python"


def created_id(stdout: str) -> str:
    m = re.match(r"created ([0-9a-f-]{36}) ", stdout)
    assert m, stdout
    return m.group(1)


def test_hello_example_end_to_end(make_kernel, start_agent):
    k = make_kernel(config_file=EXAMPLES / "rebuno.yaml")
    start_agent(EXAMPLES / "hello.py", k)
    eid = created_id(k.cli("exec", "create", "hello", '{"name":"world"}').stdout)
    watch = subprocess.run([BIN, "exec", "watch", eid, "--url", k.url], capture_output=True, text=True, timeout=30)
    assert watch.returncode == 0, watch.stdout + watch.stderr
    assert "step.succeeded" in watch.stdout and "hello, world" in watch.stdout
    assert f"execution {eid} completed" in watch.stdout


def test_shell_example_allows_safe_commands_and_gates_the_rest(make_kernel, start_agent, tmp_path):
    k = make_kernel(config_file=EXAMPLES / "rebuno.yaml")
    work = tmp_path / "shellwork"
    work.mkdir()
    from rebuno import SyncClient

    start_agent(EXAMPLES / "shell_agent.py", k, env={"SHELL_WORKDIR": str(work)})
    with SyncClient(k.url) as c:
        ok = c.create("shell", {"commands": ["echo hi", "touch made-by-agent.txt", "rm made-by-agent.txt"]})
        wait_status(c, ok.id, "blocked")
        assert not (work / "made-by-agent.txt").exists()
        k.cli("exec", "approve", ok.id, "--by", "alice")
        wait_for(lambda: (work / "made-by-agent.txt").exists(), 10, what="touch to run after approval")
        wait_status(c, ok.id, "blocked")  # rm needs its own approval
        k.cli("exec", "deny", ok.id, "--by", "alice", "--reason", "keep it")
        done = wait_status(c, ok.id)
        assert done.status == "completed", done
        results = done.output["results"]
        assert results[0] == {"command": "echo hi", "output": "exit code 0\nhi\n", "refused": False}
        assert results[1]["output"].startswith("exit code 0")
        assert results[2] == {"command": "rm made-by-agent.txt", "refused": True,
                              "output": "shell not allowed. reason: keep it"}
        assert (work / "made-by-agent.txt").exists()
        runs = {s.args["command"]: (s.rule_id, s.runs) for s in c.steps(ok.id)}
        assert runs["echo hi"] == ("safe-shell", 1)  # replayed twice, ran once
        assert runs["touch made-by-agent.txt"] == ("ask-shell", 1)


def test_workspace_example_sessions_checkpoints_and_a_cli_fork(make_kernel, start_agent, tmp_path):
    import json

    from rebuno import SyncClient

    k = make_kernel(config_file=EXAMPLES / "rebuno.yaml")
    root = tmp_path / "workspaces"
    start_agent(EXAMPLES / "workspace_agent.py", k, env={"WORKSPACE_ROOT": str(root)})
    actions = [{"tool": "write_file", "args": {"path": "notes.txt", "content": "one\n"}},
               {"tool": "shell", "args": {"command": "echo two >> notes.txt"}},
               {"tool": "shell", "args": {"command": "echo three >> notes.txt"}},
               {"tool": "read_file", "args": {"path": "notes.txt"}}]
    first = created_id(k.cli("exec", "create", "workspace", json.dumps({"actions": actions}),
                             "--session", "demo").stdout)
    second = created_id(k.cli("exec", "create", "workspace", json.dumps(
        {"actions": [{"tool": "shell", "args": {"command": "cat notes.txt"}}]}), "--session", "demo").stdout)
    with SyncClient(k.url) as c:
        one = wait_status(c, first)
        two = wait_status(c, second)
        assert one.status == two.status == "completed", (one, two)
        assert one.output["results"][-1] == "one\ntwo\nthree\n"
        assert two.output["results"] == ["exit code 0\none\ntwo\nthree\n"]
        assert two.output["workspace"] == one.output["workspace"] and two.state["turns"] == 2
        cps = [e.payload["checkpoint_ref"] for e in c.events(first) if e.type == "resource.checkpointed"]
        assert len(cps) == 3  # baseline, after the 2nd changing call, on completion
        points = k.cli("exec", "fork-points", first).stdout
        assert all(ref in points for ref in cps)
        # fork after the 3rd call (between the 2nd checkpoint and the completion one)
        at = [e.seq for e in c.events(first) if e.type == "step.succeeded"][2]
        out = k.cli("exec", "fork", first, "--at", str(at), "--session", "demo-fork").stdout
        assert out.startswith("forked ") and f"from checkpoint {cps[1]}" in out and "copied results may" in out
        fork = wait_status(c, out.split()[1])
        assert fork.status == "completed", fork
        assert fork.session == "demo-fork" and fork.output["workspace"] != one.output["workspace"]
        # the restored directory has the 2nd checkpoint's contents; `read_file` ran live
        assert fork.output["results"][:3] == ["wrote notes.txt", "exit code 0\n", "exit code 0\n"]
        assert fork.output["results"][3] == "one\ntwo\n"
