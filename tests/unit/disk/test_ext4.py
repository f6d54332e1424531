"""The root file system image: what mkfs.ext4 -d carries over, the times pass, "does not fit"."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from nvkr.disk import ext4
from nvkr.disk.layout import MIB, disk_layout
from nvkr.errors import DiskError
from tests.helpers.disk import CAPABILITY, EPOCH, ODD_NAMES, SEED, is_root, needs_tools


def debugfs(image: Path, *requests: str) -> str:
    """stdout of ``debugfs`` running ``requests`` (one -R per call, run in one process via -f)."""
    script = image.parent / "requests.debugfs"
    script.write_text("\n".join(requests) + "\n")
    return subprocess.run(
        ["debugfs", "-f", str(script), str(image)], capture_output=True, check=True, text=True
    ).stdout


def test_debugfs_quote():
    assert ext4.debugfs_quote(b"/a b/c") == b'"/a b/c"'
    assert ext4.debugfs_quote(b'/q"t') == b'"/q""t"'
    with pytest.raises(DiskError, match="line break"):
        ext4.debugfs_quote(b"/a\nb")


def test_scan_tree_counts_hard_links_once_and_lists_newer_paths(tree):
    stats = ext4.scan_tree(tree, epoch=EPOCH)
    names = {os.path.basename(p) for p in stats.newer}
    assert {b"tool", b"tool-link", b"new\nline", b"latin1-\xff", b"/"} <= names | {b"/"}
    assert b"/" in stats.newer
    n = sum(1 for _ in tree.rglob("*")) + 1  # everything + the root, minus one hard link
    assert stats.inodes == n - 1
    assert ext4.scan_tree(tree, epoch=2**40).newer == []


def test_min_fs_bytes_grows_with_the_tree():
    small = ext4.min_fs_bytes(ext4.TreeStats(data_bytes=1 * MIB, inodes=100))
    big = ext4.min_fs_bytes(ext4.TreeStats(data_bytes=900 * MIB, inodes=20000))
    assert small % MIB == 0 and big % MIB == 0
    assert 16 * MIB <= small < big and big > 900 * MIB


@pytest.fixture
def image(tree, tmp_path):
    layout = disk_layout("amd64", SEED)
    img = tmp_path / "root.ext4"
    work = tmp_path / "work"
    work.mkdir()
    stats = ext4.scan_tree(tree, epoch=EPOCH)
    ext4.make_ext4(tree, img, size=32 * MIB, layout=layout, epoch=EPOCH, workdir=work, stats=stats)
    inodes = ext4.set_times(img, epoch=EPOCH, newer=stats.newer, workdir=work)
    assert inodes == stats.inodes + 1  # + lost+found
    return img


def _inode_times(img: Path) -> dict[int, set[str]]:
    imap = ext4.read_inode_map(img)
    inos = [i for i in imap.allocated if i == 2 or i >= imap.first]
    out = debugfs(img, *(f"stat <{i}>" for i in inos))
    times: dict[int, set[str]] = {}
    for block in out.split("Inode: ")[1:]:
        ino = int(block.split()[0])
        times[ino] = set(re.findall(r"(?:[acm]|cr)time: (0x[0-9a-f]+:[0-9a-f]+)", block))
    return times


@needs_tools
def test_every_inode_time_is_the_epoch(image):
    times = _inode_times(image)
    assert len(times) > 20
    want = {f"{EPOCH:#010x}:00000000"}
    assert {ino: t for ino, t in times.items() if t != want} == {}


@needs_tools
def test_file_kinds_modes_and_links_survive(image, tree):
    out = debugfs(
        image,
        "stat /usr/bin/tool",
        "stat /usr/bin/short-link",
        "stat /srv/fifo",
        f"dump /usr/bin/long-link {image.parent}/long-link.out",
    )
    assert "Mode:  04755" in out and "Links: 2" in out
    assert 'Fast link dest: "tool"' in out
    assert "Type: FIFO" in out
    assert (image.parent / "long-link.out").read_text() == os.readlink(tree / "usr/bin/long-link")
    same = debugfs(image, "stat /usr/bin/tool-link")
    assert re.search(r"Inode: (\d+)", same).group(1) == re.search(r"Inode: (\d+)", out).group(1)
    assert "User:     0   Group:     0" in out
    for name in ODD_NAMES:
        assert ext4.resolve_inode(image, f"/srv/odd dir/{name}".encode()) > 11
    assert ext4.resolve_inode(image, b"/srv/odd dir/latin1-\xff") > 11
    with pytest.raises(DiskError, match="is not in the file system image"):
        ext4.resolve_inode(image, b"/srv/nope")


@needs_tools
@pytest.mark.skipif(not is_root, reason="xattrs in security.* and device nodes need root")
def test_capabilities_and_device_nodes_survive(image):
    out = debugfs(image, "ea_get -x /usr/bin/tool security.capability", "stat /dev/null")
    want = " ".join(f"{b:02x}" for b in CAPABILITY)
    assert f"security.capability ({len(CAPABILITY)}) = {want}" in out
    assert "Type: character special" in out
    assert re.search(r"Device major/minor number: 01:03", out)


@needs_tools
def test_tree_larger_than_the_partition(tmp_path):
    layout = disk_layout("amd64", SEED)
    tree = tmp_path / "big"
    tree.mkdir()
    (tree / "blob").write_bytes(os.urandom(30 * MIB))
    work = tmp_path / "w"
    work.mkdir()
    stats = ext4.scan_tree(tree, epoch=EPOCH)
    # Bigger than the partition: refused before mkfs runs.
    with pytest.raises(
        DiskError, match=r"\(30.0 MiB in 2 inodes\) does not fit the root partition \(16.0 MiB\)"
    ):
        ext4.make_ext4(
            tree, work / "a", size=16 * MIB, layout=layout, epoch=EPOCH, workdir=work, stats=stats
        )
    # Smaller than the partition, but not with the journal and inode tables: mkfs's failure
    # becomes the same message, not "Could not allocate block".
    with pytest.raises(DiskError, match=r"does not fit the root partition \(32.0 MiB\)") as e:
        ext4.make_ext4(
            tree, work / "b", size=32 * MIB, layout=layout, epoch=EPOCH, workdir=work, stats=stats
        )
    assert "make the disk at least" in (e.value.hint or "")
