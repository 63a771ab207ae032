"""bench/sandbox (build/bench/sandbox) leaves nothing behind when run directly: its default
state folder /tmp/rebuno-bench-sandbox-PID (a 32 GiB sparse btrfs image, mounted through a
loop device), its log, sandboxd and its cgroups are gone on every way out, a SIGKILL of
the benchmark included; and --help prints the usage instead of running."""
import os
import shutil
import signal
import subprocess
import time

import pytest

from conftest import force_cleanup_storage, host_mounts_mentioning, loop_devices_backed_by, \
    processes_mentioning

ROOT = os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..")
BENCH = os.path.join(ROOT, "build", "bench", "sandbox")
REBUNO = os.path.join(ROOT, "build", "rebuno")

pytestmark = pytest.mark.skipif(
    not (os.access(BENCH, os.X_OK) and os.access(REBUNO, os.X_OK)) or os.geteuid() != 0,
    reason="needs root, build/bench/sandbox and build/rebuno (make build/rebuno build/bench/sandbox)")


def leftovers(state):
    out = []
    if os.path.exists(state):
        out.append(state)
    if os.path.exists(state + ".log"):
        out.append(state + ".log")
    out += host_mounts_mentioning(state)
    out += loop_devices_backed_by(state)
    out += [f"process {p}" for p in processes_mentioning(state)]
    return out


def force_clean(state, proc):
    """After a failure: kill what this test started (the benchmark while it is ours, the
    sandboxd it started, found by its state folder) and remove what they left."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in processes_mentioning(state):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    force_cleanup_storage(state)
    shutil.rmtree(state, ignore_errors=True)
    if os.path.exists(state + ".log"):
        os.unlink(state + ".log")


def test_help_prints_usage_and_runs_nothing():
    for args, rc in ((["--help"], 0), (["-h"], 0), (["--iterations"], 2), (["--frob"], 2)):
        p = subprocess.Popen([BENCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             cwd=ROOT)
        state = f"/tmp/rebuno-bench-sandbox-{p.pid}"
        try:
            out, err = p.communicate(timeout=30)
            assert p.returncode == rc, (args, p.returncode, err)
            assert (out if rc == 0 else err).startswith(b"usage: " if rc == 0 else b"bench: ")
            assert b"--state-dir" in out + err
            assert leftovers(state) == []
        finally:
            force_clean(state, p)


def test_failed_start_leaves_nothing():
    p = subprocess.Popen([BENCH, "--bin", "/bin/false", "--iterations", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    state = f"/tmp/rebuno-bench-sandbox-{p.pid}"
    try:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 1 and b"sandboxd did not start" in err, err
        assert leftovers(state) == []
    finally:
        force_clean(state, p)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
def test_killed_benchmark_leaves_nothing(sig):
    """Killed once sandboxd runs with its store mounted: the janitor stops sandboxd,
    unmounts, detaches the loop device and removes the folder."""
    p = subprocess.Popen([BENCH, "--iterations", "3", "--idle", "1"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, cwd=ROOT)
    state = f"/tmp/rebuno-bench-sandbox-{p.pid}"
    try:
        end = time.time() + 120
        while not host_mounts_mentioning(state + "/store") and time.time() < end:
            assert p.poll() is None, p.stderr.read()
            time.sleep(0.1)
        assert host_mounts_mentioning(state + "/store") and loop_devices_backed_by(state)
        p.send_signal(sig)
        p.wait(timeout=60)
        end = time.time() + 180
        while leftovers(state) and time.time() < end:
            time.sleep(0.2)
        assert leftovers(state) == []
    finally:
        force_clean(state, p)
        p.stderr.close()
