"""sandboxd files API: read/write (chunked by offset), mkdir, list, stat, rename,
remove, not-found errors, and paths that try to leave the sandbox root."""
import hashlib
import os
import socket
import urllib.parse

q = urllib.parse.quote


def test_file_operations(sandboxd):
    sandboxd.create("fs")
    w = sandboxd.write("fs", "/root/hello.txt", b"hello\n")
    assert w == {"path": "/root/hello.txt", "written": 6, "size": 6}
    assert sandboxd.read("fs", "/root/hello.txt") == (200, b"hello\n")
    assert sandboxd.read("fs", "hello.txt") == (200, b"hello\n")  # relative to the home
    assert sandboxd.sh("fs", "cat /root/hello.txt; stat -c %U:%a /root/hello.txt")["stdout"] == \
        "hello\nroot:644\n"
    sandboxd.write("fs", "/root/hello.txt", b"HE", offset=0, truncate="false")
    assert sandboxd.read("fs", "/root/hello.txt")[1] == b"HEllo\n"
    sandboxd.write("fs", "/root/x.sh", b"#!/bin/sh\necho run\n", mode="0755")
    assert sandboxd.run("fs", "/root/x.sh")["stdout"] == "run\n"

    made = sandboxd.ok("POST", "/v1/sandboxes/fs/files/mkdir",
                       {"path": "/srv/a/b", "parents": True, "mode": "0750"}, status=201)
    assert made["type"] == "directory" and made["mode"] == "0750"
    st, err = sandboxd.request("POST", "/v1/sandboxes/fs/files/mkdir", {"path": "/srv/a/b"})
    assert st == 409 and err["error"]["code"] == "already_exists"
    st, err = sandboxd.request("POST", "/v1/sandboxes/fs/files/mkdir", {"path": "/no/such/dir"})
    assert st == 404 and err["error"]["code"] == "path_not_found"
    sandboxd.write("fs", "/srv/a/b/f1", b"1")
    sandboxd.ok("POST", "/v1/sandboxes/fs/files/rename", {"from": "/srv/a/b/f1", "to": "/srv/a/f2"})
    st, err = sandboxd.request("POST", "/v1/sandboxes/fs/files/rename",
                               {"from": "/root/hello.txt", "to": "/srv/a/f2"})
    assert st == 409 and err["error"]["code"] == "already_exists"
    sandboxd.ok("POST", "/v1/sandboxes/fs/files/rename",
                {"from": "/root/hello.txt", "to": "/srv/a/f2", "overwrite": True})
    listing = sandboxd.ok("GET", "/v1/sandboxes/fs/files/list?path=/srv/a")
    assert sorted((e["name"], e["type"]) for e in listing["entries"]) == \
        [("b", "directory"), ("f2", "file")]
    stat = sandboxd.ok("GET", "/v1/sandboxes/fs/files/stat?path=/srv/a/f2")
    assert stat["size"] == 6 and stat["uid"] == 0 and stat["type"] == "file"
    st, err = sandboxd.request("DELETE", "/v1/sandboxes/fs/files?path=/srv/a")
    assert st == 409 and err["error"]["code"] == "directory_not_empty"
    sandboxd.ok("DELETE", "/v1/sandboxes/fs/files?path=/srv/a&recursive=true", status=204)
    for path in ("/srv/a", "/nope", "/root/missing/deeper"):
        st, err = sandboxd.request("GET", f"/v1/sandboxes/fs/files/stat?path={q(path)}")
        assert st == 404 and err["error"]["code"] == "path_not_found", path
    st, err = sandboxd.read("fs", "/nope")
    assert st == 404 and err["error"]["code"] == "path_not_found"
    st, err = sandboxd.read("fs", "/srv")
    assert st == 400 and err["error"]["code"] == "is_a_directory"
    st, err = sandboxd.request("GET", "/v1/sandboxes/fs/files/content")
    assert st == 400 and err["error"]["field"] == "path"


def test_large_file_in_chunks(sandboxd):
    sandboxd.create("large")
    chunk = 8 << 20
    data = os.urandom(1 << 20) * 20  # 20 MiB
    for off in range(0, len(data), chunk):
        sandboxd.write("large", "/root/blob", data[off:off + chunk], offset=off)
    r = sandboxd.sh("large", "sha256sum /root/blob | cut -d' ' -f1; stat -c %s /root/blob")
    assert r["stdout"] == f"{hashlib.sha256(data).hexdigest()}\n{len(data)}\n"
    got = b""
    off = 0
    while True:
        st, part = sandboxd.request(
            "GET", f"/v1/sandboxes/large/files/content?path=/root/blob&offset={off}&length={chunk}")
        assert st == 200
        got += part
        off += len(part)
        if sandboxd.last_headers["X-Rebuno-Eof"] == "true":
            break
    assert got == data and sandboxd.last_headers["X-Rebuno-File-Size"] == str(len(data))
    # a body over the cap is refused from its headers, before a byte of it is read
    with socket.create_connection(("127.0.0.1", sandboxd.port)) as c:
        c.sendall(b"PUT /v1/sandboxes/large/files/content?path=/root/too-big HTTP/1.1\r\n"
                  b"Host: x\r\nContent-Length: %d\r\n\r\n" % (17 << 20))
        assert c.recv(100).startswith(b"HTTP/1.1 413")


def test_files_api_cannot_leave_the_root(sandboxd):
    """../, absolute and relative symlinks, /proc magic links, hard links and special
    files: the files API (which runs as host root) must stay inside the sandbox."""
    marker = "/root/rebuno-files-escape-marker"
    with open(marker, "w") as f:
        f.write("HOST-SECRET")
    try:
        sandboxd.create("jail")
        inside = sandboxd.sh("jail", f"""
            ln -s {marker} /tmp/abs
            ln -s ../../../../../../../..{marker} /tmp/rel
            ln -s / /tmp/rootlink
            ln -s /proc/1/root /tmp/procroot
            ln -s /proc/self/root /tmp/selfroot
            mkdir -p /tmp/d && ln -s .. /tmp/d/up
            ln /etc/passwd /root/hard
            mkfifo /tmp/fifo
            echo ok""")
        assert inside["stdout"].endswith("ok\n"), inside
        for p in ["../../../../.." + marker, marker, "/tmp/abs", "/tmp/rel",
                  "/tmp/rootlink" + marker, "/tmp/d/up/up/up/up" + marker,
                  "/tmp/procroot" + marker, "/tmp/selfroot" + marker,
                  "/proc/1/root" + marker, "/proc/self/root" + marker,
                  "/proc/1/cwd" + marker]:
            st, out = sandboxd.read("jail", p)
            assert st in (400, 403, 404), (p, st, out)
            assert b"HOST-SECRET" not in (out if isinstance(out, bytes) else b""), p
        # writes through the same paths land inside (or fail), never on the host
        for p in ["/tmp/abs", "/tmp/rel", "../../../../.." + marker, "/tmp/rootlink" + marker]:
            st, _ = sandboxd.request(
                "PUT", f"/v1/sandboxes/jail/files/content?path={q(p)}", raw=b"OWNED")
            assert st in (200, 400, 403, 404), (p, st)
        with open(marker) as f:
            assert f.read() == "HOST-SECRET"
        # the hard link is the sandbox's own passwd, not the host's
        st, out = sandboxd.read("jail", "/root/hard")
        assert st == 200 and b"rebuno" not in out and out.startswith(b"root:x:0:0")
        with open("/etc/passwd", "rb") as f:
            assert out != f.read()
        # a FIFO or a device is never opened (it would block or touch the host)
        st, err = sandboxd.read("jail", "/tmp/fifo")
        assert st == 400 and err["error"]["code"] == "not_a_file"
        st, err = sandboxd.read("jail", "/dev/tty")
        assert st == 400
        # kernel file systems are off limits, even though host root could write them
        for p in ["/proc/sys/kernel/hostname", "/proc/1/environ", "/proc/sysrq-trigger"]:
            st, _ = sandboxd.request(
                "PUT", f"/v1/sandboxes/jail/files/content?path={q(p)}", raw=b"x")
            assert st in (403, 404), (p, st)
        st, _ = sandboxd.request("POST", "/v1/sandboxes/jail/files/rename",
                                 {"from": "/tmp/abs", "to": "../../../../../tmp/escaped"})
        assert st in (200, 400, 404)
        assert not os.path.exists("/tmp/escaped")
        st, _ = sandboxd.request("DELETE", f"/v1/sandboxes/jail/files?path={q('/tmp/rootlink' + marker)}")
        assert st in (204, 404) and os.path.exists(marker)  # at most the sandbox's own copy
        st, _ = sandboxd.request("DELETE", "/v1/sandboxes/jail/files?path=/tmp/rootlink&recursive=true")
        assert st == 204  # removes the link itself, never what it points to
        assert os.path.exists(marker) and os.path.exists("/etc/passwd")
        # the project's own files are not there either
        here = os.path.realpath(__file__)
        st, _ = sandboxd.read("jail", here)
        assert st == 404
    finally:
        os.unlink(marker)


def test_symlink_races_stay_inside(sandboxd):
    """A process inside keeps swapping a directory for symlinks pointing up and out
    while the files API reads and writes through it: every answer comes from inside."""
    marker = "/root/rebuno-race-marker"
    with open(marker, "w") as f:
        f.write("HOST-SECRET")
    try:
        sandboxd.create("race")
        sandboxd.sh("race", "mkdir -p /tmp/real && echo inside > /tmp/real/rebuno-race-marker")
        c = sandboxd.ok("POST", "/v1/sandboxes/race/commands", {
            "cmd": "bash", "args": ["-c",
                                    "cd /tmp; while :; do ln -sfn real d; ln -sfn ../../../../root d;"
                                    " ln -sfn / d; ln -sfn /proc/1/root/root d; done"]},
            status=201)
        seen = set()
        for _ in range(150):
            st, out = sandboxd.read("race", "/tmp/d/rebuno-race-marker")
            seen.add((st, out if st == 200 else None))
            assert out != b"HOST-SECRET"
            st, _ = sandboxd.request(
                "PUT", f"/v1/sandboxes/race/files/content?path={q('/tmp/d/planted')}", raw=b"x")
            assert st in (200, 400, 403, 404)
        assert (200, b"inside\n") in seen  # the race really happened
        sandboxd.ok("POST", f"/v1/sandboxes/race/commands/{c['id']}/signal", {"signal": "KILL"})
        with open(marker) as f:
            assert f.read() == "HOST-SECRET"
        assert not os.path.exists("/root/planted") and not os.path.exists("/planted")
    finally:
        os.unlink(marker)
