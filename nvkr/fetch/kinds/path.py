"""The ``path`` source kind. A directory of this repository, hashed on every run (:mod:`nvkr.fetch.path`)."""

from __future__ import annotations

from typing import Any

from nvkr.fetch.entries import PathEntry
from nvkr.fetch.kind import Fetcher, ModuleKind
from nvkr.redact import redact_url


class PathKind(ModuleKind[PathEntry]):
    kind = "path"
    local = True

    def fetcher(self) -> Fetcher:
        from nvkr.fetch import path

        return path

    def descriptor(self, name: str, entry: PathEntry) -> dict[str, Any]:
        """No ``uri``: the kind and the path as annotations."""
        desc = super().descriptor(name, entry)
        desc["annotations"] = {"kind": "path", "path": redact_url(entry.path)}
        return desc
