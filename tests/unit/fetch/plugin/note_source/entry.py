"""The ``note`` source's lock entry: ``{"kind": "note", "digest": "sha256:<hex>", "size":
<bytes>}``, read and written by the fields below (:class:`nvkr.fetch.entries.LockEntry`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from nvkr.fetch.entries import LockEntry


@dataclass(frozen=True, kw_only=True)
class NoteEntry(LockEntry):
    """A note's blob and its size in bytes."""

    kind: ClassVar[str] = "note"

    size: int
