"""sandboxd commands: run to completion, detached commands with stdin streaming,
output re-attach by byte offset (raw and SSE), signals, timeouts that kill the
whole process group, and bounded output."""
import base64
import http.client
import json
import time

from conftest import local_auth


def test_run_to_completion(sandboxd):
    sandboxd.create("cmds", env={"SBX_VAR": "from-sandbox", "OVR": "sandbox"})
    r = sandboxd.run("cmds", "echo", ["hello", "$HOME", "a b;c"])
    assert r["stdout"] == "hello $HOME a b;c\n" and r["exit_code"] == 0  # argv, never a shell
    assert r["status"] == "exited" and r["signal"] is None and r["user"] == "root"
    r = sandboxd.sh("cmds", "echo out; echo err >&2; exit 7")
    assert (r["stdout"], r["stderr"], r["exit_code"]) == ("out\n", "err\n", 7)
    r = sandboxd.sh("cmds", 'echo "$HOME $USER $LOGNAME $PWD $SBX_VAR $OVR"', env={"OVR": "cmd"})
    assert r["stdout"] == "/root root root /root from-sandbox cmd\n"
    r = sandboxd.run("cmds", "pwd", cwd="/tmp")
    assert r["stdout"] == "/tmp\n"
    r = sandboxd.run("cmds", "cat", input="piped input")
    assert r["stdout"] == "piped input"
    r = sandboxd.run("cmds", "cat", input=base64.b64encode(b"\x00\xffbin").decode(),
                     input_encoding="base64", output_encoding="base64")
    assert base64.b64decode(r["stdout"]) == b"\x00\xffbin"
    r = sandboxd.run("cmds", "printf", ["\\xff\\xfeok"])
    assert r["stdout"] == "\ufffd\ufffdok"  # invalid UTF-8 is replaced in utf-8 mode
    r = sandboxd.sh("cmds", "kill -TERM $$")
    assert r["signal"] == "TERM" and r["exit_code"] == 128 + 15
    r = sandboxd.run("cmds", "python3", ["-c", "import sys; print(sys.version_info[0])"])
    assert r["stdout"] == "3\n"
    r = sandboxd.run("cmds", "git", ["--version"])
    assert r["stdout"].startswith("git version")

    for body, code in [({"cmd": "no-such-binary"}, "command_not_found"),
                       ({"cmd": "/etc/passwd"}, "permission_denied"),
                       ({"cmd": "true", "cwd": "/nope"}, "cwd_not_found"),
                       ({"cmd": "true", "user": "ghost"}, "user_not_found"),
                       ({"cmd": ""}, "validation_error"),
                       ({"cmd": "true", "args": "x"}, "validation_error"),
                       ({"cmd": "true", "env": {"A=B": "c"}}, "validation_error")]:
        st, err = sandboxd.request("POST", "/v1/sandboxes/cmds/commands", {**body, "wait": True})
        assert err["error"]["code"] == code, (body, st, err)
        assert 400 <= st < 500
    # the failures are listed too, and the sandbox is fine
    cmds = sandboxd.ok("GET", "/v1/sandboxes/cmds/commands")["commands"]
    assert any(c["status"] == "failed" for c in cmds)
    assert sandboxd.run("cmds", "true")["exit_code"] == 0


def read_until(sandboxd, base, offset, want):
    """Long-poll the output from offset until want arrived (writes may come in pieces)."""
    got = b""
    while len(got) < len(want):
        st, out = sandboxd.request("GET", f"{base}/output?offset={offset + len(got)}&wait_ms=5000")
        assert st == 200 and out, (st, out, got)
        got += out
    return got


def test_detached_stdin_streaming_and_reattach(sandboxd):
    sandboxd.create("io")
    c = sandboxd.ok("POST", "/v1/sandboxes/io/commands",
                    {"cmd": "python3", "args": ["-u", "-c",
                     "import sys\nfor l in sys.stdin: print(l.strip().upper(), flush=True)"],
                     "stdin": "pipe"}, status=201)
    assert c["status"] == "running" and c["stdin_open"]
    base = f"/v1/sandboxes/io/commands/{c['id']}"
    sandboxd.ok("POST", base + "/stdin", raw=b"ping\n")
    assert read_until(sandboxd, base, 0, b"PING\n") == b"PING\n"
    assert sandboxd.last_headers["X-Rebuno-Next-Offset"] == "5"
    sandboxd.ok("POST", base + "/stdin", raw=b"second\n")
    # re-attach from an offset: only what came after it
    assert read_until(sandboxd, base, 5, b"SECOND\n") == b"SECOND\n"
    # the whole log is still there from 0
    st, out = sandboxd.request("GET", base + "/output?offset=0")
    assert out == b"PING\nSECOND\n"
    sandboxd.ok("POST", base + "/stdin?close=true", raw=b"last\n")
    w = sandboxd.ok("GET", base + "/wait?timeout_ms=10000")
    assert w["status"] == "exited" and w["exit_code"] == 0 and not w["stdin_open"]
    st, out = sandboxd.request("GET", base + "/output?offset=12")
    assert out == b"LAST\n" and sandboxd.last_headers["X-Rebuno-Eof"] == "true"
    st, err = sandboxd.request("POST", base + "/stdin", raw=b"late")
    assert st == 409 and err["error"]["code"] == "stdin_closed"
    got = sandboxd.ok("GET", base)
    assert got["id"] == c["id"] and got["stdout_bytes"] == 17


def sse_events(sandboxd, path, headers=None, limit=100, timeout=20):
    conn = http.client.HTTPConnection("127.0.0.1", sandboxd.port, timeout=timeout)
    conn.request("GET", path, headers={**local_auth(sandboxd.port, "sandboxd"), **(headers or {})})
    resp = conn.getresponse()
    assert resp.status == 200
    events, ev = [], {}
    while len(events) < limit:
        line = resp.fp.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if not line:
            if ev:
                events.append(ev)
                if ev.get("event") == "exit":
                    break
            ev = {}
            continue
        if line.startswith(":"):
            continue
        k, _, v = line.partition(": ")
        ev[k] = ev.get(k, "") + v
    conn.close()
    return events


def test_sse_stream_and_resume(sandboxd):
    sandboxd.create("sse")
    c = sandboxd.ok("POST", "/v1/sandboxes/sse/commands",
                    {"cmd": "bash", "args": ["-c", "for i in 1 2 3; do echo o$i; echo e$i >&2; "
                                                   "sleep 0.1; done"]}, status=201)
    path = f"/v1/sandboxes/sse/commands/{c['id']}/stream"
    evs = sse_events(sandboxd, path)
    out = b"".join(base64.b64decode(json.loads(e["data"])["data"]) for e in evs
                   if e.get("event") == "stdout")
    err = b"".join(base64.b64decode(json.loads(e["data"])["data"]) for e in evs
                   if e.get("event") == "stderr")
    assert out == b"o1\no2\no3\n" and err == b"e1\ne2\ne3\n"
    assert evs[-1]["event"] == "exit" and json.loads(evs[-1]["data"])["exit_code"] == 0
    # reconnecting with the last id replays nothing already seen
    last = [e for e in evs if "id" in e][-1]["id"]
    again = sse_events(sandboxd, path, headers={"Last-Event-ID": last})
    assert [e["event"] for e in again] == ["exit"]
    # and from explicit offsets, only the tail
    tail = sse_events(sandboxd, path + "?stdout_offset=6&stderr_offset=9")
    got = b"".join(base64.b64decode(json.loads(e["data"])["data"]) for e in tail
                   if e.get("event") in ("stdout", "stderr"))
    assert got == b"o3\n"


def test_signals_and_timeouts_kill_the_group(sandboxd):
    sandboxd.create("sig")
    # a timeout kills the whole process group, background children included
    t0 = time.time()
    r = sandboxd.sh("sig", "sleep 300 & sleep 301 & echo started; wait", timeout_ms=500)
    assert time.time() - t0 < 10
    assert r["timed_out"] and r["signal"] == "KILL" and r["stdout"] == "started\n"
    ps = sandboxd.sh("sig", "ps -eo args --no-headers")["stdout"]
    assert "sleep 30" not in ps, ps
    # signals to a detached command, TERM handled by the command itself
    c = sandboxd.ok("POST", "/v1/sandboxes/sig/commands",
                    {"cmd": "bash", "args": ["-c", "trap 'echo got-term; exit 3' TERM; "
                                                   "echo ready; while :; do sleep 0.05; done"]},
                    status=201)
    base = f"/v1/sandboxes/sig/commands/{c['id']}"
    read_until(sandboxd, base, 0, b"ready\n")  # the trap is set
    sandboxd.ok("POST", base + "/signal", {"signal": "TERM"})
    w = sandboxd.ok("GET", base + "/wait?timeout_ms=10000")
    assert w["exit_code"] == 3
    st, out = sandboxd.request("GET", base + "/output")
    assert out == b"ready\ngot-term\n"
    st, err = sandboxd.request("POST", base + "/signal", {"signal": "KILL"})
    assert st == 409 and err["error"]["code"] == "command_finished"
    st, err = sandboxd.request("POST", base + "/signal", {"signal": "NOPE"})
    assert st == 400
    # a wait that times out answers with the running command
    c = sandboxd.ok("POST", "/v1/sandboxes/sig/commands", {"cmd": "sleep", "args": ["30"]},
                    status=201)
    w = sandboxd.ok("GET", f"/v1/sandboxes/sig/commands/{c['id']}/wait?timeout_ms=200")
    assert w["status"] == "running"
    sandboxd.ok("POST", f"/v1/sandboxes/sig/commands/{c['id']}/signal", {"signal": 9})
    w = sandboxd.ok("GET", f"/v1/sandboxes/sig/commands/{c['id']}/wait?timeout_ms=5000")
    assert w["signal"] == "KILL" and w["killed"]


def test_output_is_bounded_and_stop_ends_commands(make_sandboxd):
    d = make_sandboxd(args=["--output-limit", "65536"]).start()
    d.create("big")
    r = d.run("big", "head", ["-c", "300000", "/dev/zero"], output_encoding="base64")
    assert r["stdout_bytes"] == 300000 and r["stdout_truncated"]
    assert len(base64.b64decode(r["stdout"])) == 65536
    c = d.ok("POST", "/v1/sandboxes/big/commands", {"cmd": "head", "args": ["-c", "300000",
                                                                               "/dev/zero"]},
             status=201)
    d.ok("GET", f"/v1/sandboxes/big/commands/{c['id']}/wait?timeout_ms=5000")
    st, out = d.request("GET", f"/v1/sandboxes/big/commands/{c['id']}/output?offset=0")
    # older bytes are gone: the reply says where the held data starts
    assert d.last_headers["X-Rebuno-Offset"] == str(300000 - 65536) and len(out) == 65536
    # stopping the sandbox finishes its running commands as killed
    c = d.ok("POST", "/v1/sandboxes/big/commands", {"cmd": "sleep", "args": ["100"]}, status=201)
    d.ok("POST", "/v1/sandboxes/big/stop")
    got = d.ok("GET", f"/v1/sandboxes/big/commands/{c['id']}")
    assert got["status"] == "exited" and got["killed"] and got["signal"] == "KILL"
