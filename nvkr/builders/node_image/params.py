"""The ``node-image`` action's params, typed: what :meth:`NodeImageBuilder.plan` fixes and
:meth:`NodeImageBuilder.run` and :func:`~nvkr.builders.node_image.staging.stage` read. Their JSON
(:meth:`NodeImageParams.to_json`, the keys they always had) enters the action key."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

#: The arches a node image's disk layout knows (a BIOS boot partition on amd64 only).
DiskArch = Literal["amd64", "arm64"]

#: :data:`nvkr.disk.qcow2.Compression`, spelt out so planning does not import the disk code.
Compression = Literal["none", "zlib", "zstd"]


class _Params(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class ArtifactFile(_Params):
    """A file of the tree that is another artifact's primary output (``action``: its key);
    ``mode`` as the recipe wrote it (None: 0755)."""

    path: str
    mode: str | None
    action: str


class SourceFile(_Params):
    """A file of the tree from a source (``input``: its role), or a ``member`` of its tar;
    ``mode`` as the recipe wrote it (None: 0644)."""

    path: str
    mode: str | None
    input: str
    member: str | None


class SpireAgentParams(_Params):
    """``spireAgent``: the binary (staged as /usr/bin/spire-agent), the ``trustDomain`` (None:
    the node's SPIRE_TRUST_DOMAIN), the ``nodeAttestor`` and the recipe's agent.conf template
    (``config``; None: the builder's)."""

    binary: ArtifactFile | SourceFile
    trustDomain: str | None
    nodeAttestor: str
    config: SourceFile | None


class NodeImageParams(_Params):
    """The variant (``arch``, ``gpu``, ``kubernetes`` line and exact ``kubernetesVersion``), the
    image's settings (``nvidiaRuntime``, ``kubelet``, ``sizeBytes``, ``kernelArgs``, ``format``,
    ``compression``, ``backend``, ``bootTest``, ``sandboxImage``), the action keys it stages
    (``deps``: rootfs, agent, kubePackages), its ``files`` and the SPIRE agent
    (``spireAgent``)."""

    arch: DiskArch
    gpu: str
    kubernetes: str
    kubernetesVersion: str
    nvidiaRuntime: bool | None
    kubelet: dict[str, Any]
    sizeBytes: int
    kernelArgs: list[str]
    format: str
    compression: Compression = "none"
    backend: str
    bootTest: bool
    deps: dict[str, str]
    files: list[ArtifactFile | SourceFile]
    sandboxImage: str
    spireAgent: SpireAgentParams | None = None
    #: with a Secure Boot UKI: the hex its disk identifiers derive from (the UKI action's key)
    diskSeed: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The params as the action holds them: ``compression`` only when the image is
        compressed and ``spireAgent`` only when it is set, so an image without them keeps the
        action key it had before the fields."""
        exclude = {"compression"} if self.compression == "none" else set()
        if self.spireAgent is None:
            exclude.add("spireAgent")
        if self.diskSeed is None:
            exclude.add("diskSeed")
        return self.model_dump(exclude=exclude)
