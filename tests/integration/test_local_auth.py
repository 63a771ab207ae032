"""Local authentication with no set-up (issue 13, finding 4).

A kernel without api_keys and sandboxd make a random token at every start, in a 0600 file
of their state folder and in the starting user's registry folder, and answer 401 to any
call without it but health. Loopback is every local user: here another one (nobody,
through setpriv) gets 401 from every route and changes nothing, while the user who
started the daemons uses the CLI and the Python SDK with no key given.
"""
import base64
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import BIN, Dispatch, _localauth, free_port, local_auth

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (sandboxd; setpriv to nobody)")

AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
CLI_ENV = {"ASAN_OPTIONS": "detect_leaks=0"}

# Sends each request of a JSON list read from stdin; prints [[status, body], ...].
_CLIENT = textwrap.dedent("""
    import base64, http.client, json, sys
    port, reqs = json.load(sys.stdin)
    out = []
    for method, path, body, headers in reqs:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        data = base64.b64decode(body) if body is not None else None
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        raw = r.read()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode(errors="replace")
        out.append([r.status, parsed, r.getheader("WWW-Authenticate")])
        c.close()
    print(json.dumps(out))
""")


def as_nobody(port, reqs):
    """Send reqs ((method, path, json body or bytes or None, headers)) to port as the local
    user nobody, from a process of its own; [(status, body, WWW-Authenticate)]."""
    enc = []
    for method, path, body, headers in reqs:
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **headers}
        enc.append([method, path, base64.b64encode(body).decode() if body is not None else None, headers])
    p = subprocess.run([*AS_NOBODY, sys.executable, "-c", _CLIENT], input=json.dumps([port, enc]),
                       capture_output=True, text=True, timeout=300, cwd="/")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def run(args, env=None, nobody=False, cwd="/", **kw):
    """The rebuno CLI (as nobody with nobody=True)."""
    cmd = [*(AS_NOBODY if nobody else []), BIN, *args]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120, cwd=cwd,
                          env=dict(os.environ, **CLI_ENV, **(env or {})), **kw)


def assert_refused(results, what):
    for (method, path, _, _), (st, body, www) in zip(what, results):
        assert st == 401, (method, path, st, body)
        e = body.get("error", body)  # sandboxd nests its errors; the kernel's are at the top
        assert e["code"] == "unauthorized" and (e.get("field") or e["details"]["field"]) == "Authorization", body
        assert www and www.startswith("Bearer"), (method, path, www)


def token_file(state):
    path = os.path.join(state, _localauth.TOKEN_FILE)
    with open(path) as f:
        return path, json.load(f)


def registry_entry(port):
    return os.path.join(_localauth.registry_dir(), f"127.0.0.1_{port}")


def assert_private(path):
    """A regular file of root, mode 0600, in a folder of root, mode 0700; nobody cannot open it."""
    st = os.lstat(path)
    assert stat.S_ISREG(st.st_mode) and st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
    d = os.stat(os.path.dirname(path))
    assert d.st_uid == 0 and stat.S_IMODE(d.st_mode) == 0o700, oct(d.st_mode)
    p = subprocess.run([*AS_NOBODY, "cat", path], capture_output=True, text=True, cwd="/")
    assert p.returncode != 0 and "Permission denied" in p.stderr, p


# --- sandboxd ---------------------------------------------------------------------------------

@pytest.fixture
def root_only(tmp_path):
    """A host folder only root may read, holding a secret."""
    d = tmp_path / "root-only"
    d.mkdir(mode=0o700)
    (d / "secret.txt").write_text("root's secret\n")
    os.chmod(d / "secret.txt", 0o600)
    os.chmod(tmp_path, 0o755)  # nobody may name the path, not read it
    return str(d)


def test_other_local_user_gets_401_from_every_sandboxd_route(sandboxd, root_only):
    sandboxd.create("victim")
    sandboxd.write("victim", "/root/secret", b"owner's data")
    cid = sandboxd.ok("POST", "/v1/sandboxes/victim/commands", {"cmd": "sleep", "args": ["300"]},
                      status=(200, 201, 202))["id"]
    pty = sandboxd.ok("POST", "/v1/sandboxes/victim/ptys", {"cmd": "cat"}, status=(200, 201))["id"]
    c = f"/v1/sandboxes/victim/commands/{cid}"
    ws = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
          "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
    reqs = [
        ("POST", "/v1/images", {"type": "dir", "path": root_only}, {}),
        ("GET", "/v1/images", None, {}),
        ("GET", "/v1/images/sha256:" + "0" * 64, None, {}),
        ("DELETE", "/v1/images/sha256:" + "0" * 64, None, {}),
        ("POST", "/v1/sandboxes", {"name": "evil"}, {}),
        ("GET", "/v1/sandboxes", None, {}),
        ("GET", "/v1/sandboxes/victim", None, {}),
        ("PATCH", "/v1/sandboxes/victim", {"metadata": {"owner": "nobody"}}, {}),
        ("POST", "/v1/sandboxes/victim/stop", {}, {}),
        ("POST", "/v1/sandboxes/victim/pause", {}, {}),
        ("POST", "/v1/sandboxes/victim/resume", {}, {}),
        ("POST", "/v1/sandboxes/victim/extend", {"duration_ms": 1000}, {}),
        ("POST", "/v1/sandboxes/victim/commands", {"cmd": "touch", "args": ["/root/pwned"], "wait": True}, {}),
        ("GET", "/v1/sandboxes/victim/commands", None, {}),
        ("GET", c, None, {}),
        ("GET", c + "/wait", None, {}),
        ("GET", c + "/output", None, {}),
        ("GET", c + "/stream", None, {}),
        ("POST", c + "/stdin", b"input", {"Content-Type": "application/octet-stream"}),
        ("POST", c + "/signal", {"signal": "SIGKILL"}, {}),
        ("POST", "/v1/sandboxes/victim/users", {"name": "mallory"}, {}),
        ("GET", "/v1/sandboxes/victim/users/root", None, {}),
        ("GET", "/v1/sandboxes/victim/files/content?path=/root/secret", None, {}),
        ("PUT", "/v1/sandboxes/victim/files/content?path=/root/secret", b"pwned",
         {"Content-Type": "application/octet-stream"}),
        ("GET", "/v1/sandboxes/victim/files/stat?path=/root/secret", None, {}),
        ("GET", "/v1/sandboxes/victim/files/list?path=/root", None, {}),
        ("POST", "/v1/sandboxes/victim/files/mkdir", {"path": "/root/evil"}, {}),
        ("POST", "/v1/sandboxes/victim/files/rename", {"from": "/root/secret", "to": "/root/gone"}, {}),
        ("DELETE", "/v1/sandboxes/victim/files?path=/root/secret", None, {}),
        ("POST", "/v1/sandboxes/victim/files/extract", {"path": "/root", "source": {"type": "tarball", "path": "/x.tar"}}, {}),
        ("POST", "/v1/sandboxes/victim/snapshots", {}, {}),
        ("POST", "/v1/sandboxes/victim/fork", {"name": "evil-fork"}, {}),
        ("GET", "/v1/snapshots", None, {}),
        ("GET", "/v1/snapshots/x", None, {}),
        ("DELETE", "/v1/snapshots/x", None, {}),
        ("POST", "/v1/drives", {"name": "evil-drive"}, {}),
        ("GET", "/v1/drives", None, {}),
        ("GET", "/v1/drives/evil-drive", None, {}),
        ("POST", "/v1/drives/evil-drive/fork", {}, {}),
        ("DELETE", "/v1/drives/evil-drive", None, {}),
        ("POST", "/v1/sandboxes/victim/ptys", {"cmd": "bash"}, {}),
        ("GET", "/v1/sandboxes/victim/ptys", None, {}),
        ("GET", f"/v1/sandboxes/victim/ptys/{pty}", None, {}),
        ("GET", f"/v1/sandboxes/victim/ptys/{pty}/ws", None, ws),
        ("DELETE", f"/v1/sandboxes/victim/ptys/{pty}", None, {}),
        ("DELETE", "/v1/sandboxes/victim", None, {}),
        ("GET", "/v1/no-such-route", None, {}),
    ]
    # a guessed token is no better than none
    guessed = [(m, p, b, {**h, "Authorization": "Bearer " + "0" * 64}) for m, p, b, h in reqs[:6]]
    results = as_nobody(sandboxd.port, reqs + guessed)
    assert_refused(results, reqs + guessed)
    assert results[0][1]["error"]["message"].count("local-token") == 1
    # health stays open (probes, readiness)
    assert as_nobody(sandboxd.port, [("GET", "/v1/health", None, {})])[0][0] == 200
    # nothing changed
    assert [s["name"] for s in sandboxd.ok("GET", "/v1/sandboxes")["sandboxes"]] == ["victim"]
    assert sandboxd.get("victim")["state"] == "running"
    assert sandboxd.ok("GET", "/v1/images")["images"] == []
    assert sandboxd.ok("GET", "/v1/drives")["drives"] == []
    assert sandboxd.ok("GET", "/v1/snapshots")["snapshots"] == []
    assert sandboxd.read("victim", "/root/secret") == (200, b"owner's data")
    assert sandboxd.ok("GET", c)["status"] == "running"
    assert [p["id"] for p in sandboxd.ok("GET", "/v1/sandboxes/victim/ptys")["ptys"]] == [pty]
    sandboxd.ok("DELETE", f"/v1/sandboxes/victim/ptys/{pty}", status=(204, 409))


def test_issue_reproduction_other_user_cannot_import_a_root_only_folder(sandboxd, root_only):
    """As nobody: import a root-only host folder as an image, start a sandbox on it and read
    the secret through the files API. Each step is refused; nothing is imported."""
    img = as_nobody(sandboxd.port, [("POST", "/v1/images", {"type": "dir", "path": root_only}, {})])[0]
    assert img[0] == 401, img
    digest = (img[1] or {}).get("digest", "sha256:" + "0" * 64)
    box = as_nobody(sandboxd.port, [("POST", "/v1/sandboxes", {"name": "loot", "image": digest}, {})])[0]
    assert box[0] == 401, box
    read = as_nobody(sandboxd.port, [("GET", "/v1/sandboxes/loot/files/content?path=/secret.txt", None, {})])[0]
    assert read[0] == 401 and "root's secret" not in json.dumps(read[1]), read
    assert sandboxd.ok("GET", "/v1/images")["images"] == []
    # the CLI as nobody finds no token and says what to do
    p = run(["sandbox", "create", "loot"], env={"REBUNO_SANDBOX_URL": sandboxd.url}, nobody=True)
    assert p.returncode == 1 and "local token" in p.stderr and "REBUNO_SANDBOX_TOKEN" in p.stderr, p
    assert sandboxd.ok("GET", "/v1/images")["images"] == []


def test_sandboxd_token_file_and_owner_clients(sandboxd, tmp_path):
    """The token is in a 0600 file (state folder and registry); the owner's CLI (terminals
    included) and Python client work with no token given; a wrong token is 401 naming the
    header; a graceful stop removes both files."""
    path, entry = token_file(sandboxd.state)
    assert entry["url"] == sandboxd.url and entry["service"] == "sandboxd" and len(entry["token"]) == 64
    assert_private(path)
    reg = registry_entry(sandboxd.port)
    assert_private(reg)
    with open(reg) as f:
        assert json.load(f)["token"] == entry["token"]
    env = {"REBUNO_SANDBOX_URL": sandboxd.url}
    p = run(["sandbox", "create", "mine"], env=env)
    assert p.returncode == 0, p
    p = run(["sandbox", "exec", "mine", "--", "echo", "hi"], env=env)
    assert p.returncode == 0 and p.stdout == "hi\n", p
    p = run(["sandbox", "cp", "-", "mine:/root/f"], env=env, input="data")
    assert p.returncode == 0, p
    p = run(["sandbox", "sh", "mine", "--", "cat", "/root/f"], env=env)
    assert p.returncode == 0 and "data" in p.stdout, p
    # without the registry: ./.rebuno/sandboxes/local-token (what `rebuno dev` gives sandboxd)
    no_registry = {**env, "XDG_CONFIG_HOME": str(tmp_path / "empty")}
    p = run(["sandbox", "ls"], env=no_registry, cwd=str(tmp_path))
    assert p.returncode == 1 and "no local token" in p.stderr and "REBUNO_SANDBOX_TOKEN" in p.stderr, p
    (tmp_path / ".rebuno").mkdir()
    os.symlink(sandboxd.state, tmp_path / ".rebuno" / "sandboxes")
    p = run(["sandbox", "ls"], env=no_registry, cwd=str(tmp_path))
    assert p.returncode == 0 and "mine" in p.stdout, p
    # an explicit token wins, and a wrong one is refused naming the header
    p = run(["sandbox", "ls"], env={**env, "REBUNO_SANDBOX_TOKEN": "f" * 64})
    assert p.returncode == 1 and "wrong token in Authorization" in p.stderr, p
    st, out = sandboxd.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer nope"})
    assert st == 401 and out["error"]["field"] == "Authorization" and path in out["error"]["message"]
    st, out = sandboxd.request("GET", "/v1/sandboxes", auth=False)
    assert st == 401 and "REBUNO_SANDBOX_TOKEN" in out["error"]["message"], out
    # the Python client, with nothing given
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python")!r})
        from rebuno.sandbox.sync import SyncSandboxClient
        with SyncSandboxClient({sandboxd.url!r}) as c:
            box = c.get_sandbox(name="mine")
            print(box.run_command("cat", ["/root/f"], capture_output=True).stdout)
            with box.open_interactive("sh", ["-c", "echo pty-ok"]) as pty:
                assert pty.wait(timeout=30) == 0
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd="/")
    assert p.returncode == 0 and "data" in p.stdout, p
    sandboxd.stop(signal.SIGTERM)
    assert not os.path.exists(path) and not os.path.exists(reg)


# --- the kernel ------------------------------------------------------------------------------

POLICY = """
agents:
  - name: coder
    policy: |
      default_action: allow
      rules:
        - id: open-pr
          when:
            target: open_pr
          then:
            decision: require_approval
            reason: opening a pull request needs approval
"""


def test_other_local_user_gets_401_from_the_kernel(make_kernel):
    k = make_kernel(POLICY).start()
    ex = k.create("coder", {"task": "fix"})
    d = Dispatch(k, k.claim("coder", k.worker("coder")))
    dec = d.submit("open_pr", {"title": "Fix"}, idempotency="at_most_once")
    assert dec["decision"] == "blocked", dec
    appr = dec["approval_id"]
    e = f"/v0/executions/{ex['id']}"
    reqs = [
        ("POST", f"/v0/approvals/{appr}/grant", {"decided_by": "mallory"}, {}),
        ("POST", f"/v0/approvals/{appr}/deny", {"decided_by": "mallory"}, {}),
        ("GET", "/v0/approvals", None, {}),
        ("GET", f"/v0/approvals/{appr}", None, {}),
        ("POST", "/v0/executions", {"agent_id": "coder"}, {}),
        ("GET", "/v0/executions", None, {}),
        ("GET", e, None, {}),
        ("POST", e + "/cancel", {}, {}),
        ("GET", e + "/events", None, {}),
        ("GET", e + "/events/stream", None, {}),
        ("GET", e + "/steps", None, {}),
        ("POST", e + "/steps", {"kind": "tool_call", "target": "x"}, d.headers),
        ("POST", e + "/complete", {"output": {}}, d.headers),
        ("POST", e + "/fork", {"at": 1}, {}),
        ("GET", "/v0/agents", None, {}),
        ("POST", "/v0/agents/coder/workers", {}, {}),
        ("POST", "/v0/agents/coder/claim", {"worker_id": "w", "wait_seconds": 0}, {}),
    ]
    results = as_nobody(k.port, reqs)
    assert_refused(results, reqs)
    assert "local-token" in results[0][1]["message"]
    assert "REBUNO_API_KEY" in results[0][1]["message"]
    assert as_nobody(k.port, [("GET", "/v0/health", None, {})])[0][0] == 200
    # the CLI as nobody: refused, and told what to do
    p = run(["approval", "approve", appr, "--by", "mallory", "--url", k.url], nobody=True)
    assert p.returncode == 1 and "local token" in p.stderr, p
    # nothing changed
    assert k.ok("GET", f"/v0/approvals/{appr}")["status"] == "pending"
    assert k.ok("GET", e)["status"] == "blocked"
    assert len(k.ok("GET", "/v0/executions")["executions"]) == 1
    # the owner's CLI, with no key: approves
    p = run(["approval", "approve", appr, "--by", "alice", "--url", k.url])
    assert p.returncode == 0, p
    assert k.ok("GET", f"/v0/approvals/{appr}")["status"] == "granted"


def test_kernel_token_file_and_owner_clients(make_kernel, tmp_path):
    """0600 token file and registry entry; the owner's CLI and SDK with no key (the SDK
    also across a restart, which makes a new token); wrong token is 401 naming the header;
    a graceful stop removes both files."""
    k = make_kernel().start()
    state = os.path.join(k.state_dir, "state")
    path, entry = token_file(state)
    assert entry["url"] == k.url and entry["service"] == "kernel" and len(entry["token"]) == 64
    assert_private(path)
    reg = registry_entry(k.port)
    assert_private(reg)
    p = run(["exec", "create", "hello", '{"name": "world"}', "--url", k.url])
    assert p.returncode == 0, p
    exec_id = p.stdout.split()[1]  # "created <id> (agent hello, pending)"
    p = run(["exec", "list", "--url", k.url])
    assert p.returncode == 0 and exec_id in p.stdout, p
    # from the state folder alone (no registry), with REBUNO_STATE_DIR
    p = run(["exec", "list", "--url", k.url],
            env={"XDG_CONFIG_HOME": str(tmp_path / "empty"), "REBUNO_STATE_DIR": state})
    assert p.returncode == 0 and exec_id in p.stdout, p
    p = run(["exec", "list", "--url", k.url], env={"XDG_CONFIG_HOME": str(tmp_path / "empty")})
    assert p.returncode == 1 and "no local token" in p.stderr and "REBUNO_API_KEY" in p.stderr, p
    # a token is only sent to the address it was made for
    other = make_kernel().start()
    p = run(["exec", "list", "--url", other.url],
            env={"XDG_CONFIG_HOME": str(tmp_path / "empty"), "REBUNO_STATE_DIR": state})
    assert p.returncode == 1 and "no local token" in p.stderr, p
    st, out = k.request("GET", "/v0/executions", key="0" * 64)
    assert st == 401 and out["details"]["field"] == "Authorization" and "wrong token" in out["message"]
    st, out = k.request("GET", "/v0/executions", auth=False)
    assert st == 401 and path in out["message"], out
    # the SDK with nothing given, across a restart of the kernel (a new token)
    code = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {os.path.join(os.path.dirname(__file__), "..", "..", "sdk", "python")!r})
        from rebuno import SyncClient
        with SyncClient({k.url!r}) as c:
            print(len(c.list().executions), flush=True)
            sys.stdin.readline()
            print(len(c.list().executions), flush=True)
    """)
    sdk = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd="/")
    try:
        assert sdk.stdout.readline().strip() == "1", sdk.stderr.read() if sdk.poll() is not None else ""
        k.stop(signal.SIGTERM)
        assert not os.path.exists(path) and not os.path.exists(reg)
        k.start()
        assert token_file(state)[1]["token"] != entry["token"]
        out, err = sdk.communicate("\n", timeout=60)
        assert sdk.returncode == 0 and out.strip() == "1", (out, err)
    finally:
        if sdk.poll() is None:
            sdk.kill()
            sdk.wait()


def test_api_keys_mode_makes_no_local_token(make_kernel):
    """With api_keys the kernel behaves as before: keys only, no token file, no entry."""
    k = make_kernel("api_keys:\n  - key: admin-key-0123456789abcdef\n    role: admin\n", mode="server").start()
    state = os.path.join(k.state_dir, "state")
    assert not os.path.exists(os.path.join(state, _localauth.TOKEN_FILE))
    assert not os.path.exists(registry_entry(k.port))
    assert k.request("GET", "/v0/executions", key="admin-key-0123456789abcdef")[0] == 200
    st, out = k.request("GET", "/v0/executions")
    assert st == 401 and out["message"].startswith("missing API key"), out


def test_tokens_never_reach_sandboxes_logs_or_child_processes(make_kernel):
    """rebuno dev with sandboxes: neither token is in any descendant's command line or
    environment, in the logs, or anywhere a sandbox's processes can read."""
    port = free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}"]).start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(400):
        if local_auth(port, "sandboxd"):
            break
        time.sleep(0.05)
    ktoken = token_file(os.path.join(k.state_dir, "state"))[1]["token"]
    stoken = token_file(os.path.join(k.state_dir, "state", "sandboxes"))[1]["token"]
    assert ktoken != stoken
    env = {"REBUNO_SANDBOX_URL": url}
    assert run(["sandbox", "create", "probe"], env=env).returncode == 0
    p = run(["sandbox", "exec", "probe", "--", "bash", "-c",
             "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n'; env; "
             "grep -rsl . /etc /root /tmp /run /home 2>/dev/null | head -2000 | xargs cat 2>/dev/null"],
            env=env)
    assert p.returncode == 0, p
    assert ktoken not in p.stdout and stoken not in p.stdout
    # every process of the tree (sandboxd, its zygote, inits, proxy)
    tree, todo = set(), [k.proc.pid]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    assert len(tree) > 2
    for pid in tree:
        for what in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            assert ktoken.encode() not in data and stoken.encode() not in data, (pid, what)
    k.stop(signal.SIGTERM)
    log = k.read_log()
    assert ktoken not in log and stoken not in log
