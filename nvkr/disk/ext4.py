"""The root file system: an ext4 image made from the tree by ``mkfs.ext4 -d``, then made
reproducible by a ``debugfs`` pass over its inodes. No mount, no loop device.

``mkfs.ext4 -d`` (e2fsprogs 1.47.0) copies files, directories, symlinks, hard links, device nodes,
modes (setuid included), owners and extended attributes (``security.capability``) from the tree.
It adds each directory's entries in ``alphasort`` (strcoll) order, which the pinned
``LC_ALL=C.UTF-8`` makes byte order, so the host file system's readdir order does not matter.
Everything random or time-dependent is pinned: the UUID and directory-hash seed (derived from the
action key), the feature set (our own ``mke2fs.conf``, never the host's), ``E2FSPROGS_FAKE_TIME``
for the superblock and the inodes mkfs creates. But mkfs also copies each source file's atime and
ctime (and its mtime), so every allocated inode then gets atime, ctime and crtime set to the epoch
by inode number (the allocated inodes come from the inode bitmaps, via ``dumpe2fs``), and any
mtime newer than the epoch is clamped to it by path. Addressing inodes by number means no file
name, however odd, can escape the pass; the few clamped paths are quoted for debugfs (or, holding
a line break, resolved to their inode number first).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from nvkr.disk.layout import MIB, DiskLayout
from nvkr.errors import DiskError, IntegrityError, ToolError
from nvkr.run import pinned_env, run, tail

BLOCK = 4096
INODE_SIZE = 256
INODE_RATIO = 16384

#: Debian 12's /etc/mke2fs.conf, pinned here so the host's copy cannot change the feature set.
#: ``orphan_file`` (default in upstream 1.47) stays off: GRUB 2.06 and older e2fsck lack it.
MKE2FS_CONF = """\
[defaults]
	base_features = sparse_super,large_file,filetype,resize_inode,dir_index,ext_attr
	default_mntopts = acl,user_xattr
	enable_periodic_fsck = 0
	blocksize = 4096
	inode_size = 256
	inode_ratio = 16384

[fs_types]
	ext4 = {
		features = has_journal,extent,huge_file,flex_bg,metadata_csum,64bit,dir_nlink,extra_isize
	}
	small = {
		inode_ratio = 4096
	}
	floppy = {
		inode_ratio = 8192
	}
	big = {
		inode_ratio = 32768
	}
	huge = {
		inode_ratio = 65536
	}
"""

_NO_SPACE = re.compile(r"Could not allocate (block|inode)|No free space|No space left")


@dataclass
class TreeStats:
    """What :func:`scan_tree` found: sizes for the "does it fit" checks, mtimes to clamp.

    Attributes:
        data_bytes: file contents, directories and long symlinks, rounded up to 4 KiB blocks.
        inodes: distinct inodes (hard links counted once), the tree's root included.
        newer: tree-relative paths (bytes, ``/``-separated, leading ``/``) whose mtime is
            after the epoch.
    """

    data_bytes: int = 0
    inodes: int = 0
    newer: list[bytes] = field(default_factory=list)


def _blocks(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK * BLOCK


def scan_tree(tree: Path, *, epoch: int) -> TreeStats:
    """Walk ``tree`` (not following symlinks) and size it; see :class:`TreeStats`."""
    stats = TreeStats()
    seen: set[tuple[int, int]] = set()
    root = os.fsencode(tree)
    st = os.lstat(root)
    stats.inodes = 1
    stats.data_bytes = BLOCK
    if int(st.st_mtime) > epoch:
        stats.newer.append(b"/")
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = dirpath[len(root) :]
        dir_bytes = 24  # "." and ".."
        for name in [*dirnames, *filenames]:
            dir_bytes += (8 + len(name) + 3) // 4 * 4
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if int(st.st_mtime) > epoch:
                stats.newer.append(rel_dir + b"/" + name)
            key = (st.st_dev, st.st_ino)
            if key in seen:
                continue
            seen.add(key)
            stats.inodes += 1
            if stat.S_ISREG(st.st_mode):
                stats.data_bytes += _blocks(st.st_size)
            elif stat.S_ISLNK(st.st_mode) and st.st_size >= 60:
                stats.data_bytes += BLOCK
        stats.data_bytes += _blocks(dir_bytes)
    stats.newer.sort()
    return stats


def _journal_bytes(fs_bytes: int) -> int:
    """e2fsprogs' ext2fs_default_journal_size() for 4 KiB blocks, in bytes."""
    blocks = fs_bytes // BLOCK
    for limit, journal in ((32768, 1024), (256 * 1024, 4096), (512 * 1024, 8192)):
        if blocks < limit:
            return journal * BLOCK
    return (16384 if blocks < 4096 * 1024 else 32768) * BLOCK


def min_fs_bytes(stats: TreeStats) -> int:
    """An estimate of the smallest ext4 (in bytes, a multiple of 1 MiB) that holds the tree.

    Counts the data, the inode tables (256 bytes per 16 KiB, or per 4 KiB below 512 MiB), the
    journal and 2% for bitmaps, group descriptors and their reserve, plus 5% slack: good for a
    message, not a guarantee.
    """
    size = max(stats.data_bytes * 11 // 10, 16 * MIB)
    while True:
        ratio = 4096 if size < 512 * MIB else INODE_RATIO
        overhead = size * INODE_SIZE // ratio + _journal_bytes(size) + size // 50
        if stats.data_bytes + overhead <= size * 95 // 100 and size // ratio >= stats.inodes + 16:
            return (size + MIB - 1) // MIB * MIB
        size = size * 21 // 20 + MIB


def _mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


def make_ext4(
    tree: Path,
    image: Path,
    *,
    size: int,
    layout: DiskLayout,
    epoch: int,
    workdir: Path,
    stats: TreeStats,
    log_file: Path | None = None,
) -> None:
    """Create ``image`` (a sparse file of ``size`` bytes) holding an ext4 copy of ``tree``.

    Raises:
        DiskError: the tree does not fit (the message names the tree's size, its inode count and
            the partition's size), or the size is not a multiple of 4 KiB.
        ToolError: mkfs.ext4 failed otherwise, or is missing.
    """
    if size % BLOCK:
        raise DiskError(f"root partition size {size} is not a multiple of {BLOCK} bytes")
    too_big = DiskError(
        f"the tree {tree} ({_mib(stats.data_bytes)} in {stats.inodes} inodes) does not fit the "
        f"root partition ({_mib(size)})",
        hint=f"make the disk at least {_mib(min_fs_bytes(stats) + layout.fixed_bytes())} "
        "(an estimate), or the tree smaller",
    )
    if stats.data_bytes > size:
        raise too_big
    conf = workdir / "mke2fs.conf"
    conf.write_text(MKE2FS_CONF)
    with open(image, "wb") as f:
        f.truncate(size)
    env = pinned_env({"E2FSPROGS_FAKE_TIME": str(epoch), "MKE2FS_CONFIG": str(conf)})
    extended = ",".join(
        [
            f"hash_seed={layout.fs_hash_seed}",
            "root_owner=0:0",
            "lazy_itable_init=0",
            "lazy_journal_init=0",
            "nodiscard",
        ]
    )
    argv = [
        "mkfs.ext4", "-F", "-t", "ext4", "-b", str(BLOCK), "-I", str(INODE_SIZE),
        "-L", layout.fs_label, "-U", layout.fs_uuid, "-O", "^orphan_file",
        "-E", extended, "-d", str(tree), str(image),
    ]  # fmt: skip
    try:
        run(argv, env=env, log_file=log_file)
    except ToolError as e:
        if _NO_SPACE.search(e.message):
            raise too_big from e
        raise


@dataclass(frozen=True)
class InodeMap:
    """The inode geometry and allocated inode numbers of an ext4 image (from dumpe2fs)."""

    count: int
    first: int
    allocated: tuple[int, ...]


def _ranges(text: str) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        a, _, b = part.partition("-")
        out.append((int(a), int(b or a)))
    return out


def read_inode_map(image: Path) -> InodeMap:
    """The allocated inodes of ``image``: everything in each group's range not listed as free.

    Raises:
        DiskError: dumpe2fs's output is not understood.
    """
    text = run(["dumpe2fs", str(image)], env=pinned_env()).stdout.decode(errors="replace")
    head: dict[str, int] = {}
    for key in ("Inode count", "Inodes per group", "First inode"):
        m = re.search(rf"^{key}:\s+(\d+)$", text, re.M)
        if not m:
            raise DiskError(f"dumpe2fs {image}: no {key!r} in its output")
        head[key] = int(m.group(1))
    per_group = head["Inodes per group"]
    allocated: list[int] = []
    groups = re.split(r"^Group (\d+): ", text, flags=re.M)[1:]
    for number, body in zip(groups[::2], groups[1::2], strict=True):
        g = int(number)
        m = re.search(r"^  Free inodes: ?(.*)$", body, re.M)
        if m is None:
            raise DiskError(f"dumpe2fs {image}: group {g} lists no free inodes line")
        free = _ranges(m.group(1))
        lo, hi = g * per_group + 1, (g + 1) * per_group
        ino = lo
        for a, b in free:
            allocated.extend(range(ino, a))
            ino = b + 1
        allocated.extend(range(ino, hi + 1))
    if len(groups) // 2 * per_group != head["Inode count"]:
        raise DiskError(f"dumpe2fs {image}: the groups do not add up to the inode count")
    return InodeMap(head["Inode count"], head["First inode"], tuple(allocated))


def debugfs_quote(path: bytes) -> bytes:
    """``path`` as one debugfs (libss) argument: in double quotes, inner quotes doubled.

    Raises:
        DiskError: the path holds a newline or carriage return, which end a debugfs script line
            (:func:`resolve_inode` finds such a file's inode number instead).
    """
    if b"\n" in path or b"\r" in path:
        raise DiskError(f"debugfs cannot name {path!r} in a script: it holds a line break")
    return b'"' + path.replace(b'"', b'""') + b'"'


_LS_ENTRY = re.compile(rb"/(\d+)/(\d+)/(\d+)/(\d+)/([^/]*)/(\d*)/\n")


def resolve_inode(image: Path, path: bytes) -> int:
    """The inode number of ``path`` (absolute, in the image), one directory listing
    (``debugfs -R "ls -p <ino>"``, whose entries are ``/ino/mode/uid/gid/name/size/``) per
    component, so that names with any bytes but ``/`` resolve.

    Raises:
        DiskError: a component is not found.
    """
    ino = 2
    for name in (c for c in path.split(b"/") if c):
        out = run(["debugfs", "-R", f"ls -p <{ino}>", str(image)], env=pinned_env()).stdout
        found = [int(m.group(1)) for m in _LS_ENTRY.finditer(out) if m.group(5) == name]
        if not found:
            raise DiskError(f"{path!r} is not in the file system image {image}")
        ino = found[0]
    return ino


def set_times(
    image: Path,
    *,
    epoch: int,
    newer: list[bytes],
    workdir: Path,
    log_file: Path | None = None,
) -> int:
    """Set atime, ctime and crtime of every allocated inode of ``image`` to ``epoch``, and the
    mtime of each path in ``newer`` (see :class:`TreeStats`), with one ``debugfs -w -f`` run.
    Then check the file system with ``e2fsck -fn``. Returns the number of inodes set.

    Raises:
        DiskError: debugfs reported an error (the message carries its first lines).
        IntegrityError: e2fsck found the file system inconsistent afterwards.
        ToolError: a tool failed or is missing.
    """
    imap = read_inode_map(image)
    at = f"@{epoch}".encode()
    lines: list[bytes] = []
    inodes = [i for i in imap.allocated if i == 2 or i >= imap.first]
    for ino in inodes:  # not the other reserved ones: mkfs made them with the fake time
        for fld in (b"atime", b"ctime", b"crtime"):
            lines.append(b"sif <%d> %s %s" % (ino, fld, at))
    for path in newer:
        if b"\n" in path or b"\r" in path:
            target = b"<%d>" % resolve_inode(image, path)
        else:
            target = debugfs_quote(path)
        lines.append(b"sif " + target + b" mtime " + at)
    script = workdir / "times.debugfs"
    script.write_bytes(b"\n".join(lines) + b"\n")
    env = pinned_env({"E2FSPROGS_FAKE_TIME": str(epoch)})
    proc = run(["debugfs", "-w", "-f", str(script), str(image)], env=env)
    errors = [
        line
        for line in proc.stderr.decode(errors="replace").splitlines()
        if line.strip() and not line.startswith("debugfs ")
    ]
    if log_file is not None:
        with open(log_file, "a") as lf:
            lf.write(f"$ debugfs -w -f {script} {image}  # {len(lines)} commands\n")
            lf.writelines(f"{line}\n" for line in errors)
    if errors:
        raise DiskError(
            f"debugfs could not set inode times in {image}: " + "; ".join(errors[:5]),
            hint=f"the script is {script}",
        )
    check = run(["e2fsck", "-f", "-n", str(image)], env=env, check=False)
    if check.returncode != 0:
        output = (check.stdout + check.stderr).decode(errors="replace")
        raise IntegrityError(
            f"e2fsck found the root file system image {image} inconsistent "
            f"(exit {check.returncode}):\n{tail(output)}"
        )
    return len(inodes)
