"""The ``go-binary`` artifact model: what a recipe says about a Go binary."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field

from nvkr.builders.rootfs.artifact import RootfsArtifact
from nvkr.recipe.base import ArtifactModel, Name, ToolSources


class GoBinaryArtifact(ArtifactModel):
    """A static Go binary built reproducibly for the variant's architecture (builder ``go-binary``)."""

    builder: Literal["go-binary"]
    source: str = Field(description="Required. name of the source holding the Go module")
    package: str = Field(
        default=".", description="Optional. package to build, e.g. ./cmd/node-agent"
    )
    toolchain: str = Field(
        default="go", description="Optional. name of the source holding the Go toolchain"
    )
    output: Name | None = Field(
        default=None, description="Optional. binary name; default: the artifact name"
    )
    cgo: bool = Field(
        default=False,
        description="Optional. enable cgo (CGO_ENABLED=1); needs toolsTree",
    )
    toolsTree: str | None = Field(
        default=None,
        description="Optional; required with cgo. a rootfs artifact (locked Debian packages: "
        "gcc, libc6-dev, and for another target arch its cross compiler) whose C toolchain "
        "builds the cgo code, in a chroot",
    )
    tags: list[str] = Field(default_factory=list, description="Optional. build tags")
    ldflags: list[str] = Field(
        default_factory=list, description="Optional. extra -ldflags (e.g. -X k=v)"
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        """``(field path, "source" | "artifact", name)`` for every name this artifact uses."""
        refs: list[tuple[tuple[str, ...], str, str]] = [
            (("source",), "source", self.source),
            (("toolchain",), "source", self.toolchain),
        ]
        if self.toolsTree is not None:
            refs.append((("toolsTree",), "artifact", self.toolsTree))
        return refs

    def tool_sources(self, artifacts: Mapping[str, ArtifactModel]) -> ToolSources:
        """The Go toolchain source, and with cgo the apt source of the tools tree (a rootfs
        artifact, whose ``packages`` names it)."""
        tree = artifacts.get(self.toolsTree or "")
        trees: frozenset[str] = frozenset()
        if isinstance(tree, RootfsArtifact):
            trees = frozenset({tree.packages})
        return ToolSources(toolchains=frozenset({self.toolchain}), c_trees=trees)
