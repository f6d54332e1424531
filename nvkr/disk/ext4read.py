"""Reading an ext4 file system image without mounting it: e2fsprogs' ``debugfs`` in read-only
mode, a command file per pass, its output parsed by inode number.

``nvkr image ls|cat|diff`` (:mod:`nvkr.disk.imageread` finds the root partition of a machine
image and hands it here) and the disk tests read a root file system this way. Every command names
its inode as ``<N>``, never a path, so no file name (spaces, quotes, line breaks, bytes that are no
UTF-8) reaches debugfs's command parser; paths are built here from the directory entries, as
bytes. A walk (:meth:`Ext4Reader.walk`) is one ``ls -p`` per directory, one debugfs run per tree
level; contents (:meth:`Ext4Reader.digests`, :meth:`Ext4Reader.read`) are ``cat`` of many inodes
in one run into a temporary file, cut apart by the sizes the walk found, in batches of about
:data:`BATCH_BYTES` so that file stays bounded.

debugfs (1.47.0) echoes each command of ``-f`` as ``debugfs: <command>`` on stdout before its
output and reports errors on stderr with exit 0, so every pass checks that each command's echo
is where the sizes say and turns a missing or short answer into a :class:`DiskError`.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nvkr.errors import DiskError
from nvkr.run import pinned_env, run

#: Bytes of file contents one ``cat`` pass captures at most (a larger file goes alone).
BATCH_BYTES: Final = 256 << 20
ROOT_INODE: Final = 2
#: Symlinks :meth:`Ext4Reader.lookup` follows on one path at most (Linux's MAXSYMLINKS).
MAX_SYMLINKS: Final = 40

# ls -p: "/<inode>/<mode octal>/<uid>/<gid>/<name>/<size>/" per entry (size empty for a
# directory), a blank line after the listing; a name holds no '/', so [^/]* takes all of it,
# line breaks included.
_LS_RECORD = re.compile(rb"/(\d+)/([0-7]+)/(\d+)/(\d+)/([^/]*)/(\d*)/\n")
_ECHO = re.compile(rb"debugfs: ([^\n]*)\n")
_FAST_LINK = b'Fast link dest: "'


@dataclass(frozen=True)
class Entry:
    """One path of the file system.

    Attributes:
        path: absolute, as bytes (``b"/etc/hostname"``; the root is ``b"/"``).
        inode: its inode number (hard links share one).
        mode: ``st_mode``: file type and permission bits.
        uid, gid: numeric owner.
        size: bytes (a symlink: its target's length); None for a directory (debugfs's ``ls -p``
            gives none).
        target: a symlink's target (bytes), else None.
    """

    path: bytes
    inode: int
    mode: int
    uid: int
    gid: int
    size: int | None
    target: bytes | None = None

    @property
    def kind(self) -> str:
        """``file``, ``dir``, ``symlink``, ``char``, ``block``, ``fifo``, ``socket``."""
        return file_kind(self.mode)


def file_kind(mode: int) -> str:
    """The file type of ``st_mode`` as a word (see :attr:`Entry.kind`)."""
    for test, word in (
        (stat.S_ISREG, "file"),
        (stat.S_ISDIR, "dir"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISCHR, "char"),
        (stat.S_ISBLK, "block"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return word
    return "unknown"


def _join(parent: bytes, name: bytes) -> bytes:
    return (parent.rstrip(b"/") + b"/" + name) if parent != b"/" else b"/" + name


class Ext4Reader:
    """An ext4 image (a file, or a disk file with the file system at ``offset`` bytes) read
    with ``debugfs`` (never opened for writing). ``what`` names it in errors."""

    def __init__(self, image: Path, *, offset: int = 0, what: str | None = None) -> None:
        self.image = image
        self.offset = offset
        self.what = what or str(image)

    # -- running debugfs ----------------------------------------------------------------------
    def _device(self) -> str:
        return f"{self.image}?offset={self.offset}" if self.offset else str(self.image)

    def _run(self, commands: Sequence[str], *, stdout: Path | None = None) -> bytes:
        """Stdout of one debugfs run of ``commands`` (a command file, read-only); with
        ``stdout``, written into that file instead (by the shell: a file takes a file's contents
        many times faster than a pipe, which debugfs feeds a block at a time) and b"" returned.

        Raises:
            DiskError: debugfs cannot open the file system (its message quoted).
            ToolError: debugfs is missing (Debian package e2fsprogs).
        """
        env = pinned_env({"DEBUGFS_PAGER": "__none__", "PAGER": "__none__"})
        with tempfile.NamedTemporaryFile("w", prefix="nvkr-debugfs-", suffix=".cmd") as f:
            f.write("".join(c + "\n" for c in commands))
            f.flush()
            argv = ["debugfs", "-f", f.name, self._device()]
            if stdout is not None:
                argv = ["sh", "-c", 'exec "$@" > "$0"', str(stdout), *argv]
            done = run(argv, env=env, check=False)
        err = done.stderr.decode(errors="replace")
        if done.returncode != 0 or "Bad magic number" in err or "while opening filesystem" in err:
            lines = [x for x in err.splitlines() if x and not x.startswith("debugfs ")]
            raise DiskError(
                f"{self.what}: debugfs cannot read an ext4 file system there: "
                + ("; ".join(lines[:3]) or f"exit {done.returncode}"),
                hint="nvkr image reads the ext4 root file system of a machine image",
            )
        return done.stdout

    def _answers(self, commands: Sequence[str], out: bytes) -> Iterator[tuple[str, bytes]]:
        """``(command, its output)`` for each command, split at the echo lines; for outputs
        that are parsed record by record (``ls -p``, ``stat``), where a file name cannot fake an
        echo line since it is consumed inside its record."""
        pos = 0
        for i, command in enumerate(commands):
            m = _ECHO.match(out, pos)
            if m is None or m.group(1).decode(errors="replace") != command:
                raise DiskError(f"{self.what}: unexpected debugfs output before {command!r}")
            pos = m.end()
            if i + 1 < len(commands):
                nxt = out.find(b"debugfs: " + commands[i + 1].encode() + b"\n", pos)
                end = nxt if nxt >= 0 else len(out)
            else:
                end = len(out)
            yield command, out[pos:end]
            pos = end

    # -- directories --------------------------------------------------------------------------
    def listdir(
        self, inodes: Sequence[int]
    ) -> dict[int, list[tuple[bytes, int, int, int, int, int | None]]]:
        """``{directory inode: [(name, inode, mode, uid, gid, size), ...]}`` without ``.`` and
        ``..``, in directory order, for each of ``inodes`` (one debugfs run).

        Raises:
            DiskError: an inode is no directory, or the output cannot be parsed.
        """
        if not inodes:
            return {}
        commands = [f"ls -p <{i}>" for i in inodes]
        out = self._run(commands)
        listing: dict[int, list[tuple[bytes, int, int, int, int, int | None]]] = {}
        pos = 0
        current: int | None = None
        wanted = iter(inodes)
        while pos < len(out):
            echo = _ECHO.match(out, pos)
            if echo is not None and echo.group(1).startswith(b"ls -p <"):
                current = next(wanted, None)
                if current is None or echo.group(1) != f"ls -p <{current}>".encode():
                    raise DiskError(
                        f"{self.what}: debugfs answered out of order ({echo.group(1)!r})"
                    )
                listing[current] = []
                pos = echo.end()
                continue
            if out.startswith(b"\n", pos):
                pos += 1
                continue
            rec = _LS_RECORD.match(out, pos)
            if rec is None or current is None:
                snippet = out[pos : pos + 60]
                raise DiskError(f"{self.what}: cannot parse debugfs's listing at {snippet!r}")
            pos = rec.end()
            name = rec.group(5)
            if name in (b".", b".."):
                continue
            size = int(rec.group(6)) if rec.group(6) else None
            listing[current].append(
                (name, int(rec.group(1)), int(rec.group(2), 8), int(rec.group(3)),
                 int(rec.group(4)), size)
            )  # fmt: skip
        missing = [i for i in inodes if i not in listing]
        if missing:
            raise DiskError(f"{self.what}: debugfs listed no directory <{missing[0]}>")
        return listing

    def walk(self, top: Entry | None = None) -> list[Entry]:
        """Every path under ``top`` (default: the root directory), ``top`` included, sorted by
        path bytes; symlinks with their targets. One debugfs run per tree level, plus one for
        the symlink targets.

        Raises:
            DiskError: as :meth:`listdir`, :meth:`targets`.
        """
        root = top or self.root()
        found = [root]
        level = [root] if stat.S_ISDIR(root.mode) else []
        while level:
            listing = self.listdir([e.inode for e in level])
            nxt = []
            for d in level:
                for name, ino, mode, uid, gid, size in listing[d.inode]:
                    e = Entry(_join(d.path, name), ino, mode, uid, gid, size)
                    found.append(e)
                    if stat.S_ISDIR(mode):
                        nxt.append(e)
            level = nxt
        return sorted(self._with_targets(found), key=lambda e: e.path)

    def children(self, directory: Entry) -> list[Entry]:
        """The entries of ``directory`` (not ``.`` and ``..``), sorted by path, symlinks with
        their targets.

        Raises:
            DiskError: as :meth:`listdir`, :meth:`targets`.
        """
        listing = self.listdir([directory.inode])[directory.inode]
        found = [Entry(_join(directory.path, n), i, m, u, g, s) for n, i, m, u, g, s in listing]
        return sorted(self._with_targets(found), key=lambda e: e.path)

    def _with_targets(self, entries: list[Entry]) -> list[Entry]:
        links = self.targets([e for e in entries if stat.S_ISLNK(e.mode)])
        return [
            Entry(e.path, e.inode, e.mode, e.uid, e.gid, e.size, links[e.inode])
            if e.inode in links
            else e
            for e in entries
        ]

    def root(self) -> Entry:
        """The root directory's entry (``..`` of the root names it, with its mode and owner)."""
        out = self._run([f"ls -p <{ROOT_INODE}>"])
        for rec in _LS_RECORD.finditer(out):
            if rec.group(5) == b".":
                return Entry(b"/", ROOT_INODE, int(rec.group(2), 8), int(rec.group(3)),
                             int(rec.group(4)), None)  # fmt: skip
        raise DiskError(f"{self.what}: debugfs lists no root directory")

    def lookup(self, path: bytes, *, follow: bool = False) -> Entry | None:
        """The entry of the absolute ``path`` (``b"/etc/hostname"``), or None when there is
        none. Symlinks on the way are followed inside the image (an absolute target from the
        image's root, as the booted machine sees it: Debian's ``/lib`` is ``usr/lib``); the
        last component too with ``follow``, else its own entry is returned (with its target).
        The entry's ``path`` is the resolved one. One debugfs run per component.

        Raises:
            DiskError: more than :data:`MAX_SYMLINKS` symlinks on the way; as :meth:`listdir`.
        """
        root = self.root()
        chain = [root]  # the directories from the root to the current one
        parts = [p for p in path.split(b"/") if p and p != b"."]
        hops = 0
        while parts:
            name = parts.pop(0)
            current = chain[-1]
            if name == b"..":
                if len(chain) > 1:
                    chain.pop()
                continue
            if not stat.S_ISDIR(current.mode):
                return None
            entries = self.listdir([current.inode])[current.inode]
            hit = next((x for x in entries if x[0] == name), None)
            if hit is None:
                return None
            _, ino, mode, uid, gid, size = hit
            entry = Entry(_join(current.path, name), ino, mode, uid, gid, size)
            if stat.S_ISLNK(mode):
                target = self.targets([entry])[ino]
                if not parts and not follow:
                    return Entry(entry.path, ino, mode, uid, gid, size, target)
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise DiskError(
                        f"{self.what}: {path.decode(errors='replace')}: more than "
                        f"{MAX_SYMLINKS} symlinks on the way"
                    )
                if target.startswith(b"/"):
                    chain = [root]
                parts = [p for p in target.split(b"/") if p and p != b"."] + parts
                continue
            chain.append(entry)
        return chain[-1]

    # -- contents -----------------------------------------------------------------------------
    def targets(self, links: Sequence[Entry]) -> dict[int, bytes]:
        """``{inode: target}`` of the symlinks ``links``: a fast symlink's from ``stat``'s
        ``Fast link dest``, a slow one's (60 bytes or more, in a data block) from ``cat``.

        Raises:
            DiskError: a target cannot be read at its recorded length.
        """
        by_inode = {e.inode: e for e in links}
        if not by_inode:
            return {}
        inodes = sorted(by_inode)
        commands = [f"stat <{i}>" for i in inodes]
        out = self._run(commands)
        found: dict[int, bytes] = {}
        slow = []
        for (command, text), ino in zip(self._answers(commands, out), inodes, strict=True):
            size = by_inode[ino].size or 0
            at = text.find(_FAST_LINK)
            if at >= 0:
                target = text[at + len(_FAST_LINK) : at + len(_FAST_LINK) + size]
                if len(target) != size:
                    raise DiskError(f"{self.what}: {command}: a short symlink target")
                found[ino] = target
            else:
                slow.append(by_inode[ino])
        self._cat(slow, lambda e, data: found.__setitem__(e.inode, bytes(data)))
        return found

    def _cat(self, entries: Sequence[Entry], consume: Callable[[Entry, memoryview], None]) -> None:
        """Call ``consume(entry, its bytes)`` for each of ``entries`` (regular files or slow
        symlinks; one per inode), in runs of about :data:`BATCH_BYTES` written to a temporary
        file (the view is valid during the call only).

        Raises:
            DiskError: debugfs's output does not hold each one's echo and ``size`` bytes.
        """
        batch: list[Entry] = []
        total = 0
        with tempfile.TemporaryDirectory(prefix="nvkr-debugfs-") as tmp:
            out = Path(tmp) / "cat.out"
            for e in entries:
                if batch and total + (e.size or 0) > BATCH_BYTES:
                    self._cat_batch(batch, out, consume)
                    batch, total = [], 0
                batch.append(e)
                total += e.size or 0
            if batch:
                self._cat_batch(batch, out, consume)

    def _cat_batch(
        self, batch: Sequence[Entry], out: Path, consume: Callable[[Entry, memoryview], None]
    ) -> None:
        commands = [f"cat <{e.inode}>" for e in batch]
        self._run(commands, stdout=out)
        with open(out, "rb") as f:
            size_all = os.fstat(f.fileno()).st_size
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size_all else b""
            view = memoryview(data)
            try:
                pos = 0
                for command, e in zip(commands, batch, strict=True):
                    echo = b"debugfs: " + command.encode() + b"\n"
                    if view[pos : pos + len(echo)] != echo:
                        raise DiskError(
                            f"{self.what}: debugfs could not read "
                            f"{e.path.decode(errors='replace')} (inode {e.inode}) in full"
                        )
                    pos += len(echo)
                    size = e.size or 0
                    if pos + size > size_all:
                        raise DiskError(
                            f"{self.what}: {e.path.decode(errors='replace')}: short read"
                        )
                    consume(e, view[pos : pos + size])
                    pos += size
                if pos != size_all:
                    raise DiskError(f"{self.what}: debugfs wrote more than the files' sizes")
            finally:
                view.release()
                if isinstance(data, mmap.mmap):
                    data.close()

    def read(self, entry: Entry) -> bytes:
        """The bytes of a regular file (or a symlink's target).

        Raises:
            DiskError: ``entry`` is another kind of file, or cannot be read in full.
        """
        if stat.S_ISLNK(entry.mode):
            return self.targets([entry])[entry.inode]
        if not stat.S_ISREG(entry.mode):
            raise DiskError(
                f"{self.what}: {entry.path.decode(errors='replace')} is a {entry.kind}, "
                "not a regular file"
            )
        got: list[bytes] = []
        self._cat([entry], lambda _, data: got.append(bytes(data)))
        return got[0]

    def digests(self, entries: Iterable[Entry]) -> dict[int, str]:
        """``{inode: sha256 hex}`` of the regular files among ``entries`` (each inode read
        once).

        Raises:
            DiskError: as :meth:`read`.
        """
        unique = {e.inode: e for e in entries if stat.S_ISREG(e.mode)}
        ordered = [unique[i] for i in sorted(unique)]  # inode order: near block order
        found: dict[int, str] = {}
        self._cat(
            ordered, lambda e, data: found.__setitem__(e.inode, hashlib.sha256(data).hexdigest())
        )
        return found
