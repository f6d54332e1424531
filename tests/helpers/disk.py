"""Small disks for the disk and boot tests: :func:`make_tree` (a root file system with no real
kernel, the host's GRUB modules linked in, every kind of file mkfs.ext4 -d must carry over),
:func:`build_image` (a disk whose GRUB boots for real and then fails to load its fake kernel),
the skip marks for missing host tools, and :func:`read_root_file` (a file of a built disk's root
file system)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvkr.disk import assemble_disk, prepare_boot_files
from nvkr.disk.layout import MIB

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


needs_qemu = pytest.mark.skipif(
    shutil.which("qemu-system-x86_64", path="/usr/bin:/bin") is None,
    reason="qemu-system-x86 missing",
)
LOADING = rf"nvkr: loading /boot/vmlinuz-{KVER}"


def qemu_running(image: Path) -> list[int]:
    """Pids of QEMU processes whose command line names ``image``."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if b"qemu-system" in cmdline and str(image).encode() in cmdline:
            pids.append(int(entry))
    return pids


def build_image(base: Path) -> Path:
    """A 96 MiB disk under ``base`` whose GRUB boots for real and then fails to load its fake
    kernel after printing :data:`LOADING`."""
    tree = make_tree(base / "tree")
    layout = prepare_boot_files(tree, arch="amd64", seed=SEED, kernel_args=[], epoch=EPOCH)
    work = base / "work"
    work.mkdir()
    out = base / "node.qcow2"
    assemble_disk(tree, out, layout=layout, size_bytes=96 * MIB, epoch=EPOCH, workdir=work)
    return out


def read_root_file(raw: Path, path: str) -> str:
    """The text of ``path`` in the root file system of the disk image ``raw`` (raw or QCOW2),
    read as ``nvkr image cat`` reads it (:func:`nvkr.disk.imageread.open_root_fs`)."""
    from nvkr.disk.imageread import open_root_fs

    with open_root_fs(raw) as fs:
        entry = fs.lookup(os.fsencode(path), follow=True)
        assert entry is not None, f"{path} is not in {raw}"
        return fs.read(entry).decode()


def debugfs_read(
    raw: Path, path: str, *, partition: int = -1, command: str = "cat", unclean: bool = False
) -> str:
    """What debugfs ``command`` (``cat``, or ``ls -l`` for a directory) prints for ``path`` in
    partition ``partition`` (default the last: the root file system; -2 when a config drive
    follows it) of the raw disk image ``raw``: empty when it is missing (where
    :func:`read_root_file` fails). ``unclean``: the file system was still mounted when QEMU quit
    (a guest that ignores the ACPI power button): debugfs -c reads it without its allocation
    bitmaps."""
    table = json.loads(
        subprocess.run(["sfdisk", "--json", str(raw)], capture_output=True, check=True).stdout
    )
    root = table["partitiontable"]["partitions"][partition]
    out = subprocess.run(
        [
            "debugfs",
            *(["-c"] if unclean else []),
            "-R",
            f"{command} {path}",
            f"{raw}?offset={root['start'] * 512}",
        ],
        capture_output=True,
        check=True,
    )
    return out.stdout.decode()


def debugfs_rdump(raw: Path, path: str, dest: Path, *, partition: int = -1) -> Path:
    """Copy the directory or file ``path`` of the root file system (partition ``partition``)
    of the raw disk image ``raw`` into the directory ``dest`` (debugfs ``rdump``, which keeps
    modes and symlinks); returns ``dest / basename(path)``."""
    table = json.loads(
        subprocess.run(["sfdisk", "--json", str(raw)], capture_output=True, check=True).stdout
    )
    root = table["partitiontable"]["partitions"][partition]
    dest.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        ["debugfs", "-R", f"rdump {path} {dest}", f"{raw}?offset={root['start'] * 512}"],
        capture_output=True,
        check=True,
    )
    out = dest / path.rstrip("/").rsplit("/", 1)[-1]
    assert out.exists(), f"debugfs rdump {path}: {res.stderr.decode()}"
    return out


#: The partitions of :func:`make_disk`: a 1 MiB partition that is no file system, then root.
SMALL_DISK_SCRIPT = """label: gpt
label-id: 0E5EED00-0000-4000-8000-000000000001
unit: sectors
first-lba: 2048
sector-size: 512

1 : start=2048, size=2048, type=21686148-6449-6E6F-744E-656564454649, uuid=0E5EED00-0000-4000-8000-000000000002, name="BIOS boot"
2 : start=4096, size={root}, type=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709, uuid=0E5EED00-0000-4000-8000-000000000003, name="root-x86-64"
"""


def make_disk(base: Path, tree: Path, *, fs_mib: int = 16) -> tuple[Path, Path]:
    """``(raw, qcow2)``: a GPT disk under ``base`` whose second partition holds ``tree`` as
    ext4 (real mkfs.ext4 -d, sfdisk and qemu-img convert), laid out as nvkr's amd64 images are
    (root type GUID, root last)."""
    base.mkdir(parents=True, exist_ok=True)
    fs = base / "root.ext4"
    subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-d", str(tree), "-b", "4096", "-I", "256", str(fs),
         f"{fs_mib}M"],
        check=True, capture_output=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "E2FSPROGS_FAKE_TIME": str(EPOCH)},
    )  # fmt: skip
    raw = base / "disk.raw"
    sectors = fs_mib * MIB // 512
    with open(raw, "wb") as f:
        f.truncate(2 * MIB + fs_mib * MIB + MIB)
    script = SMALL_DISK_SCRIPT.format(root=sectors)
    subprocess.run(
        ["sfdisk", "--no-reread", "--no-tell-kernel", "-q", str(raw)],
        input=script.encode(), check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        ["dd", f"if={fs}", f"of={raw}", "bs=1M", "seek=2", "conv=notrunc,sparse", "status=none"],
        check=True,
    )
    qcow2 = base / "disk.qcow2"
    subprocess.run(
        ["qemu-img", "convert", "-f", "raw", "-O", "qcow2", str(raw), str(qcow2)], check=True
    )
    return raw, qcow2
