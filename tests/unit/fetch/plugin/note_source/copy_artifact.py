"""The ``copy-source`` artifact model: a file holding one source's bytes."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.recipe.base import ArtifactModel, Reference


class CopySourceArtifact(ArtifactModel):
    """``source``'s blob as a file named ``filename``."""

    builder: Literal["copy-source"]
    source: str = Field(description="Required. the source")
    filename: str = Field(description="Required. the file's name")

    def references(self) -> list[Reference]:
        return [(("source",), "source", self.source)]
