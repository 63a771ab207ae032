"""sandboxd users: create_user with a private home, commands as a user, sudo for one
command, name validation, and file ownership for uploads."""


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
        "alice:alice 770"], r
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
