"""Imported images: a host directory or tarball as a single-layer image, imported once
and cached by digest (issues 5 and 14).

Images are self-contained: nothing of the host's /usr is visible, so the test trees
bring a static busybox (oci_fixtures.py) and commands run its sh.
"""
import hashlib
import io
import os
import shutil
import tarfile


def sh(d, ref, script, **kw):
    return d.run(ref, "sh", ["-c", script], **kw)


def make_tree(root):
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
    for a in ("sh", "cat", "stat", "test", "echo"):
        os.symlink("busybox", os.path.join(root, "bin", a))
    os.makedirs(os.path.join(root, "app"))
    os.makedirs(os.path.join(root, "etc"))
    with open(os.path.join(root, "app", "hello.txt"), "w") as f:
        f.write("from the image\n")
    with open(os.path.join(root, "etc", "motd"), "w") as f:
        f.write("image motd\n")
    os.symlink("hello.txt", os.path.join(root, "app", "link"))


def make_tar(path, members, shell=True):
    with tarfile.open(path, "w:gz") as t:
        if shell:
            t.add("/bin/busybox", arcname="bin/busybox")
            info = tarfile.TarInfo("bin/sh")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            t.addfile(info)
            info = tarfile.TarInfo("bin/cat")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            t.addfile(info)
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return path


def test_directory_image_is_cached_and_used(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    tree = os.path.join(tmpdir_path, "tree")
    make_tree(tree)
    st, img = d.request("POST", "/v1/images", {"type": "dir", "path": tree})
    assert st == 201, img
    assert img["digest"].startswith("sha256:") and len(img["digest"]) == 71
    assert img["source"] == {"type": "dir", "path": tree} and img["size_bytes"] > 0
    # the same content again: the same image, 200
    st, again = d.request("POST", "/v1/images", {"type": "dir", "path": tree})
    assert st == 200 and again["digest"] == img["digest"], again
    dg = img["digest"]
    assert d.ok("GET", f"/v1/images/{dg}")["digest"] == dg
    assert [x["digest"] for x in d.ok("GET", "/v1/images")["images"]] == [dg]

    s = d.create("im", image=dg)
    assert s["image"] == dg
    r = sh(d, "im", "cat /app/hello.txt /app/link /etc/motd; stat -c %u /app/hello.txt; "
                    "test -e /etc/passwd && echo passwd; echo x > /app/new && cat /app/new; "
                    "test -e /usr/bin/python3 || echo no-host-usr")
    assert r["stdout"] == ("from the image\nfrom the image\nimage motd\n0\npasswd\nx\n"
                           "no-host-usr\n"), r
    # the source form names the same image
    s2 = d.create("im2", source={"type": "image", "image": dg}, start=False)
    assert s2["image"] == dg

    # in use: refused
    st, out = d.request("DELETE", f"/v1/images/{dg}")
    assert st == 409 and out["error"]["code"] == "image_in_use", out

    # survives a restart, and sandboxes keep using it
    d.stop()
    d.start()
    assert d.ok("GET", f"/v1/images/{dg}")["source"]["path"] == tree
    r = sh(d, "im", "cat /app/hello.txt /app/new")
    assert r["stdout"] == "from the image\nx\n", r

    d.ok("DELETE", "/v1/sandboxes/im")
    d.ok("DELETE", "/v1/sandboxes/im2")
    d.ok("DELETE", f"/v1/images/{dg}", status=204)
    st, out = d.request("GET", f"/v1/images/{dg}")
    assert st == 404 and out["error"]["code"] == "image_not_found"
    assert not os.path.exists(os.path.join(d.state, "images", dg[7:]))
    assert not os.path.exists(os.path.join(d.state, "store", "layers", dg[7:]))


def test_tarball_image_and_failures(sandboxd, tmpdir_path):
    d = sandboxd
    good = make_tar(os.path.join(tmpdir_path, "good.tar.gz"),
                    [("app/data.txt", b"tarball data\n")])
    st, img = d.request("POST", "/v1/images", {"type": "tarball", "path": good})
    assert st == 201, img
    with open(good, "rb") as f:
        assert img["digest"] == "sha256:" + hashlib.sha256(f.read()).hexdigest()
    assert d.request("POST", "/v1/images", {"type": "tarball", "path": good})[0] == 200
    d.create("tb", image=img["digest"])
    assert sh(d, "tb", "cat /app/data.txt")["stdout"] == "tarball data\n"

    bad = make_tar(os.path.join(tmpdir_path, "bad.tar.gz"),
                   [("app/ok", b"ok"), ("../escape", b"no")])
    st, out = d.request("POST", "/v1/images", {"type": "tarball", "path": bad})
    assert st == 400 and out["error"]["code"] == "invalid_image" and ".." in out["error"][
        "message"], out
    absolute = make_tar(os.path.join(tmpdir_path, "abs.tar"), [("/etc/x", b"no")])
    st, out = d.request("POST", "/v1/images", {"type": "tarball", "path": absolute})
    assert st == 400 and out["error"]["code"] == "invalid_image", out
    assert not os.path.exists(os.path.join(tmpdir_path, "escape"))
    dev = os.path.join(tmpdir_path, "dev.tar")
    with tarfile.open(dev, "w") as t:
        info = tarfile.TarInfo("dev/sda")
        info.type, info.devmajor, info.devminor = tarfile.BLKTYPE, 8, 0
        t.addfile(info)
    st, out = d.request("POST", "/v1/images", {"type": "tarball", "path": dev})
    assert st == 400 and "device" in out["error"]["message"], out
    # a symlink out of the layer, then a member through it: tar writes nothing outside
    outside = os.path.join(tmpdir_path, "outside")
    os.mkdir(outside)
    esc = os.path.join(tmpdir_path, "esc.tar")
    with tarfile.open(esc, "w") as t:
        info = tarfile.TarInfo("link")
        info.type, info.linkname = tarfile.SYMTYPE, outside
        t.addfile(info)
        info = tarfile.TarInfo("link/pwned")
        info.size = 2
        t.addfile(info, io.BytesIO(b"no"))
    st, out = d.request("POST", "/v1/images", {"type": "tarball", "path": esc})
    assert st == 400 and out["error"]["code"] == "invalid_image", out
    assert os.listdir(outside) == []
    assert len(d.ok("GET", "/v1/images")["images"]) == 1
    layers = os.path.join(d.state, "store", "layers")
    assert [n for n in os.listdir(layers) if n.startswith(".")] == []  # nothing half-made

    for body in ({"type": "tarball", "path": "relative.tar"},
                 {"type": "tarball", "path": tmpdir_path},          # a directory
                 {"type": "dir", "path": good},                     # a file
                 {"type": "dir", "path": "/no/such/dir"},
                 {"type": "zip", "path": good},
                 {"type": "dir", "path": tmpdir_path, "extra": 1}):
        st, out = d.request("POST", "/v1/images", body)
        assert st == 400 and out["error"]["code"] == "validation_error", (body, out)

    missing = "sha256:" + "0" * 64
    st, out = d.request("POST", "/v1/sandboxes", {"name": "nope", "image": missing})
    assert st == 404 and out["error"]["code"] == "image_not_found", out
    st, out = d.request("POST", "/v1/sandboxes",
                        {"name": "nope", "source": {"type": "image", "image": missing}})
    assert st == 404 and out["error"]["code"] == "image_not_found", out
    st, out = d.request("POST", "/v1/sandboxes", {"name": "nope", "image": "ubuntu"})
    assert st == 404 and out["error"]["code"] == "image_not_found", out
    assert "ubuntu" in out["error"]["message"] and "docker.io/library/ubuntu:latest" in \
        out["error"]["message"], out
    st, out = d.request("POST", "/v1/sandboxes", {"name": "nope", "image": "Bad Name!"})
    assert st == 400 and out["error"]["field"] == "image", out
    st, out = d.request("GET", "/v1/images/" + missing)
    assert st == 404 and out["error"]["code"] == "image_not_found", out
    # the default image still works
    assert d.create("plain", image="default")["image"] == "host"
    assert d.create("plain2", image="host")["image"] == "host"


def test_an_import_does_not_stall_other_requests(sandboxd, tmpdir_path):
    """The import's tar work runs off the daemon's loop: while a large tree is being
    imported, other requests are answered, and concurrent imports of the same bytes
    end with one image (201 once, 200 for the others)."""
    import threading
    import time

    big = os.path.join(tmpdir_path, "big")
    os.makedirs(os.path.join(big, "data"))
    for i in range(40):
        with open(os.path.join(big, "data", f"f{i}"), "wb") as f:
            f.write(os.urandom(4 << 20))          # 160 MiB that tar must read and write
    results = []

    def imp():
        results.append(sandboxd.request("POST", "/v1/images", {"type": "dir", "path": big}, timeout=300))

    threads = [threading.Thread(target=imp) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    answered = 0  # health checks answered before any import was: 0 when tar held the loop
    while any(t.is_alive() for t in threads):
        assert sandboxd.request("GET", "/v1/health")[0] == 200
        if not results:
            answered += 1
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert sorted(st for st, _ in results) == [200, 201], results
    assert results[0][1]["digest"] == results[1][1]["digest"]
    assert len(sandboxd.ok("GET", "/v1/images")["images"]) == 1
    assert answered >= 3, answered
    assert not [n for n in os.listdir(os.path.join(sandboxd.state, "images")) if n.startswith(".import")]
