"""The ``node-image`` artifact model: what a recipe says about a bootable node disk image."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

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


#: A SPIFFE trust domain name (SPIFFE-ID spec, section 2.1): lower-case letters, digits, dots,
#: dashes and underscores.
TRUST_DOMAIN_PATTERN = r"^[a-z0-9._-]{1,255}$"


class SpireAgentSettings(Strict):
    """The SPIRE agent a node image carries (``spireAgent``): the binary, a systemd unit and
    ``/etc/spire/agent/agent.conf``. What is per node or per cluster (the server's address and
    port, a join token, the trust bundle, and the trust domain unless it is given here) is not in
    the image: the node's cloud-init user-data writes ``/etc/spire/agent/agent.env`` and
    ``/etc/spire/agent/bundle.pem``, and the agent runs with ``-expandEnv`` on its environment."""

    binary: str | ImageFile = Field(
        description="Required. spire-agent: an artifact, or {source, path} (the release "
        "archive's member, e.g. spire-1.15.3/bin/spire-agent)"
    )
    trustDomain: str | None = Field(
        default=None,
        pattern=TRUST_DOMAIN_PATTERN,
        description="Optional. the SPIFFE trust domain (e.g. example.org); default: the node's "
        "SPIRE_TRUST_DOMAIN from agent.env",
    )
    nodeAttestor: Literal["join_token", "tpm_devid", "x509pop"] = Field(
        default="join_token",
        description="Optional. join_token (SPIRE_JOIN_TOKEN from agent.env), tpm_devid (an "
        "LDevID provisioned into the TPM, its files under /etc/spire/agent/devid.*) or x509pop "
        "(a node certificate and key at /etc/spire/agent/node.crt.pem, node.key.pem)",
    )
    config: ImageFile | None = Field(
        default=None,
        description="Optional. {source, path}: a Jinja2 template of agent.conf replacing "
        "nvkr's (it is given trustDomain, nodeAttestor, paths, arch, gpu, kubernetes)",
    )

    @model_validator(mode="after")
    def _config_is_a_source(self) -> SpireAgentSettings:
        if self.config is not None and self.config.source is None:
            raise ValueError("config is a template from a source: {source, path}")
        return self


class SecureBootSettings(Strict):
    """Secure Boot with the owner's key: UEFI boots Debian's Microsoft-signed shim from the
    removable path, shim the owner-signed UKI (``uki``), whose kernel loads the owner-signed
    modules (``modules``) once the owner's certificate is enrolled as a MOK."""

    uki: str | None = Field(
        default=None,
        description="Optional. a signed-uki artifact (of a uki of the image's rootfs): shim's "
        "second stage, \\EFI\\BOOT\\grubx64.efi (grubaa64.efi)",
    )
    modules: str | None = Field(
        default=None,
        description="Optional. a signed-modules artifact of the image's rootfs: its signed "
        "modules replace the unsigned ones in the tree",
    )

    @model_validator(mode="after")
    def _something(self) -> SecureBootSettings:
        if self.uki is None and self.modules is None:
            raise ValueError(
                "secureBoot names a signed-uki (uki), signed-modules (modules) or both"
            )
        return self


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
    spireAgent: SpireAgentSettings | None = Field(
        default=None,
        description="Optional. the SPIRE agent: binary, unit and agent.conf; its per-node "
        "settings come from cloud-init user-data",
    )
    secureBoot: SecureBootSettings | None = Field(
        default=None,
        description="Optional. Secure Boot with the owner's key: {modules: SIGNED-MODULES}",
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = [(("rootfs",), "artifact", self.rootfs)]
        if self.agent is not None:
            refs.append((("agent",), "artifact", self.agent))
        if self.kubePackages is not None:
            refs.append((("kubePackages",), "artifact", self.kubePackages))
        refs += file_refs(self.files)
        if self.secureBoot is not None:
            for field in ("uki", "modules"):
                if (name := getattr(self.secureBoot, field)) is not None:
                    refs.append((("secureBoot", field), "artifact", name))
        if self.spireAgent is not None:
            spire = self.spireAgent
            binary = (
                ImageFile(artifact=spire.binary) if isinstance(spire.binary, str) else spire.binary
            )
            where = ("spireAgent", "binary")
            if binary.artifact is not None:
                refs.append(((*where, "artifact"), "artifact", binary.artifact))
            elif binary.source is not None:
                refs.append(((*where, "source"), "source", binary.source))
            if spire.config is not None and spire.config.source is not None:
                refs.append((("spireAgent", "config", "source"), "source", spire.config.source))
        return refs
