"""Creating sandboxes from a git repository or a tarball, and tar uploads (issue 6).

git and tar run inside the new sandbox as its root; the host only copies bytes. The
repository is a local bare repo this test makes; a failed source deletes the sandbox
and answers 400 source_failed with git's or tar's message.
"""
import io
import os
import subprocess
import tarfile

import pytest


def git(*args, cwd=None):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@x", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@x")
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


@pytest.fixture
def bare_repo(tmpdir_path):
    bare = os.path.join(tmpdir_path, "repo.git")
    work = os.path.join(tmpdir_path, "work")
    git("init", "-q", "--bare", "-b", "main", bare)
    git("init", "-q", "-b", "main", work)
    with open(os.path.join(work, "README"), "w") as f:
        f.write("first\n")
    git("add", "README", cwd=work)
    git("commit", "-q", "-m", "one", cwd=work)
    with open(os.path.join(work, "README"), "w") as f:
        f.write("second\n")
    git("commit", "-q", "-am", "two", cwd=work)
    git("checkout", "-q", "-b", "feature", cwd=work)
    with open(os.path.join(work, "feature.txt"), "w") as f:
        f.write("feature\n")
    git("add", "feature.txt", cwd=work)
    git("commit", "-q", "-m", "three", cwd=work)
    git("push", "-q", bare, "main", "feature", cwd=work)
    return bare


def make_tar(members, gz=True):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as t:
        for name, data in members:
            if isinstance(data, tuple):  # ("symlink", target)
                info = tarfile.TarInfo(name)
                info.type = tarfile.SYMTYPE
                info.linkname = data[1]
                t.addfile(info)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.uid = info.gid = 4242
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_git_source_clones_a_branch_inside_the_sandbox(sandboxd, bare_repo):
    d = sandboxd
    s = d.create("g1", source={"type": "git", "url": bare_repo, "branch": "feature", "depth": 1,
                               "path": "/workspace/repo"})
    assert s["state"] == "running" and s["source"]["type"] == "git"
    r = d.sh("g1", "cd /workspace/repo && git rev-parse --abbrev-ref HEAD && "
                   "git log --oneline | wc -l && cat README feature.txt && stat -c %u README")
    assert r["stdout"] == "feature\n1\nsecond\nfeature\n0\n", r
    # the whole history of the default branch, into the default path, created stopped
    s = d.create("g2", source={"type": "git", "url": "file://" + bare_repo}, start=False)
    assert s["state"] == "stopped"
    r = d.sh("g2", "cd /workspace && git log --oneline | wc -l && ls -A /tmp")
    assert r["stdout"] == "2\n", r  # and the host copy of the repository is gone from /tmp


def test_git_source_failures(sandboxd, bare_repo, tmpdir_path):
    d = sandboxd
    st, out = d.request("POST", "/v1/sandboxes", {
        "name": "nob", "source": {"type": "git", "url": bare_repo, "branch": "no-such"}})
    assert st == 400 and out["error"]["code"] == "source_failed", out
    assert "no-such" in out["error"]["message"]
    assert d.request("GET", "/v1/sandboxes/nob")[0] == 404
    assert d.ok("GET", "/v1/sandboxes")["sandboxes"] == []
    bad = [{"type": "git"}, {"type": "git", "url": os.path.join(tmpdir_path, "missing")},
           {"type": "git", "url": "-oProxyCommand=x"}, {"type": "git", "url": bare_repo,
                                                        "branch": "--upload-pack=x"},
           {"type": "git", "url": bare_repo, "path": "/"}, {"type": "nope"},
           {"type": "tarball", "file": "relative.tar"}, {"type": "git", "url": bare_repo, "x": 1}]
    for src in bad:
        st, out = d.request("POST", "/v1/sandboxes", {"source": src})
        assert st == 400 and out["error"]["code"] == "validation_error", (src, out)


def test_tarball_source_and_unsafe_members(sandboxd, tmpdir_path):
    d = sandboxd
    good = os.path.join(tmpdir_path, "good.tar.gz")
    with open(good, "wb") as f:
        f.write(make_tar([("app/main.py", b"print('hi')\n"), ("/abs/file", b"abs\n"),
                          ("app/link", ("symlink", "/etc/hostname"))]))
    s = d.create("t1", source={"type": "tarball", "file": good, "path": "/srv/app"})
    assert s["source"]["type"] == "tarball"
    r = d.sh("t1", "cat /srv/app/app/main.py /srv/app/abs/file /srv/app/app/link; "
                   "stat -c %u /srv/app/app/main.py; ls /abs 2>&1 | head -1")
    # the absolute member lands under the target; the symlink resolves inside the sandbox;
    # the archive's owner (4242) is not kept
    assert r["stdout"].startswith("print('hi')\nabs\nt1\n0\nls: cannot access"), r
    evil = os.path.join(tmpdir_path, "evil.tar")
    with open(evil, "wb") as f:
        f.write(make_tar([("ok", b"ok\n"), ("../../../../escape", b"x\n")], gz=False))
    st, out = d.request("POST", "/v1/sandboxes",
                        {"name": "t2", "source": {"type": "tarball", "file": evil}})
    assert st == 400 and out["error"]["code"] == "source_failed", out
    assert d.request("GET", "/v1/sandboxes/t2")[0] == 404
    assert not os.path.exists("/escape")


def test_tar_upload_extracts_inside(sandboxd):
    d = sandboxd
    d.create("u")
    body = make_tar([("a/b.txt", b"bee\n"), ("c.txt", b"sea\n")])
    st, out = d.request("POST", "/v1/sandboxes/u/files/extract?path=/data/in", raw=body,
                        headers={"Content-Type": "application/octet-stream"})
    assert st == 200 and out["path"] == "/data/in", out
    assert d.read("u", "/data/in/a/b.txt") == (200, b"bee\n")
    assert d.read("u", "/data/in/c.txt") == (200, b"sea\n")
    st, out = d.request("POST", "/v1/sandboxes/u/files/extract?path=/x", raw=b"not a tar" * 100,
                        headers={"Content-Type": "application/octet-stream"})
    assert st == 400 and out["error"]["code"] == "extract_failed", out
