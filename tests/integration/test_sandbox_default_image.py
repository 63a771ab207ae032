"""The demo's default image (issue 14): Debian bookworm made by scripts/default-image.sh
with mmdebstrap, imported as docker.io/rebuno/default:latest, becomes the default of new
sandboxes, and has what 004 lists for user handles (getent, useradd, setpriv, GNU find)
plus git, python3, bash and coreutils; nothing of the host's /usr.

The tarball is built once and cached by scripts/test.sh (REBUNO_DEFAULT_IMAGE_TAR, under
/var/cache/rebuno); without it this test is skipped (the build needs the Debian mirror).
"""
import os

import pytest

TAR = os.environ.get("REBUNO_DEFAULT_IMAGE_TAR", "/var/cache/rebuno/default-bookworm.tar")


@pytest.mark.skipif(not os.path.isfile(TAR), reason=f"no default image tarball at {TAR} "
                    "(bash scripts/default-image.sh --build-only)")
def test_debian_default_image(make_sandboxd):
    d = make_sandboxd().start()
    assert d.ok("GET", "/v1/images")["default"] == "host"
    st, img = d.request("POST", "/v1/images", {"type": "tarball", "path": TAR,
                                               "ref": "docker.io/rebuno/default:latest"})
    assert st == 201, img
    assert d.ok("GET", "/v1/images")["default"] == "docker.io/rebuno/default@" + img["digest"]
    s = d.create("deb")
    assert s["image"] == "docker.io/rebuno/default@" + img["digest"]
    r = d.run("deb", "bash", ["-c",
              "set -e; . /etc/os-release; echo $VERSION_CODENAME; git --version | cut -d' ' -f1-2;"
              " python3 -c 'print(6*7)'; for p in getent useradd setpriv find sudo ls; do"
              " command -v $p >/dev/null || echo missing $p; done; find --version | head -1 |"
              " cut -d' ' -f1-3; test -e /usr/bin/rebuno || echo no-host"])
    assert r["exit_code"] == 0, r
    assert r["stdout"] == "bookworm\ngit version\n42\nfind (GNU findutils)\nno-host\n", r
    # a user handle (useradd inside), then a command as that user
    u = d.ok("POST", "/v1/sandboxes/deb/users", {"name": "alice"}, status=201)
    assert u["home_dir"] == "/home/alice"
    r = d.run("deb", "bash", ["-c", "id -un; getent passwd alice | cut -d: -f6"], user="alice")
    assert r["stdout"] == "alice\n/home/alice\n", r
    # a build on it: RUN changes /etc (useradd), USER runs as the new account, and the
    # sandbox's own /etc/hostname is not part of any layer
    st, job = d.request("POST", "/v1/images", {
        "type": "build", "ref": "example.test/deb-tool:v1",
        "recipe": "FROM docker.io/rebuno/default:latest\n"
                  "RUN useradd -m -s /bin/bash bob && echo built > /home/bob/x\n"
                  "USER bob\nWORKDIR /home/bob\nRUN id -un > who && python3 -c 'print(1)' >> who\n"})
    assert st == 202, job
    import time
    deadline = time.time() + 300
    while job["status"] == "building":
        assert time.time() < deadline, job
        time.sleep(0.2)
        job = d.ok("GET", "/v1/images/builds/" + job["id"])
    assert job["status"] == "done", job
    d.create("deb-built", image="example.test/deb-tool:v1")
    r = d.run("deb-built", "bash", ["-c", "cat x who; pwd; id -un; getent passwd bob | cut -d: -f7;"
              " cat /etc/hostname"])
    assert r["stdout"] == "built\nbob\n1\n/home/bob\nbob\n/bin/bash\ndeb-built\n", r
