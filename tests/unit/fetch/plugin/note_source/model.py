"""The ``note`` source's recipe model: a source named by its ``note`` key."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from nvkr.recipe.base import Strict


class NoteSource(Strict):
    """A text written in the recipe, stored as the source's bytes (UTF-8)."""

    note: str = Field(description="Required. the text")

    def lock_identity(self) -> dict[str, Any]:
        """What its lock entry must agree with besides its digest: nothing (the text is the
        bytes, checked by the digest)."""
        return {}
