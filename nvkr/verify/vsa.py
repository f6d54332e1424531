"""SLSA Verification Summary Attestations (VSA v1) of a rebuild: the statement, made and read.

``nvkr verify --rebuild --attest KEY`` states what the rebuild found as an in-toto Statement v1
whose predicate is a SLSA VSA v1 (https://slsa.dev/spec/v1.0/verification_summary, predicateType
:data:`VSA_PREDICATE`), signs it into a DSSE envelope (:mod:`nvkr.verify.attest`) and stores it
beside the release set or as its referrer (:mod:`nvkr.verify.attestations`); ``nvkr verify
--policy`` counts such attestations (:mod:`nvkr.verify.gate`) after :func:`read_summary` has
checked each one's shape. The statement::

    subject    the release set index ({"name": <set>, "digest", "mediaType"}), then every
               artifact as its metadata lists it ("<artifact> (<variant>)", its manifest or
               index digest): the build record's subjects (:func:`nvkr.releaseset.record.record_subjects`)
    predicate  verifier            {"id": VERIFIER_ID, "version": {"nvkr": <version>}}
               timeVerified        RFC 3339 UTC, to the second
               resourceUri         oci://REGISTRY/REPO@sha256:<index> (verify REF), or
                                   file://<absolute layout path> (verify DIR)
               policy              {"uri": file://<policy>, "digest": {"sha256"}} with --policy,
                                   else {"uri": REBUILD_POLICY}: rebuild from the recipe and
                                   lockfile the metadata names, every artifact and the index
                                   bit-identical
               inputAttestations   the set's provenance statements: {"name", "uri", "digest"
                                   (of the statement's bytes), "mediaType"}
               verificationResult  PASSED when every check of the run passed (closure,
                                   provenance, signatures, build record, the policy's other
                                   rules, the rebuild identical), else FAILED
               verifiedLevels      [REBUILD_IDENTICAL] when PASSED, [FAILED] when not
               slsaVersion         "1.0"

A rebuild is no SLSA level, so the level is nvkr's own (the VSA lets a verifier name levels of
its own, never starting with ``SLSA_``); ``dependencyLevels`` is left out: nvkr does not verify
its sources' own provenance. ``verifier.version`` is a field SLSA VSA v1.1 added (a map, like
provenance's ``builder.version``); consumers of v1.0 ignore it, as the parsing rules require.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nvkr import __version__
from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError
from nvkr.jsondoc import json_kind
from nvkr.provenance import STATEMENT_TYPE, parse_timestamp, resource_problems, validate_statement
from nvkr.releaseset.record import record_subjects
from nvkr.verify.documents import sha256_subjects

#: predicateType of a Verification Summary Attestation (SLSA VSA v1).
VSA_PREDICATE: Final = "https://slsa.dev/verification_summary/v1"
#: verifier.id: nvkr's rebuild verification; its version goes in verifier.version.
VERIFIER_ID: Final = "https://nvkr.dev/verifiers/nvkr"
#: policy.uri when no --policy file was given: the rebuild check itself.
REBUILD_POLICY: Final = "https://nvkr.dev/policies/rebuild/v1"
#: The level a PASSED rebuild verifies: every artifact and the index rebuilt bit-identical.
REBUILD_IDENTICAL: Final = "NVKR_REBUILD_IDENTICAL"
PASSED: Final = "PASSED"
FAILED: Final = "FAILED"
RESULTS: Final = (PASSED, FAILED)
SLSA_VERSION: Final = "1.0"

_SLSA_VERSION_RE = re.compile(r"^\d+\.\d+$")


class MalformedSummary(ValueError):
    """A statement that is no well-formed VSA v1; the message lists every problem with its JSON
    path (``$.predicate.verificationResult is 'OK', expected PASSED or FAILED``)."""


@dataclass(frozen=True)
class Summary:
    """What one VSA says, its shape checked (:func:`read_summary`): the ``subjects`` it names
    (``sha256:<hex>``), ``verifier_id``, ``verifier_version`` (``{"nvkr": "0.1.0"}``, may be
    empty), ``time_verified`` (RFC 3339), ``resource_uri``, ``policy_uri``, ``result``
    (``PASSED`` or ``FAILED``) and ``levels`` (verifiedLevels)."""

    subjects: tuple[str, ...]
    verifier_id: str
    verifier_version: Mapping[str, str]
    time_verified: str
    resource_uri: str
    policy_uri: str
    result: str
    levels: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "verifier": self.verifier_id,
            "verifierVersion": dict(self.verifier_version),
            "timeVerified": self.time_verified,
            "resourceUri": self.resource_uri,
            "policy": self.policy_uri,
            "result": self.result,
            "levels": list(self.levels),
        }


def vsa_statement(
    *,
    metadata: Mapping[str, Any],
    index_digest: str,
    passed: bool,
    resource_uri: str,
    policy: Mapping[str, Any],
    input_attestations: Sequence[Mapping[str, Any]],
    time_verified: str,
) -> dict[str, Any]:
    """The VSA of one verification of a release set (shape in the module docstring).

    Args:
        metadata: the set's metadata JSON (its name and artifacts name the subjects).
        index_digest: ``sha256:<hex>`` of the release set index.
        passed: the verification's result.
        resource_uri: what was verified (``oci://...`` or ``file://...``).
        policy: the policy ResourceDescriptor (``{"uri"[, "digest"]}``).
        input_attestations: ResourceDescriptors of the attestations the verification read.
        time_verified: RFC 3339 UTC.
    Returns:
        the statement, checked by :func:`read_summary`.
    Raises:
        MalformedSummary: an argument makes it malformed (a bad time, an empty uri).
        ValueError: a digest in ``metadata`` is malformed.
    """
    predicate: dict[str, Any] = {
        "verifier": {"id": VERIFIER_ID, "version": {"nvkr": __version__}},
        "timeVerified": time_verified,
        "resourceUri": resource_uri,
        "policy": dict(policy),
        "verificationResult": PASSED if passed else FAILED,
        "verifiedLevels": [REBUILD_IDENTICAL if passed else FAILED],
        "slsaVersion": SLSA_VERSION,
    }
    if input_attestations:
        predicate["inputAttestations"] = [dict(a) for a in input_attestations]
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": record_subjects(metadata, index_digest),
        "predicateType": VSA_PREDICATE,
        "predicate": predicate,
    }
    read_summary(statement)
    return statement


def statement_payload(statement: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes of a VSA statement: what the DSSE envelope signs."""
    return canonical_json(statement)


def read_summary(statement: Any) -> Summary:
    """Check that ``statement`` is an in-toto Statement v1 carrying a well-formed VSA v1
    predicate (the published fields' types and required fields, module docstring) and return
    what it says.

    Raises:
        MalformedSummary: naming every problem with its JSON path.
    """
    try:
        validate_statement(statement)
    except IntegrityError as e:
        raise MalformedSummary(e.message) from None
    if statement.get("predicateType") != VSA_PREDICATE:
        raise MalformedSummary(
            f"$.predicateType is {statement.get('predicateType')!r}, expected {VSA_PREDICATE}"
        )
    predicate = statement["predicate"]
    problems = predicate_problems(predicate)
    if problems:
        raise MalformedSummary("malformed VSA predicate: " + "; ".join(problems))
    verifier = predicate["verifier"]
    return Summary(
        subjects=tuple(sha256_subjects(statement)),
        verifier_id=verifier["id"],
        verifier_version=dict(verifier.get("version") or {}),
        time_verified=predicate["timeVerified"],
        resource_uri=predicate["resourceUri"],
        policy_uri=predicate["policy"]["uri"],
        result=predicate["verificationResult"],
        levels=tuple(predicate["verifiedLevels"]),
    )


def predicate_problems(p: Mapping[str, Any]) -> list[str]:
    """Every way the VSA v1 predicate ``p`` breaks the published fields (verification_summary.md
    "Fields"): required ``verifier.id`` (a non-empty string), ``timeVerified`` (RFC 3339),
    ``resourceUri``, ``policy`` (a ResourceDescriptor with a ``uri``), ``verificationResult``
    (``PASSED`` or ``FAILED``), ``verifiedLevels`` (a non-empty list of distinct strings; a
    PASSED result cannot list ``FAILED``); optional ``verifier.version`` (string map),
    ``inputAttestations`` (ResourceDescriptors with a ``digest``), ``dependencyLevels`` (level →
    count, a non-negative integer), ``slsaVersion`` (``<MAJOR>.<MINOR>``)."""
    out: list[str] = []
    at = "$.predicate"
    verifier = p.get("verifier")
    if not isinstance(verifier, Mapping) or not _text(verifier.get("id")):
        out.append(f"{at}.verifier.id must be a non-empty string (a URI)")
    elif "version" in verifier and not (
        isinstance(verifier["version"], Mapping)
        and all(isinstance(v, str) for v in verifier["version"].values())
    ):
        out.append(f"{at}.verifier.version must map names to version strings")
    try:
        parse_timestamp(p.get("timeVerified"))
    except ValueError as e:
        out.append(f"{at}.timeVerified: {e}")
    if not _text(p.get("resourceUri")):
        out.append(f"{at}.resourceUri must be a non-empty string (a URI)")
    policy = p.get("policy")
    if not isinstance(policy, Mapping) or not _text(policy.get("uri")):
        out.append(f"{at}.policy must be a ResourceDescriptor with a uri")
    else:
        out += resource_problems(policy, f"{at}.policy")
    inputs = p.get("inputAttestations", [])
    if not isinstance(inputs, list):
        out.append(f"{at}.inputAttestations must be a list, got {json_kind(inputs)}")
    else:
        for i, a in enumerate(inputs):
            out += resource_problems(a, f"{at}.inputAttestations[{i}]", need_digest=True)
    result = p.get("verificationResult")
    if result not in RESULTS:
        out.append(f"{at}.verificationResult is {result!r}, expected PASSED or FAILED")
    levels = p.get("verifiedLevels")
    if (
        not isinstance(levels, list)
        or not levels
        or not all(_text(level) for level in levels)
        or len(set(levels)) != len(levels)
    ):
        out.append(f"{at}.verifiedLevels must be a non-empty list of distinct level strings")
    elif result == PASSED and FAILED in levels:
        out.append(f"{at}.verifiedLevels lists FAILED for a PASSED result")
    deps = p.get("dependencyLevels", {})
    if not isinstance(deps, Mapping) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in deps.values()
    ):
        out.append(f"{at}.dependencyLevels must map levels to counts (non-negative integers)")
    version = p.get("slsaVersion", SLSA_VERSION)
    if not isinstance(version, str) or not _SLSA_VERSION_RE.match(version):
        out.append(f"{at}.slsaVersion is {version!r}, expected <MAJOR>.<MINOR> such as 1.0")
    return out


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


__all__ = [
    "FAILED",
    "PASSED",
    "REBUILD_IDENTICAL",
    "REBUILD_POLICY",
    "VERIFIER_ID",
    "VSA_PREDICATE",
    "MalformedSummary",
    "Summary",
    "predicate_problems",
    "read_summary",
    "statement_payload",
    "vsa_statement",
]
