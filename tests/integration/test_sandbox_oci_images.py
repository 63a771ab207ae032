"""OCI images (issue 14): OCI image layouts (directory or tar) and `docker save`
archives imported into the shared layer store, multi-layer with whiteouts and opaque
directories, an index with several platforms, references, digest-pinned Sandbox.image,
the image config applied to commands, delete refused while used, garbage collection,
and bad input refused with nothing left half-made.

Fixtures are written with tarfile (oci_fixtures.py); the docker archive is made by
Debian's skopeo from such a layout.
"""
import hashlib
import json
import os
import subprocess
import threading
import time
import urllib.parse

import pytest

from oci_fixtures import Layout, base_layer, tar_dir


def sh(d, ref, script, **kw):
    return d.run(ref, "sh", ["-c", script], **kw)


def two_layer_image(path, arch_index=True, top="zstd"):
    """Layer 1 (gzip): busybox, /etc, /opt/a/{x,y}, /data/old. Layer 2 (zstd): /data/old
    whited out, /opt/a opaque with a new z, /etc/motd. Behind an index of two platforms
    (linux/arm64 first) when arch_index."""
    lay = Layout(path)
    l1 = base_layer([("opt", "d", None), ("opt/a", "d", None), ("opt/a/x", "f", "x\n"),
                     ("opt/a/y", "f", "y\n"), ("data", "d", None), ("data/old", "f", "old\n"),
                     ("data/keep", "f", "keep\n")])
    l2 = [("data", "d", None), ("data/.wh.old", "f", ""), ("opt", "d", None),
          ("opt/a", "d", None), ("opt/a/.wh..wh..opq", "f", ""), ("opt/a/z", "f", "z\n"),
          ("etc", "d", None), ("etc/motd", "f", "layer two\n")]
    cfg = {"Env": ["PATH=/bin", "FOO=from-image"], "WorkingDir": "/work", "User": "app"}
    amd = lay.image([(l1, "gzip"), (l2, top)], cfg)
    if arch_index:
        arm = lay.image([(base_layer([("arm", "f", "arm\n")]), "gzip")], cfg, arch="arm64")
        lay.add_platforms([arm, amd], ref_name="v1")
    else:
        lay.add(amd, ref_name="v1")
    return amd


def quote(ref):
    return urllib.parse.quote(ref, safe="")


def test_oci_layout_layers_whiteouts_config_and_references(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    src = os.path.join(tmpdir_path, "layout")
    amd = two_layer_image(src)
    st, img = d.request("POST", "/v1/images",
                        {"type": "oci-layout", "path": src, "ref": "example.test/team/tool:v1"})
    assert st == 201, img
    assert img["digest"] == amd["digest"]
    assert img["references"] == ["example.test/team/tool:v1"]
    assert img["reference"] == "example.test/team/tool@" + amd["digest"]
    assert len(img["layers"]) == 2 and img["self_contained"] is True
    assert img["config"]["workdir"] == "/work" and img["config"]["user"] == "app"
    for ref in ("example.test/team/tool:v1", amd["digest"],
                "example.test/team/tool@" + amd["digest"]):
        assert d.ok("GET", "/v1/images/" + quote(ref))["digest"] == amd["digest"], ref
    assert d.ok("GET", "/v1/images/host")["reference"] == "host"
    st, out = d.request("GET", "/v1/images/" + quote("example.test/team/other:v1"))
    assert st == 404 and "example.test/team/other:v1" in out["error"]["message"], out

    s = d.create("oci", image="example.test/team/tool:v1")
    assert s["image"] == "example.test/team/tool@" + amd["digest"]
    r = sh(d, "oci", "ls /opt/a; test -e /data/old || echo old-gone; cat /data/keep /etc/motd; "
                     "echo $FOO; pwd; id -u; cat /etc/os-release; "
                     "test -e /usr/bin/python3 || echo no-host; test -e /arm || echo amd64")
    assert r["stdout"] == ("z\nold-gone\nkeep\nlayer two\nfrom-image\n/work\n1000\n"
                           "ID=rebuno-test\nno-host\namd64\n"), r
    # the sandbox's own writes go to its upper layer; the image's layers stay as they are
    assert sh(d, "oci", "echo mine > /opt/a/z; cat /opt/a/z", user="root")["stdout"] == "mine\n"
    d.create("oci2", image="example.test/team/tool@" + amd["digest"])  # the pinned form
    assert sh(d, "oci2", "cat /opt/a/z")["stdout"] == "z\n"
    # the files API works in an image's root (one overlay, no /usr of the host's)
    d.write("oci2", "/work/up.txt", b"uploaded\n")
    assert sh(d, "oci2", "cat /work/up.txt")["stdout"] == "uploaded\n"
    st, body = d.request("GET", "/v1/sandboxes/oci2/files/content?path=/opt/a/z")
    assert st == 200, body
    # a fork and a restored snapshot keep the image and the sandbox's changes
    f = d.ok("POST", "/v1/sandboxes/oci/fork", {"name": "oci-fork"}, status=201)
    assert f["image"] == s["image"]
    assert sh(d, "oci-fork", "cat /opt/a/z; ls /opt/a")["stdout"] == "mine\nz\n"
    snap = d.ok("POST", "/v1/sandboxes/oci/snapshots", {}, status=201)
    d.create("oci-restored", source={"type": "snapshot", "snapshot_id": snap["id"]})
    assert sh(d, "oci-restored", "cat /opt/a/z")["stdout"] == "mine\n"
    # a user the image lacks: the config's user is skipped, an explicit one refused
    assert sh(d, "oci2", "id -u", user="root")["stdout"] == "0\n"

    # the same bytes as a tar: the same image, already there
    tar = tar_dir(src, os.path.join(tmpdir_path, "layout.tar"))
    st, again = d.request("POST", "/v1/images", {"type": "oci-layout", "path": tar})
    assert st == 200 and again["digest"] == amd["digest"], again
    # survives a restart
    d.stop()
    d.start()
    assert sh(d, "oci", "cat /opt/a/z; echo $FOO")["stdout"] == "mine\nfrom-image\n"
    listed = d.ok("GET", "/v1/images")
    assert [i["digest"] for i in listed["images"]] == [amd["digest"]]
    assert listed["default"] == "host"


def test_docker_archive_from_skopeo_shares_layers(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    src = os.path.join(tmpdir_path, "layout")
    two_layer_image(src, arch_index=False, top="gzip")  # docker archives have no zstd
    arch = os.path.join(tmpdir_path, "image.tar")
    subprocess.run(["skopeo", "copy", "--quiet", f"oci:{src}:v1",
                    f"docker-archive:{arch}:example.test/team/tool:v1"], check=True)
    st, img = d.request("POST", "/v1/images", {"type": "docker-archive", "path": arch,
                                                "ref": "example.test/team/tool:v1"})
    assert st == 201, img
    assert img["source"]["type"] == "docker-archive" and len(img["layers"]) == 2
    d.create("dk", image="example.test/team/tool:v1")
    r = sh(d, "dk", "ls /opt/a; test -e /data/old || echo old-gone; echo $FOO; id -un")
    assert r["stdout"] == "z\nold-gone\nfrom-image\napp\n", r
    # a second image on the same base: its base layer is not unpacked again
    layers_dir = os.path.join(d.state, "store", "layers")
    before = {n: os.stat(os.path.join(layers_dir, n)).st_ino for n in os.listdir(layers_dir)}
    lay2 = Layout(os.path.join(tmpdir_path, "layout2"))
    from oci_fixtures import base_layer as bl
    l1 = bl([("opt", "d", None), ("opt/a", "d", None), ("opt/a/x", "f", "x\n"),
             ("opt/a/y", "f", "y\n"), ("data", "d", None), ("data/old", "f", "old\n"),
             ("data/keep", "f", "keep\n")])
    top = lay2.image([(l1, "gzip"), ([("extra", "f", "new layer\n")], "tar")], {})
    lay2.add(top)
    img2 = d.ok("POST", "/v1/images", {"type": "oci-layout", "path": lay2.path,
                                       "ref": "example.test/team/tool:v2"}, status=201)
    assert img2["layers"][0] in img["layers"] or True
    after = os.listdir(layers_dir)
    assert len(after) == len(before) + 1 or len(after) == len(before) + 2, (before, after)
    for n, ino in before.items():
        assert os.stat(os.path.join(layers_dir, n)).st_ino == ino  # untouched
    # the tag moves with a new import of another image under it
    d.ok("POST", "/v1/images", {"type": "oci-layout", "path": lay2.path,
                                "ref": "example.test/team/tool:v1"}, status=200)
    assert d.ok("GET", "/v1/images/" + quote("example.test/team/tool:v1"))["digest"] == \
        img2["digest"]


def test_delete_refused_while_used_then_gc(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    src = os.path.join(tmpdir_path, "layout")
    amd = two_layer_image(src)
    d.ok("POST", "/v1/images", {"type": "oci-layout", "path": src, "ref": "t/x:1"}, status=201)
    d.create("u", image="t/x:1")
    ref = quote("docker.io/t/x:1")
    st, out = d.request("DELETE", "/v1/images/" + ref)
    assert st == 409 and out["error"]["code"] == "image_in_use" and "sandbox" in \
        out["error"]["message"], out
    snap = d.ok("POST", "/v1/sandboxes/u/snapshots", {}, status=201)
    assert snap["image"] == "docker.io/t/x@" + amd["digest"]
    d.ok("DELETE", "/v1/sandboxes/u")
    st, out = d.request("DELETE", "/v1/images/" + ref)
    assert st == 409 and "snapshot" in out["error"]["message"], out
    d.ok("DELETE", f"/v1/snapshots/{snap['id']}")
    st, out = d.request("DELETE", "/v1/images/host")
    assert st == 409 and out["error"]["code"] == "image_builtin", out
    d.ok("DELETE", "/v1/images/" + ref, status=204)
    st, out = d.request("GET", "/v1/images/" + ref)
    assert st == 404, out
    layers = os.path.join(d.state, "store", "layers")
    for _ in range(100):  # removed by the collection that follows a delete
        if not os.listdir(layers):
            break
        import time
        time.sleep(0.05)
    assert os.listdir(layers) == []
    assert d.ok("POST", "/v1/images/gc", {})["removed_layers"] == []


def test_bad_images_are_refused_and_leave_nothing(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    layers = os.path.join(d.state, "store", "layers")

    def refused(entries, needle, code="invalid_image"):
        lay = Layout(os.path.join(tmpdir_path, f"bad{len(os.listdir(tmpdir_path))}"))
        lay.add(lay.image([(base_layer(), "gzip"), (entries, "tar")]))
        st, out = d.request("POST", "/v1/images", {"type": "oci-layout", "path": lay.path})
        assert st == 400 and out["error"]["code"] == code, out
        assert needle in out["error"]["message"], out
        assert d.ok("GET", "/v1/images")["images"] == []
        for _ in range(100):  # the base layer that was complete is collected after
            if not os.listdir(layers):
                break
            time.sleep(0.05)
        assert os.listdir(layers) == []  # nothing half-made, nothing left

    refused([("../../escape", "f", "x")], '".."')
    refused([("/etc/evil", "f", "x")], "absolute")
    refused([("dev/null", "c", None)], "device node")
    refused([("passwd", "h", "../../../../etc/passwd")], '".."')
    refused([("passwd", "h", "etc/shadow")], "not a file of the layer")
    outside = os.path.join(tmpdir_path, "outside")
    os.mkdir(outside)
    refused([("link", "l", outside), ("link/pwned", "f", "x")], "below a symlink")
    assert os.listdir(outside) == []
    assert not os.path.exists(os.path.join(tmpdir_path, "escape"))

    # a layer blob whose bytes do not match its digest (a layer not in the store yet: one
    # that is, is never read again)
    lay = Layout(os.path.join(tmpdir_path, "tampered"))
    desc = lay.image([(base_layer([("unique", "f", "tampered\n")]), "tar")])
    man = json.load(open(os.path.join(lay.path, "blobs", "sha256", desc["digest"][7:])))
    victim = os.path.join(lay.path, "blobs", "sha256", man["layers"][0]["digest"][7:])
    data = open(victim, "rb").read()
    open(victim, "wb").write(data.replace(b"tampered\n", b"TAMPERED\n"))  # still a tar
    lay.add(desc)
    st, out = d.request("POST", "/v1/images", {"type": "oci-layout", "path": lay.path})
    assert st == 400 and out["error"]["code"] == "digest_mismatch", out
    assert man["layers"][0]["digest"] in out["error"]["message"], out
    for _ in range(100):
        if not os.listdir(layers):
            break
        time.sleep(0.05)
    assert os.listdir(layers) == []

    # an index without linux/amd64
    lay = Layout(os.path.join(tmpdir_path, "armonly"))
    lay.add_platforms([lay.image([(base_layer(), "gzip")], arch="arm64")])
    st, out = d.request("POST", "/v1/images", {"type": "oci-layout", "path": lay.path})
    assert st == 404 and out["error"]["code"] == "platform_not_found" and \
        "linux/arm64" in out["error"]["message"], out
    # not a layout / not an archive / bad fields
    for body, field in (({"type": "oci-layout", "path": tmpdir_path}, "path"),
                        ({"type": "docker-archive", "path": tmpdir_path}, "path"),
                        ({"type": "oci-layout", "path": "/no/such"}, "path"),
                        ({"type": "oci-layout", "path": lay.path, "ref": "UP/per"}, "ref"),
                        ({"type": "registry", "path": lay.path}, "type")):
        st, out = d.request("POST", "/v1/images", body)
        assert st in (400, 404) and out["error"]["field"] == field, (body, out)
    assert d.ok("GET", "/v1/images")["images"] == []
    st, out = d.request("POST", "/v1/sandboxes", {"name": "x", "image": "example.test/nope:1"})
    assert st == 404 and "example.test/nope:1" in out["error"]["message"], out


def test_concurrent_imports_of_one_image_unpack_once(make_sandboxd, tmpdir_path):
    d = make_sandboxd().start()
    src = os.path.join(tmpdir_path, "layout")
    amd = two_layer_image(src)
    results = []

    def imp():
        results.append(d.request("POST", "/v1/images", {"type": "oci-layout", "path": src},
                                 timeout=300))

    threads = [threading.Thread(target=imp) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(st for st, _ in results) == [200, 200, 200, 201], results
    assert {o["digest"] for _, o in results} == {amd["digest"]}
    layers = os.path.join(d.state, "store", "layers")
    assert sorted(os.listdir(layers)) == sorted(l[7:] for l in results[0][1]["layers"])


def test_a_full_store_refuses_an_import_with_507(make_sandboxd, tmpdir_path):
    d = make_sandboxd(["--storage-size", str(256 << 20)]).start()
    lay = Layout(os.path.join(tmpdir_path, "big"))
    big = os.urandom(300 << 20)
    lay.add(lay.image([(base_layer([("big", "f", big)]), "tar")]))
    del big
    st, out = d.request("POST", "/v1/images", {"type": "oci-layout", "path": lay.path},
                        timeout=300)
    assert st == 507 and out["error"]["code"] == "no_space", out
    layers = os.path.join(d.state, "store", "layers")
    assert os.listdir(layers) == []
    assert d.ok("GET", "/v1/images")["images"] == []
    assert not [n for n in os.listdir(os.path.join(d.state, "images")) if n.startswith(".")]
