"""The ``pypi`` source kind. A wheel, or one file in it, fetched with pip (:mod:`nvkr.fetch.pypi`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import SourceKind
from nvkr.redact import redact_urls

if TYPE_CHECKING:
    from nvkr.fetch.context import FetchContext


class PypiKind(SourceKind):
    kind = "pypi"

    def resolve(
        self, name: str, source: Any, ctx: FetchContext, *, base_dir: Path
    ) -> dict[str, Any]:
        from nvkr.fetch import pypi as fetch_pypi

        return fetch_pypi.resolve(name, source, ctx, base_dir=base_dir)

    def ensure(
        self,
        name: str,
        source: Any,
        resolved: dict[str, Any],
        ctx: FetchContext,
        *,
        base_dir: Path,
    ) -> str:
        from nvkr.fetch import pypi as fetch_pypi

        return fetch_pypi.ensure(name, source, resolved, ctx, base_dir=base_dir)

    def descriptor(self, name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """``uri`` the wheel's URL (else ``pkg:pypi/NAME@VERSION``), the wheel's file name (and
        the member used) as annotations."""
        desc = super().descriptor(name, entry)
        e = redact_urls(entry)
        desc["uri"] = e.get("url") or f"pkg:pypi/{e['name']}@{e['version']}"
        desc["annotations"] = {"filename": e["filename"]}
        if "member" in e:
            desc["annotations"]["member"] = e["member"]
        return desc

    def version(self, entry: Mapping[str, Any]) -> str | None:
        return str(entry["version"])
