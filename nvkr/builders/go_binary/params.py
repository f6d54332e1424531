"""The ``go-binary`` action's params, typed: what :meth:`GoBinaryBuilder.plan` fixes and
:meth:`GoBinaryBuilder.run` reads.

Their JSON (:meth:`GoBinaryParams.to_json`) enters the action key: the field names are the keys
it always had, and ``cc`` and ``toolsTree`` appear only in a cgo build, so a build without cgo
keeps its key.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class GoBinaryParams(BaseModel):
    """``package`` to build, ``output`` file name, ``goos``/``goarch`` and ``isa`` (``GOAMD64``
    or ``GOARM64``), ``cgo``, build ``tags`` and extra ``ldflags``; with cgo the tools tree's
    compiler driver ``cc`` and the ``toolsTree`` action key."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    package: str
    output: str
    goos: str
    goarch: str
    isa: dict[str, str]
    cgo: bool
    tags: list[str]
    ldflags: list[str]
    cc: str | None = None
    toolsTree: str | None = None
    requires: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        """The params as the action holds them (``cc``, ``toolsTree`` and ``requires`` only when
        set)."""
        return self.model_dump(exclude_none=True)
