"""The ``signed-modules`` artifact model: the kernel modules of a root filesystem that no key the
kernel trusts has signed (DKMS's), signed with the owner's Secure Boot key."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import ArtifactModel, Strict


class CertificateRef(Strict):
    """The owner's X.509 certificate (PEM or DER): a source, or a file inside a path source."""

    source: str = Field(description="Required. the source holding the certificate")
    path: fc.InnerPath | None = Field(
        default=None, description="Optional. the certificate's file inside a path source"
    )


class SignedModulesArtifact(ArtifactModel):
    """The unsigned kernel modules of ``rootfs`` (those DKMS built), each signed with the
    owner's key by the tree's own ``sign-file`` and compressed again as the kernel wants them.

    The output is a tar of the signed modules at their paths in the tree, which a node image
    with ``secureBoot.modules`` lays over its root filesystem. The private key is not part of the
    recipe: ``nvkr build --secure-boot-key``. The certificate's digest is part of the action key.
    """

    builder: Literal["signed-modules"]
    rootfs: str = Field(description="Required. the rootfs artifact whose modules are signed")
    certificate: CertificateRef = Field(
        description="Required. the owner's certificate: {source: NAME} or {source: NAME, path: FILE}"
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        return [
            (("rootfs",), "artifact", self.rootfs),
            (("certificate", "source"), "source", self.certificate.source),
        ]
