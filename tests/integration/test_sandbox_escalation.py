"""Privilege escalation inside a sandbox (allow_privilege_escalation, docs/sandbox.md):
with it, setuid programs work (sudo, as E2B's SDK expects of its default user), and the
root they reach is the sandbox's own: the same capabilities, seccomp filter, cgroup and
host uid range as a command run as root, no host files, no other sandbox. Without it
(the /v1 default), no_new_privs holds and setuid bits do nothing."""
import os
import textwrap

SUDOERS = b"root ALL=(ALL:ALL) ALL\nuser ALL=(ALL:ALL) NOPASSWD: ALL\n"
PAM = b"auth required pam_unix.so\naccount required pam_permit.so\nsession required pam_permit.so\n"


def with_sudo(sandboxd, name, **fields):
    """A sandbox with account "user" and a sudoers entry for it (the host's sudo is in
    the default image's /usr; its /etc has no sudo configuration of the host)."""
    sb = sandboxd.create(name, **fields)
    sandboxd.ok("POST", f"/v1/sandboxes/{name}/users", {"name": "user"})
    sandboxd.sh(name, "mkdir -p /etc/pam.d")
    sandboxd.write(name, "/etc/sudoers", SUDOERS)
    sandboxd.write(name, "/etc/pam.d/sudo", PAM)
    assert sandboxd.sh(name, "chmod 0440 /etc/sudoers")["exit_code"] == 0
    return sb


def status(sandboxd, name, prefix="", **kw):
    out = sandboxd.sh(name, f"{prefix}grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status", **kw)
    return dict(l.split(":\t") for l in out["stdout"].splitlines())


def test_sudo_reaches_only_the_sandboxs_root(sandboxd):
    marker = "/root/rebuno-escalation-marker"
    with open(marker, "w") as f:
        f.write("HOST-SECRET")
    try:
        sb = with_sudo(sandboxd, "esc", allow_privilege_escalation=True)
        assert sb["allow_privilege_escalation"] is True
        other = sandboxd.create("other")
        sandboxd.write("other", "/root/other-sandbox-secret", b"OTHER-SECRET")
        r = sandboxd.sh("esc", "id -u; sudo -n id -u; sudo -n whoami", user="user")
        assert r["exit_code"] == 0 and r["stdout"] == "1000\n0\nroot\n", r
        # the same powers as a command run as root: capabilities, no_new_privs off
        # (the session's), the seccomp filter
        as_root = status(sandboxd, "esc")
        via_sudo = status(sandboxd, "esc", "sudo -n ", user="user")
        assert via_sudo == as_root, (via_sudo, as_root)
        assert via_sudo["Seccomp"] == "2" and via_sudo["NoNewPrivs"] == "0"
        assert int(via_sudo["CapBnd"], 16) & (1 << 21) == 0  # CAP_SYS_ADMIN is not there
        # root of the sandbox's user namespace: a mapped unprivileged host uid range
        m = sandboxd.sh("esc", "sudo -n cat /proc/self/uid_map", user="user")["stdout"].split()
        assert m[0] == "0" and int(m[1]) >= 65536, m
        # and on the host: every process of the sandbox, the sudo'd one included, runs as
        # a host uid of that range
        sandboxd.ok("POST", "/v1/sandboxes/esc/commands",
                    {"cmd": "bash", "args": ["-c", "sudo -n sleep 30"], "user": "user"}, status=201)
        kind, cg = sandboxd.get("esc")["usage"]["cgroup"].split(":", 1)
        host_cg = (lambda c: f"/sys/fs/cgroup/{c}{cg}") if kind == "v1" else \
            (lambda c: f"/sys/fs/cgroup{cg}")
        with open(host_cg("pids") + "/cgroup.procs") as f:
            procs = f.read().split()
        uids = set()
        for p in procs:
            try:
                with open(f"/proc/{p}/status") as f:
                    uids |= {int(l.split()[2]) for l in f if l.startswith("Uid:")}
            except FileNotFoundError:
                pass
        assert uids and all(int(m[1]) <= u < int(m[1]) + int(m[2]) for u in uids), (uids, m)
        # what root inside cannot do, sudo cannot either
        r = sandboxd.sh("esc", textwrap.dedent(f"""
            sudo -n cat {marker} 2>&1; echo "host=$?"
            sudo -n find / -name other-sandbox-secret -not -path '/proc/*' 2>/dev/null | sed 's/^/found /'
            sudo -n mount -t tmpfs none /mnt 2>&1; echo "mount=$?"
            sudo -n unshare -m true 2>&1; echo "unshare=$?"
            sudo -n mknod /tmp/sda b 8 0 2>&1; echo "mknod=$?"
            sudo -n hostname evil 2>&1; echo "hostname=$?"
            sudo -n sh -c 'echo 999999999 > /sys/fs/cgroup/memory{cg}/memory.limit_in_bytes || echo max > /sys/fs/cgroup/memory.max' 2>&1; echo "cglimit=$?"
            sudo -n python3 -c 'import ctypes; l = ctypes.CDLL(None, use_errno=True); print("keyctl", l.syscall(250, 0, 0, 0), ctypes.get_errno())'
            """), user="user")
        out = r["stdout"]
        assert "HOST-SECRET" not in out and "found" not in out, out
        for k in ("host", "mount", "unshare", "mknod", "hostname", "cglimit"):
            assert f"{k}=0" not in out, (k, out)
        assert "keyctl -1 1\n" in out, out  # EPERM from the filter
        limit = "/memory.limit_in_bytes" if kind == "v1" else "/memory.max"
        with open(host_cg("memory") + limit) as f:
            assert int(f.read()) == 2048 << 20
        # a fork keeps the setting
        fk = sandboxd.ok("POST", "/v1/sandboxes/esc/fork", {"name": "esc-fork"}, status=201)
        assert fk["allow_privilege_escalation"] is True
        assert sandboxd.sh("esc-fork", "sudo -n id -u", user="user")["stdout"] == "0\n"
        assert other["allow_privilege_escalation"] is False
    finally:
        os.unlink(marker)


def test_without_the_setting_no_new_privs_holds(sandboxd):
    sb = with_sudo(sandboxd, "plain")
    assert sb["allow_privilege_escalation"] is False
    r = sandboxd.sh("plain", "sudo -n id -u; echo rc=$?", user="user")
    assert "rc=1" in r["stdout"] and "0\n" not in r["stdout"], r
    assert "no new privileges" in r["stderr"], r
    st = status(sandboxd, "plain", user="user")
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2"
    # and the sandbox's files are mounted nosuid: a setuid bit does nothing
    opts = sandboxd.sh("plain", "awk '$5 == \"/\" {print $6}' /proc/self/mountinfo")["stdout"]
    assert "nosuid" in opts, opts
    sandboxd.create("esc2", allow_privilege_escalation=True)
    opts = sandboxd.sh("esc2", "awk '$5 == \"/\" || $5 == \"/tmp\" {print $5, $6}' /proc/self/mountinfo")["stdout"]
    assert "/ " in opts and "nosuid" not in opts.split("\n")[0] and "/tmp rw,nosuid" in opts, opts
    r = sandboxd.request("POST", "/v1/sandboxes", {"name": "bad", "allow_privilege_escalation": "yes"})
    assert r[0] == 400 and r[1]["error"]["field"] == "allow_privilege_escalation", r
