"""Reading a disk image's root file system without a mount: the GPT from the first sectors, the
ext4 walked and read with debugfs (every kind of file and name :func:`make_tree` holds), QCOW2
and raw alike, and the errors for what is no GPT or no ext4. The disk is made in the test with
the real mkfs.ext4, sfdisk and qemu-img (:func:`tests.helpers.disk.make_disk`)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from nvkr.disk.ext4read import Ext4Reader
from nvkr.disk.gpt import GPT_HEAD_SECTORS, read_gpt, root_entry
from nvkr.disk.imageread import disk_format, open_root_fs
from nvkr.errors import DiskError
from tests.helpers.disk import ODD_NAMES, is_root, make_disk, make_tree, needs_tools

pytestmark = needs_tools


@pytest.fixture(scope="module")
def disk(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """``(tree, raw, qcow2)``: :func:`make_tree` as the root file system of a small GPT disk."""
    base = tmp_path_factory.mktemp("imageread")
    tree = make_tree(base / "tree")
    raw, qcow2 = make_disk(base / "disk", tree)
    return tree, raw, qcow2


def _tree_view(tree: Path) -> dict[bytes, tuple[str, int, int, int | None, bytes | None]]:
    """``{path: (kind, mode, uid:gid as one int pair, size, target)}`` of ``tree`` by lstat."""
    root = os.fsencode(tree)
    view = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            rel = full[len(root) :]
            target = os.readlink(full) if stat.S_ISLNK(st.st_mode) else None
            size = None if stat.S_ISDIR(st.st_mode) else (0 if not (
                stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) else st.st_size)  # fmt: skip
            view[rel] = (stat.filemode(st.st_mode), st.st_uid, st.st_gid, size, target)
    return view


def test_the_gpt_is_read_from_the_first_sectors(disk: tuple[Path, Path, Path]) -> None:
    _, raw, qcow2 = disk
    head = raw.read_bytes()[: GPT_HEAD_SECTORS * 512]
    entries = read_gpt(head)
    assert [(e.number, e.name, e.start, e.sectors) for e in entries] == [
        (1, "BIOS boot", 2048, 2048),
        (2, "root-x86-64", 4096, 16 * 2048),
    ]
    assert root_entry(entries).guid == "0E5EED00-0000-4000-8000-000000000003"
    assert disk_format(raw) == "raw" and disk_format(qcow2) == "qcow2"
    damaged = bytearray(head)
    damaged[512 + 80] ^= 1  # the entry count, under the header's CRC
    with pytest.raises(DiskError, match="header's CRC32"):
        read_gpt(bytes(damaged), what="d.raw")
    damaged = bytearray(head)
    damaged[1024 + 56] ^= 1  # a partition name, under the array's CRC
    with pytest.raises(DiskError, match="entry array's CRC32"):
        read_gpt(bytes(damaged))
    with pytest.raises(DiskError, match=r"d\.raw has no GUID partition table"):
        read_gpt(bytes(34 * 512), what="d.raw")


def test_the_root_partition_is_found_by_its_type_not_its_place() -> None:
    """Ironic adds a config-2 partition after the root one: root is still the root type's."""
    from nvkr.disk.gpt import GptEntry

    root = GptEntry(3, "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709", "A", "root-x86-64", 135168, 8192)
    config = GptEntry(4, "0FC63DAF-8483-4772-8E79-3D69D8477DE4", "B", "config-2", 143360, 2048)
    esp = GptEntry(2, "C12A7328-F81F-11D2-BA4B-00A0C93EC93B", "C", "EFI System", 4096, 131072)
    assert root_entry([esp, root, config]) == root
    assert root_entry([esp, config]) == config  # no typed root: the last, as nvkr lays it out
    with pytest.raises(DiskError, match="lists no partition"):
        root_entry([])


def test_a_walk_finds_every_path_with_its_mode_owner_size_and_target(
    disk: tuple[Path, Path, Path],
) -> None:
    tree, raw, qcow2 = disk
    want = _tree_view(tree)
    for image in (qcow2, raw):
        with open_root_fs(image) as fs:
            entries = fs.walk()
        got = {
            e.path: (stat.filemode(e.mode), e.uid, e.gid, e.size, e.target)
            for e in entries
            if e.path != b"/" and not e.path.startswith(b"/lost+found")
        }
        assert got == want, image
        assert [e.path for e in entries] == sorted(e.path for e in entries)
    by_path = {e.path: e for e in entries}
    # hard links are one inode; odd names (a line break, bytes that are no UTF-8) survive
    assert by_path[b"/usr/bin/tool"].inode == by_path[b"/usr/bin/tool-link"].inode
    assert by_path[b"/usr/bin/tool"].mode & 0o7777 == 0o4755
    assert {os.fsencode(f"/srv/odd dir/{n}") for n in ODD_NAMES} <= by_path.keys()
    assert by_path[b"/srv/odd dir/latin1-\xff"].kind == "dir"
    assert by_path[b"/usr/bin/long-link"].target == b"/" + b"long/" * 20 + b"target"  # slow
    assert by_path[b"/usr/bin/short-link"].target == b"tool"  # fast
    assert by_path[b"/srv/fifo"].kind == "fifo"
    if is_root:
        assert by_path[b"/dev/null"].kind == "char"


def test_contents_are_read_and_hashed_as_they_are_in_the_tree(
    disk: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    tree, _, qcow2 = disk
    from nvkr.disk import ext4read

    monkeypatch.setattr(ext4read, "BATCH_BYTES", 4096)  # several debugfs runs, cut right
    with open_root_fs(qcow2) as fs:
        entries = fs.walk()
        digests = fs.digests(entries)
        files = [e for e in entries if e.kind == "file"]
        for e in files:
            data = (tree / os.fsdecode(e.path.lstrip(b"/"))).read_bytes()
            assert digests[e.inode] == hashlib.sha256(data).hexdigest(), e.path
        name = os.fsencode("/srv/odd dir/new\nline")
        odd = fs.lookup(name)
        assert odd is not None and fs.read(odd) == b"new\nline"
        hostname = fs.lookup(b"/etc/hostname")
        assert hostname is not None and fs.read(hostname) == b"node\n"
        etc = fs.lookup(b"/etc")
        assert etc is not None
        with pytest.raises(DiskError, match="/etc is a dir, not a regular file"):
            fs.read(etc)


def test_lookup_follows_symlinks_inside_the_image(disk: tuple[Path, Path, Path]) -> None:
    _, raw, _ = disk
    with open_root_fs(raw) as fs:
        link = fs.lookup(b"/usr/bin/short-link")
        assert link is not None and (link.kind, link.target) == ("symlink", b"tool")
        resolved = fs.lookup(b"/usr/bin/short-link", follow=True)
        assert resolved is not None and resolved.path == b"/usr/bin/tool"
        assert fs.lookup(b"/usr/bin/../bin/./tool") == resolved
        assert fs.lookup(b"/etc/nope") is None
        assert fs.lookup(b"/etc/hostname/below") is None
        assert [e.path for e in fs.children(fs.root()) if e.path.startswith(b"/e")] == [b"/etc"]


def test_what_is_no_gpt_or_no_ext4_is_a_disk_error(
    tmp_path: Path, disk: tuple[Path, Path, Path]
) -> None:
    _, raw, _ = disk
    plain = tmp_path / "plain.raw"
    plain.write_bytes(bytes(1 << 20))
    with pytest.raises(DiskError, match="has no GUID partition table"), open_root_fs(plain):
        pass
    blank = tmp_path / "blank.raw"
    blank.write_bytes(raw.read_bytes()[: 2 << 20] + bytes(16 << 20))  # the GPT, no file system
    with (
        pytest.raises(DiskError, match="debugfs cannot read an ext4 file system"),
        open_root_fs(blank) as fs,
    ):
        fs.walk()
    with pytest.raises(DiskError, match="cannot read an ext4"):
        Ext4Reader(plain).root()
