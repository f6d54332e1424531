"""Seals of unpacked trees (``tools/<hex>/``): what a blob's seal is for a blob, for a directory.

A toolchain is unpacked from its blob once (:meth:`nvkr.store.Store.unpacked`) and then run from
the tree: the Go toolchain's GOROOT, a cgo tools tree. The blob's digest is in every action key
that uses it, so a tree changed after unpacking would build other bytes under honest keys (and a
shared cache would sign and serve them). When a tree is unpacked its seal is written beside it
(``tools/<hex>/seal.json``): for every entry its kind, mode, size, mtime and ctime, and its
content (a file's sha256, a link's target). Each use compares the tree with the seal by ``lstat``
alone (a Go toolchain: 13,500 entries, 0.1 to 0.3 s; only builders that run a toolchain pay it,
never a no-op build); an entry whose stat differs is hashed, and the tree counts as changed
when an entry was added, removed, or differs in kind, mode or content. A touched entry with the
same bytes only gets its times sealed again. ``nvkr store verify`` hashes every entry
(:func:`verify_tree`), for what stat cannot see. The threat model is the blob seals': any write
after unpacking is caught (the ctime cannot be set back), bit rot only by a full hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from nvkr.atomic import write_atomic

#: The seal's file name in ``tools/<hex>/``, beside the unpacked tree (never part of it).
SEAL_NAME = "seal.json"
SEAL_VERSION = 1

_CHUNK = 1 << 20
_KINDS = {stat.S_IFREG: "file", stat.S_IFDIR: "dir", stat.S_IFLNK: "link"}

#: entry path (relative, '/'-separated) -> [kind, mode, size, mtime_ns, ctime_ns, content]
Entries = dict[str, list[Any]]


def hash_file(path: Path | str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _stats(root: Path) -> dict[str, os.stat_result]:
    """Every entry below ``root`` (not ``root`` itself, nor the seal), by relative path."""
    found: dict[str, os.stat_result] = {}
    pending = [("", str(root))]
    while pending:
        prefix, path = pending.pop()
        with os.scandir(path) as it:
            for entry in it:
                rel = prefix + entry.name
                if rel in (SEAL_NAME, SEAL_NAME + ".tmp"):
                    continue
                st = entry.stat(follow_symlinks=False)
                found[rel] = st
                if stat.S_ISDIR(st.st_mode):
                    pending.append((rel + "/", entry.path))
    return found


def _kind(st: os.stat_result) -> str:
    return _KINDS.get(stat.S_IFMT(st.st_mode), "other")


def _content(root: Path, rel: str, st: os.stat_result) -> str:
    kind = _kind(st)
    if kind == "file":
        return hash_file(root / rel)
    if kind == "link":
        return os.readlink(root / rel)
    return ""


def _entry(root: Path, rel: str, st: os.stat_result, content: str | None = None) -> list[Any]:
    size = st.st_size if _kind(st) == "file" else 0
    if content is None:
        content = _content(root, rel, st)
    return [_kind(st), stat.S_IMODE(st.st_mode), size, st.st_mtime_ns, st.st_ctime_ns, content]


def seal_tree(root: Path) -> dict[str, Any]:
    """The seal of the tree below ``root``, every entry hashed (at unpack time)."""
    entries = {rel: _entry(root, rel, st) for rel, st in sorted(_stats(root).items())}
    return {"version": SEAL_VERSION, "entries": entries}


def write_seal(root: Path, seal: dict[str, Any]) -> None:
    write_atomic(root / SEAL_NAME, json.dumps(seal, sort_keys=True, separators=(",", ":")).encode())


def read_seal(root: Path) -> dict[str, Any] | None:
    """The seal beside the tree in ``root``; None when there is none or it is unreadable (a
    tree unpacked by an older nvkr, or a damaged seal: the tree is unpacked again)."""
    try:
        seal = json.loads((root / SEAL_NAME).read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(seal, dict) or seal.get("version") != SEAL_VERSION:
        return None
    if not isinstance(seal.get("entries"), dict):
        return None
    return seal


def _describe(changed: list[str], added: list[str], removed: list[str]) -> str:
    parts = [f"{p} changed" for p in changed] + [f"{p} added" for p in added]
    parts += [f"{p} removed" for p in removed]
    more = len(parts) - 3
    return ", ".join(parts[:3]) + (f" and {more} more" if more > 0 else "")


def check_tree(root: Path, seal: dict[str, Any]) -> str | None:
    """Compare the tree in ``root`` with ``seal`` by stat, hashing only entries whose stat
    differs. Returns None when the tree is as unpacked (its seal's times refreshed where an
    entry was only touched), else what changed (entry paths, at most three named)."""
    return _compare(root, seal, full=False)


def verify_tree(root: Path, seal: dict[str, Any]) -> str | None:
    """:func:`check_tree` hashing every entry, whatever its stat says."""
    return _compare(root, seal, full=True)


def _compare(root: Path, seal: dict[str, Any], *, full: bool) -> str | None:
    recorded: Entries = seal["entries"]
    now = _stats(root)
    added = sorted(set(now) - set(recorded))
    removed = sorted(set(recorded) - set(now))
    changed: list[str] = []
    touched = False
    for rel in sorted(set(now) & set(recorded)):
        st, old = now[rel], recorded[rel]
        if not full and _entry(root, rel, st, content=old[5]) == old:
            continue
        new = _entry(root, rel, st)
        if new[:3] != old[:3] or new[5] != old[5]:
            changed.append(rel)
        elif new != old:
            recorded[rel] = new
            touched = True
    if changed or added or removed:
        return _describe(changed, added, removed)
    if touched:
        write_seal(root, seal)
    return None
