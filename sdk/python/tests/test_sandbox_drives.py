"""Sandbox Drives of rebuno.sandbox (async and sync) against a real `rebuno sandboxd`:
get-or-create, lookups and queries, mounts (read-write with one writer at a time, and
read-only snapshot mounts), mount path validation, drive forks and deletes, and the API's
errors (404 not_found, 409 conflict / drive_attached / drive_not_initialized).

The daemon and the clean-up (every sandbox, snapshot and drive after each test, pass or
fail) are those of test_sandbox_snapshots.py.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import PurePosixPath
from typing import Any

import pytest
from test_sandbox_snapshots import StorageDaemon, daemon, sandbox_names, sbx_url  # noqa: F401  (fixtures)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sandboxd runs as root")


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _commit(box: Any) -> None:
    """End a read-write session: its drives' data is committed."""
    await box.stop()


def test_get_or_create_lookup_query_and_delete(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import (
        Drive, DriveQueryByCreatedAt, DriveQueryByName, DriveQueryByUpdatedAt, SandboxApiError,
    )

    async def main() -> None:
        cache, created = await sandbox.get_or_create_drive(name="q-cache", max_size_bytes=64 << 20)
        assert isinstance(cache, Drive) and created is True
        assert cache.name == "q-cache" and cache.max_size_bytes == 64 << 20 and cache.region == "local"
        assert cache.initialized is False and cache.committed_at is None and cache.attached_to is None
        assert cache.parent_drive_id is None and cache.root_drive_id is None
        again, created = await sandbox.get_or_create_drive(name="q-cache", max_size_bytes=128 << 20)
        assert created is False and again.id == cache.id and again.max_size_bytes == 64 << 20  # unchanged
        other, _ = await sandbox.get_or_create_drive(name="q-blob", region="iad1")  # region: recorded only
        third, _ = await sandbox.get_or_create_drive(name="z-other")

        assert (await sandbox.get_drive(name_or_id="q-cache")).id == cache.id
        assert (await sandbox.get_drive(name_or_id=cache.id)).name == "q-cache"
        with pytest.raises(SandboxApiError) as e:
            await sandbox.get_drive(name_or_id="nope")
        assert e.value.status_code == 404 and e.value.code == "not_found"
        with pytest.raises(SandboxApiError) as e:
            await sandbox.get_or_create_drive(name="bad name")
        assert e.value.status_code == 400 and e.value.field == "name"

        names = [d.name async for d in sandbox.query_drives()]
        assert names == ["q-cache", "q-blob", "z-other"]  # creation order
        assert [d.name async for d in sandbox.query_drives(DriveQueryByCreatedAt(direction="desc"))] == names[::-1]
        assert [d.name async for d in sandbox.query_drives(DriveQueryByName())] == ["q-blob", "q-cache", "z-other"]
        assert [d.name async for d in sandbox.query_drives(DriveQueryByName(name_prefix="q-"), page_size=1)] == \
            ["q-blob", "q-cache"]
        assert [d.name async for d in sandbox.query_drives(name_prefix="z")] == ["z-other"]
        upd = [d.name async for d in sandbox.query_drives(DriveQueryByUpdatedAt())]
        assert sorted(upd) == sorted(names)
        with pytest.raises(ValueError, match="direction"):
            [d async for d in sandbox.query_drives(DriveQueryByName(direction="up"))]  # type: ignore[arg-type]

        await other.delete()
        await sandbox.delete_drive(name="z-other")
        for gone in (other, third):
            with pytest.raises(SandboxApiError) as e:
                await gone.refresh()
            assert e.value.status_code == 404 and e.value.code == "not_found"
        with pytest.raises(SandboxApiError) as e:
            await sandbox.delete_drive(name="z-other")
        assert e.value.status_code == 404 and e.value.code == "not_found"
        assert [d.name async for d in sandbox.query_drives()] == ["q-cache"]

    run(main())


def test_single_writer_commit_and_delete_while_attached(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import DriveMount, SandboxApiError

    async def main() -> None:
        cache, _ = await sandbox.get_or_create_drive(name="sw-cache")
        async with sandbox.create_sandbox(name="sw-writer", mounts={"/cache": cache}) as writer:
            m = writer.mounts["/cache"]
            assert m == DriveMount("sw-cache", mode="read-write", drive_id=cache.id)
            await writer.fs.write_text("/cache/data.txt", "v1")
            await cache.refresh()
            assert cache.attached_to is not None and cache.attached_to["sandbox_name"] == "sw-writer"
            assert cache.attached_to["mode"] == "rw"

            # one running writer at a time: a second one creates nothing
            before = sandbox_names(daemon)
            with pytest.raises(SandboxApiError) as e:
                await sandbox.create_sandbox(name="sw-second", mounts={"/c": "sw-cache"})
            assert e.value.status_code == 409 and e.value.code == "drive_attached"
            assert "sw-writer" in e.value.message
            assert sandbox_names(daemon) == before
            # nor can it be deleted or forked before anything is committed
            with pytest.raises(SandboxApiError) as e:
                await cache.delete()
            assert e.value.status_code == 409 and e.value.code == "drive_attached"
            with pytest.raises(SandboxApiError) as e:
                await cache.fork(name="sw-fork")
            assert e.value.status_code == 409 and e.value.code == "drive_not_initialized"
            # a snapshot mount needs committed data too
            with pytest.raises(SandboxApiError) as e:
                await sandbox.create_sandbox(mounts={"/ro": cache.snapshot()})
            assert e.value.status_code == 409 and e.value.code == "drive_not_initialized"

            await _commit(writer)
            await cache.refresh()
            assert cache.initialized and cache.committed_at is not None and cache.attached_to is None

            # the next writer sees the committed data; the stopped one cannot start meanwhile
            async with sandbox.create_sandbox(name="sw-second", mounts={"/c": cache}) as second:
                assert await second.fs.read_text("/c/data.txt") == "v1"
                with pytest.raises(SandboxApiError) as e:
                    await writer.resume()
                assert e.value.status_code == 409 and e.value.code == "drive_attached"
        # both sandboxes are gone: the drive can go too
        await cache.delete()

    run(main())


def test_snapshot_mounts_are_read_only_point_in_time_views(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import DriveMount, SandboxPermissionError

    async def main() -> None:
        src, _ = await sandbox.get_or_create_drive(name="ro-src")
        async with sandbox.create_sandbox(mounts={"/data": src}) as writer:
            await writer.fs.write_text("/data/f.txt", "one")
            await writer.stop()

            async with sandbox.create_sandbox(name="ro-reader", mounts={
                "/a": src.snapshot(),
            }) as reader, sandbox.create_sandbox(mounts={"/b": DriveMount("ro-src", mode="snapshot")}) as reader2:
                assert reader.mounts["/a"].mode == "snapshot"
                assert await reader.fs.read_text("/a/f.txt") == "one"
                assert await reader2.fs.read_text("/b/f.txt") == "one"
                with pytest.raises(SandboxPermissionError) as e:
                    await reader.fs.write_text("/a/f.txt", "changed")
                assert e.value.status_code == 403 and e.value.code == "read_only"
                r = await reader.run_command("touch", ["/a/new"], capture_output=True)
                assert r.returncode != 0 and "Read-only" in (r.stderr or "")
                await src.refresh()
                assert src.info.snapshot_mounts == 2 and src.attached_to is None

                # a writer may run alongside snapshot mounts; its commit does not change them
                await writer.resume()
                await writer.fs.write_text("/data/f.txt", "two")
                await writer.stop()
                assert await reader.fs.read_text("/a/f.txt") == "one"
                # the reader's next session sees the new commit
                await reader.stop()
                assert await reader.fs.read_text("/a/f.txt") == "two"

    run(main())


def test_drive_forks(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import SandboxApiError

    async def main() -> None:
        cache, _ = await sandbox.get_or_create_drive(name="fk-cache", max_size_bytes=32 << 20)
        with pytest.raises(SandboxApiError) as e:
            await sandbox.fork_drive(source="fk-cache", name="fk-early")
        assert e.value.status_code == 409 and e.value.code == "drive_not_initialized"
        async with sandbox.create_sandbox(mounts={"/cache": cache}) as box:
            await box.fs.write_text("/cache/v.txt", "original")
            await box.stop()

            forked = await cache.fork(name="fk-child")
            assert forked.name == "fk-child" and forked.id != cache.id
            assert forked.parent_drive_id == cache.id and forked.root_drive_id == cache.id
            assert forked.max_size_bytes == 32 << 20 and forked.initialized
            assert cache.parent_drive_id is None  # the source's handle is unchanged
            grandchild = await sandbox.fork_drive(source=forked, name="fk-grandchild")
            assert grandchild.parent_drive_id == forked.id and grandchild.root_drive_id == cache.id
            by_name = await sandbox.fork_drive(source="fk-cache", name="fk-byname")
            assert by_name.parent_drive_id == cache.id

            # independent data: a write to the fork leaves the source alone
            async with sandbox.create_sandbox(mounts={"/f": forked}) as fbox:
                assert await fbox.fs.read_text("/f/v.txt") == "original"
                await fbox.fs.write_text("/f/v.txt", "fork")
                await fbox.stop()
            async with sandbox.create_sandbox(mounts={"/s": cache.snapshot(), "/f": forked.snapshot(),
                                                      "/g": grandchild}) as check:
                assert await check.fs.read_text("/s/v.txt") == "original"
                assert await check.fs.read_text("/f/v.txt") == "fork"
                assert await check.fs.read_text("/g/v.txt") == "original"

            # errors keep status, code and message
            with pytest.raises(SandboxApiError) as e:
                await cache.fork(name="fk-child")
            assert e.value.status_code == 409 and e.value.code == "conflict" and e.value.message
            with pytest.raises(SandboxApiError) as e:
                await sandbox.fork_drive(source="fk-missing", name="fk-x")
            assert e.value.status_code == 404 and e.value.code == "not_found"
            with pytest.raises(ValueError):
                await cache.fork(name="")

    run(main())


def test_mount_path_validation(daemon: StorageDaemon) -> None:
    from rebuno import sandbox
    from rebuno.sandbox import DriveMount, SandboxApiError

    async def main() -> None:
        a, _ = await sandbox.get_or_create_drive(name="mv-a")
        b, _ = await sandbox.get_or_create_drive(name="mv-b")
        before = sandbox_names(daemon)
        bad: list[tuple[dict[Any, Any], str]] = [
            ({"relative/path": a}, "absolute"),
            ({"/": a}, "must not be /"),
            ({"//./": a}, "must not be /"),
            ({"/x/../y": a}, r"\.\."),
            ({"/x\0y": a}, "NUL"),
            ({"/" + "d" * 256: a}, "256"),
            ({"/data": a, "/data/sub": b}, "overlap"),
            ({"/data": a, "/data/": b}, "overlap"),
            ({"/one": a, "/two": "mv-a"}, "twice"),
            ({"/one": a, "/two": DriveMount("mv-a", mode="snapshot")}, "twice"),
            ({"/one": {"drive": "mv-a", "mode": "rw", "extra": 1}}, "mounts"),
        ]
        for mounts, match in bad:
            with pytest.raises(ValueError, match=match):
                sandbox.create_sandbox(mounts=mounts)
            with pytest.raises(ValueError, match=match):
                sandbox.get_or_create_sandbox(name="mv-goc", mounts=mounts)
        with pytest.raises(TypeError):
            sandbox.create_sandbox(mounts={"/x": 42})
        with pytest.raises(TypeError):
            sandbox.create_sandbox(mounts=["/x"])  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="mode"):
            DriveMount("mv-a", mode="read-only")
        assert sandbox_names(daemon) == before  # nothing reached the daemon

        # 256 characters is the limit after canonicalization
        ok = "/" + "e" * 255
        async with sandbox.create_sandbox(mounts={
            ok + "//": a, PurePosixPath("/srv/./b/"): {"drive": "mv-b", "mode": "rw"},
        }) as box:
            assert set(box.mounts) == {ok, "/srv/b"}
            assert box.mounts["/srv/b"].drive == "mv-b"

        # the daemon's own rules come through as API errors naming the field
        for mounts in ({"/proc/x": a}, {"/usr/local/x": a}, {"/bad path": a}):
            with pytest.raises(SandboxApiError) as e:
                await sandbox.create_sandbox(mounts=mounts)
            assert e.value.status_code == 400 and e.value.code == "validation_error"
            assert e.value.field == "mounts"
        with pytest.raises(SandboxApiError) as e:
            await sandbox.create_sandbox(mounts={"/x": "mv-missing"})
        assert e.value.status_code == 404 and e.value.code == "not_found"
        assert sandbox_names(daemon) == before

    run(main())


def test_update_mounts_and_get_or_create_sandbox(daemon: StorageDaemon) -> None:
    from rebuno import sandbox

    async def main() -> None:
        d, _ = await sandbox.get_or_create_drive(name="up-d")
        e, _ = await sandbox.get_or_create_drive(name="up-e")
        async with sandbox.create_sandbox(name="up-box") as box:
            assert dict(box.mounts) == {}
            await box.update(mounts={"/data/": d})  # for the next session
            assert set(box.mounts) == {"/data"} and box.mounts["/data"].drive == "up-d"
            assert not await box.fs.exists("/data/x")
            await box.stop()
            await box.fs.write_text("/data/x", "in the drive")  # lazy resume: a new session mounts it
            await box.update(tags={"k": "v"})  # mounts=None leaves them
            assert set(box.mounts) == {"/data"}
            await box.update(mounts={})  # {} removes every mount
            assert dict(box.mounts) == {}
            await box.stop()
            await box.resume()
            assert not await box.fs.exists("/data/x")
            with pytest.raises(ValueError, match="overlap"):
                await box.update(mounts={"/a": d, "/a/b": e})

        # get_or_create_sandbox uses mounts only when it creates the sandbox
        op = sandbox.get_or_create_sandbox(name="up-goc", mounts={"/d": d})
        async with op as box:
            assert op.created is True and set(box.mounts) == {"/d"}
            assert await box.fs.read_text("/d/x") == "in the drive"
        op = sandbox.get_or_create_sandbox(name="up-goc", mounts={"/other": e})
        async with op as box:
            assert op.created is False and set(box.mounts) == {"/d"}

    run(main())


def test_sync_mirror_drives(daemon: StorageDaemon) -> None:
    from rebuno.sandbox import DriveQueryByName, SandboxApiError
    from rebuno.sandbox import sync as sandbox

    cache, created = sandbox.get_or_create_drive(name="sy-cache")
    assert isinstance(cache, sandbox.SyncDrive) and created
    assert sandbox.get_or_create_drive(name="sy-cache")[1] is False
    with sandbox.create_sandbox(name="sy-box", mounts={"/cache": cache}) as box:
        box.fs.write_text("/cache/a", "A")
        with pytest.raises(SandboxApiError) as e:
            sandbox.create_sandbox(mounts={"/c": "sy-cache"})
        assert e.value.status_code == 409 and e.value.code == "drive_attached"
        with pytest.raises(SandboxApiError) as e:
            cache.delete()
        assert e.value.status_code == 409 and e.value.code == "drive_attached"
        box.stop()
        assert cache.refresh().initialized
        forked = cache.fork(name="sy-fork")
        assert forked.parent_drive_id == cache.id and forked.root_drive_id == cache.id
        f2 = sandbox.fork_drive(source=forked, name="sy-fork2")
        assert f2.root_drive_id == cache.id
        with sandbox.create_sandbox(mounts={"/ro": cache.snapshot(), "/rw": f2}) as other:
            assert other.fs.read_text("/ro/a") == "A" and other.fs.read_text("/rw/a") == "A"
        with pytest.raises(SandboxApiError) as e:
            sandbox.fork_drive(source="sy-cache", name="sy-fork")
        assert e.value.status_code == 409 and e.value.code == "conflict"
    assert sandbox.get_drive(name_or_id="sy-fork").id == forked.id
    assert [d.name for d in sandbox.query_drives(DriveQueryByName(name_prefix="sy-"))] == \
        ["sy-cache", "sy-fork", "sy-fork2"]
    forked.delete()
    sandbox.delete_drive(name="sy-fork2")
    with pytest.raises(SandboxApiError) as e:
        sandbox.get_drive(name_or_id="sy-fork")
    assert e.value.status_code == 404 and e.value.code == "not_found"
    cache.delete()


def test_spec_examples_sandbox_drives(daemon: StorageDaemon, capsys: pytest.CaptureFixture[str]) -> None:
    """The spec's "Sandbox Drives" examples, imports changed (a rebuno host is one region)."""

    async def setup() -> None:
        from rebuno import sandbox

        shared, _ = await sandbox.get_or_create_drive(name="shared-source")
        await sandbox.get_or_create_drive(name="scratch")
        async with sandbox.create_sandbox(mounts={"/s": shared}) as box:
            await box.fs.write_text("/s/README", "shared")
            await box.stop()  # commits: a snapshot mount needs committed data

    run(setup())

    async def mount_example() -> None:
        from rebuno import sandbox
        from rebuno.sandbox import DriveMount

        cache, _ = await sandbox.get_or_create_drive(
            name="cache",
            region="sfo1",
            max_size_bytes=10 * 1024**3,
        )
        async with sandbox.create_sandbox(
            region=cache.region,
            mounts={
                # Mount a read-write drive
                "/cache": cache,
                # You can mount an existing drive by name as a point-in-time read-only snapshot
                "/readonly": DriveMount("shared-source", mode="snapshot"),
                # You can also provide a PurePosixPath as the mount point
                PurePosixPath("/scratch"): "scratch",
            },
        ) as workspace:
            print(cache.id)
            print(workspace.mounts)
            assert await workspace.fs.read_text("/readonly/README") == "shared"
            await workspace.fs.write_text("/cache/warm", "1")
            await workspace.stop()

    run(mount_example())
    out = capsys.readouterr().out
    assert "/readonly" in out and "/scratch" in out and "/cache" in out

    async def fork_example() -> None:
        from rebuno import sandbox

        cache = await sandbox.get_drive(name_or_id="cache")
        forked = await cache.fork(name="cache-fork")
        async with sandbox.create_sandbox(region=forked.region, mounts={"/cache": forked}) as box:
            print(forked.parent_drive_id, forked.root_drive_id)
            assert await box.fs.read_text("/cache/warm") == "1"
        await forked.delete()

        forked = await sandbox.fork_drive(source="cache", name="cache-fork")
        assert forked.parent_drive_id == cache.id
        await forked.delete()
        await cache.delete()
        await sandbox.delete_drive(name="scratch")

    run(fork_example())

    from rebuno.sandbox import sync as sandbox

    forked = sandbox.fork_drive(source="shared-source", name="shared-fork")
    assert forked.root_drive_id == sandbox.get_drive(name_or_id="shared-source").id
