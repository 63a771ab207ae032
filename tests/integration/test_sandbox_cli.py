"""`rebuno sandbox ...` against a real sandboxd: create, ls, get, exec (streamed, exit
code passed through, stdin with -i), cp both ways, stop/pause/resume/rm, --json."""
import json
import os
import subprocess

from conftest import BIN


def cli(d, *args, check=True, input=None, timeout=60):
    env = dict(os.environ, REBUNO_SANDBOX_URL=d.url if d else "http://127.0.0.1:9")
    p = subprocess.run([BIN, "sandbox", *args], capture_output=True, env=env, timeout=timeout,
                       input=input)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def test_cli_round_trip(sandboxd, tmp_path):
    out = cli(sandboxd, "create", "c1", "--meta", "team=a", "--env", "GREETING=hi",
              "--memory", "512", "--timeout", "600").stdout.decode()
    assert out.startswith("created c1 (") and out.rstrip().endswith("running")
    j = json.loads(cli(sandboxd, "create", "c2", "--no-start", "--json").stdout)
    assert j["name"] == "c2" and j["state"] == "stopped"
    ls = cli(sandboxd, "ls").stdout.decode()
    assert "c1" in ls and "c2" in ls and '{"team":"a"}' in ls
    only = json.loads(cli(sandboxd, "ls", "--state", "stopped", "--json").stdout)
    assert [s["name"] for s in only] == ["c2"]
    got = cli(sandboxd, "get", "c1").stdout.decode()
    assert "512 MiB" in got and "600000 ms" in got

    p = cli(sandboxd, "exec", "c1", "--", "sh", "-c", 'echo "$GREETING"; echo oops >&2; exit 5',
            check=False)
    assert (p.returncode, p.stdout, p.stderr) == (5, b"hi\n", b"oops\n")
    p = cli(sandboxd, "exec", "c1", "-i", "--", "wc", "-c", input=b"x" * 3000000)
    assert p.stdout.strip() == b"3000000"
    p = cli(sandboxd, "exec", "c1", "--json", "--", "echo", "j")
    assert json.loads(p.stdout)["stdout"] == "j\n"

    src = tmp_path / "in.bin"
    data = os.urandom(9 << 20)
    src.write_bytes(data)
    cli(sandboxd, "cp", str(src), "c1:/root/in.bin")
    cli(sandboxd, "cp", "c1:/root/in.bin", str(tmp_path / "out.bin"))
    assert (tmp_path / "out.bin").read_bytes() == data
    assert cli(sandboxd, "cp", "c1:/etc/hostname", "-").stdout == b"c1\n"
    p = cli(sandboxd, "cp", "c1:/nope", str(tmp_path / "x"), check=False)
    assert p.returncode == 1 and b"no such file" in p.stderr

    for action, state in (("pause", "paused"), ("resume", "running"), ("stop", "stopped")):
        assert cli(sandboxd, action, "c1").stdout.decode() == f"c1 {state}\n"
        assert sandboxd.get("c1")["state"] == state
    cli(sandboxd, "rm", "c1")
    p = cli(sandboxd, "get", "c1", check=False)
    assert p.returncode == 1 and b"no sandbox" in p.stderr


def test_cli_errors(sandboxd):
    p = cli(None, "ls", check=False)
    assert p.returncode == 1 and b"cannot reach sandboxd" in p.stderr
    p = cli(sandboxd, "exec", "x", check=False)
    assert p.returncode == 2
    p = cli(sandboxd, "create", "--meta", "novalue", check=False)
    assert p.returncode == 2 and b"KEY=VALUE" in p.stderr
    p = cli(sandboxd, "frobnicate", check=False)
    assert p.returncode == 2
    p = cli(sandboxd, "create", "bad name", check=False)
    assert p.returncode == 1 and b"name" in p.stderr


def test_cli_images(sandboxd, tmp_path):
    tree = tmp_path / "img"
    (tmp_path / "img" / "app").mkdir(parents=True)
    (tree / "app" / "hello.txt").write_text("from the image\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)       # a relative path is made absolute for the daemon
    try:
        out = cli(sandboxd, "image", "import", "img").stdout.decode()
    finally:
        os.chdir(cwd)
    digest = out.split()[0]
    assert digest.startswith("sha256:") and f"dir {tree}" in out, out
    assert digest in cli(sandboxd, "images").stdout.decode()
    cli(sandboxd, "create", "im", "--image", digest)
    assert cli(sandboxd, "exec", "im", "--", "cat", "/app/hello.txt").stdout == b"from the image\n"
    p = cli(sandboxd, "image-rm", digest, check=False)
    assert p.returncode == 1 and b"is used by a sandbox" in p.stderr, p.stderr
    cli(sandboxd, "rm", "im")
    assert cli(sandboxd, "image-rm", digest).stdout.decode() == f"{digest} deleted\n"
    assert json.loads(cli(sandboxd, "images", "--json").stdout)["images"] == []
    p = cli(sandboxd, "image", "import", str(tmp_path / "missing"), check=False)
    assert p.returncode == 1 and b"cannot use" in p.stderr and b"No such file" in p.stderr
    p = cli(sandboxd, "image", "import", check=False)
    assert p.returncode == 2 and b"give a host folder or tarball" in p.stderr
