"""Snapshots, restores, forks and sources of rebuno.sandbox (async and sync) against a real
`rebuno sandboxd`.

One daemon serves the module (the `Daemon` of test_sandbox_client.py: binary from
$REBUNO_BIN, else build/asan/rebuno, a temporary --state-dir, root only). After every test,
pass or fail, every sandbox, snapshot and drive is deleted through the raw HTTP API; at the
end the daemon gets SIGTERM and must exit cleanly, leaving no process, cgroup or mount and
no sanitizer report. test_sandbox_drives.py reuses these fixtures.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO
from test_sandbox_client import Daemon, daemon_lifetime, pointed_at

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxd runs as root")


# --- the daemon -------------------------------------------------------------------------------------


class StorageDaemon(Daemon):
    """The client tests' daemon, whose clean-up also removes snapshots and drives."""

    def cleanup(self) -> None:
        self.delete_everything()

    def delete_everything(self) -> None:
        self.delete_all()  # sandboxes first: a mounted drive cannot be deleted
        st, body = self.http("GET", "/v1/snapshots?limit=1000")
        assert st == 200, body
        for s in body["snapshots"]:
            self.http("DELETE", f"/v1/snapshots/{s['id']}")
        deadline = time.monotonic() + 15
        while True:
            st, body = self.http("GET", "/v1/drives?limit=1000")
            assert st == 200, body
            busy = []
            for d in body["drives"]:
                st, reply = self.http("DELETE", f"/v1/drives/{d['id']}")
                if st == 409:
                    busy.append(d["name"])
            if not busy:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"drives still attached after their sandboxes were deleted: {busy}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def daemon() -> Iterator[StorageDaemon]:
    yield from daemon_lifetime(StorageDaemon, "rebuno-sbx-storage-")  # type: ignore[misc]


@pytest.fixture(autouse=True)
def sbx_url(daemon: StorageDaemon, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point the module-level API at the test daemon; delete everything afterwards."""
    yield from pointed_at(daemon, monkeypatch)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def sandbox_names(daemon: Daemon) -> set[str]:
    st, body = daemon.http("GET", "/v1/sandboxes?limit=1000")
    assert st == 200, body
    return {s["name"] for s in body["sandboxes"]}


# --- snapshots ----------------------------------------------------------------------------------------


def test_snapshot_keeps_running_and_restores_its_files(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import Sandbox, SandboxApiError, SandboxStatus, Snapshot, SnapshotSource

    async def main() -> None:
        async with sandbox.create_sandbox(name="snap-src", env={"KEY": "v1"}, tags={"team": "a"}) as box:
            await box.fs.write_text("/root/state.txt", "before")
            sleeper = await box.create_command("sleep", ["300"])
            t0 = datetime.now(timezone.utc)
            snap = await box.snapshot()
            assert isinstance(snap, Snapshot)
            # our departure from Vercel: the sandbox is not stopped, its processes live on
            await box.refresh()
            assert box.status == SandboxStatus.RUNNING
            await sleeper.refresh()
            assert sleeper.returncode is None and sleeper.status.value == "running"
            assert snap.id == snap.snapshot_id and snap.status == "created"
            assert snap.source_sandbox_id == snap.sandbox_id == box.id and snap.sandbox_name == "snap-src"
            assert snap.size_bytes is None and snap.image == box.image
            assert snap.created_at is not None and snap.created_at >= t0 - timedelta(seconds=5)
            assert snap.expires_at is not None  # the daemon's default: 30 days
            assert abs((snap.expires_at - snap.created_at) - timedelta(days=30)) < timedelta(seconds=5)
            assert snap.model_dump(mode="json")["id"] == snap.id

            # later changes do not reach the snapshot
            await box.fs.write_text("/root/state.txt", "after")
            async with sandbox.create_sandbox(name="snap-restored",
                                              source=SnapshotSource(snapshot_id=snap.snapshot_id)) as restored:
                assert await restored.fs.read_text("/root/state.txt") == "before"
                assert restored.source is not None and restored.source["type"] == "snapshot"
                assert restored.source["snapshot_id"] == snap.id
                assert restored.image == box.image
            # a Snapshot handle is accepted as a source too
            async with sandbox.create_sandbox(source=snap) as restored2:
                assert await restored2.fs.read_text("/root/state.txt") == "before"
            assert await box.fs.read_text("/root/state.txt") == "after"
            await sleeper.kill()

            # expiration: seconds or timedelta; 0 never expires
            forever = await box.snapshot(expiration=0)
            assert forever.expires_at is None
            hour = await box.snapshot(expiration=timedelta(hours=1))
            assert hour.expires_at is not None and hour.created_at is not None
            assert abs((hour.expires_at - hour.created_at) - timedelta(hours=1)) < timedelta(seconds=5)
            with pytest.raises(SandboxApiError) as e:
                await box.snapshot(expiration=0.5)  # the API's minimum is one second
            assert e.value.status_code == 400 and e.value.code == "validation_error"

            # lookups
            got = await sandbox.get_snapshot(snapshot_id=snap.id)
            assert got.id == snap.id and got.source_sandbox_id == box.id
            mine = [s.id for s in await box.list_snapshots()]
            assert mine == [snap.id, forever.id, hour.id]
            assert [s.id for s in await box.list_snapshots(limit=2)] == mine[:2]
            listed = [s.id async for s in sandbox.query_snapshots(sandbox="snap-src", page_size=1)]
            assert listed == mine
            assert [s.id async for s in sandbox.query_snapshots(sandbox=box)] == mine

            # a name is kept with the snapshot and filters listings (names need not be unique)
            named = await box.snapshot(name="release/v1")
            assert named.name == "release/v1" and snap.name is None
            assert (await sandbox.get_snapshot(snapshot_id=named.id)).name == "release/v1"
            assert [s.id async for s in sandbox.query_snapshots(name="release/v1")] == [named.id]
            assert [s.id async for s in sandbox.query_snapshots(name="other")] == []
            with pytest.raises(SandboxApiError) as e:
                await box.snapshot(name="no spaces")
            assert e.value.status_code == 400 and e.value.field == "name"
            await named.delete()

            # delete: gone for lookups and restores, and a restore then creates nothing
            await hour.delete()
            with pytest.raises(SandboxApiError) as e:
                await hour.refresh()
            assert e.value.status_code == 404 and e.value.code == "snapshot_not_found"
            with pytest.raises(SandboxApiError) as e:
                await hour.delete()
            assert e.value.status_code == 404
            await sandbox.delete_snapshot(snapshot_id=forever.id)
            before = sandbox_names(daemon)
            with pytest.raises(SandboxApiError) as e:
                await sandbox.create_sandbox(name="from-deleted", source=SnapshotSource(snapshot_id=forever.id))
            assert e.value.status_code == 404 and e.value.code == "snapshot_not_found"
            assert e.value.field == "source.snapshot_id" and "snapshot" in e.value.message
            assert sandbox_names(daemon) == before
            with pytest.raises(SandboxApiError) as e:
                await sandbox.get_snapshot(snapshot_id="01a20000-0000-7000-8000-000000000000")
            assert e.value.status_code == 404 and e.value.code == "snapshot_not_found"
            src_id = box.id

        # a snapshot outlives its sandbox
        assert isinstance(box, Sandbox)
        again = await sandbox.get_snapshot(snapshot_id=snap.id)
        assert again.source_sandbox_id == src_id
        assert [s.id async for s in sandbox.query_snapshots(sandbox=src_id)] == [snap.id]
        async with sandbox.create_sandbox(source=SnapshotSource(snapshot_id=snap.id)) as late:
            assert await late.fs.read_text("/root/state.txt") == "before"

    run(main())


def test_snapshot_of_paused_and_stopped_sandboxes(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import SandboxStatus, SnapshotSource

    async def main() -> None:
        async with sandbox.create_sandbox() as box:
            await box.fs.write_text("/root/f", "paused")
            await box.pause()
            snap = await box.snapshot()
            await box.refresh()
            assert box.status == SandboxStatus.PAUSED  # left as it was
            await box.resume()
            await box.fs.write_text("/root/f", "stopped")
            await box.stop()
            snap2 = await box.snapshot()
            await box.refresh()
            assert box.status == SandboxStatus.STOPPED
            for s, want in ((snap, "paused"), (snap2, "stopped")):
                async with sandbox.create_sandbox(source=SnapshotSource(snapshot_id=s.id)) as r:
                    assert await r.fs.read_text("/root/f") == want

    run(main())


# --- forks ---------------------------------------------------------------------------------------------


def test_fork_inherits_settings_not_mounts_and_overrides_apply(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import (
        CreateSandboxOperation, NetworkPolicy, SandboxApiError, SandboxNotFoundError, SandboxResources,
        SandboxStatus,
    )

    async def main() -> None:
        drive, _ = await sandbox.get_or_create_drive(name="fork-cache")
        async with sandbox.create_sandbox(name="fork-src", env={"KEY": "v1", "OTHER": "o"}, tags={"team": "a"},
                                          resources=SandboxResources(vcpus=1, memory=512), timeout=120,
                                          on_timeout="pause", snapshot_expiration=3600,
                                          mounts={"/cache": drive}) as src:
            assert set(src.mounts) == {"/cache"} and src.snapshot_expiration == timedelta(hours=1)
            await src.fs.write_text("/root/code.py", "print('src')")
            sleeper = await src.create_command("sleep", ["300"])

            op = sandbox.fork_sandbox(source_sandbox="fork-src", name="fork-plain")
            assert isinstance(op, CreateSandboxOperation)
            async with op as plain:
                assert plain.name == "fork-plain" and plain.id != src.id
                assert plain.status == SandboxStatus.RUNNING
                assert dict(plain.metadata) == {"team": "a"}
                assert set(plain.env_keys) == {"KEY", "OTHER"}
                r = await plain.run_command("printenv", ["KEY"], capture_output=True)
                assert r.stdout == "v1\n"
                assert plain.resources == src.resources
                assert plain.timeout == timedelta(seconds=120) and plain.on_timeout == "pause"
                assert plain.snapshot_expiration == timedelta(hours=1)
                assert plain.image == src.image
                assert dict(plain.mounts) == {}  # never inherited
                assert plain.source == {"type": "fork", "sandbox_id": src.id, "sandbox_name": "fork-src"}
                assert await plain.fs.read_text("/root/code.py") == "print('src')"
                assert not await plain.fs.exists("/cache/anything")
                # independent files
                await plain.fs.write_text("/root/code.py", "print('fork')")
                assert await src.fs.read_text("/root/code.py") == "print('src')"
                plain_id = plain.id
            # the managed fork is deleted at the end of the block; the source lives on
            with pytest.raises(SandboxNotFoundError):
                await sandbox.get_sandbox(id=plain_id)
            await src.refresh()
            assert src.status == SandboxStatus.RUNNING
            await sleeper.refresh()
            assert sleeper.returncode is None

            # overrides: only what is passed changes; resources merge; env and tags replace
            forked = await sandbox.fork_sandbox(source_sandbox=src, name="fork-over", tags={"purpose": "debug"},
                                                env={"KEY": "v2"}, resources={"vcpus": 2}, timeout=30,
                                                network_policy=NetworkPolicy.allow_all())
            try:
                assert dict(forked.metadata) == {"purpose": "debug"}
                assert set(forked.env_keys) == {"KEY"}
                r = await forked.run_command("printenv", ["KEY"], capture_output=True)
                assert r.stdout == "v2\n"
                assert forked.resources.vcpus == 2 and forked.resources.memory == 512
                assert forked.timeout == timedelta(seconds=30) and forked.on_timeout == "pause"
                assert forked.network_policy is not None and forked.network_policy.mode == "allow-all"
                assert src.network_policy is not None and src.network_policy.mode == "deny-all"
            finally:
                await forked.delete()

            # start=False creates it stopped; destroy=False only stops it at the end
            async with sandbox.fork_sandbox(source_sandbox=src.id, name="fork-cold", start=False,
                                            destroy=False) as cold:
                assert cold.status == SandboxStatus.STOPPED
                assert await cold.fs.read_text("/root/code.py") == "print('src')"  # lazy resume
            cold_box = await sandbox.get_sandbox("fork-cold")
            assert cold_box.status == SandboxStatus.STOPPED
            await cold_box.delete()

            # mounts are passed explicitly: the source's read-write drive is still attached
            before = sandbox_names(daemon)
            with pytest.raises(SandboxApiError) as e:
                await sandbox.fork_sandbox(source_sandbox=src, name="fork-rw", mounts={"/cache": drive})
            assert e.value.status_code == 409 and e.value.code == "drive_attached"
            assert sandbox_names(daemon) == before
            with pytest.raises(ValueError, match="mounts"):
                sandbox.fork_sandbox(source_sandbox=src, mounts={"relative": drive})

            # errors
            with pytest.raises(SandboxNotFoundError) as e2:
                await sandbox.fork_sandbox(source_sandbox="no-such-sandbox")
            assert e2.value.status_code == 404 and e2.value.code == "sandbox_not_found"
            with pytest.raises(SandboxApiError) as e:
                await sandbox.fork_sandbox(source_sandbox=src, name="fork-src")
            assert e.value.status_code == 409 and e.value.code == "name_taken"
            with pytest.raises(TypeError):
                sandbox.fork_sandbox(source_sandbox="")
            with pytest.raises(NotImplementedError):
                sandbox.fork_sandbox(source_sandbox=src, runtime="node22")
            op = sandbox.fork_sandbox(source_sandbox=src)
            once = await op
            try:
                with pytest.raises(RuntimeError):
                    await op
            finally:
                await once.delete()
            await sleeper.kill()

    run(main())


def test_sync_mirror_snapshots_and_forks(daemon: StorageDaemon) -> None:
    from rebuno.sandbox import SandboxApiError, SandboxServiceOptions, SnapshotSource
    from rebuno.sandbox import sync as sandbox

    with sandbox.create_sandbox(name="sync-src", env={"A": "1"}) as box:
        box.fs.write_text("/root/x", "one")
        snap = box.snapshot(expiration=600)
        assert isinstance(snap, sandbox.SyncSnapshot) and snap.snapshot_id == snap.id
        assert box.refresh().status.value == "running"
        assert [s.id for s in box.list_snapshots()] == [snap.id]
        assert [s.id for s in sandbox.query_snapshots(sandbox="sync-src")] == [snap.id]
        named = box.snapshot(name="sync-named")
        assert named.name == "sync-named" and snap.name is None
        assert [s.id for s in sandbox.query_snapshots(name="sync-named")] == [named.id]
        named.delete()
        assert sandbox.get_snapshot(snapshot_id=snap.id).source_sandbox_id == box.id
        box.fs.write_text("/root/x", "two")
        with sandbox.create_sandbox(source=SnapshotSource(snapshot_id=snap.id)) as restored:
            assert restored.fs.read_text("/root/x") == "one"
        with sandbox.fork_sandbox(source_sandbox="sync-src", name="sync-fork", tags={"k": "v"}) as forked:
            assert forked.fs.read_text("/root/x") == "two"
            assert dict(forked.tags) == {"k": "v"} and forked.env_keys == ("A",)
            assert forked.source is not None and forked.source["sandbox_name"] == "sync-src"
        assert "sync-fork" not in sandbox_names(daemon)
        with sandbox.fork_sandbox(source_sandbox=box) as forked2:  # a SyncSandbox handle works too
            assert forked2.fs.read_text("/root/x") == "two"
        snap.delete()
        with pytest.raises(SandboxApiError) as e:
            snap.refresh()
        assert e.value.status_code == 404 and e.value.code == "snapshot_not_found"

    client = sandbox.SyncSandboxClient.create(options=SandboxServiceOptions(region="iad1"))
    try:
        with client.create_sandbox(name="sync-client") as box:
            snap = box.snapshot()
            with client.fork_sandbox(source_sandbox="sync-client") as forked:
                assert forked.region == "iad1"
            assert client.get_snapshot(snapshot_id=snap.id).id == snap.id
            assert [s.id for s in client.query_snapshots(sandbox=box)] == [snap.id]
            client.delete_snapshot(snapshot_id=snap.id)
            with pytest.raises(SandboxApiError) as e:
                client.create_sandbox(source=snap)
            assert e.value.status_code == 404
    finally:
        client.close()


# --- sources --------------------------------------------------------------------------------------------


def _git(*args: str, cwd: Path | None = None) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@example.com", GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_SYSTEM="/dev/null")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def bare_repo(tmp_path: Path) -> Path:
    """A bare repository on the host: two commits on main, one more on branch feature."""
    work = tmp_path / "work"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "README.md").write_text("v1\n")
    _git("add", "README.md", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    (work / "README.md").write_text("v2\n")
    _git("commit", "-q", "-am", "two", cwd=work)
    _git("checkout", "-q", "-b", "feature", cwd=work)
    (work / "feature.txt").write_text("feature\n")
    _git("add", "feature.txt", cwd=work)
    _git("commit", "-q", "-m", "three", cwd=work)
    _git("checkout", "-q", "main", cwd=work)
    bare = tmp_path / "repo.git"
    _git("clone", "-q", "--bare", str(work), str(bare))
    return bare


def test_git_source_from_a_local_bare_repository(daemon: StorageDaemon, bare_repo: Path) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import GitSource, SandboxApiError

    async def git(box: Any, *args: str) -> str:
        r = await box.run_command("git", ["-C", "/workspace", *args], capture_output=True)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    async def main() -> None:
        async with sandbox.create_sandbox(source=GitSource(url=str(bare_repo))) as box:
            assert await box.fs.read_text("/workspace/README.md") == "v2\n"
            assert await git(box, "rev-parse", "--abbrev-ref", "HEAD") == "main"
            assert await git(box, "rev-list", "--count", "HEAD") == "2"
            assert box.source is not None and box.source["type"] == "git"
        # revision = a branch, depth, a custom path, a file:// URL
        async with sandbox.create_sandbox(source=GitSource(url=f"file://{bare_repo}", revision="feature", depth=1,
                                                           path="/srv/code")) as box:
            assert await box.fs.read_text("/srv/code/feature.txt") == "feature\n"
            r = await box.run_command("git", ["-C", "/srv/code", "rev-list", "--count", "HEAD"], capture_output=True)
            assert r.stdout.strip() == "1"
            r = await box.run_command("git", ["-C", "/srv/code", "rev-parse", "--abbrev-ref", "HEAD"],
                                      capture_output=True)
            assert r.stdout.strip() == "feature"
        async with sandbox.create_sandbox(source=GitSource(url=str(bare_repo), branch="feature")) as box:
            assert await box.fs.exists("/workspace/feature.txt")

        # a failed clone deletes the sandbox and says why
        before = sandbox_names(daemon)
        with pytest.raises(SandboxApiError) as e:
            await sandbox.create_sandbox(name="git-bad", source=GitSource(url=str(bare_repo), revision="nope"))
        assert e.value.status_code == 400 and e.value.code == "source_failed"
        assert sandbox_names(daemon) == before
        with pytest.raises(SandboxApiError) as e:
            await sandbox.create_sandbox(source=GitSource(url=str(bare_repo / "missing")))
        assert e.value.status_code == 400 and e.value.code == "validation_error" and e.value.field == "source.url"
        # checked before any request
        with pytest.raises(NotImplementedError, match="network_policy"):
            sandbox.create_sandbox(source=GitSource(url="https://example.com/r.git", username="u", password="p"))
        with pytest.raises(ValueError, match="revision"):
            sandbox.create_sandbox(source=GitSource(url=str(bare_repo), revision="a", branch="b"))
        with pytest.raises(ValueError, match="depth"):
            sandbox.create_sandbox(source=GitSource(url=str(bare_repo), depth=0))

    run(main())


def test_tarball_and_image_sources(daemon: StorageDaemon, tmp_path: Path) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import ImageSource, SandboxApiError, TarballSource
    from rebuno.sandbox import sync as sync_sandbox

    content = tmp_path / "content"
    (content / "pkg").mkdir(parents=True)
    (content / "pkg" / "mod.py").write_text("X = 1\n")
    (content / "top.txt").write_text("top\n")
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(content / "pkg", arcname="pkg")
        tf.add(content / "top.txt", arcname="top.txt")

    async def main() -> None:
        async with sandbox.create_sandbox(source=TarballSource(url=str(archive))) as box:
            assert await box.fs.read_text("/workspace/pkg/mod.py") == "X = 1\n"
            assert await box.fs.read_text("/workspace/top.txt") == "top\n"
            assert box.source is not None and box.source["type"] == "tarball"
        async with sandbox.create_sandbox(source=TarballSource(url=f"file://{archive}", path="/opt/app"),
                                          start=False) as box:
            assert box.status.value == "stopped"
            assert await box.fs.read_text("/opt/app/top.txt") == "top\n"
        async with sandbox.create_sandbox(source=ImageSource("default")) as box:
            assert (await box.run_command("true")).returncode == 0

        with pytest.raises(NotImplementedError, match="host path"):
            sandbox.create_sandbox(source=TarballSource(url="https://example.com/x.tar.gz"))
        with pytest.raises(ValueError, match="absolute"):
            sandbox.create_sandbox(source=TarballSource(url="relative/x.tar.gz"))
        with pytest.raises(ValueError, match="absolute"):
            sandbox.create_sandbox(source=TarballSource(url="/tmp/../etc/x.tar.gz"))
        with pytest.raises(SandboxApiError) as e:
            await sandbox.create_sandbox(source=TarballSource(url=str(tmp_path / "missing.tar")))
        assert e.value.status_code == 400 and e.value.field == "source.file"
        with pytest.raises(SandboxApiError) as e:
            await sandbox.create_sandbox(source=TarballSource(url=str(archive), path="/"))
        assert e.value.status_code == 400 and e.value.field == "source.path"
        with pytest.raises(TypeError):
            sandbox.create_sandbox(source="snap_123")

    run(main())

    with sync_sandbox.create_sandbox(source=TarballSource(url=str(archive))) as box:
        assert box.fs.read_text("/workspace/top.txt") == "top\n"


def test_spec_examples_creating_forking_and_restoring(daemon: StorageDaemon) -> None:
    """The spec's "Creating, forking, and restoring" examples, imports changed, with real ids."""

    async def setup() -> str:
        from rebuno import sandbox

        agent = await sandbox.create_sandbox(name="production-agent", env={"MODE": "prod"}, tags={"team": "a"})
        await agent.fs.write_text("script.py", "print('hi from the agent')\n")
        return (await agent.snapshot()).snapshot_id

    snap_123 = run(setup())

    async def main() -> None:
        from rebuno import sandbox
        from rebuno.sandbox import SnapshotSource

        restored = await sandbox.create_sandbox(
            name="restored-workspace",
            source=SnapshotSource(snapshot_id=snap_123),
        )
        assert (await restored.fs.read_text("script.py")) == "print('hi from the agent')\n"

        forked = await sandbox.fork_sandbox(
            source_sandbox="production-agent",
            name="debug-agent",
            resources=sandbox.SandboxResources(vcpus=4, memory=8192),
            tags={"purpose": "debug"},
        )
        assert forked.resources.vcpus == 4 and dict(forked.tags) == {"purpose": "debug"}
        assert forked.env_keys == ("MODE",)

    run(main())

    from rebuno.sandbox import sync as sandbox

    with sandbox.fork_sandbox(source_sandbox="production-agent") as forked:
        result = forked.run_command("python3", ["script.py"], capture_output=True)
        assert result.stdout == "hi from the agent\n"


def test_images_import_use_and_delete(tmp_path: Path) -> None:
    """Images from a host folder, async and sync: cached by digest, used by a sandbox,
    refused deletion while in use."""
    from rebuno import sandbox
    from rebuno.sandbox import SandboxApiError
    from rebuno.sandbox import sync as sync_sandbox

    (tmp_path / "img" / "app").mkdir(parents=True)
    (tmp_path / "img" / "app" / "hello.txt").write_text("from the image\n")
    (tmp_path / "img" / "bin").mkdir()  # images are self-contained: bring a cat
    shutil.copy("/bin/busybox", tmp_path / "img" / "bin" / "busybox")
    os.symlink("busybox", tmp_path / "img" / "bin" / "cat")

    async def main() -> str:
        async with sandbox.SandboxClient() as client:
            image, created = await client.import_image(tmp_path / "img")
            assert created and image["digest"].startswith("sha256:")
            assert image["source"] == {"type": "dir", "path": str(tmp_path / "img")}
            again, created = await client.import_image(str(tmp_path / "img"))
            assert not created and again["digest"] == image["digest"]
            async with client.create_sandbox(image=image["digest"]) as box:
                r = await box.run_command("cat", ["/app/hello.txt"], capture_output=True)
                assert r.stdout == "from the image\n"
                with pytest.raises(SandboxApiError) as e:
                    await client.delete_image(image["digest"])
                assert (e.value.status_code, e.value.code) == (409, "image_in_use")
            return image["digest"]

    digest = run(main())
    with sync_sandbox.SyncSandboxClient() as client:
        assert [i["digest"] for i in client.list_images()] == [digest]
        assert client.get_image(digest)["layers"] == [digest]
        assert client.get_image("host")["reference"] == "host"
        client.delete_image(digest)
        assert client.list_images() == []


def test_oci_image_by_reference(tmp_path: Path) -> None:
    """An OCI image layout imported under a reference (issue 14): create_sandbox(image=REF)
    runs on it, Sandbox.image is the digest-pinned reference, get_image and delete_image
    take the reference."""
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from oci_fixtures import Layout, base_layer  # the integration tests' fixture writer

    from rebuno import sandbox

    lay = Layout(str(tmp_path / "layout"))
    desc = lay.image([(base_layer([("etc/motd", "f", "from the sdk\n")]), "zstd")],
                     {"Env": ["PATH=/bin", "GREETING=hi"], "WorkingDir": "/work"})
    lay.add(desc)

    async def main() -> None:
        async with sandbox.SandboxClient() as client:
            image, created = await client.import_image(tmp_path / "layout", ref="sdk/tool:1")
            assert created and image["digest"] == desc["digest"]
            assert image["source"]["type"] == "oci-layout"
            assert (await client.get_image("sdk/tool:1"))["digest"] == desc["digest"]
            async with client.create_sandbox(image="sdk/tool:1") as box:
                assert box.image == "docker.io/sdk/tool@" + desc["digest"]
                r = await box.run_command("sh", ["-c", "cat /etc/motd; echo $GREETING; pwd"],
                                          capture_output=True)
                assert r.stdout == "from the sdk\nhi\n/work\n"
            await client.delete_image("sdk/tool:1")
            assert await client.list_images() == []

    run(main())


def test_build_image_from_a_recipe(tmp_path: Path) -> None:
    """build_image(recipe, context, ref=) (issue 14): the log reaches on_log, the image is
    returned and a sandbox runs on it; a failing RUN raises its error (build_failed)."""
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from oci_fixtures import Layout, base_layer

    from rebuno import sandbox

    lay = Layout(str(tmp_path / "layout"))
    lay.add(lay.image([(base_layer(), "gzip")], {"Env": ["PATH=/bin"]}))
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "hello.txt").write_text("copied\n")
    lines: list[str] = []

    async def main() -> None:
        async with sandbox.SandboxClient() as client:
            await client.import_image(tmp_path / "layout", ref="sdk/base:1")
            img = await client.build_image(
                "FROM sdk/base:1\nCOPY hello.txt /srv/\nRUN echo built-by-sdk > /srv/b\n",
                tmp_path / "ctx", ref="sdk/built:1", on_log=lines.append)
            assert img["references"] == ["docker.io/sdk/built:1"]
            assert "STEP 3/3: RUN echo built-by-sdk > /srv/b" in lines, lines
            async with client.create_sandbox(image="sdk/built:1") as box:
                r = await box.run_command("sh", ["-c", "cat /srv/hello.txt /srv/b"],
                                          capture_output=True)
                assert r.stdout == "copied\nbuilt-by-sdk\n"
            with pytest.raises(sandbox.SandboxApiError) as ei:
                await client.build_image("FROM sdk/base:1\nRUN echo oops; exit 3\n")
            assert ei.value.code == "build_failed" and "oops" in str(ei.value)
            await client.delete_image("sdk/built:1")
            await client.delete_image("sdk/base:1")

    run(main())
    from rebuno.sandbox import sync as sync_sandbox
    with sync_sandbox.SyncSandboxClient() as client:
        assert client.list_images() == []
