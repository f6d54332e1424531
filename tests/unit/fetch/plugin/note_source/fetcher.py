"""The ``note`` source kind: the bytes are the recipe's text, so locking and fetching need no
network; its lock entry is a :class:`~note_source.entry.NoteEntry`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvkr.errors import ChecksumError
from nvkr.fetch.context import FetchContext, check_entry
from nvkr.fetch.kind import SourceKind

from .entry import NoteEntry


class NoteKind(SourceKind[NoteEntry]):
    kind = "note"

    def resolve(self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path) -> NoteEntry:
        data = source.note.encode()
        return NoteEntry(digest=ctx.store.add_bytes(data).digest, size=len(data))

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: NoteEntry,
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        check_entry(name, resolved.to_json(), "note")
        digest = resolved.digest
        if not ctx.store.has_blob(digest):
            got = ctx.store.add_bytes(source.note.encode()).digest
            if got != digest:
                raise ChecksumError(f"source {name!r}: the note is {got}, the lock says {digest}")
        return digest

    def descriptor(self, name: str, entry: NoteEntry) -> dict[str, Any]:
        desc = super().descriptor(name, entry)
        desc["annotations"] = {"kind": "note", "size": str(entry.size)}
        return desc
