"""``nvkr store verify``: hash every blob of the store in full, for what a seal cannot see.

Builds check a blob against its seal where they use it (:mod:`nvkr.store`): a write after the
blob was committed is caught there, bit rot is not. This walks the whole store instead: every
``blobs/sha256/<hex>`` is hashed (on a thread pool: hashlib releases the GIL on large reads),
every action record parsed, every seal matched to a blob, every unpacked tool in ``tools/``
hashed against its seal (:mod:`nvkr.treeseal`), and every output an action record names looked
for (a record whose output is gone is stale: a build runs its action again). With ``repair`` it
deletes what is wrong (corrupt blobs, files that are no blob, unreadable action records, records
whose outputs are gone or corrupt, seals of no blob, changed tools trees) under the store lock,
so no build is using them meanwhile; the next build fetches, unpacks or rebuilds what it needs
of it. Without ``repair`` nothing is changed but the seals of intact blobs and trees, refreshed.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from nvkr import treeseal
from nvkr.errors import IntegrityError
from nvkr.store import Store

_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass
class StoreReport:
    """What :func:`verify_store` found: ``blobs`` hashed (``bytes`` in all), ``corrupt`` blob
    digests (``sha256:<hex>``), ``stray`` files in ``blobs/sha256/`` that are no blob's name,
    ``actions`` records read and ``unreadable_actions`` (file names), ``missing_outputs``
    (digests action records name as outputs that are not in the store -> those records, as
    ``owners``), ``stale_actions`` (the file names of the records with a missing or corrupt
    output), and whether it repaired."""

    root: Path
    blobs: int = 0
    bytes: int = 0
    corrupt: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    actions: int = 0
    unreadable_actions: list[str] = field(default_factory=list)
    orphan_seals: int = 0
    #: corrupt digest -> the actions whose outputs it is ("NAME (BUILDER)"; none for a source)
    owners: dict[str, list[str]] = field(default_factory=dict)
    missing_outputs: dict[str, list[str]] = field(default_factory=dict)
    stale_actions: list[str] = field(default_factory=list)
    tools: int = 0
    corrupt_tools: list[str] = field(default_factory=list)
    repaired: bool = False

    @property
    def ok(self) -> bool:
        return not (
            self.corrupt
            or self.stray
            or self.unreadable_actions
            or self.corrupt_tools
            or self.missing_outputs
        )

    def as_json(self) -> dict[str, object]:
        return {
            "store": str(self.root),
            "blobs": self.blobs,
            "bytes": self.bytes,
            "corrupt": self.corrupt,
            "stray": self.stray,
            "actions": self.actions,
            "unreadableActions": self.unreadable_actions,
            "orphanSeals": self.orphan_seals,
            "owners": self.owners,
            "missingOutputs": self.missing_outputs,
            "staleActions": self.stale_actions,
            "tools": self.tools,
            "corruptTools": self.corrupt_tools,
            "repaired": self.repaired,
            "ok": self.ok,
        }


def verify_store(store: Store, *, repair: bool = False, jobs: int = 2) -> StoreReport:
    """Hash every blob of ``store`` and read every action record; see the module docstring.

    Returns:
        the report; ``repaired`` is True when ``repair`` deleted what was wrong (corrupt and
        stray blobs, unreadable action records, records whose outputs are gone or corrupt,
        orphan seals).
    """
    report = StoreReport(root=store.root)
    with store.lock() if repair else contextlib.nullcontext():
        digests = _check_blobs(store, report, jobs)
        _check_records(store, report, set(digests))
        _check_tools(store, report)
        blob_names = {d.split(":", 1)[1] for d in digests}
        orphans = [p for p in store.seals_dir.iterdir() if p.name not in blob_names]
        report.orphan_seals = len(orphans)
        if repair:
            _repair(store, report, orphans)
    return report


def _check_blobs(store: Store, report: StoreReport, jobs: int) -> list[str]:
    """Hash every blob on ``jobs`` threads, counting blobs and bytes and listing the corrupt
    ones and the stray files in ``report``; returns the blobs' digests."""
    digests: list[str] = []
    for path in sorted(store.blobs_dir.iterdir()):
        if _HEX.fullmatch(path.name) and path.is_file():
            digests.append("sha256:" + path.name)
        else:
            report.stray.append(path.name)

    def check(digest: str) -> tuple[str, int, bool]:
        try:
            store.verify_blob(digest)  # a full hash; seals an intact blob again
            return digest, store.blob_path(digest).stat().st_size, True
        except IntegrityError:
            return digest, store.blob_path(digest).stat().st_size, False
        except FileNotFoundError:  # removed meanwhile (by gc, or a repair elsewhere)
            return digest, 0, True

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for digest, size, intact in pool.map(check, digests):
            report.blobs += 1
            report.bytes += size
            if not intact:
                report.corrupt.append(digest)
    return digests


def _check_records(store: Store, report: StoreReport, blobs: set[str]) -> None:
    """Read every action record: list the unreadable ones, name the actions each corrupt blob
    is an output of (``report.owners``) and each output not among ``blobs`` (the store's) is
    missing for (``report.missing_outputs``), and list the records either makes stale."""
    for record in _records(store):
        report.actions += 1
        try:
            doc = json.loads(record.read_bytes())
            if not isinstance(doc, dict) or not isinstance(doc.get("outputs", []), list):
                raise ValueError("not an action record")
        except (ValueError, UnicodeDecodeError):
            report.unreadable_actions.append(record.name)
            continue
        owner = f"{doc.get('name', record.stem)} ({doc.get('builder', '?')})"
        stale = False
        for out in doc.get("outputs", []):
            output = str(out.get("digest")) if isinstance(out, dict) else ""
            if output in report.corrupt:
                report.owners.setdefault(output, []).append(owner)
                stale = True
            elif output not in blobs and not _present(store, output):
                report.missing_outputs.setdefault(output, []).append(owner)
                stale = True
        if stale:  # a build runs its action again; with --repair, the record goes
            report.stale_actions.append(record.name)


def _present(store: Store, digest: str) -> bool:
    """Whether ``digest`` is in the store after all (committed since the blobs were listed, by a
    build running meanwhile); a malformed digest is not."""
    try:
        return store.blob_path(digest).is_file()
    except ValueError:
        return False


def _check_tools(store: Store, report: StoreReport) -> None:
    """Check every sealed unpacked tool tree against its seal."""
    for tree in sorted(store.tools_dir.iterdir()):
        tree_seal = treeseal.read_seal(tree) if tree.is_dir() else None
        if tree_seal is None:  # no seal: unpacked again on its next use, never used as is
            continue
        report.tools += 1
        if treeseal.verify_tree(tree, tree_seal) is not None:
            report.corrupt_tools.append("sha256:" + tree.name)


def _repair(store: Store, report: StoreReport, orphans: list[Path]) -> None:
    """Delete what ``report`` found wrong (under the store lock, which the caller holds)."""
    for digest in report.corrupt:
        store.discard_blob(digest, "found by store verify")
    for name in report.stray:
        _remove(store.blobs_dir / name)
    for name in report.unreadable_actions + report.stale_actions:
        _remove(store.actions_dir / name)
    for seal in orphans:
        _remove(seal)
    for digest in report.corrupt_tools:  # unpacked again from its blob when next used
        _remove(store.tools_dir / digest.split(":", 1)[1])
    report.repaired = True


def _records(store: Store) -> Iterator[Path]:
    yield from sorted(p for p in store.actions_dir.iterdir() if p.suffix == ".json")


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
