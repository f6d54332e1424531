"""The ``text-file`` artifact model: what a recipe says about a text file."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.recipe.base import ArtifactModel


class TextFileArtifact(ArtifactModel):
    """A file holding ``text``, named ``filename``."""

    builder: Literal["text-file"]
    text: str = Field(description="Required. the file's content")
    filename: str = Field(default="file.txt", description="Optional. the file's name")
