"""The ``kube-packages`` artifact model: what a recipe says about the Kubernetes node binaries."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import ArtifactModel, Name, Strict


class KubeBinary(Strict):
    """One Kubernetes node binary: a url source holding the binary, or a member of its archive."""

    source: str = Field(description="Required. the source (a binary, or a .tar.gz holding it)")
    member: fc.ArchiveMember | None = Field(
        default=None, description="Optional. path of the binary inside a .tar/.tar.gz source"
    )


class KubePackagesArtifact(ArtifactModel):
    """Kubernetes node binaries (kubelet, kubeadm, kubectl, crictl, ...) staged under ``prefix``.

    The output is a deterministic tar of ``<prefix>/<name>`` files (mode 0755) that the
    ``node-image`` builder unpacks into the root filesystem.
    """

    builder: Literal["kube-packages"]
    binaries: dict[Name, str | KubeBinary] = Field(
        min_length=1, description="Required. file name -> source name, or {source, member}"
    )
    prefix: fc.ImagePath = Field(default="/usr/bin", description="Optional. directory in the image")

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = []
        for name, entry in self.binaries.items():
            if isinstance(entry, str):
                refs.append((("binaries", name), "source", entry))
            else:
                refs.append((("binaries", name, "source"), "source", entry.source))
        return refs
