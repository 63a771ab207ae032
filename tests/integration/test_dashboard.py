"""The web dashboard at /ui/, driven in a real headless Chromium (Debian's `chromium`) with
puppeteer-core from ui/'s devDependencies (no browser download).

Real agents (examples/python/hello.py and shell_agent.py, the SDK of this checkout) run
against a real `rebuno dev`; ui/test/dashboard.mjs then signs in with a wrong key (clear
error) and the local token, filters the list by status, agent and session, opens the
hello run's execution view, and watches an execution blocked on an approval complete live
once the test grants the approval through the API. ui/test/timeline.mjs pages through a
long running execution's timeline as a reader scrolls (live events meanwhile), and
ui/test/sandboxes.mjs drives the sandbox views: their list, a terminal, snapshots, forks, and
stop / pause / resume / delete. Screenshots are saved in a folder
printed by the test ($REBUNO_ARTIFACTS if set); with REBUNO_UPDATE_DOCS_IMG=1 they are also
copied to docs/img/ for docs/dashboard.md.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import free_port, local_auth

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UI = os.path.join(ROOT, "ui")
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

CONFIG = """
agents:
  - name: hello
  - name: shell
    policy_file: shell_policy.yaml
  - name: workspace
"""
WORKSPACE_ACTIONS = [
    {"tool": "write_file", "args": {"path": "notes.txt", "content": "one\n"}},
    {"tool": "shell", "args": {"command": "echo two >> notes.txt"}},
    {"tool": "shell", "args": {"command": "echo three >> notes.txt"}},
    {"tool": "read_file", "args": {"path": "notes.txt"}}]


def need_browser():
    missing = [what for what, ok in (
        ("node (Node.js 20+)", shutil.which("node")),
        (f"chromium at {CHROMIUM} (apt-get install chromium; scripts/deps.sh)", os.path.exists(CHROMIUM)),
        ("ui/node_modules/puppeteer-core (make ui, or cd ui && npm ci)",
         os.path.isdir(os.path.join(UI, "node_modules", "puppeteer-core")))) if not ok]
    if missing:
        pytest.fail("the dashboard test needs " + ", ".join(missing))


def wait_status(k, exec_id, statuses, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        ex = k.ok("GET", f"/v0/executions/{exec_id}")
        if ex["status"] in statuses:
            return ex
        time.sleep(0.05)
    raise AssertionError(f"{exec_id} did not reach {statuses}: {ex}")


@pytest.fixture
def agents(make_kernel, tmpdir_path):
    k = make_kernel(CONFIG)
    shutil.copy(os.path.join(ROOT, "examples", "python", "shell_policy.yaml"), k.state_dir)
    k.start()
    work = k.work = tempfile.mkdtemp(dir=tmpdir_path)
    env = dict(os.environ, REBUNO_URL=k.url, PYTHONPATH=os.path.join(ROOT, "sdk", "python"),
               SHELL_WORKDIR=work,
               WORKSPACE_ROOT=os.path.join(work, "workspaces"))
    procs = []
    try:
        for script in ("hello.py", "shell_agent.py", "workspace_agent.py"):
            log = open(os.path.join(k.state_dir, script + ".log"), "ab")
            procs.append((subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "python", script)],
                                           cwd=work, env=env, stdout=log, stderr=log), log))
        yield k
    finally:
        for p, log in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()


def test_dashboard_in_chromium(agents):
    need_browser()
    k = agents
    hello = k.create("hello", {"name": "dashboard"}, session="ui-session-1")
    wait_status(k, hello["id"], {"completed"})
    ok = k.create("shell", {"commands": ["echo hi"]})
    wait_status(k, ok["id"], {"completed"})
    ws = k.create("workspace", {"actions": WORKSPACE_ACTIONS})
    wait_status(k, ws["id"], {"completed"})
    blocked = k.create("shell", {"commands": ["echo before", "touch made-by-approval"]})
    wait_status(k, blocked["id"], {"blocked"})
    # fork points to look at in the page: one a checkpoint covers, one none does
    fp = k.ok("GET", f"/v0/executions/{ws['id']}/fork-points")
    registered = min(fp["resources"].values())
    after_reg = [e for e in fp["events"] if e["event_seq"] >= registered]
    uncovered = next(e["event_seq"] for e in after_reg if not e["covered"])
    covered = next(e["event_seq"] for e in after_reg if e["covered"] and e["event_seq"] > uncovered)

    shots = os.environ.get("REBUNO_ARTIFACTS") or tempfile.mkdtemp(prefix="rebuno-dashboard-shots-")
    os.makedirs(shots, exist_ok=True)
    print(f"dashboard screenshots in {shots}")
    token = local_auth(k.port)["Authorization"].split(" ", 1)[1]
    spec_path = os.path.join(k.state_dir, "ui-spec.json")
    with open(spec_path, "w") as f:
        json.dump({"url": k.url, "token": token, "shots": shots, "hello_id": hello["id"],
                   "blocked_id": blocked["id"], "session": "ui-session-1",
                   "workspace_id": ws["id"], "fork_seqs": [uncovered, covered], "fork_session": "ui-fork-1",
                   "created_after": ok["created_at"], "after_count": 4}, f)
    proc = subprocess.Popen(["node", os.path.join(UI, "test", "dashboard.mjs"), spec_path],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, CHROMIUM=CHROMIUM))
    try:
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = json.loads(out.strip().splitlines()[-1]) if out.strip() else None
    assert result is not None, err
    if "error" in result:
        print(result["error"])  # whole, where the assertion's message is cut
        print(result.get("page"))
        if result.get("ask_id"):  # the live inbox's run: where it got to, and what its agent said
            print(k.request("GET", f"/v0/executions/{result['ask_id']}"))
            with open(os.path.join(k.state_dir, "shell_agent.py.log"), errors="replace") as f:
                print(f.read()[-4000:])
    assert "error" not in result, (result["error"], result.get("page"))

    # assets: CSP everywhere, index.html never cached
    h = result["index_headers"]
    assert h["content-security-policy"].startswith("default-src 'self'"), h
    assert h["cache-control"] == "no-cache", h

    assert "refused this key" in result["wrong_key_error"], result["wrong_key_error"]
    assert "Authorization" in result["wrong_key_error"] or "token" in result["wrong_key_error"]

    assert set(result["list_ids"]) == {hello["id"], ok["id"], ws["id"], blocked["id"]}
    # counts per status (the API's), next to the status filters
    assert result["counts"] == {"all": "4", "pending": "0", "running": "0", "blocked": "1", "completed": "3",
                                "failed": "0", "cancelled": "0"}, result["counts"]
    # the live list: a new execution appeared on top and turned completed, no reload
    live = result["live"]
    assert live["first_row"] == live["id"] and live["no_reload"]
    assert live["counts"]["all"] == "5" and live["counts"]["completed"] == "4"
    assert wait_status(k, live["id"], {"completed"})["agent_id"] == "hello"
    # created at or after the shell run: it, the workspace run, the blocked one, the live one
    ft = result["filter_time"]
    assert set(ft["ids"]) == {ok["id"], ws["id"], blocked["id"], live["id"]}, ft
    assert ft["counts"]["all"] == "4" and ft["counts"]["blocked"] == "1" and ft["input"], ft
    assert result["filter_status"] == ["completed"] * 4  # with the live one
    assert result["filter_agent"] == ["shell", "shell"]
    assert result["filter_session"] == [[hello["id"], "ui-session-1"]]

    hv = result["hello"]
    assert hv["status"] == "completed" and hv["agent"] == "hello"
    assert hv["steps"] == ["greet"] and hv["step_states"] == ["succeeded"]
    assert json.loads(hv["output"])["greeting"] == "hello, dashboard"
    last_seq = k.ok("GET", f"/v0/executions/{hello['id']}")["last_seq"]
    # every event is on the page once, the step's own ones inside its group
    assert sorted({int(s.lstrip("#")) for s in hv["events"]}) == list(range(1, last_seq + 1))

    # the inbox shows the pending approval with its rule, reason and arguments
    [card] = result["inbox"]
    assert card["execution"] == blocked["id"] and "shell" in card["title"]
    assert "ask-shell" in card["rule"] and "a person must approve it" in card["rule"]
    assert json.loads(card["args"]) == {"command": "touch made-by-approval"}
    assert result["nav_badge"] == "1"

    # approved in the page; the page saw the execution complete live
    assert result["blocked_seen"] and result["live_completed"] == "completed"
    assert "made-by-approval" in result["live_outcome"]
    assert ["touch made-by-approval", "succeeded"] not in result["live_steps"]  # targets, not commands
    assert ["shell", "succeeded"] in result["live_steps"]
    assert wait_status(k, blocked["id"], {"completed"})["status"] == "completed"
    [ap] = k.ok("GET", f"/v0/approvals?execution_id={blocked['id']}")
    assert ap["status"] == "granted" and ap["decided_by"] == "ui-tester"
    assert ap["rationale"] == "fine in a temp dir"
    assert os.path.exists(os.path.join(k.work, "made-by-approval"))
    # the only failed request the page made is the refused wrong key
    assert result["console_errors"] == [
        "Failed to load resource: the server responded with a status of 401 (Unauthorized)"], result["console_errors"]

    # forks: the page's coverage is what fork-points says, and the restoration it showed
    # for the point forked at is the one the kernel made
    [unc, cov] = result["forks"]
    assert f"#{uncovered}" in unc["heading"] and unc["covered"] == "false"
    assert f"#{covered}" in cov["heading"] and cov["covered"] == "true"
    assert [r["covered"] for r in unc["rows"]] == ["no"] and [r["covered"] for r in cov["rows"]] == ["yes"]
    fork = k.ok("GET", f"/v0/executions/{result['fork_id']}")
    assert fork["forked_from"] == ws["id"] and fork["fork_seq"] == covered
    assert fork["session"] == "ui-fork-1"
    assert {r["key"]: (r["ref"], r["covered"] == "yes") for r in cov["rows"]} == {
        key: (v["checkpoint_ref"], v["covered"]) for key, v in fork["restoration"].items()}
    assert "Forked from" in result["fork_header"]
    assert result["fork_tree"]["root"] == f"#/executions/{ws['id']}"
    assert result["fork_tree"]["kids"] == [f"…{result['fork_id'][-12:]} (this one)"]
    # what the page showed at the uncovered point is the kernel's choice there too
    fork2 = k.ok("POST", f"/v0/executions/{ws['id']}/fork", {"at_seq": uncovered}, status=201)
    assert {r["key"]: (r["ref"] if r["ref"] != "nothing: starts fresh" else None, r["covered"] == "yes")
            for r in unc["rows"]} == {
        key: (v.get("checkpoint_ref"), v["covered"]) for key, v in fork2["restoration"].items()}
    for f_id in (result["fork_id"], fork2["id"]):
        wait_status(k, f_id, {"completed", "failed"})

    # the policy view: the rules in order, and the dry run's decision and rule
    assert result["policy_rules"] == ["allow-llm", "safe-shell", "ask-shell"]
    assert result["dry_run"]["decision"] == "require_approval"
    assert "ask-shell (position 3)" in result["dry_run"]["text"] and "a person must approve it" in result["dry_run"]["text"]
    # replaying the shell run's steps (echo before, then touch - approved): decided as they were
    assert result["replay"] == [["true", "tool_call shell", "allow (safe-shell)", "allow", "safe-shell", "yes"],
                                ["true", "tool_call shell", "require_approval (ask-shell)", "require_approval",
                                 "ask-shell", "yes"]], result["replay"]

    # a stale stored key: back to the sign-in, with the kernel's reason, the key dropped
    assert result["stale_key_error"].startswith("The kernel refused the stored key"), result["stale_key_error"]
    assert result["stale_key_cleared"]

    # the inbox took an approval asked while it was open, and denied it
    il = result["inbox_live"]
    assert il["decided"] == "denied by ui-tester"
    [ap2] = k.ok("GET", f"/v0/approvals?execution_id={il['id']}")
    assert ap2["status"] == "denied" and ap2["rationale"] == "not from the inbox"
    wait_status(k, il["id"], {"completed", "failed"})
    assert not os.path.exists(os.path.join(k.work, "made-by-denial"))

    # every control on every view checked has a name a screen reader can announce
    assert set(result["unlabelled"]) == {"signin", "executions", "execution-blocked", "fork", "policy"}
    assert all(v == [] for v in result["unlabelled"].values()), result["unlabelled"]

    assert len(result["shots"]) == 9
    if os.environ.get("REBUNO_UPDATE_DOCS_IMG") == "1":
        dest = os.path.join(ROOT, "docs", "img")
        os.makedirs(dest, exist_ok=True)
        for p in result["shots"]:
            shutil.copy(p, os.path.join(dest, "dashboard-" + os.path.basename(p)))


def test_dashboard_assets_served_with_cache_and_csp(make_kernel):
    """No browser: the embedded files, their headers, and what is not there."""
    import gzip
    import http.client
    import re
    k = make_kernel().start()

    def get(path, headers=None, port=None):
        c = http.client.HTTPConnection("127.0.0.1", port or k.port, timeout=10)
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, {n.lower(): v for n, v in r.getheaders()}, body

    st, h, body = get("/ui/")
    assert st == 200 and h["content-type"].startswith("text/html"), (st, h)
    assert h["cache-control"] == "no-cache"
    assert h["content-security-policy"].startswith("default-src 'self'")
    assert h["x-content-type-options"] == "nosniff"
    assets = re.findall(rb'(?:src|href)="(app-[A-Z0-9]+\.(?:js|css))"', body)
    assert len(assets) == 2, body  # the bundle is built (make builds it when node is here)
    for a in assets:
        st, h, data = get("/ui/" + a.decode())
        assert st == 200 and len(data) > 0
        assert h["cache-control"] == "public, max-age=31536000, immutable"
        assert h["content-security-policy"].startswith("default-src 'self'")
        assert "content-encoding" not in h and h["vary"] == "Accept-Encoding"
        # gzip for a client that takes it: the same bytes, smaller
        st, h, gz = get("/ui/" + a.decode(), {"Accept-Encoding": "br, gzip"})
        assert st == 200 and h["content-encoding"] == "gzip", h
        assert gzip.decompress(gz) == data and len(gz) < len(data) / 2
    st, _, body = get("/ui/service.json")  # no sandboxes here (REBUNO_SANDBOXES=off): no link
    assert st == 200 and json.loads(body) == {"service": "kernel"}
    st, h, _ = get("/ui")
    assert st == 308 and h["location"] == "/ui/"
    for bad in ("/ui/app-NOPE.js", "/ui/..%2fstate", "/ui/%2e%2e", "/ui/index.html/x"):
        st, _, body = get(bad)
        assert st == 404, (bad, st)
        assert json.loads(body)["code"] == "not_found"
    # the files are public, the data is not: the API still wants the token
    st, _, body = get("/v0/executions")
    assert st == 401

    # a server told of a sandbox service shows its sandboxes: service.json says where, and
    # the page may connect there (and nowhere else)
    s = make_kernel(mode="server", env={"REBUNO_DASHBOARD_SANDBOXES": "127.0.0.1:8099"}).start()
    st, h, body = get("/ui/", port=s.port)
    assert h["content-security-policy"].endswith("; connect-src 'self' http://127.0.0.1:8099 ws://127.0.0.1:8099"), h
    st, _, body = get("/ui/service.json", port=s.port)
    assert json.loads(body) == {"service": "kernel", "sandboxes_api": "http://127.0.0.1:8099",
                                "sandboxes_url": "http://127.0.0.1:8099/ui/"}
    bad = make_kernel(mode="server", env={"REBUNO_DASHBOARD_SANDBOXES": "x/y; script-src *"})
    with pytest.raises(RuntimeError, match="dashboard_sandboxes"):
        bad.start()


def test_sandbox_dashboard_terminal_in_chromium(sandboxd, tmpdir_path):
    """sandboxd serves the dashboard's Sandboxes views: the list, a command's output, and a
    terminal (xterm.js over the PTY WebSocket, the token in the subprotocol) typed into."""
    need_browser()
    sandboxd.create("ui-1", metadata={"team": "dash"})
    sandboxd.run("ui-1", "echo", ["hello-from-cmd"])
    shots = os.environ.get("REBUNO_ARTIFACTS") or tempfile.mkdtemp(prefix="rebuno-dashboard-shots-")
    os.makedirs(shots, exist_ok=True)
    print(f"dashboard screenshots in {shots}")
    token = local_auth(sandboxd.port, "sandboxd")["Authorization"].split(" ", 1)[1]
    spec_path = os.path.join(tmpdir_path, "sbx-spec.json")
    with open(spec_path, "w") as f:
        json.dump({"url": f"http://127.0.0.1:{sandboxd.port}", "token": token, "shots": shots,
                   "name": "ui-1", "command_text": "echo typed-$((6*7)) > /tmp/from-ui; cat /tmp/from-ui"}, f)
    proc = subprocess.run(["node", os.path.join(UI, "test", "sandboxes.mjs"), spec_path],
                          capture_output=True, text=True, timeout=180, env=dict(os.environ, CHROMIUM=CHROMIUM))
    assert proc.stdout.strip(), proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in result, (result["error"], result.get("errors"), result.get("page_alerts"))
    row = result["row"]
    assert row[0] == "ui-1" and row[1] == "running" and "team=dash" in row[3] and "vCPU" in row[4]
    assert result["commands"] == ["echo hello-from-cmd"]
    assert result["stdout"] == "hello-from-cmd\n"
    assert "typed-42" in result["terminal"]
    # the typed command really ran in the sandbox
    assert sandboxd.run("ui-1", "cat", ["/tmp/from-ui"])["stdout"] == "typed-42\n"
    assert result["errors"] == [], result["errors"]
    if os.environ.get("REBUNO_UPDATE_DOCS_IMG") == "1":
        for p in result["shots"]:
            shutil.copy(p, os.path.join(ROOT, "docs", "img", "dashboard-" + os.path.basename(p)))


def test_kernel_dashboard_shows_sandboxes_of_rebuno_dev(make_kernel, tmpdir_path):
    """The kernel's own dashboard under `rebuno dev` shows the sandbox views: service.json
    names sandboxd's /v1, the page calls it from the browser (sandboxd's CORS lets exactly
    the kernel's origins in, the kernel's CSP lets the page connect there), asking once for
    the sandbox service's token; a terminal typed into runs in the sandbox."""
    import http.client
    from test_dev_sandboxes import post, wait_for_sandboxd
    need_browser()
    port = free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}"]).start()
    wait_for_sandboxd(port, k)
    st, _ = post(port, "/v1/sandboxes", {"name": "kui-1", "metadata": {"team": "dash"}})
    assert st == 201
    st, out = post(port, "/v1/sandboxes/kui-1/commands", {"cmd": "echo", "args": ["hello-from-cmd"], "wait": True})
    assert st == 200, out
    st, svc = k.request("GET", "/ui/service.json", auth=False)
    assert svc == {"service": "kernel", "sandboxes_api": f"http://127.0.0.1:{port}",
                   "sandboxes_url": f"http://127.0.0.1:{port}/ui/"}, svc

    def preflight(origin):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("OPTIONS", "/v1/sandboxes", headers={"Origin": origin, "Access-Control-Request-Method": "GET",
                                                       "Access-Control-Request-Headers": "authorization"})
        r = c.getresponse()
        r.read()
        return r.status, {n.lower(): v for n, v in r.getheaders()}
    st, h = preflight(f"http://127.0.0.1:{k.port}")
    assert st == 204 and h["access-control-allow-origin"] == f"http://127.0.0.1:{k.port}", (st, h)
    assert "Authorization" in h["access-control-allow-headers"]
    st, h = preflight("http://evil.example")  # any other page: no CORS, and no way past the token
    assert "access-control-allow-origin" not in h and st == 401, (st, h)

    shots = os.environ.get("REBUNO_ARTIFACTS") or tempfile.mkdtemp(prefix="rebuno-dashboard-shots-")
    os.makedirs(shots, exist_ok=True)
    spec_path = os.path.join(tmpdir_path, "ksbx-spec.json")
    with open(spec_path, "w") as f:
        json.dump({"url": f"http://127.0.0.1:{port}", "token": local_auth(port, "sandboxd")["Authorization"][7:],
                   "kernel": {"url": k.url, "token": local_auth(k.port)["Authorization"][7:]},
                   "shots": shots, "name": "kui-1",
                   "command_text": "echo typed-$((6*7)) > /tmp/from-ui; cat /tmp/from-ui"}, f)
    proc = subprocess.run(["node", os.path.join(UI, "test", "sandboxes.mjs"), spec_path],
                          capture_output=True, text=True, timeout=180, env=dict(os.environ, CHROMIUM=CHROMIUM))
    assert proc.stdout.strip(), proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in result, (result["error"], result.get("errors"), result.get("page_alerts"))
    assert result["page_origin"] == k.url  # the kernel's page, not sandboxd's
    assert "refused this token" in result["wrong_token_error"], result["wrong_token_error"]
    row = result["row"]
    assert row[0] == "kui-1" and row[1] == "running" and "team=dash" in row[3] and "vCPU" in row[4]
    assert result["commands"] == ["echo hello-from-cmd"] and result["stdout"] == "hello-from-cmd\n"
    assert "typed-42" in result["terminal"]
    st, out = post(port, "/v1/sandboxes/kui-1/commands", {"cmd": "cat", "args": ["/tmp/from-ui"], "wait": True})
    assert out["stdout"] == "typed-42\n"
    # the refused wrong token is the only failed request (until the sandbox deleted behind
    # the page's back, whose 404s are the point there)
    assert result["errors_before_gone"] == [
        "Failed to load resource: the server responded with a status of 401 (Unauthorized)"], result["errors"]
    # the actions: a snapshot of kui-1, a sandbox made from it, a fork of that one
    from test_dev_sandboxes import get
    st, snap = get(port, f"/v1/snapshots/{result['snapshot']}")
    assert st == 200 and snap["sandbox_name"] == "kui-1", snap
    st, restored = get(port, f"/v1/sandboxes/{result['restored']}")
    assert st == 200 and restored["source"]["type"] == "snapshot" and restored["state"] == "stopped", restored
    assert restored["source"]["snapshot_id"] == result["snapshot"], restored
    assert result["forked"] not in ("kui-1", result["restored"]), result["forked"]
    # the fork paused, resumed (by keyboard), stopped and deleted from the page: each state as
    # the page showed it and as /v1 had it right then
    lc = result["lifecycle"]
    assert lc["before"] == ["running", "running"], lc
    assert lc["paused"] == ["paused", "paused"] and lc["focus_after_pause"] == "resume", lc
    assert lc["resumed"] == ["running", "running"], lc
    assert lc["stopped"] == ["stopped", "stopped"], lc
    assert lc["disabled_when_stopped"] == ["stop", "pause"], lc  # what a stopped sandbox cannot do
    # the confirmation: a modal dialog named for the sandbox, focus on Cancel, Escape keeps it
    assert lc["dialog"]["modal"] and result["forked"] in lc["dialog"]["title"], lc
    assert "cannot be undone" in lc["dialog"]["text"], lc
    assert lc["focus_in_dialog"] == "cancel-delete" and lc["after_escape"] == 200, lc
    assert lc["focus_after_escape"] == "delete" and lc["focus_after_tab"] == "confirm-delete", lc
    assert lc["after_delete"] == 404 and result["forked"] not in lc["listed_after_delete"], lc
    # and the restored one stopped from its row in the list
    assert lc["row_stop_name"] == f"Stop {result['restored']}" and lc["row_stopped"] == "stopped", lc
    st, body = get(port, f"/v1/sandboxes/{result['forked']}")
    assert st == 404 and "sandbox_not_found" in json.dumps(body), (st, body)
    # an action on a sandbox deleted behind the page's back shows sandboxd's reason
    assert "kui-gone" in result["gone_error"] and ("no sandbox" in result["gone_error"]
                                                   or "was deleted" in result["gone_error"]), result["gone_error"]
    post(port, "/v1/sandboxes/kui-1/stop", {})
    if os.environ.get("REBUNO_UPDATE_DOCS_IMG") == "1":
        for p in result["shots"]:
            shutil.copy(p, os.path.join(ROOT, "docs", "img", "dashboard-" + os.path.basename(p)))


def test_sandboxd_ui_public_and_ws_token_subprotocol(sandboxd):
    """sandboxd: the dashboard files need no token, the API still does; a terminal attach may
    carry the token as the "rebuno.bearer.<token>" subprotocol (a browser cannot send
    Authorization), answered with "rebuno"; a wrong one is 401."""
    import base64
    import http.client
    import socket

    def get(path, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", sandboxd.port, timeout=10)
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        body = r.read()
        c.close()
        return r.status, body

    assert get("/ui/")[0] == 200
    assert json.loads(get("/ui/service.json")[1]) == {"service": "sandboxd"}
    assert get("/v1/sandboxes")[0] == 401
    # a subprotocol token is only taken on a WebSocket handshake
    token = local_auth(sandboxd.port, "sandboxd")["Authorization"].split(" ", 1)[1]
    assert get("/v1/sandboxes", {"Sec-WebSocket-Protocol": f"rebuno, rebuno.bearer.{token}"})[0] == 401

    sandboxd.create("ws-1")
    pty = sandboxd.ok("POST", "/v1/sandboxes/ws-1/ptys", {"cmd": "true"}, status=201)

    def handshake(tok):
        s = socket.create_connection(("127.0.0.1", sandboxd.port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET /v1/sandboxes/ws-1/ptys/{pty['id']}/ws HTTP/1.1\r\nHost: x\r\n"
                   f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Protocol: rebuno, rebuno.bearer.{tok}\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        s.close()
        return head.decode(errors="replace")

    bad = handshake("0" * 64)
    assert bad.startswith("HTTP/1.1 401"), bad
    good = handshake(token)
    assert good.startswith("HTTP/1.1 101"), good
    assert "sec-websocket-protocol: rebuno\r\n" in good.lower()


def long_execution(k, events, boundary=1000):
    """An execution of `long` with about `events` events, run through the worker API and left
    running: steps of 4 events (proposed, allowed, executing, succeeded), one of them opened
    a little before event `boundary` and completed a little after it (other steps between),
    so its events straddle the dashboard's page boundary. Returns (id, straddle step id,
    the dispatch headers, every step id)."""
    ex = k.create("long", {"task": "many steps"})
    w = k.worker("long")
    claim = k.claim("long", w, wait=10)
    assert claim and claim["execution"]["id"] == ex["id"], claim
    h = {"Rebuno-Dispatch-Id": claim["dispatch"]["id"], "Rebuno-Dispatch-Attempt": str(claim["dispatch"]["attempt"])}
    path = f"/v0/executions/{ex['id']}"
    last, i, straddle, steps = 4, 0, None, []

    def propose(target):
        sid = k.ok("POST", f"{path}/steps", {"kind": "tool_call", "target": target,
                                             "args": {"path": f"src/file_{i}.py"}}, headers=h)["step_id"]
        steps.append(sid)
        return sid
    while last < events:
        if straddle is None and last >= boundary - 12:
            straddle = propose("straddle")
            last += 3
        sid = propose("write_file")
        k.ok("POST", f"{path}/steps/{sid}/complete", {"result": {"ok": True, "i": i}}, headers=h)
        last += 4
        i += 1
        if straddle and last >= boundary + 12 and straddle not in ("done",):
            k.ok("POST", f"{path}/steps/{straddle}/complete", {"result": {"ok": True}}, headers=h)
            last += 1
            straddle_id, straddle = straddle, "done"
    assert k.ok("GET", path)["last_seq"] == last
    return ex["id"], straddle_id, h, steps


def test_dashboard_timeline_pages_in_chromium(make_kernel, tmpdir_path):
    """A running execution of ~2,500 events: the first screen reads one page (1,000 events)
    and shows its start; a keyboard press on "load more" and then scrolling read the next
    pages up to the last event; a step whose events straddle a page boundary is one entry
    with all its events; a live event committed while pages are unread waits for them, and
    ones committed after the end is reached are appended live."""
    need_browser()
    k = make_kernel("agents:\n  - name: long\n").start()
    exec_id, straddle, headers, steps = long_execution(k, 2500)
    last_seq = k.ok("GET", f"/v0/executions/{exec_id}")["last_seq"]
    evs = []
    while len(evs) < last_seq:
        evs += k.ok("GET", f"/v0/executions/{exec_id}/events?after_seq={len(evs)}&limit=1000")
    straddle_seqs = [e["event_seq"] for e in evs if (e.get("payload") or {}).get("step_id") == straddle]
    assert min(straddle_seqs) <= 1000 < max(straddle_seqs), straddle_seqs  # the set-up did straddle

    shots = os.environ.get("REBUNO_ARTIFACTS") or tempfile.mkdtemp(prefix="rebuno-dashboard-shots-")
    os.makedirs(shots, exist_ok=True)
    print(f"dashboard screenshots in {shots}")
    spec_path = os.path.join(tmpdir_path, "timeline-spec.json")
    with open(spec_path, "w") as f:
        json.dump({"url": k.url, "token": local_auth(k.port)["Authorization"][7:], "shots": shots, "id": exec_id,
                   "headers": headers, "straddle": straddle, "last_seq": last_seq}, f)
    proc = subprocess.run(["node", os.path.join(UI, "test", "timeline.mjs"), spec_path],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, CHROMIUM=CHROMIUM))
    assert proc.stdout.strip(), proc.stderr
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if "error" in r:
        print(r["error"])  # whole, where the assertion's message is cut
    assert "error" not in r, (r["error"], r.get("errors"), r.get("page"))

    # the first screen: one page read, the log's first 1,000 events on it, and no more
    first = r["first"]
    assert first["pages_read"] == [[0, 1000]], first["pages_read"]
    assert first["events"] == 1000 and first["max"] == 1000, first
    assert f"the first 1000 of {last_seq} events" in first["heading"], first["heading"]
    assert first["more"] == "Show the next 1000 events", first["more"]
    # the straddling step is there with the events page 1 holds, and only once
    [part] = [s for s in first["steps"] if s["id"] == straddle]
    assert part["events"] == len([q for q in straddle_seqs if q <= 1000]) and part["last"] <= 1000, part
    # a live step proposed while pages are unread: counted, not shown past the gap
    assert r["while_unread"]["events"] == 1000 and r["while_unread"]["max"] == 1000
    # Enter on the button read page 2
    kb = r["after_keyboard"]
    assert kb["pages_read"][:2] == [[0, 1000], [1000, 1000]] and kb["events"] >= 2000, kb
    # and focus went on to the first new entry: the first event of page 2 not in a step already shown
    assert kb["focus"]["index"] == kb["entries_before"] and kb["focus"]["first"] > 1000, kb

    total = last_seq + 3  # with the live step's proposed, allowed and executing
    done = r["all"]
    # every event once, in order, up to the live step's; each page read once, in order
    assert done["events"] == total and done["max"] == total and done["more"] is None, done
    assert done["pages_read"] == [[a, 1000] for a in range(0, total, 1000)], done["pages_read"]
    ids = [s["id"] for s in done["steps"]]
    assert len(ids) == len(set(ids)) == len(steps) + 1, (len(ids), len(set(ids)), len(steps))
    [whole] = [s for s in done["steps"] if s["id"] == straddle]
    assert (whole["first"], whole["last"], whole["events"]) == (min(straddle_seqs), max(straddle_seqs), 4), whole
    assert [t for _, t in r["straddle_sub"]] == ["step.proposed", "step.allowed", "step.executing", "step.succeeded"]
    assert [int(q.lstrip("#")) for q, _ in r["straddle_sub"]] == straddle_seqs
    assert [s for s in done["steps"] if s["id"] == r["live_step"]][0]["events"] == 3
    # after the end was reached: the live step's completion and the execution's end, appended
    final = k.ok("GET", f"/v0/executions/{exec_id}")
    assert final["status"] == "completed"
    end = r["end"]
    assert end["events"] == final["last_seq"] and end["max"] == final["last_seq"], (end, final["last_seq"])
    assert end["pages_read"] == done["pages_read"]  # the stream brought them, no page read again
    assert f"({final['last_seq']} events, {len(steps) + 1} steps)" in end["heading"], end["heading"]
    assert [s for s in end["steps"] if s["id"] == r["live_step"]][0]["events"] == 4
    assert r["errors"] == [], r["errors"]
    if os.environ.get("REBUNO_UPDATE_DOCS_IMG") == "1":
        for p in r["shots"]:
            shutil.copy(p, os.path.join(ROOT, "docs", "img", "dashboard-" + os.path.basename(p)))
