"""A sandbox's tree is the tenant's: whatever it leaves there (an /etc that is a symlink
to a host directory, /etc/hosts pointing at a host file, links where mount points go,
links planted for another account), sandboxd acting as host root on that tree never
follows it (issue 13, findings 1 and 16; docs/sandbox.md "Host-side file operations").

Every host directory a link points at is checked to keep its owner, mode and contents.
"""
import json
import os
import tarfile
import time


def make_victim(root, name):
    """A host directory only host root may touch, holding a file of its own."""
    path = os.path.join(root, name)
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)
    with open(os.path.join(path, "keep.txt"), "w") as f:
        f.write("host data\n")
    for n in ("hosts", "hostname"):
        with open(os.path.join(path, n), "w") as f:
            f.write(f"the host's {n}\n")
    return path


def tree_state(path):
    """Owner, mode and content of path and of everything below it (links not followed)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(path):
        for name in [""] + sorted(dirnames) + sorted(filenames):
            p = os.path.join(dirpath, name) if name else dirpath
            st = os.lstat(p)
            content = None
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    content = f.read()
            out[os.path.relpath(p, path)] = (st.st_uid, st.st_gid, oct(st.st_mode), content)
    return out


def err(d, method, path, body=None, raw=None):
    st, out = d.request(method, path, body, raw=raw)
    return st, (out.get("error", {}) if isinstance(out, dict) else out)


def fork_and_restore(d, ref, victim):
    """Fork ref, and create a sandbox from a snapshot of it (what `rebuno exec fork`
    does); victim must be unchanged after each, and each must work. Their names."""
    before = tree_state(victim)
    names = (f"{ref}-fork", f"{ref}-restored")
    st, out = d.request("POST", f"/v1/sandboxes/{ref}/fork", {"name": names[0]})
    assert tree_state(victim) == before
    assert st == 201, out
    s = d.ok("POST", f"/v1/sandboxes/{ref}/snapshots", {}, status=201)
    st, out = d.request("POST", "/v1/sandboxes", {
        "name": names[1], "source": {"type": "snapshot", "snapshot_id": s["id"]}})
    assert tree_state(victim) == before
    assert st == 201, out
    return names


def test_fork_and_restore_never_follow_an_etc_symlink_to_the_host(sandboxd, tmpdir_path):
    """The issue's reproduction: /etc replaced by a symlink to a host directory, then a
    fork and a create from a snapshot. The host directory is not chowned, chmodded or
    written; both work, keeping the sandbox's own /etc (the link) as it made it."""
    d = sandboxd
    victim = make_victim(tmpdir_path, "victim-etc")
    before = tree_state(victim)
    d.create("t")
    r = d.sh("t", f"python3 -c \"import shutil,os;shutil.rmtree('/etc');os.symlink('{victim}','/etc')\"")
    assert r["exit_code"] == 0, r
    for name in fork_and_restore(d, "t", victim):
        r = d.sh(name, "readlink /etc; hostname")
        assert r["stdout"] == f"{victim}\n{name}\n", r  # its own /etc, as it left it
    assert tree_state(victim) == before


def test_hosts_and_hostname_links_are_replaced_inside_the_tree(sandboxd, tmpdir_path):
    """/etc/hosts linked to a host file and /etc/hostname to a host directory: a fork and
    a restore write their own files in their own /etc (the links are replaced, not
    followed), and the host's files keep their contents."""
    d = sandboxd
    victim = make_victim(tmpdir_path, "victim-files")
    before = tree_state(victim)
    d.create("h")
    d.sh("h", f"ln -sfn {victim}/hosts /etc/hosts && ln -sfn {victim} /etc/hostname")
    for name in fork_and_restore(d, "h", victim):
        # root's inside, although the fork's files belong to another uid range on disk
        r = d.sh(name, "stat -c '%F %U' /etc/hosts /etc/hostname; cat /etc/hostname; tail -n1 /etc/hosts")
        assert r["stdout"] == f"regular file root\nregular file root\n{name}\n127.0.1.1\t{name}\n", r
    # the original keeps its links
    assert d.sh("h", "readlink /etc/hosts /etc/hostname")["stdout"] == f"{victim}/hosts\n{victim}\n"
    # an /etc/hosts that is a directory is the sandbox's own: left alone, the fork works
    d.sh("h", "rm /etc/hosts && mkdir /etc/hosts")
    st, fork = d.request("POST", "/v1/sandboxes/h/fork", {"name": "h-fork2"})
    assert st == 201, fork
    assert d.sh("h-fork2", "stat -c %F /etc/hosts; cat /etc/hostname")["stdout"] == "directory\nh-fork2\n"
    assert tree_state(victim) == before


def test_session_start_never_follows_links_in_the_tree(sandboxd, tmpdir_path):
    """What a session's start does in the tree it is given: the /usr/local/etc mask (a
    link, or a chain of links for /usr/local), the mount points of drives (a chain of
    links for their parent). None is followed to the host; a session whose drive mount
    point is a link fails to start with a clear error."""
    d = sandboxd
    victim = make_victim(tmpdir_path, "victim-start")
    before = tree_state(victim)
    d.create("u")
    d.sh("u", f"rm -rf /usr/local/etc && ln -s {victim} /usr/local/etc")
    d.ok("POST", "/v1/sandboxes/u/stop")
    assert d.sh("u", "readlink /usr/local/etc")["stdout"] == f"{victim}\n"  # a new session
    st, fork = d.request("POST", "/v1/sandboxes/u/fork", {"name": "u-fork"})
    assert st == 201, fork
    assert tree_state(victim) == before

    d.create("v")
    d.sh("v", f"mv /usr/local /usr/local.old && ln -s /l1 /usr/local && ln -s {victim} /l1")
    d.ok("POST", "/v1/sandboxes/v/stop")
    assert d.sh("v", "readlink /usr/local /l1")["stdout"] == f"/l1\n{victim}\n"
    assert tree_state(victim) == before

    d.ok("POST", "/v1/drives", {"name": "dv"}, status=(200, 201))
    d.create("m")
    d.sh("m", f"rm -rf /data && ln -s /l2 /data && ln -s {victim} /l2")
    d.ok("PATCH", "/v1/sandboxes/m", {"mounts": {"/data/x": "dv"}})
    d.ok("POST", "/v1/sandboxes/m/stop")
    st, out = d.request("POST", "/v1/sandboxes/m/commands",
                        {"cmd": "true", "wait": True})
    assert (st, out["error"]["code"]) == (500, "sandbox_start_failed"), (st, out)
    assert "mount point /data/x passes through a symlink" in out["error"]["message"], out
    assert tree_state(victim) == before


def test_image_links_to_the_host_are_never_followed(sandboxd, tmpdir_path):
    """An imported image whose entries point at the host (var, run, /etc/passwd, mnt):
    filling its skeleton writes below none of them, and a sandbox on it runs."""
    d = sandboxd
    victim = make_victim(tmpdir_path, "victim-image")
    before = tree_state(victim)
    tar = os.path.join(tmpdir_path, "hostile.tar")
    with tarfile.open(tar, "w") as t:
        def link(name, target):
            i = tarfile.TarInfo(name)
            i.type, i.linkname = tarfile.SYMTYPE, target
            t.addfile(i)
        etc = tarfile.TarInfo("etc")
        etc.type, etc.mode = tarfile.DIRTYPE, 0o755
        t.addfile(etc)
        link("var", victim)
        link("run", victim)
        link("mnt", victim)
        link("etc/passwd", f"{victim}/keep.txt")
        link("etc/ssl", victim)
        t.add("/bin/busybox", arcname="bin/busybox")  # images are self-contained
        link("bin/sh", "busybox")
        link("bin/readlink", "busybox")
    img = d.ok("POST", "/v1/images", {"type": "tarball", "path": tar}, status=(200, 201))
    assert tree_state(victim) == before
    d.create("img", image=img["digest"])
    r = d.run("img", "sh", ["-c", "readlink /var; readlink /etc/passwd"])
    assert r["stdout"] == f"{victim}\n{victim}/keep.txt\n", json.dumps(r)
    assert tree_state(victim) == before


def test_user_uploads_and_mkdir_never_follow_a_link_the_user_planted(sandboxd):
    """Finding 16: alice's link into bob's home. An upload or mkdir made for alice
    (?user=alice) that would pass through a symlink a non-root account made is refused
    with 403 symlink_refused naming the link; links root made still work, and so do
    calls made as root (trusted orchestration)."""
    d = sandboxd
    d.create("users")
    for u in ("alice", "bob"):
        d.ok("POST", "/v1/sandboxes/users/users", {"name": u}, status=201)
    d.write("users", "/home/bob/notes", b"bob's notes\n", user="bob", mode="0600")
    d.sh("users", "ln -s /home/bob/notes s2 && ln -s /home/bob bobdir", user="alice")

    st, e = err(d, "PUT", "/v1/sandboxes/users/files/content?path=s2&user=alice", raw=b"alice")
    assert (st, e.get("code")) == (403, "symlink_refused"), (st, e)
    assert "/home/alice/s2" in e["message"], e
    st, e = err(d, "PUT", "/v1/sandboxes/users/files/content?path=bobdir/new&user=alice", raw=b"x")
    assert (st, e.get("code")) == (403, "symlink_refused"), (st, e)
    assert "/home/alice/bobdir" in e["message"], e
    st, e = err(d, "POST", "/v1/sandboxes/users/files/mkdir",
                {"path": "bobdir/sub", "parents": True, "user": "alice"})
    assert (st, e.get("code")) == (403, "symlink_refused"), (st, e)
    r = d.sh("users", "cat /home/bob/notes; stat -c %U:%a /home/bob/notes; ls /home/bob")
    assert r["stdout"] == "bob's notes\nbob:600\nnotes\n", r

    # links root made (and the image's, such as /bin -> usr/bin) are followed for alice
    d.sh("users", "mkdir -p /srv/shared && ln -s /srv/shared /home/alice/shared")
    d.write("users", "/home/alice/shared/f", b"f", user="alice")
    assert d.sh("users", "stat -c %U /srv/shared/f")["stdout"] == "alice\n"
    d.write("users", "/bin/alice-tool", b"#!/bin/sh\n", user="alice", mode="0755")
    assert d.sh("users", "stat -c %U:%a /usr/bin/alice-tool")["stdout"] == "alice:755\n"
    # a call made as root follows any link inside (root's own rights)
    d.write("users", "/home/alice/s2", b"root wrote\n")
    assert d.sh("users", "cat /home/bob/notes")["stdout"] == "root wrote\n"


def test_an_upload_mode_applies_to_an_existing_file(sandboxd):
    """The mode of an upload is set on the file it writes, new or existing, so a client
    never needs a chmod by path afterwards (which would follow a link swapped in)."""
    d = sandboxd
    d.create("modes")
    d.write("modes", "/root/f", b"1")
    d.write("modes", "/root/f", b"2", mode="0600")
    st = d.ok("GET", "/v1/sandboxes/modes/files/stat?path=/root/f")
    assert st["mode"] == "0600"
    d.write("modes", "/root/f", b"3")  # no mode: it stays
    assert d.ok("GET", "/v1/sandboxes/modes/files/stat?path=/root/f")["mode"] == "0600"
    d.write("modes", "/root/g", b"x", mode="4750")
    assert d.ok("GET", "/v1/sandboxes/modes/files/stat?path=/root/g")["mode"] == "4750"


RACER = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
os.chdir("/w")
n = int(sys.argv[1])
for i in range(n):
    os.symlink(sys.argv[2], f"s{i}")
open("ready", "w").close()
for i in range(n):
    # as soon as the daemon made d<i>, swap it for the link s<i> (RENAME_EXCHANGE)
    while libc.renameat2(-100, f"d{i}".encode(), -100, f"s{i}".encode(), 2) != 0:
        pass
"""


def test_files_mkdir_sets_the_mode_on_the_directory_it_made(sandboxd, tmpdir_path):
    """A directory made by the files API gets its owner and mode on its descriptor: a
    sandbox that swaps the new directory for a symlink to a host directory right after
    it was made cannot have the host's directory chmodded (a chmod by name followed it)."""
    d = sandboxd
    victim = make_victim(tmpdir_path, "victim-mkdir")
    before = tree_state(victim)
    d.create("race")
    d.sh("race", "mkdir /w")
    n = 2000
    racer = d.ok("POST", "/v1/sandboxes/race/commands",
                 {"cmd": "python3", "args": ["-c", RACER, str(n), victim]}, status=201)
    for _ in range(200):
        if d.request("GET", "/v1/sandboxes/race/files/stat?path=/w/ready")[0] == 200:
            break
        time.sleep(0.05)
    for i in range(n):
        d.request("POST", "/v1/sandboxes/race/files/mkdir", {"path": f"/w/d{i}", "mode": "0777"})
        if tree_state(victim) != before:
            break
    assert tree_state(victim) == before, f"after {i + 1} mkdirs"
