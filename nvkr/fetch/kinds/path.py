"""The ``path`` source kind. A directory of this repository, hashed on every run (:mod:`nvkr.fetch.path`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import SourceKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.fetch.context import FetchContext


class PathKind(SourceKind):
    kind = "path"
    local = True

    def resolve(
        self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path
    ) -> dict[str, Any]:
        from nvkr.fetch import path as fetch_path

        return fetch_path.resolve(name, source, ctx, base_dir=base_dir)

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: dict[str, Any],
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        from nvkr.fetch import path as fetch_path

        return fetch_path.ensure(name, source, resolved, ctx, base_dir=base_dir)

    def descriptor(self, name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """No ``uri``: the kind and the path as annotations."""
        desc = super().descriptor(name, entry)
        desc["annotations"] = {"kind": "path", "path": redact_url(entry["path"])}
        return desc
