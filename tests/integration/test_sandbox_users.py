"""sandboxd users: create_user with a private home, commands as a user, sudo for one
command, name validation, file ownership for uploads and directories, and supplementary
groups.

The sandbox default group is root's group (gid 0): the default account, which the files
API and user-less commands act as, is root inside. Homes and directories made for a user
belong to the user and that group, mode 0770 (spec 004).
"""


def test_users(sandboxd):
    sandboxd.create("multi")
    alice = sandboxd.ok("POST", "/v1/sandboxes/multi/users", {"name": "alice"}, status=201)
    assert alice["username"] == "alice" and alice["home_dir"] == "/home/alice"
    assert alice["uid"] >= 1000 and alice["gid"] == alice["uid"]
    bob = sandboxd.ok("POST", "/v1/sandboxes/multi/users", {"name": "bob"}, status=201)
    assert bob["uid"] != alice["uid"]
    st, err = sandboxd.request("POST", "/v1/sandboxes/multi/users", {"name": "alice"})
    assert st == 409 and err["error"]["code"] == "user_exists"
    for bad in ("Alice", "1abc", "a" * 33, "a b", "", "../x"):
        st, err = sandboxd.request("POST", "/v1/sandboxes/multi/users", {"name": bad})
        assert st == 400, bad
    assert sandboxd.ok("GET", "/v1/sandboxes/multi/users/alice")["uid"] == alice["uid"]
    st, err = sandboxd.request("GET", "/v1/sandboxes/multi/users/ghost")
    assert st == 404 and err["error"]["code"] == "user_not_found"

    r = sandboxd.sh("multi", 'whoami; id -u; id -g; echo "$HOME $USER $LOGNAME"; pwd; '
                    'stat -c "%U:%G %a" /home/alice', user="alice")
    assert r["stdout"].split("\n")[:6] == [
        "alice", str(alice["uid"]), str(alice["gid"]), "/home/alice alice alice", "/home/alice",
        "alice:root 770"], r
    # private homes: bob cannot read alice's
    sandboxd.sh("multi", "echo secret > ~/s.txt && chmod 600 ~/s.txt", user="alice")
    r = sandboxd.sh("multi", "cat /home/alice/s.txt", user="bob")
    assert r["exit_code"] != 0 and "Permission denied" in r["stderr"]
    # sudo runs one command as root, with root's defaults but the user's cwd
    r = sandboxd.sh("multi", 'id -u; echo "$HOME"; pwd; cat /home/alice/s.txt', user="bob",
                    sudo=True)
    assert r["stdout"] == "0\n/root\n/home/bob\nsecret\n"
    # a user has no capabilities and cannot become root
    r = sandboxd.sh("multi", "grep CapEff /proc/self/status; su -c id root </dev/null", user="bob")
    assert "CapEff:\t0000000000000000" in r["stdout"] and r["exit_code"] != 0
    # uploads as a user belong to that user
    sandboxd.write("multi", "notes.txt", b"n", user="alice")
    r = sandboxd.sh("multi", "stat -c %U:%G /home/alice/notes.txt")
    assert r["stdout"] == "alice:alice\n"
    st, err = sandboxd.request("POST", "/v1/sandboxes/multi/users", {"name": "carol", "x": 1})
    assert st == 400
    # a home path that exists already is refused
    sandboxd.sh("multi", "mkdir /home/dave")
    st, err = sandboxd.request("POST", "/v1/sandboxes/multi/users", {"name": "dave"})
    assert st == 409 and err["error"]["code"] == "home_exists"


def test_user_directories_belong_to_the_user_and_the_default_group(sandboxd):
    sandboxd.create("dirs")
    alice = sandboxd.ok("POST", "/v1/sandboxes/dirs/users", {"name": "alice"}, status=201)
    # the home: the user and the sandbox default group (root's, gid 0), 0770
    home = sandboxd.ok("GET", "/v1/sandboxes/dirs/files/stat?path=/home/alice")
    assert (home["uid"], home["gid"], home["mode"]) == (alice["uid"], 0, "0770")
    # mkdir as the user: every directory it makes, parents included, is user:0 0770
    made = sandboxd.ok("POST", "/v1/sandboxes/dirs/files/mkdir",
                       {"path": "a/b/c", "parents": True, "user": "alice"}, status=201)
    assert made["path"] == "/home/alice/a/b/c"
    r = sandboxd.sh("dirs", "cd /home/alice && stat -c '%n %u %g %a' a a/b a/b/c")
    assert r["stdout"].splitlines() == [f"{d} {alice['uid']} 0 770" for d in ("a", "a/b", "a/b/c")], r
    # an explicit mode is kept; a directory that existed is left alone
    sandboxd.ok("POST", "/v1/sandboxes/dirs/files/mkdir",
                {"path": "a/b/c/d", "parents": True, "mode": "0700", "user": "alice"}, status=201)
    r = sandboxd.sh("dirs", "stat -c '%u %g %a' /home/alice/a/b/c/d /home/alice/a")
    assert r["stdout"] == f"{alice['uid']} 0 700\n{alice['uid']} 0 770\n"
    # the user can work in them; another user cannot get in
    sandboxd.ok("POST", "/v1/sandboxes/dirs/users", {"name": "bob"}, status=201)
    r = sandboxd.sh("dirs", "touch /home/alice/a/b/c/mine && echo ok", user="alice")
    assert r["stdout"] == "ok\n", r
    r = sandboxd.sh("dirs", "ls /home/alice/a", user="bob")
    assert r["exit_code"] != 0 and "Permission denied" in r["stderr"]
    # uploads as the user keep the user's own primary group
    sandboxd.write("dirs", "a/up.txt", b"u", user="alice")
    r = sandboxd.sh("dirs", "stat -c '%U:%G' /home/alice/a/up.txt")
    assert r["stdout"] == "alice:alice\n"
    # root's directories are unchanged: root:root 0755
    sandboxd.ok("POST", "/v1/sandboxes/dirs/files/mkdir", {"path": "/srv/x", "parents": True}, status=201)
    r = sandboxd.sh("dirs", "stat -c '%U:%G %a' /srv /srv/x")
    assert r["stdout"] == "root:root 755\nroot:root 755\n"


def test_supplementary_groups_follow_the_sandbox_group_file(sandboxd):
    sandboxd.create("groups")
    alice = sandboxd.ok("POST", "/v1/sandboxes/groups/users", {"name": "alice"}, status=201)
    assert alice["groups"] == [alice["gid"]]
    r = sandboxd.sh("groups", "groupadd devs && usermod -aG devs alice && getent group devs")
    assert r["exit_code"] == 0, r
    devs = int(r["stdout"].split(":")[2])
    # the next command as alice carries the new group; so does the user object
    r = sandboxd.run("groups", "id", ["-G"], user="alice")
    assert r["stdout"].split() == [str(alice["gid"]), str(devs)], r
    assert sandboxd.ok("GET", "/v1/sandboxes/groups/users/alice")["groups"] == [alice["gid"], devs]
    # and the group's rights apply: a devs-only directory is open to alice, not to bob
    sandboxd.ok("POST", "/v1/sandboxes/groups/users", {"name": "bob"}, status=201)
    r = sandboxd.sh("groups", "mkdir /srv/devs && chgrp devs /srv/devs && chmod 0770 /srv/devs")
    assert r["exit_code"] == 0, r
    assert sandboxd.sh("groups", "touch /srv/devs/ok", user="alice")["exit_code"] == 0
    r = sandboxd.sh("groups", "touch /srv/devs/no", user="bob")
    assert r["exit_code"] != 0 and "Permission denied" in r["stderr"]
    # sudo drops the user's groups for root's
    r = sandboxd.run("groups", "id", ["-G"], user="alice", sudo=True)
    assert r["stdout"].split() == ["0"], r
