"""What dead processes leave in a store's tmp/ is removed under the store lock (nvkr.scratch);
what live ones use is never touched. Real flocks held by other processes, real tmpfs and bind
mounts and a real loop device under tmp/ (those need root)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvkr.scratch import loop_devices_under, mounts_under
from nvkr.store import Store

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts and loop devices need root")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


def _holder(path: Path) -> subprocess.Popen[str]:
    """Another process holding ``path``'s claim (a live build's entry), until killed."""
    code = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(path)!r}, os.O_RDONLY)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def _leftovers(store: Store) -> dict[str, int]:
    """What a SIGKILLed build leaves: a half-written download and an action's work dir."""
    blob = store.tmp_dir / "blob-k1ll3d"
    blob.write_bytes(b"x" * 1000)
    work = store.tmp_dir / "act-0123456789ab-dead"
    (work / "repo").mkdir(parents=True)
    (work / "repo" / "a.deb").write_bytes(b"y" * 3000)
    os.symlink("/etc", work / "etc-link")  # never followed
    return {blob.name: 1000, work.name: 3000}  # bytes of regular files


def test_leftovers_are_removed_and_live_entries_kept(store: Store) -> None:
    sizes = _leftovers(store)
    other = store.tmp_dir / "act-live-other-process"
    other.mkdir()
    (other / "keep").write_text("in use")
    holder = _holder(other)
    try:
        with store.workdir(prefix="act-live-here-") as mine, store.lock() as cleaned:
            (mine / "keep").write_text("in use")
            assert sorted(cleaned.removed) == sorted(sizes)
            assert cleaned.bytes == sum(sizes.values())
            assert (other / "keep").read_text() == "in use", "another process's entry is kept"
            assert (mine / "keep").read_text() == "in use", "this process's own entry is kept"
            assert Path("/etc/hostname").exists()
    finally:
        holder.kill()
        holder.wait()
    assert sorted(os.listdir(store.tmp_dir)) == [other.name]
    with store.lock() as cleaned:  # its holder died: now it is a leftover too
        assert cleaned.removed == [other.name]
    assert os.listdir(store.tmp_dir) == []
    with store.lock() as cleaned:
        assert not cleaned, "nothing left: nothing to say"


def test_entries_in_use_are_claimed(store: Store) -> None:
    # every kind of entry nvkr makes in tmp/: a download, an atomic write, a work dir
    seen: list[bool] = []

    def claimed(path: Path) -> bool:
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    with store.writer() as w:
        w.write(b"data")
        (entry,) = store.tmp_dir.iterdir()
        seen.append(claimed(entry))
        w.commit()
    with store.workdir() as work:
        seen.append(claimed(work))
    fd, path = store.claimed_file(".tmp-")
    seen.append(claimed(path))
    os.close(fd)
    seen.append(claimed(path))
    assert seen == [True, True, True, False]


@needs_root
def test_mounts_below_a_leftover_are_unmounted_before_anything_is_deleted(
    store: Store, tmp_path: Path
) -> None:
    # mmdebstrap's chroot as an older nvkr left it after a SIGKILL: proc, sys and dev/pts
    # still mounted, and a bind mount whose source must survive (a delete that crossed it
    # would empty the source)
    chroot = store.tmp_dir / "act-0123456789ab-chroot" / "tmp" / "mmdebstrap.X"
    for d in ("proc", "sys", "dev/pts", "host"):
        (chroot / d).mkdir(parents=True)
    source = tmp_path / "bind-source"
    source.mkdir()
    (source / "precious").write_text("not the leftover's")
    mounted = []
    try:
        for d in ("proc", "sys", "dev/pts"):
            subprocess.run(["mount", "-t", "tmpfs", "nvkr-test", str(chroot / d)], check=True)
            mounted.append(chroot / d)
        (chroot / "proc" / "file").write_text("in the tmpfs")
        subprocess.run(["mount", "--bind", str(source), str(chroot / "host")], check=True)
        mounted.append(chroot / "host")
        assert len(mounts_under(store.tmp_dir)) == 4
        with store.lock() as cleaned:
            assert cleaned.unmounted == 4 and cleaned.removed == ["act-0123456789ab-chroot"]
    finally:
        for m in reversed(mounted):
            subprocess.run(["umount", "--lazy", str(m)], check=False, capture_output=True)
    assert mounts_under(store.root) == []
    assert os.listdir(store.tmp_dir) == []
    assert (source / "precious").read_text() == "not the leftover's"


@needs_root
def test_a_mount_below_a_live_entry_is_left_alone(store: Store) -> None:
    with store.workdir(prefix="act-live-") as work:
        (work / "proc").mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "nvkr-test", str(work / "proc")], check=True)
        with store.lock() as cleaned:
            assert not cleaned
        assert mounts_under(work) == [str(work / "proc")]
    # the work dir's own removal unmounted what was below it before deleting it
    assert mounts_under(store.root) == []
    assert os.listdir(store.tmp_dir) == []


@needs_root
def test_a_loop_device_backed_by_a_leftover_is_detached(store: Store) -> None:
    work = store.tmp_dir / "act-0123456789ab-disk"
    work.mkdir()
    image = work / "disk.raw"
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    attach = subprocess.run(
        ["losetup", "--find", "--show", str(image)], capture_output=True, text=True, check=False
    )
    if attach.returncode != 0:
        pytest.skip(f"no loop device here: {attach.stderr.strip()}")
    dev = attach.stdout.strip()
    try:
        assert loop_devices_under(store.tmp_dir) == [dev]
        with store.lock() as cleaned:
            assert cleaned.detached == 1 and cleaned.removed == [work.name]
        deadline = time.monotonic() + 10
        while loop_devices_under(store.root) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert loop_devices_under(store.root) == []
    finally:
        subprocess.run(["losetup", "--detach", dev], check=False, capture_output=True)
