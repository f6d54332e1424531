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

import re
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
    a_kind,
    builder_of,
    source_kind_of,
)
from nvkr.builders.node_image.staging import primary_output
from nvkr.builders.signed_modules.builder import read_certificate
from nvkr.builders.uki.artifact import SignedUkiArtifact
from nvkr.errors import IntegrityError
from nvkr.hosttools import package_version
from nvkr.recipe.matrix import Variant
from nvkr.run import pinned_env, run
from nvkr.secureboot.owner import OwnerCertificate, owner_key_for

if TYPE_CHECKING:
    from nvkr.action import Action

MEDIA_TYPE = "application/vnd.nvkr.uki.signed.v1+efi"


class SignedUkiBuilder(Builder[SignedUkiArtifact]):
    name = "signed-uki"
    version = "1"
    per_arch = True
    artifact_model = SignedUkiArtifact
    release_kind = ReleaseKind.INTERNAL

    def check(
        self, artifact_name: str, artifact: SignedUkiArtifact, variant: Variant
    ) -> list[Problem]:
        problems: list[Problem] = []
        builder = builder_of(variant, artifact.uki)
        if builder is not None and builder != "uki":
            problems.append(
                (
                    ("artifacts", artifact_name, "uki"),
                    f"{artifact.uki!r} is {a_kind(builder)} artifact, not a uki",
                    None,
                )
            )
        kind = source_kind_of(variant, artifact.certificate.source)
        if kind == "path" and artifact.certificate.path is None:
            problems.append(
                (
                    ("artifacts", artifact_name, "certificate"),
                    f"{artifact.certificate.source!r} is a path source (a directory): name the "
                    "certificate's file in it",
                    f"certificate: {{source: {artifact.certificate.source}, path: owner.crt}}",
                )
            )
        return problems

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
                "certificate": {"source": cert.name, "path": artifact.certificate.path or ""},
            },
            inputs={"certificate": cert.digest},
            tools={"osslsigncode": package_version("osslsigncode", purpose=purpose)},
            sources={"certificate": cert},
            deps=(uki.key,),
        )

    def owner_certificates(
        self, action: Action, source_path: Callable[[ResolvedSource], Path]
    ) -> list[OwnerCertificate]:
        return [read_certificate(source_path(action.sources["certificate"]), action.params)]

    def run(self, ctx: ActionContext) -> None:
        params = ctx.action.params
        cert = read_certificate(ctx.input_path("certificate"), params)
        unsigned = primary_output(ctx, ctx.deps[str(params["uki"])], "UKI")
        key = owner_key_for(cert, ctx.action.ref)
        cert_file = ctx.workdir / "owner.pem"
        cert_file.write_bytes(cert.pem)
        out = ctx.workdir / "signed.efi"
        with key.pem_file(ctx.workdir) as key_file:
            run(
                ["osslsigncode", "sign", "-certs", cert_file, "-key", key_file,
                 "-time", str(ctx.action.epoch), "-h", "sha256", "-in", unsigned, "-out", out],
                env=pinned_env(), log_file=ctx.log_file,
            )  # fmt: skip
        check_signed(out, cert, ctx.log_file)
        ctx.add_output(out, name=f"uki-{params['arch']}.signed.efi", media_type=MEDIA_TYPE)
        ctx.metadata.update({"certificate": {"digest": cert.digest, "subject": cert.subject}})


def check_signed(path: Path, cert: OwnerCertificate, log_file: Path | None = None) -> None:
    """Raises IntegrityError unless ``path`` carries a valid Authenticode signature by
    ``cert`` (``osslsigncode verify``, the certificate as the only trust anchor)."""
    anchor = path.with_name(path.name + ".anchor.pem")
    anchor.write_bytes(cert.pem)
    try:
        done = run(
            ["osslsigncode", "verify", "-in", path, "-CAfile", anchor],
            env=pinned_env(), check=False,
        )  # fmt: skip
    finally:
        anchor.unlink()
    said = (done.stdout or b"").decode(errors="replace") + (done.stderr or b"").decode(
        errors="replace"
    )
    if log_file is not None:
        with open(log_file, "a", encoding="utf-8") as f:
            f.write(said)
    if done.returncode != 0 or not re.search(r"Signature verification: ok", said):
        raise IntegrityError(
            f"{path.name}: the Authenticode signature does not verify with {cert.subject}",
            hint="osslsigncode verify said: " + " | ".join(said.strip().splitlines()[-3:]),
        )
