"""The ``oci`` source kind. An OCI image or index by digest with its whole closure (:mod:`nvkr.fetch.oci`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import SourceKind
from nvkr.redact import redact_url

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

    def descriptor(self, name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """``uri`` ``oci://REF@DIGEST`` and the pinned document's ``mediaType``."""
        desc = super().descriptor(name, entry)
        e = {k: redact_url(entry[k]) for k in ("ref", "digest", "mediaType")}
        desc["uri"] = f"oci://{e['ref']}@{e['digest']}"
        desc["mediaType"] = e["mediaType"]
        return desc
