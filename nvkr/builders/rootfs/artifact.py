"""The ``rootfs`` artifact model: what a recipe says about a Debian root filesystem."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.recipe.base import ArtifactModel


class RootfsArtifact(ArtifactModel):
    """A Debian root filesystem (tar) made by mmdebstrap from exactly the locked .debs."""

    builder: Literal["rootfs"]
    packages: str = Field(description="Required. the apt source with the package set")
    hostname: str | None = Field(
        default=None,
        description="Optional. /etc/hostname; absent: the image has none (systemd names the "
        "machine localhost until cloud-init sets the name from its metadata's local-hostname)",
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        return [(("packages",), "source", self.packages)]
