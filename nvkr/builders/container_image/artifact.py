"""The ``container-image`` artifact model: what a recipe says about a container image."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import ArtifactModel, Strict
from nvkr.recipe.imagefiles import ImageFile, file_refs


class ImageBase(Strict):
    """A container image's base made by the recipe itself: the tar of a ``rootfs`` artifact
    (Debian packages from the lock, made by mmdebstrap) as the first layer, as it is."""

    rootfs: str = Field(description="Required. a rootfs artifact of the same variant")


class ContainerImageArtifact(ArtifactModel):
    """An OCI container image per variant arch, joined across arches in an image index.

    ``backend: daemonless`` (default) writes layers from ``files`` onto ``base``; ``backend:
    docker`` builds ``dockerfile`` in the ``context`` source through a Docker-API socket
    (``DOCKER_HOST``) and normalises the result.
    """

    builder: Literal["container-image"]
    backend: Literal["daemonless", "docker"] = "daemonless"
    base: str | ImageBase = Field(
        default="scratch",
        description='Optional. "scratch", the name of an oci source, or {rootfs: ARTIFACT}: the '
        "tree a rootfs artifact made, as the first layer",
    )
    files: dict[fc.ImagePath, str | ImageFile | list[str | ImageFile]] = Field(
        default_factory=dict,
        description="Optional. absolute path in the image -> artifact name, or {artifact|source, "
        "path, mode, unpack}, or a list of those laid out at that path in order",
    )
    context: str | None = Field(
        default=None, description="docker backend: the build context source"
    )
    dockerfile: fc.DockerfilePath = Field(
        default="Dockerfile", description="docker backend: path in the context"
    )
    buildArgs: dict[str, str] = Field(
        default_factory=dict, description="docker backend: build args"
    )
    entrypoint: list[str] = Field(default_factory=list)
    cmd: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None
    workdir: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    revisionSource: str | None = Field(
        default=None,
        description="Optional. source whose pinned revision fills org.opencontainers.image.revision/source",
    )
    version: str | None = Field(
        default=None, description="Optional. org.opencontainers.image.version"
    )
    compression: Literal["gzip", "zstd"] = "gzip"

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = []
        if isinstance(self.base, ImageBase):
            refs.append((("base", "rootfs"), "artifact", self.base.rootfs))
        elif self.base != "scratch":
            refs.append((("base",), "source", self.base))
        if self.context is not None:
            refs.append((("context",), "source", self.context))
        if self.revisionSource is not None:
            refs.append((("revisionSource",), "source", self.revisionSource))
        return refs + file_refs(self.files)

    @model_validator(mode="after")
    def _backend_fields(self) -> ContainerImageArtifact:
        if self.backend == "docker" and self.context is None:
            raise ValueError("backend docker needs a context source")
        if self.backend == "daemonless" and self.context is not None:
            raise ValueError("context is for backend docker; use files for the daemonless backend")
        return self
