"""The ``url`` source kind. A file fetched over http(s) or file, pinned by its digest (:mod:`nvkr.fetch.http`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import SourceKind
from nvkr.redact import redact_url

if TYPE_CHECKING:
    from nvkr.fetch.context import FetchContext


class UrlKind(SourceKind):
    kind = "url"

    def resolve(
        self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path
    ) -> dict[str, Any]:
        from nvkr.fetch import http as fetch_http

        return fetch_http.resolve(name, source, ctx, base_dir=base_dir)

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: dict[str, Any],
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        from nvkr.fetch import http as fetch_http

        return fetch_http.ensure(name, source, resolved, ctx, base_dir=base_dir)

    def descriptor(self, name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """``uri`` the URL, and ``digest.sha512`` when one was pinned."""
        desc = super().descriptor(name, entry)
        desc["uri"] = redact_url(entry["url"])
        if "sha512" in entry:
            desc["digest"]["sha512"] = str(entry["sha512"]).split(":", 1)[1]
        return desc
