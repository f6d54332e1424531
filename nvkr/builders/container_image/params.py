"""The ``container-image`` action's params, typed: what the plans of the two backends fix
(:func:`~nvkr.builders.container_image.daemonless.plan_daemonless`,
:func:`~nvkr.builders.container_image.docker_backend.plan`) and their runs and
:func:`~nvkr.builders.container_image.layout.assemble` read.

Their JSON (``to_json()``, the keys they always had) enters the action key. ``backend`` tells
the two shapes apart (:func:`image_params`). A daemonless image's ``files`` come in four shapes,
each its own model: an artifact's primary output, a file source whole, a tree source (or a part
of it), an archive unpacked; only the last has an ``unpack`` key, and ``mode`` is null where the
run keeps the source's own modes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Params(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class ArtifactFile(_Params):
    """Another artifact's primary output at ``path`` (relative to ``/``): its recipe name
    ``artifact``, its ``action`` key and the file's ``mode`` (``"0755"``-style)."""

    path: str
    artifact: str
    action: str
    mode: str


class SourceFile(_Params):
    """A file source (url, pypi), whole, at ``path``: the ``source`` name, its ``input`` role
    and the file's ``mode``."""

    path: str
    source: str
    input: str
    tree: Literal[False]
    select: Literal[""]
    mode: str


class TreeFile(_Params):
    """A tree source (path, git), or the file or directory ``select`` names in it (``""``: the
    whole tree), at ``path`` (``""``: the image's root); ``mode`` for every file of it, or None
    for the modes its tar holds."""

    path: str
    source: str
    input: str
    tree: Literal[True]
    select: str
    mode: str | None


class UnpackedFile(_Params):
    """The members of a zip (a wheel) or tar file source laid out under ``path``; ``mode`` as
    the recipe wrote it (the run takes each member's mode from the archive)."""

    path: str
    source: str
    input: str
    tree: Literal[False]
    unpack: Literal[True]
    select: Literal[""]
    mode: str | None


#: One entry of a daemonless image's ``files``.
FileParams = ArtifactFile | SourceFile | TreeFile | UnpackedFile


class RootfsBase(_Params):
    """A base made by the recipe: the ``rootfs`` artifact's name and its ``action`` key."""

    rootfs: str
    action: str


class _Image(_Params):
    """What both backends write: the OCI ``platform`` (``{"os": "linux", "architecture"[,
    "variant"]}``), the image config's execution fields (``entrypoint``, ``cmd``, ``env``,
    ``user``, ``workdir``, ``labels``), the layer ``compression`` and the manifest's
    ``annotations`` known at plan time."""

    platform: dict[str, str]
    entrypoint: list[str]
    cmd: list[str]
    env: dict[str, str]
    user: str | None
    workdir: str | None
    labels: dict[str, str]
    compression: Literal["gzip", "zstd"]
    annotations: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        """The params as the action holds them."""
        return self.model_dump()


class DaemonlessParams(_Image):
    """A daemonless image: its ``base`` (``"scratch"``, an oci source's name, or a
    :class:`RootfsBase`) and its ``files``, sorted by destination."""

    backend: Literal["daemonless"]
    base: str | RootfsBase
    files: list[FileParams]


class DockerParams(_Image):
    """A Dockerfile built by a daemon: the ``dockerfile``'s path in the context (relative,
    normalised) and the ``buildArgs``."""

    backend: Literal["docker"]
    dockerfile: str
    buildArgs: dict[str, str]


#: A container-image action's params, either backend.
ContainerImageParams = Annotated[DaemonlessParams | DockerParams, Field(discriminator="backend")]
_ADAPTER: TypeAdapter[DaemonlessParams | DockerParams] = TypeAdapter(ContainerImageParams)


def image_params(params: Mapping[str, Any]) -> DaemonlessParams | DockerParams:
    """A container-image action's params read back as the model of their ``backend``.

    Raises:
        pydantic.ValidationError: params no plan of this builder writes.
    """
    return _ADAPTER.validate_python(params)
