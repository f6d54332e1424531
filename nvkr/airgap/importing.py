"""``nvkr mirror import DIR``: every listed blob the store lacks streamed into the store
against its sha256 and size (a mismatch exits 3 naming the blob and its source, and stores
nothing of it); then ``nvkr build --offline`` needs no network.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.airgap.index import read_index
from nvkr.canonical import hex_of
from nvkr.errors import ChecksumError, IntegrityError
from nvkr.store import Store


@dataclass
class ImportReport:
    """What an import did: blobs ``added`` to the store (verified) and their bytes, blobs the
    store already ``present``ly held (not read)."""

    added: int = 0
    added_bytes: int = 0
    present: int = 0


def _blob_label(source: dict[str, Any], blob: dict[str, Any]) -> str:
    what = f"source {source.get('name')!r} (recipe {source.get('recipe')})"
    if blob.get("package"):
        what += f", package {blob['package']}"
    if blob.get("urls"):
        what += f", {blob['urls'][0]}"
    return f"blob {blob['digest']} of {what}"


def import_mirror(
    directory: Path, store: Store, *, progress: Callable[[str], None] | None = None
) -> ImportReport:
    """Add every blob ``DIR/index.json`` lists to ``store``, each verified (sha256 and size)
    through the store's atomic writer. Blobs the store already holds are not read.

    Raises:
        UsageError: ``directory`` has no index.
        IntegrityError: a listed blob is missing from ``directory`` (exit 3).
        ChecksumError: a blob's bytes differ from its digest or size (exit 3); it is not stored.
    """
    say = progress or (lambda _msg: None)
    index = read_index(directory)
    report = ImportReport()
    done: set[str] = set()
    for source in index["sources"]:
        for blob in source["blobs"]:
            digest = blob["digest"]
            if digest in done:
                continue
            done.add(digest)
            if store.has_blob(digest):
                report.present += 1
                continue
            label = _blob_label(source, blob)
            path = directory / "blobs" / "sha256" / hex_of(digest)
            if not path.is_file():
                raise IntegrityError(
                    f"{label}: {path} is missing from the export",
                    hint="export again into that directory (it adds what is missing)",
                )
            with open(path, "rb") as f, store.writer(expected={"sha256": digest}, expected_size=blob["size"], what=label, url=str(path)) as w:  # fmt: skip
                w.copy_from(f)
                try:
                    info = w.commit()
                except ChecksumError as e:
                    raise ChecksumError(
                        e.message,
                        hint="the export was altered or damaged; nothing of this blob was "
                        "stored: export it again from a connected machine",
                    ) from e
            say(f"imported {digest}")
            report.added += 1
            report.added_bytes += info.size
    return report
