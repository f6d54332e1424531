"""The ``go-binary`` artifact model: what a recipe says about a Go binary."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from nvkr.builders.rootfs.artifact import RootfsArtifact
from nvkr.recipe.base import ArtifactModel, FieldProblem, Name, ToolSources

#: ``importpath.name`` of a Go string variable, as ``go build -ldflags=-X`` takes it
GoSymbol = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.~/-]+\.[A-Za-z_][A-Za-z0-9_]*$")]
#: What of a git source's pin a stamp takes: the commit id, or the commit's time in UTC as
#: RFC 3339 (``2026-11-02T10:00:00Z``), the same on every machine (never the build's date)
StampValue = Literal["commit", "commitDate"]


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
    stamp: dict[GoSymbol, StampValue] = Field(
        default_factory=dict,
        description="Optional. Go string variables set at link time (-X) from the git pin of "
        "`source`: {importpath.name: commit | commitDate}, e.g. {k8s.ovn.org/pkg/config.Commit: "
        "commit}; commitDate is the commit's time (UTC, RFC 3339), never the build's",
    )

    requires: dict[str, str] = Field(
        default_factory=dict,
        description="Optional. module path -> version the module's go.mod must require, checked "
        "before the build, e.g. {k8s.io/client-go: v0.34.1}: a recipe's statement about its pin "
        "(a compatibility rule reads it from a var) that a moved pin cannot silently falsify",
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

    def tree_c_toolchain(self, packages: Iterable[Mapping[str, Any]], arch: str) -> dict[str, str]:
        """See :func:`nvkr.builders.go_binary.tools_tree.tree_c_toolchain`."""
        from nvkr.builders.go_binary.tools_tree import tree_c_toolchain

        return tree_c_toolchain(packages, arch)

    def recipe_problems(self, artifacts: Mapping[str, ArtifactModel]) -> list[FieldProblem]:
        """A cgo build names the tools tree its C compiler comes from, and only a cgo build does.

        The host's gcc and libc headers are in no action key, lock, provenance or SBOM: another
        machine's compiler would give another binary under the same key. So ``cgo: true`` needs
        ``toolsTree`` (a rootfs artifact of locked Debian packages); a ``toolsTree`` without cgo
        would be dropped unused. (That the tree is a rootfs artifact with a compiler for the
        variant's arch is checked at plan time, where its locked packages are known.) The hint
        shows the fix, naming the recipe's first rootfs artifact (or ``build-tools``).
        """
        if self.cgo and self.toolsTree is None:
            field = "cgo"
            message = (
                "cgo: true needs a toolsTree, a rootfs artifact whose locked gcc and libc6-dev "
                "compile the C code (the host's C compiler and headers are in no action key, "
                "lock or provenance)"
            )
        elif self.toolsTree is not None and not self.cgo:
            field = "toolsTree"
            message = (
                f"toolsTree '{self.toolsTree}' is set but cgo is false, so the tree would be unused"
            )
        else:
            return []
        trees = sorted(n for n, a in artifacts.items() if isinstance(a, RootfsArtifact))
        tree = trees[0] if trees else "build-tools"
        hint = (
            f"give the cgo artifact `toolsTree: {tree}` and define {tree} as a rootfs of "
            "locked packages, e.g. sources: {build-tools-packages: {apt: {debian: {url: "
            '"http://deb.debian.org/debian", suite: bookworm}}, arch: amd64, packages: {gcc: '
            '"4:12.2.0-3", libc6-dev: "2.36-9+deb12u14"}}} (add gcc-aarch64-linux-gnu and '
            f"libc6-dev-arm64-cross for arm64 targets) and artifacts: {{{tree}: {{builder: "
            "rootfs, packages: build-tools-packages}}; or set cgo: false (a static binary, "
            "CGO_ENABLED=0)"
        )
        return [((field,), message, hint)]
