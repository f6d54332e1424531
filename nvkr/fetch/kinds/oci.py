"""The ``oci`` source kind. An OCI image or index by digest with its whole closure (:mod:`nvkr.fetch.oci`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import SourceKind

if TYPE_CHECKING:
    from nvkr.fetch.context import FetchContext


class OciKind(SourceKind):
    kind = "oci"

    def resolve(
        self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path
    ) -> dict[str, Any]:
        from nvkr.fetch import oci as fetch_oci

        return fetch_oci.resolve(name, source, ctx, base_dir=base_dir)

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: dict[str, Any],
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        from nvkr.fetch import oci as fetch_oci

        return fetch_oci.ensure(name, source, resolved, ctx, base_dir=base_dir)

    def blobs(self, entry: Mapping[str, Any]) -> list[str]:
        """The pinned manifest or index and every blob of its closure (the lock lists it with
        the pinned one: a blob may repeat)."""
        return [str(entry["digest"]), *(entry.get("blobs") or [])]
