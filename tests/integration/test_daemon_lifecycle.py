"""sandboxd's life on a host: supervised by `rebuno dev`, stopped by a signal to the whole
process group (Ctrl-C in a terminal, systemd's default stop), killed, and the daemons that
come after it (docs/sandbox.md "Restarts" and "Daemons and leftovers")."""
import http.client
import json
import os
import signal
import time

import pytest

from conftest import (Sandboxd, cgroup_dirs, daemon_leftovers, force_cleanup_daemon, free_port,
                      host_mounts_mentioning, local_auth, loop_devices_backed_by, network_leftovers)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxd needs root")


def call(port, method, path, body=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {"Content-Type": "application/json"} if body is not None else {}
    if not path.endswith("/health"):
        h.update(local_auth(port, "sandboxd"))  # found as the daemon's user's clients find it
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.getheader("Content-Type", "").startswith("application/json"):
        return r.status, json.loads(data)
    return r.status, data


def ok(port, method, path, body=None, status=(200, 201, 204)):
    st, out = call(port, method, path, body)
    assert st in status, (method, path, st, out)
    return out


def wait_healthy(port, k, timeout=30):
    end = time.time() + timeout
    while True:
        try:
            if call(port, "GET", "/v1/health", timeout=5)[0] == 200:
                return
        except OSError:
            pass
        assert time.time() < end, "the sandbox API did not come up:\n" + k.read_log()[-4000:]
        time.sleep(0.05)


def sandboxd_pids(dev_pid):
    """The sandboxd processes `rebuno dev` started (its children running `sandboxd`)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == dev_pid and len(argv) > 1 and argv[1] == b"sandboxd":
            out.append(int(pid))
    return out


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def alive(pid):
    """Running or frozen; a zombie (dead, not yet reaped by the init it was left to) is not."""
    return proc_state(pid) not in (None, "Z")


def uid_range(port, ref):
    """(first host uid, count) of the sandbox's user namespace, as seen from inside."""
    r = ok(port, "POST", f"/v1/sandboxes/{ref}/commands",
           {"cmd": "cat", "args": ["/proc/self/uid_map"], "wait": True})
    inside, first, count = r["stdout"].split()
    assert inside == "0", r
    return int(first), int(count)


def start_dev(make_kernel):
    port = free_port()
    k = make_kernel(args=["--sandboxes", "on", "--sandbox-listen", f"127.0.0.1:{port}"])
    state = os.path.join(k.state_dir, "state", "sandboxes")
    return k, port, state


def busy_and_paused(port):
    """A running sandbox with a network (so a veth and the nftables table exist) and a
    background process, and a paused one (its processes frozen in their cgroup)."""
    ok(port, "POST", "/v1/sandboxes", {"name": "busy", "network_policy": "allow-all"})
    ok(port, "POST", "/v1/sandboxes/busy/commands",
       {"cmd": "bash", "args": ["-c", "echo kept > /root/kept.txt; sleep 1000 &"], "wait": True})
    ok(port, "POST", "/v1/sandboxes", {"name": "nap"})
    ok(port, "POST", "/v1/sandboxes/nap/pause")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signalled_to_the_whole_process_group_leaves_nothing(make_kernel, sig):
    """Ctrl-C in a terminal and systemd's default stop signal dev and sandboxd (and the
    zygote) together: it must be as clean as a stop of dev alone."""
    k, port, state = start_dev(make_kernel)
    pgid = None
    try:
        k.start(new_session=True)
        pgid = k.proc.pid
        wait_healthy(port, k)
        busy_and_paused(port)
        before = daemon_leftovers(state)
        assert any(x.startswith("mount ") for x in before), before
        assert any(x.startswith("cgroup ") for x in before), before
        os.killpg(pgid, sig)
        k.proc.wait(60)
        end = time.time() + 30  # the group is empty once sandboxd has finished cleaning up
        while time.time() < end:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("processes of the group outlived rebuno dev")
        deadline = time.time() + 10  # an autoclear loop device goes a moment after its mount
        while daemon_leftovers(state) and time.time() < deadline:
            time.sleep(0.05)
        assert not daemon_leftovers(state), daemon_leftovers(state)
        log = k.read_log()
        assert "sandboxd stopped" in log or "shutting down" in log, log[-3000:]
        # sessions ended as in a graceful stop, not because their inits were killed
        k.stop()
        k.start()
        wait_healthy(port, k)
        for name in ("busy", "nap"):
            s = ok(port, "GET", f"/v1/sandboxes/{name}")
            assert s["state"] == "stopped" and s["stop_reason"] == "daemon_shutdown", s
        st, body = call(port, "GET", "/v1/sandboxes/busy/files/content?path=/root/kept.txt")
        assert (st, body) == (200, b"kept\n")
        assert k.stop(signal.SIGTERM) == 0
    finally:
        if k.proc and k.proc.poll() is None:
            k.stop(signal.SIGTERM)
        try:
            if pgid:
                os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        force_cleanup_daemon(state)


def test_dev_restarts_a_killed_sandboxd(make_kernel):
    """kill -9 of sandboxd under dev: dev reaps it, says why, and starts it again; the
    sandboxes come back stopped with their files."""
    k, port, state = start_dev(make_kernel)
    try:
        k.start()
        wait_healthy(port, k)
        busy_and_paused(port)
        [old] = sandboxd_pids(k.proc.pid)
        os.kill(old, signal.SIGKILL)
        end = time.time() + 30
        while time.time() < end and not [p for p in sandboxd_pids(k.proc.pid) if p != old]:
            time.sleep(0.05)
        wait_healthy(port, k)
        assert proc_state(old) != "Z", "sandboxd is a zombie"
        assert old not in sandboxd_pids(k.proc.pid)
        log = k.read_log()
        assert "sandboxd exited" in log and "signal=9" in log, log[-3000:]
        for name in ("busy", "nap"):
            s = ok(port, "GET", f"/v1/sandboxes/{name}")
            assert s["state"] == "stopped" and s["stop_reason"] == "daemon_restart", s
        st, body = call(port, "GET", "/v1/sandboxes/busy/files/content?path=/root/kept.txt")
        assert (st, body) == (200, b"kept\n")
        r = ok(port, "POST", "/v1/sandboxes/nap/commands", {"cmd": "echo", "args": ["back"],
                                                            "wait": True})
        assert r["stdout"] == "back\n"
        assert k.stop(signal.SIGTERM) == 0
        deadline = time.time() + 10
        while daemon_leftovers(state) and time.time() < deadline:
            time.sleep(0.05)
        assert not daemon_leftovers(state), daemon_leftovers(state)
    finally:
        if k.proc and k.proc.poll() is None:
            k.proc.kill()
        force_cleanup_daemon(state)


def test_a_daemon_reaps_what_a_killed_daemon_left_on_another_state_folder(make_sandboxd):
    """kill -9 of a sandboxd with a paused sandbox leaves its store mounted, its loop device
    attached, frozen processes in its cgroups and its nftables table; the next daemon to
    start on the host, whatever its state folder, cleans all of it up."""
    a = make_sandboxd().start()
    try:
        busy_and_paused(a.port)
        frozen = []
        for d in cgroup_dirs(a.state):
            for sub, _, _ in os.walk(d):
                try:
                    frozen += [int(x) for x in open(os.path.join(sub, "cgroup.procs")).read().split()]
                except OSError:
                    pass
        assert frozen and host_mounts_mentioning(os.path.realpath(a.state))
        assert loop_devices_backed_by(os.path.realpath(a.state)) and network_leftovers(a)
        a.kill9()
        time.sleep(0.2)
        assert any(alive(p) for p in frozen), "the frozen processes should outlive the daemon"
        make_sandboxd().start()  # another state folder
        deadline = time.time() + 10
        while daemon_leftovers(a.state) and time.time() < deadline:
            time.sleep(0.05)
        assert not daemon_leftovers(a.state), daemon_leftovers(a.state)
        assert not [p for p in frozen if alive(p)], "frozen processes survived"
        # and the dead daemon's own folder starts again as after any crash
        a.start()
        s = a.get("nap")
        assert s["state"] == "stopped" and s["stop_reason"] == "daemon_restart", s
        assert a.read("busy", "/root/kept.txt") == (200, b"kept\n")
    finally:
        if a.proc and a.proc.poll() is None:
            a.stop()
        force_cleanup_daemon(a.state)


def test_a_second_daemon_on_a_live_state_folder_is_refused_and_touches_nothing(make_sandboxd):
    """Before anything of its own (cgroups, store, network), a daemon takes its folder's
    record: a second one on the same folder stops there, and the first one's sandboxes
    keep running."""
    a = make_sandboxd().start()
    a.create("live")
    session = a.get("live")["session"]["id"]
    b = Sandboxd(a.root)
    b.log_path = os.path.join(a.root, "second.log")
    try:
        b.start(wait=False)
        assert b.proc.wait(30) != 0
        log = b.read_log()
        assert "another sandboxd (pid %d)" % a.proc.pid in log, log
        s = a.get("live")
        assert s["state"] == "running" and s["session"]["id"] == session, s
        assert a.sh("live", "echo still")["stdout"] == "still\n"
    finally:
        if b.proc and b.proc.poll() is None:
            b.proc.kill()
            b.proc.wait()
        if b.log and not b.log.closed:
            b.log.close()


def test_two_daemons_give_their_sandboxes_disjoint_uid_ranges(make_sandboxd):
    a, b = make_sandboxd().start(), make_sandboxd().start()
    ranges = []
    for d in (a, b):
        for name in ("u1", "u2"):
            d.create(name)
            ranges.append(uid_range(d.port, name))
    for i, (f1, n1) in enumerate(ranges):
        assert n1 == 65536
        for f2, n2 in ranges[i + 1:]:
            assert f1 + n1 <= f2 or f2 + n2 <= f1, ranges


def test_a_state_folder_keeps_its_uid_ranges_and_they_are_recorded(make_sandboxd, tmp_path):
    """A folder whose sandboxes got their ranges before the host-wide table existed (here: a
    table that has never heard of it) keeps them, and no other daemon is given them."""
    old_table, new_table = str(tmp_path / "before.db"), str(tmp_path / "after.db")
    a = make_sandboxd(args=["--uid-ranges", old_table]).start()
    a.create("old1")
    a.create("old2")
    before = {n: uid_range(a.port, n) for n in ("old1", "old2")}
    a.stop()
    a.args = ["--uid-ranges", new_table]
    a.start()
    assert {n: uid_range(a.port, n) for n in ("old1", "old2")} == before
    c = make_sandboxd(args=["--uid-ranges", new_table]).start()
    c.create("new1")
    f, n = uid_range(c.port, "new1")
    for f2, n2 in before.values():
        assert f + n <= f2 or f2 + n2 <= f, (f, before)
