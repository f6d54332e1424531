"""The ``pypi`` source kind. A wheel, or one file in it, fetched with pip (:mod:`nvkr.fetch.pypi`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.fetch.kind import SourceKind

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
