"""The ``signed-uki`` builder: a ``uki`` action's UKI signed with the owner's Secure Boot key.

``osslsigncode sign -certs CERT -key KEY -time EPOCH -h sha256``: an Authenticode signature whose
signing time is the recipe's epoch, so with an RSA key (PKCS#1 v1.5) the signed UKI is the same
bytes on every build by the key holder (sbsign and systemd-sbsign stamp the current time). Its
version is in the action key (2.5 and 2.9 encode the same signature differently). The signature
is checked against the owner's certificate before the result is stored. A separate action from
the UKI's: the unsigned UKI stays the same whoever builds it, and a rebuild without the key
compares it by its Authenticode digest.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    ResolvedSource,
)
from nvkr.builders.node_image.staging import primary_output
from nvkr.builders.owner_signing import (
    action_certificates,
    certificate_params,
    read_certificate,
    signing_problems,
)
from nvkr.builders.uki.artifact import SignedUkiArtifact
from nvkr.errors import BuildError
from nvkr.hosttools import package_version
from nvkr.recipe.matrix import Variant
from nvkr.run import pinned_env, run
from nvkr.secureboot.authenticode import attach_signatures, authenticode_digest, verify_pe
from nvkr.secureboot.owner import OwnerCertificate, has_owner_key, owner_key_for
from nvkr.secureboot.published import PublishedSignatures, published_signatures

if TYPE_CHECKING:
    from nvkr.action import Action

MEDIA_TYPE = "application/vnd.nvkr.uki.signed.v1+efi"
#: the role of the owner's certificate among the outputs (and the machine image's layers)
CERT_ROLE = "secure-boot-certificate"


def certificate_files(cert: OwnerCertificate) -> list[tuple[str, bytes, str]]:
    """The owner's certificate as a node enrolls it: DER (``mokutil --import``) and PEM (a BMC's
    Redfish ``SecureBootDatabases/db/Certificates``), with their media types."""
    return [
        ("secure-boot-owner.der", cert.der, "application/pkix-cert"),
        ("secure-boot-owner.pem", cert.pem, "application/x-pem-file"),
    ]


class SignedUkiBuilder(Builder[SignedUkiArtifact]):
    name = "signed-uki"
    version = "1"
    per_arch = True
    artifact_model = SignedUkiArtifact
    release_kind = ReleaseKind.INTERNAL

    def check(
        self, artifact_name: str, artifact: SignedUkiArtifact, variant: Variant
    ) -> list[Problem]:
        return signing_problems(
            artifact_name, "uki", artifact.uki, "uki", artifact.certificate, variant
        )

    def plan(
        self, artifact_name: str, artifact: SignedUkiArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        uki = refs.artifact(artifact.uki)
        cert = refs.source(artifact.certificate.source)
        purpose = "the signed-uki builder (Authenticode signatures)"
        return ActionSpec(
            params={
                "arch": uki.params.get("arch"),
                "uki": uki.key,
                "certificate": certificate_params(cert, artifact.certificate),
            },
            inputs={"certificate": cert.digest},
            tools={"osslsigncode": package_version("osslsigncode", purpose=purpose)},
            sources={"certificate": cert},
            deps=(uki.key,),
        )

    def owner_certificates(
        self, action: Action, source_path: Callable[[ResolvedSource], Path]
    ) -> list[OwnerCertificate]:
        return action_certificates(action, source_path)

    def run(self, ctx: ActionContext) -> None:
        params = ctx.action.params
        cert = read_certificate(ctx.input_path("certificate"), params)
        unsigned = primary_output(ctx, ctx.deps[str(params["uki"])], "UKI")
        out = ctx.workdir / "signed.efi"
        published = None if has_owner_key() else published_signatures()
        if published is not None:  # a rebuild without the key: the set's signature, checked
            out.write_bytes(_published(published, unsigned.read_bytes(), cert))
        else:
            key = owner_key_for(cert, ctx.action.ref)
            cert_file = ctx.workdir / "owner.pem"
            cert_file.write_bytes(cert.pem)
            with key.pem_file(ctx.workdir) as key_file:
                run(
                    ["osslsigncode", "sign", "-certs", cert_file, "-key", key_file,
                     "-time", str(ctx.action.epoch), "-h", "sha256", "-in", unsigned, "-out", out],
                    env=pinned_env(), log_file=ctx.log_file,
                )  # fmt: skip
        digest = check_signed(out.read_bytes(), cert, "the signed UKI")
        ctx.add_output(out, name=f"uki-{params['arch']}.signed.efi", media_type=MEDIA_TYPE)
        for name, data, media_type in certificate_files(cert):  # what a node enrolls
            (ctx.workdir / name).write_bytes(data)
            ctx.add_output(ctx.workdir / name, name=name, media_type=media_type, role=CERT_ROLE)
        ctx.metadata.update(
            {
                "certificate": {"digest": cert.digest, "subject": cert.subject},
                "authenticode": digest,
            }
        )


def check_signed(data: bytes, cert: OwnerCertificate, what: str) -> str:
    """The Authenticode digest (``sha256:<hex>``) of ``data``, whose signature must verify with
    the owner's certificate ``cert`` as the only trust anchor.

    Raises:
        IntegrityError: unsigned, malformed, changed after signing or signed by another key.
    """
    checked = verify_pe(data, [cert.cert], what)
    return f"{checked.algorithm}:{checked.image_digest.hex()}"


def _published(published: PublishedSignatures, unsigned: bytes, cert: OwnerCertificate) -> bytes:
    """The rebuilt ``unsigned`` UKI with the signatures of the release set's UKI of the same
    Authenticode digest attached: byte for byte what signing gave the key holder."""
    digest = "sha256:" + authenticode_digest(unsigned).hex()
    found = published.signed_pe(digest)
    if found is None:
        raise BuildError(
            f"no machine image of the release set holds a signed UKI of Authenticode digest "
            f"{digest} (the rebuilt one's): the UKI is not reproducible, or the image has none",
            hint="without the owner's key a rebuild takes each signature from the release set; "
            "with --secure-boot-key it signs again",
        )
    signed, where = found
    attached = attach_signatures(unsigned, signed, f"the UKI from {where}")
    check_signed(attached, cert, f"the UKI from {where}")
    published.record(where.split(":", 1)[-1], where, cert.subject, cert.digest)
    return attached
