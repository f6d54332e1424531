"""``nvkr image diff``: the files two machine images' root file systems differ in.

Each side is walked once (:meth:`nvkr.disk.ext4read.Ext4Reader.walk`) and its regular files are
hashed (:meth:`~nvkr.disk.ext4read.Ext4Reader.digests`), by :func:`read_tree`; ``nvkr image diff``
reads both sides at once, each in a thread of its own from the download or QCOW2 conversion to
the last digest, since each mostly waits for qemu-img and debugfs. A path is ``added``, ``removed`` or ``changed`` in its type,
permission bits, owner, size, content sha256 or symlink target. Device numbers and times are not
compared (debugfs's listing gives neither, and nvkr pins every time to the epoch).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nvkr.disk.ext4read import Entry, Ext4Reader


def show_path(path: bytes) -> str:
    """``path`` for a terminal: UTF-8, with ``\\`` doubled, ``\\n``, ``\\t`` and any other
    control character or byte that is no UTF-8 written as an escape (``\\xff``), so one path is
    one line."""
    out = []
    for ch in path.decode("utf-8", errors="surrogateescape"):
        code = ord(ch)
        if 0xDC80 <= code <= 0xDCFF:
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "".join(out)


def mode_text(mode: int) -> str:
    """Permission bits (setuid, setgid, sticky included) as four octal digits: ``0755``."""
    return f"{stat.S_IMODE(mode):04o}"


def entry_json(e: Entry, sha256: str | None = None) -> dict[str, Any]:
    """An entry as ``ls --json`` and ``diff --json`` give it: ``path`` (a byte that is no UTF-8
    as the lone surrogate U+DC80+byte, Python's surrogateescape), ``type``, ``mode`` (four octal
    digits), ``uid``, ``gid``, ``size`` (bytes; null for a directory), ``target`` (symlinks) and
    ``sha256`` (when computed)."""
    doc: dict[str, Any] = {
        "path": os.fsdecode(e.path),
        "type": e.kind,
        "mode": mode_text(e.mode),
        "uid": e.uid,
        "gid": e.gid,
        "size": e.size,
    }
    if e.target is not None:
        doc["target"] = os.fsdecode(e.target)
    if sha256 is not None:
        doc["sha256"] = sha256
    return doc


@dataclass
class TreeDiff:
    """What :func:`diff_trees` found: ``added`` and ``removed`` entries, and ``changed`` as
    ``(entry in A, entry in B, {field: (value in A, value in B)})``, each sorted by path."""

    added: list[Entry] = field(default_factory=list)
    removed: list[Entry] = field(default_factory=list)
    changed: list[tuple[Entry, Entry, dict[str, tuple[Any, Any]]]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff_trees(
    a: Sequence[Entry],
    b: Sequence[Entry],
    digests_a: Mapping[int, str],
    digests_b: Mapping[int, str],
) -> TreeDiff:
    """Compare two walks (``digests_*``: ``{inode: sha256 hex}`` of their regular files, as
    :func:`read_tree` gives them)."""
    by_a = {e.path: e for e in a}
    by_b = {e.path: e for e in b}
    result = TreeDiff()
    for path in sorted(by_a.keys() | by_b.keys()):
        ea, eb = by_a.get(path), by_b.get(path)
        if ea is None:
            assert eb is not None
            result.added.append(eb)
            continue
        if eb is None:
            result.removed.append(ea)
            continue
        fields: dict[str, tuple[Any, Any]] = {}
        if ea.kind != eb.kind:
            fields["type"] = (ea.kind, eb.kind)
        if stat.S_IMODE(ea.mode) != stat.S_IMODE(eb.mode):
            fields["mode"] = (mode_text(ea.mode), mode_text(eb.mode))
        if (ea.uid, ea.gid) != (eb.uid, eb.gid):
            fields["owner"] = (f"{ea.uid}:{ea.gid}", f"{eb.uid}:{eb.gid}")
        if ea.kind == eb.kind and ea.size != eb.size and ea.kind not in ("dir", "symlink"):
            fields["size"] = (ea.size, eb.size)
        if ea.kind == eb.kind == "file" and ea.size == eb.size:
            ha, hb = digests_a.get(ea.inode), digests_b.get(eb.inode)
            if ha != hb:
                fields["sha256"] = (ha, hb)
        if ea.target != eb.target:
            fields["target"] = (
                None if ea.target is None else os.fsdecode(ea.target),
                None if eb.target is None else os.fsdecode(eb.target),
            )
        if fields:
            result.changed.append((ea, eb, fields))
    return result


def read_tree(fs: Ext4Reader) -> tuple[list[Entry], dict[int, str]]:
    """One side of a diff: every path of ``fs`` (one walk) and the sha256 hex of each regular
    file's content by inode.

    Raises:
        DiskError: the file system cannot be read (see :class:`Ext4Reader`).
    """
    entries = fs.walk()
    return entries, fs.digests(entries)
