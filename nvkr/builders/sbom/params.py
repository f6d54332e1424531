"""The ``sbom`` action's params, typed: what :func:`~nvkr.builders.sbom.builder.sbom_spec`
fixes and :meth:`SbomBuilder.run` reads. Their JSON (:meth:`SbomParams.to_json`, the keys they
always had) enters the action key."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class SbomParams(BaseModel):
    """The described ``artifact``'s name(s), its release ``kind``, the ``subject`` action key,
    the ``binaries`` (action keys with Go build info) and ``images`` (sbom action keys a chart
    refers to), and the ``nvkrVersion`` the document names as its creator."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    artifact: str
    kind: str
    subject: str
    binaries: list[str]
    images: list[str] = Field(default_factory=list)  # absent in params from before charts had it
    nvkrVersion: str

    def to_json(self) -> dict[str, Any]:
        """The params as the action holds them."""
        return self.model_dump()
