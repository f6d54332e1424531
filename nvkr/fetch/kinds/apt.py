"""The ``apt`` source kind. A closed set of Debian packages and their manifest (:mod:`nvkr.fetch.apt`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import SourceKind

if TYPE_CHECKING:
    from nvkr.fetch.context import FetchContext


class AptKind(SourceKind):
    kind = "apt"

    def resolve(
        self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path
    ) -> dict[str, Any]:
        from nvkr.fetch import apt as fetch_apt

        return fetch_apt.resolve(name, source, ctx, base_dir=base_dir)

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: dict[str, Any],
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        from nvkr.fetch import apt as fetch_apt

        return fetch_apt.ensure(name, source, resolved, ctx, base_dir=base_dir)

    def blobs(self, entry: Mapping[str, Any]) -> list[str]:
        """The manifest and every .deb."""
        return [str(entry["digest"]), *(p["sha256"] for p in entry.get("packages") or [])]
