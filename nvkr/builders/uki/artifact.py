"""The ``uki`` and ``signed-uki`` artifact models: a Unified Kernel Image of a root filesystem's
kernel, and the same UKI signed with the owner's Secure Boot key."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.builders.signed_modules.artifact import CertificateRef
from nvkr.recipe.base import ArtifactModel


class UkiArtifact(ArtifactModel):
    """A UKI (systemd-stub, the kernel, its initrd, the command line, os-release) made by the
    tree's own ``ukify`` from the tree's files, unsigned. Its command line names the root file
    system of the node image that boots it (the image derives its disk identifiers from this
    action's key), so a node image and its UKI always agree."""

    builder: Literal["uki"]
    rootfs: str = Field(
        description="Required. the rootfs artifact whose kernel and initrd it holds"
    )
    kernelArgs: list[str] = Field(
        default_factory=list,
        description="Optional. extra kernel command-line arguments (the node image's "
        "kernelArgs when it boots this UKI)",
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        return [(("rootfs",), "artifact", self.rootfs)]


class SignedUkiArtifact(ArtifactModel):
    """A ``uki`` artifact signed with the owner's Secure Boot key (Authenticode, by
    ``osslsigncode`` with the recipe's epoch as the signing time: the same bytes on every build
    by the key holder)."""

    builder: Literal["signed-uki"]
    uki: str = Field(description="Required. the uki artifact to sign")
    certificate: CertificateRef = Field(
        description="Required. the owner's certificate: {source: NAME} or {source: NAME, path: FILE}"
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        return [
            (("uki",), "artifact", self.uki),
            (("certificate", "source"), "source", self.certificate.source),
        ]
