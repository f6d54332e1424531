"""Small trees for the disk tests: no real kernel, the host's GRUB modules linked in (the tree's
``usr/lib/grub/<platform>`` is a symlink, so mkfs copies a symlink and grub-mkimage reads the
host's modules), and every kind of file mkfs.ext4 -d must carry over."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

EPOCH = 1764547200
SEED = "5eed" * 16
KVER = "6.1.0-test-amd64"
HOST_GRUB = Path("/usr/lib/grub")
# security.capability = cap_net_raw+ep (VFS_CAP_REVISION_2)
CAPABILITY = bytes.fromhex("0100000200200000000000000000000000000000")
ODD_NAMES = ["with space", 'quo"te', "tab\tname", "new\nline", "ünïcode", "lt<1>gt", "-dash"]

TOOLS = ("mkfs.ext4", "debugfs", "dumpe2fs", "e2fsck", "sfdisk", "qemu-img", "grub-mkimage",
         "mkfs.fat", "mcopy", "mmd")  # fmt: skip
missing = [t for t in TOOLS if shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") is None]
needs_tools = pytest.mark.skipif(bool(missing), reason=f"disk tools missing: {missing}")
needs_grub = pytest.mark.skipif(
    not (HOST_GRUB / "i386-pc" / "kernel.img").is_file()
    or not (HOST_GRUB / "x86_64-efi" / "kernel.img").is_file(),
    reason="host GRUB modules (grub-pc-bin, grub-efi-amd64-bin) missing",
)
is_root = os.geteuid() == 0


@contextlib.contextmanager
def umask(value: int) -> Iterator[None]:
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def make_tree(
    root: Path, *, mask: int = 0o022, grub: tuple[str, ...] = ("i386-pc", "x86_64-efi")
) -> Path:
    """A small root file system under ``root`` (created with umask ``mask``)."""
    with umask(mask):
        root.mkdir(parents=True)
        (root / "boot").mkdir()
        (root / "boot" / f"vmlinuz-{KVER}").write_bytes(b"not a kernel\n" * 300)
        (root / "boot" / f"initrd.img-{KVER}").write_bytes(b"not an initrd\n" * 300)
        lib = root / "usr" / "lib" / "grub"
        lib.mkdir(parents=True)
        for platform in grub:
            os.symlink(HOST_GRUB / platform, lib / platform)
        etc = root / "etc"
        etc.mkdir()
        (etc / "hostname").write_text("node\n")
        odd = root / "srv" / "odd dir"
        odd.mkdir(parents=True)
        for name in ODD_NAMES:
            (odd / name).write_text(name)
        os.mkdir(os.fsencode(odd) + b"/latin1-\xff")
        (root / "usr" / "bin").mkdir(parents=True)
        tool = root / "usr" / "bin" / "tool"
        tool.write_bytes(b"#!/bin/sh\n")
        os.chmod(tool, 0o4755)
        os.link(tool, root / "usr" / "bin" / "tool-link")
        os.symlink("tool", root / "usr" / "bin" / "short-link")
        os.symlink("/" + "long/" * 20 + "target", root / "usr" / "bin" / "long-link")
        os.mkfifo(root / "srv" / "fifo")
        if is_root:
            os.setxattr(tool, "security.capability", CAPABILITY)
            (root / "dev").mkdir()
            os.mknod(root / "dev" / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return root


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "tree")
