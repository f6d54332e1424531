"""The ``rootfs`` artifact model: what a recipe says about a Debian root filesystem."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.recipe.base import ArtifactModel


class RootfsArtifact(ArtifactModel):
    """A Debian root filesystem (tar) made by mmdebstrap from exactly the locked .debs."""

    builder: Literal["rootfs"]
    packages: str = Field(description="Required. the apt source with the package set")
    hostname: str = Field(default="nvkr-node", description="Optional. /etc/hostname")

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        return [(("packages",), "source", self.packages)]
