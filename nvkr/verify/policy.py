"""Verification policy: what a consumer requires of a release set beyond its integrity.

``nvkr verify --policy FILE`` loads a YAML file with :func:`load_policy`; after the closure,
provenance and signatures have been checked, :func:`apply_policy` records every violation in the
report (each names the rule and the offending value; any makes ``nvkr verify`` exit 3)::

    allowedBuilderIds: [https://nvkr.dev/builders/nvkr]   # runDetails.builder.id of every statement
    requireProvenance: [binary, image, chart]              # kinds that must carry provenance
    requireSbom: [binary, image]                           # kinds that must carry an SPDX SBOM
    allowedSourcePrefixes: ["https://files.pythonhosted.org/"]  # every dependency uri
    minimumKeyBits: 128                                    # security strength of the --key keys
    attestations:                                          # rebuild attestations (VSAs) required
      minimum: 2                                           # PASSED ones, each by a distinct key
      keys: [rebuilder-a.pub, rebuilder-b.pub]             # trusted: paths (relative to this
                                                           # file), env://VAR, or inline PEM
      verifierIds: [https://nvkr.dev/verifiers/nvkr]       # optional: accepted verifier.id

Every field is optional; an omitted one checks nothing. ``minimumKeyBits`` is the security
strength in bits (NIST SP 800-57 Part 1, Table 2: ECDSA P-256 and Ed25519 128, P-384 192, P-521
256), which compares across algorithms where key sizes do not; setting it requires signatures
verified with ``--key``. ``allowedSourcePrefixes`` applies to dependencies with a ``uri``: this
repository's own directories (path sources) are named by digest only. An SBOM is a manifest with
``artifactType: application/spdx+json`` (or such a layer) whose ``subject`` is the artifact (for
an image: its index or one of its manifests). ``attestations`` is checked apart from the other
rules, once the run's own attestation is written: :mod:`nvkr.verify.gate` counts the
verification summary attestations kept beside the layout or attached to the REF
(:mod:`nvkr.verify.attestations`); :func:`load_policy` resolves its relative key paths against
the policy file's directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nvkr.bounds import read_limited
from nvkr.bounds.yamldata import load
from nvkr.errors import UsageError
from nvkr.releaseset import KINDS
from nvkr.verify.report import VerifyReport


class AttestationRule(BaseModel):
    """``attestations:`` of a policy: at least ``minimum`` PASSED rebuild attestations, each
    signed by a distinct one of ``keys`` (PEM file paths, ``env://VAR`` or inline PEM text),
    by a verifier in ``verifierIds`` when given."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    minimum: int = Field(ge=1)
    keys: tuple[str, ...] = Field(min_length=1)
    verifier_ids: tuple[str, ...] | None = Field(None, alias="verifierIds", min_length=1)


class Policy(BaseModel):
    """A verification policy (module docstring); unknown keys are rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    allowed_builder_ids: tuple[str, ...] | None = Field(None, alias="allowedBuilderIds")
    require_provenance: tuple[str, ...] = Field((), alias="requireProvenance")
    require_sbom: tuple[str, ...] = Field((), alias="requireSbom")
    allowed_source_prefixes: tuple[str, ...] | None = Field(None, alias="allowedSourcePrefixes")
    minimum_key_bits: int | None = Field(None, alias="minimumKeyBits", ge=1)
    attestations: AttestationRule | None = None

    @field_validator("require_provenance", "require_sbom")
    @classmethod
    def _known_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown kind {unknown[0]!r}; kinds are {', '.join(KINDS)}")
        return kinds


def load_policy(path: Path) -> Policy:
    """Read a policy YAML file.

    Raises:
        UsageError: the file is missing, not YAML, not a mapping, has an unknown key, or a field
            of the wrong type; the message names the file and the field.
    """
    try:
        doc: Any = load(read_limited(Path(path), "policy").decode("utf-8"), path)
    except OSError as e:
        raise UsageError(f"policy {path}: cannot read it: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise UsageError(
            f"policy {path}: not UTF-8 (byte {e.start})", hint="save the file as UTF-8"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise UsageError(f"policy {path}{at}: not valid YAML: {problem}") from e
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise UsageError(f"policy {path}: expected a mapping of rules, got {type(doc).__name__}")
    try:
        policy = Policy.model_validate(doc)
    except ValidationError as e:
        errors = e.errors()  # a misspelt key first: it is why a required one is missing
        err = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
        place = ".".join(str(p) for p in err["loc"]) or "(top)"
        raise UsageError(
            f"policy {path}: {place}: {err['msg']}",
            hint="rules: allowedBuilderIds, requireProvenance, requireSbom, "
            "allowedSourcePrefixes, minimumKeyBits, attestations {minimum, keys, verifierIds}",
        ) from e
    rule = policy.attestations
    if rule is None:
        return policy
    # a key path means the file beside the policy, wherever nvkr runs from
    keys = tuple(
        k if k.startswith(("env://", "-----BEGIN")) else str(Path(path).parent / k)
        for k in rule.keys
    )
    return policy.model_copy(update={"attestations": rule.model_copy(update={"keys": keys})})


def apply_policy(policy: Policy, report: VerifyReport, *, path: str | None = None) -> None:
    """Check ``report`` (a verified release set) against ``policy``; record each violation.

    Sets ``report.policy`` to ``{"path", "rules": {...the policy...}, "violations": n}``.
    """
    before = len(report.problems)

    def violate(rule: str, message: str, hint: str | None = None) -> None:
        report.fail("policy", f"policy {rule}: {message}", hint)

    for art in report.artifacts:
        what = f"artifact {art.name} ({art.kind}, {art.digest})"
        if art.kind in policy.require_provenance and art.provenance is None:
            violate(
                "requireProvenance", f"{what} has no provenance (kind {art.kind!r} requires it)"
            )
        if art.kind in policy.require_sbom and not art.sboms:
            violate("requireSbom", f"{what} has no SPDX SBOM (kind {art.kind!r} requires one)")
        if (
            policy.allowed_builder_ids is not None
            and art.provenance is not None
            and art.builder_id not in policy.allowed_builder_ids
        ):
            violate(
                "allowedBuilderIds",
                f"{what}: its provenance names builder {art.builder_id!r}, allowed: "
                + ", ".join(policy.allowed_builder_ids),
            )
        if policy.allowed_source_prefixes is not None:
            for dep in art.dependencies:
                uri = dep.get("uri")
                if isinstance(uri, str) and not uri.startswith(policy.allowed_source_prefixes):
                    violate(
                        "allowedSourcePrefixes",
                        f"{what}: dependency {dep.get('name')!r} comes from {uri}, allowed "
                        "prefixes: " + ", ".join(policy.allowed_source_prefixes),
                    )
    if policy.minimum_key_bits is not None:
        if not report.keys:
            violate(
                "minimumKeyBits",
                f"requires signatures verified with a key of at least {policy.minimum_key_bits} "
                "bits, and no --key was given",
                hint="pass the signer's public key with --key",
            )
        for key in report.keys:
            if key["securityBits"] < policy.minimum_key_bits:
                violate(
                    "minimumKeyBits",
                    f"key {key['keyid']} ({key['algorithm']}) has {key['securityBits']}-bit "
                    f"security, the policy requires {policy.minimum_key_bits}",
                )
    report.policy = {
        "path": path,
        "rules": policy.model_dump(mode="json", by_alias=True, exclude_none=True),
        "violations": len(report.problems) - before,
    }
