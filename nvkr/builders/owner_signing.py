"""What the builders that sign with the owner's Secure Boot key share (``signed-modules``,
``signed-uki``): the recipe checks of the artifact they sign and of the certificate, and the
certificate read from its source at plan and at run time."""

from __future__ import annotations

import os
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nvkr.builders.api import Problem, ResolvedSource, a_kind, builder_of, source_kind_of
from nvkr.builders.signed_modules.artifact import CertificateRef
from nvkr.errors import UsageError
from nvkr.jsondoc import JsonObject
from nvkr.recipe.matrix import Variant
from nvkr.secureboot.owner import OWNER_KEY_HINT, OwnerCertificate, parse_certificate

if TYPE_CHECKING:
    from nvkr.action import Action


def signing_problems(
    artifact_name: str,
    field: str,
    name: str,
    wanted: str,
    certificate: CertificateRef,
    variant: Variant,
) -> list[Problem]:
    """``field`` names an artifact of builder ``wanted``, and a path source's certificate names
    its file."""
    problems: list[Problem] = []
    builder = builder_of(variant, name)
    if builder is not None and builder != wanted:
        problems.append(
            (
                ("artifacts", artifact_name, field),
                f"{name!r} is {a_kind(builder)} artifact, not {a_kind(wanted)}",
                None,
            )
        )
    if source_kind_of(variant, certificate.source) == "path" and certificate.path is None:
        problems.append(
            (
                ("artifacts", artifact_name, "certificate"),
                f"{certificate.source!r} is a path source (a directory): name the certificate's "
                "file in it",
                f"certificate: {{source: {certificate.source}, path: owner.crt}}",
            )
        )
    elif source_kind_of(variant, certificate.source) == "path":
        problems += _path_certificate_problems(artifact_name, certificate, variant)
    return problems


def _path_certificate_problems(
    artifact_name: str, certificate: CertificateRef, variant: Variant
) -> list[Problem]:
    """The certificate file of a path source, read as the signing action will read it (a
    directory of the repository: reading it fetches nothing), so ``validate`` and ``plan``
    name a missing or unusable certificate before any build."""
    source = variant.recipe.sources[certificate.source]
    base = variant.source_dirs.get(certificate.source)
    if base is None:
        return []
    file = Path(
        os.path.normpath(base / str(getattr(source, "path", "")) / str(certificate.path).strip("/"))
    )
    field = ("artifacts", artifact_name, "certificate", "path")
    try:
        parse_certificate(file.read_bytes(), str(file))
    except FileNotFoundError:
        return [(field, f"{file}: no such file (the owner's certificate, PEM or DER)",
                 f"put the owner's certificate there (source {certificate.source}'s directory), "
                 f"or name its file in certificate.path; to {OWNER_KEY_HINT}")]  # fmt: skip
    except OSError as e:
        return [(field, f"{file}: cannot read the owner's certificate: {e.strerror}", None)]
    except UsageError as e:
        return [(field, e.message, e.hint)]
    return []


def certificate_params(cert: ResolvedSource, ref: CertificateRef) -> JsonObject:
    """How an action names its certificate in its params (the digest is its input's)."""
    return {"source": cert.name, "path": ref.path or ""}


def read_certificate(blob: Path, params: JsonObject) -> OwnerCertificate:
    """The owner's certificate a signing action names (``params``), from its source's blob: the
    blob itself, or a file of a path source's tar.

    Raises:
        UsageError: the file is not in the source, or not a usable certificate.
    """
    spec = params["certificate"]
    assert isinstance(spec, dict)
    member = str(spec.get("path") or "")
    where = f"source {spec['source']}" + (f" file {member}" if member else "")
    if not member:
        return parse_certificate(blob.read_bytes(), where)
    try:
        with tarfile.open(blob) as tf:
            f = tf.extractfile(member.strip("/"))
            if f is None:
                raise KeyError(member)
            return parse_certificate(f.read(), where)
    except (KeyError, tarfile.ReadError):
        raise UsageError(
            f"the owner's certificate: source {spec['source']} (a directory) holds no file "
            f"{member!r}",
            hint=f"put the owner's certificate (PEM or DER) there as {member}, or name its file "
            "in the signing artifact's certificate.path",
        ) from None


def action_certificates(
    action: Action, source_path: Callable[[ResolvedSource], Path]
) -> list[OwnerCertificate]:
    """:meth:`nvkr.builders.api.Builder.owner_certificates` of a signing action."""
    return [read_certificate(source_path(action.sources["certificate"]), action.params)]
