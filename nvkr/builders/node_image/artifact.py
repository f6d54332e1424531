"""The ``node-image`` artifact model: what a recipe says about a bootable node disk image."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import ArtifactModel, Strict
from nvkr.recipe.imagefiles import ImageFile, file_refs
from nvkr.recipe.versionfields import ExactRelease


class KubeletSettings(Strict):
    """Kubelet settings the node image writes into its KubeletConfiguration and drop-in."""

    maxPods: int = Field(
        default=110, ge=1, le=2**31 - 1, description="Optional. maxPods (an int32 for kubelet)"
    )
    extraLabels: dict[str, str] = Field(
        default_factory=dict, description="Optional. node labels added to the agent's labels"
    )
    extraArgs: list[str] = Field(
        default_factory=list, description="Optional. extra kubelet flags in the drop-in"
    )


class NodeImageArtifact(ArtifactModel):
    """A bootable disk image (QCOW2) from a ``rootfs`` plus staged agent, runtime config and
    Kubernetes binaries (builder ``node-image``).

    Partitions (GPT): BIOS boot (amd64), EFI system partition, ext4 root; GRUB boots it by
    itself; the root partition grows to the disk on first boot.
    """

    builder: Literal["node-image"]
    backend: Literal["native", "diskimage-builder"] = Field(
        default="native",
        description="Optional. native (mkfs.ext4 -d, sfdisk, qemu-img) or diskimage-builder",
    )
    rootfs: str = Field(description="Required. the rootfs artifact")
    agent: str | None = Field(
        default=None, description="Optional. go-binary artifact staged as /usr/bin/node-agent"
    )
    kubePackages: str | None = Field(
        default=None, description="Optional. kube-packages artifact staged into the tree"
    )
    kubernetesVersion: ExactRelease = Field(
        description='Required. exact Kubernetes release MAJOR.MINOR.PATCH, e.g. "1.36.3" '
        "(a leading v is dropped)"
    )
    files: dict[fc.ImagePath, str | ImageFile] = Field(
        default_factory=dict,
        description="Optional. absolute path -> artifact name, or {artifact|source, path, mode}",
    )
    nvidiaRuntime: bool | None = Field(
        default=None,
        description="Optional. containerd's nvidia runtime handler as the default runtime; "
        "default: when the rootfs holds nvidia-container-toolkit",
    )
    kubelet: KubeletSettings = Field(default_factory=KubeletSettings)
    size: fc.DiskSize = Field(
        default="4GiB",
        pattern=r"^[0-9]+(MiB|GiB)$",
        description='Optional. virtual disk size, e.g. "4GiB" or "2048MiB"; at most 16777215MiB '
        "(16 TiB less 1 MiB)",
    )
    kernelArgs: list[str] = Field(
        default_factory=list, description="Optional. extra kernel command-line arguments"
    )
    format: Literal["qcow2"] = "qcow2"
    compression: Literal["none", "zlib", "zstd"] = Field(
        default="none",
        description="Optional. compressed QCOW2 clusters: none, zlib (every qemu-img reads it: "
        "older provisioning agents and ironic-python-agent ramdisks), or zstd (smaller and faster "
        "to build; needs qemu-img 5.1 or newer built with zstd)",
    )
    bootTest: bool = Field(
        default=False, description="Optional. boot the image in QEMU after building it"
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = [(("rootfs",), "artifact", self.rootfs)]
        if self.agent is not None:
            refs.append((("agent",), "artifact", self.agent))
        if self.kubePackages is not None:
            refs.append((("kubePackages",), "artifact", self.kubePackages))
        return refs + file_refs(self.files)
