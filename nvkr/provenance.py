"""in-toto Statements with a SLSA provenance v1 predicate, one per artifact of a release set.

:mod:`nvkr.releaseset` calls :func:`slsa_statement` for each artifact manifest and stores the
canonical JSON of the result as the layer of a referrer manifest (``subject`` = the artifact);
``nvkr sign`` will wrap the same bytes in a DSSE envelope, and ``nvkr verify`` checks them with
:func:`validate_statement`. Shapes follow in-toto attestation spec v1 (statement.md,
resource_descriptor.md) and SLSA v1.0 provenance.md.

Reproducibility: the statement is part of the release set, whose digest must be the same on every
rebuild, so it carries no wall-clock time at all. ``runDetails.metadata.startedOn`` and
``finishedOn`` are optional in SLSA v1.0 and deliberately omitted; ``invocationId`` is a
deterministic identifier (an action key or build digest), never a random id. The build's only
time is its epoch (SOURCE_DATE_EPOCH), recorded under ``internalParameters``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from nvkr.canonical import DIGEST_RE, canonical_json
from nvkr.errors import IntegrityError

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1: Final = "https://slsa.dev/provenance/v1"
#: buildType of every nvkr action: the recipe + lockfile + action key define the build.
BUILD_TYPE: Final = "https://nvkr.dev/buildtypes/recipe/v1"
#: builder.id: nvkr itself; its version goes in builder.version {"nvkr": "<version>"}.
BUILDER_ID: Final = "https://nvkr.dev/builders/nvkr"

#: Fields that hold wall-clock times in SLSA v1.0; nvkr never writes them (module docstring).
TIME_FIELDS: Final = frozenset({"startedOn", "finishedOn"})

_HEX_LEN = {"sha256": 64, "sha384": 96, "sha512": 128, "sha1": 40}
_HEX_RE = re.compile(r"^[0-9a-f]+$")


def digest_set(digest: str) -> dict[str, str]:
    """``sha256:<hex>`` → the in-toto DigestSet ``{"sha256": "<hex>"}`` (digest_set.md).

    Raises:
        ValueError: ``digest`` is not ``sha256:<64 hex>`` or ``sha512:<128 hex>``.
    """
    if not DIGEST_RE.match(digest):
        raise ValueError(
            f"malformed digest {digest!r}: expected sha256:<64 hex> or sha512:<128 hex>"
        )
    alg, hexpart = digest.split(":", 1)
    return {alg: hexpart}


def slsa_statement(
    subjects: Sequence[Mapping[str, Any]],
    *,
    build_type: str,
    external_parameters: Mapping[str, Any],
    internal_parameters: Mapping[str, Any],
    resolved_dependencies: Sequence[Mapping[str, Any]],
    builder_id: str,
    builder_version: Mapping[str, str],
    invocation_id: str,
) -> dict[str, Any]:
    """An in-toto Statement v1 with a SLSA provenance v1 predicate.

    Args:
        subjects: ResourceDescriptors of what was built, each ``{"name": .., "digest":
            {"sha256": "<hex>"}}`` (statement.md: subject digests are REQUIRED).
        build_type: URI of the build's template, normally :data:`BUILD_TYPE`.
        external_parameters: what the user controls (recipe, lockfile, variants, artifact name).
        internal_parameters: what nvkr set (epoch in seconds, builder, action key).
        resolved_dependencies: ResourceDescriptors of every input (sources with their digests).
        builder_id: URI of the builder, normally :data:`BUILDER_ID`.
        builder_version: component → version, e.g. ``{"nvkr": "0.1.0"}``.
        invocation_id: a deterministic id of this build (action key or build digest).
    Returns:
        ``{"_type", "subject", "predicateType", "predicate": {"buildDefinition": {...},
        "runDetails": {"builder": {"id", "version"}, "metadata": {"invocationId"}}}}``. No
        ``startedOn``/``finishedOn``: see the module docstring.
    Raises:
        IntegrityError: the result would not pass :func:`validate_statement` (e.g. a subject
            without a digest, a dependency with neither uri, digest nor content).
    """
    statement: dict[str, Any] = {
        "_type": STATEMENT_TYPE,
        "subject": [dict(s) for s in subjects],
        "predicateType": SLSA_PROVENANCE_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": build_type,
                "externalParameters": dict(external_parameters),
                "internalParameters": dict(internal_parameters),
                "resolvedDependencies": [dict(d) for d in resolved_dependencies],
            },
            "runDetails": {
                "builder": {"id": builder_id, "version": dict(builder_version)},
                "metadata": {"invocationId": invocation_id},
            },
        },
    }
    validate_statement(statement)
    return statement


def statement_bytes(statement: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes of a validated statement (what is stored, hashed and signed).

    Raises:
        IntegrityError: the statement is invalid (:func:`validate_statement`).
        TypeError: it holds floats (no canonical form).
    """
    validate_statement(statement)
    return canonical_json(statement)


def validate_statement(d: Any) -> None:
    """Check the fields in-toto Statement v1 and (for its predicateType) SLSA provenance v1 require.

    Statement: ``_type`` is :data:`STATEMENT_TYPE`, ``subject`` a non-empty list of
    ResourceDescriptors each with a DigestSet, ``predicateType`` a non-empty string, ``predicate``
    an object. SLSA v1.0 (when ``predicateType`` is :data:`SLSA_PROVENANCE_V1`):
    ``buildDefinition.buildType`` (string), ``buildDefinition.externalParameters`` (object),
    ``internalParameters`` (object, optional), ``resolvedDependencies`` (ResourceDescriptors,
    optional), ``runDetails.builder.id`` (string), ``builder.version`` (string map, optional),
    ``metadata.invocationId`` (string, optional). Time fields are allowed here (statements from
    other producers may carry them); nvkr's own never do.

    Raises:
        IntegrityError: listing every problem found, each with its JSON path.
    """
    problems: list[str] = []
    if not isinstance(d, Mapping):
        raise IntegrityError(f"in-toto statement: expected a JSON object, got {type(d).__name__}")
    if d.get("_type") != STATEMENT_TYPE:
        problems.append(f"$._type is {d.get('_type')!r}, expected {STATEMENT_TYPE!r}")
    subjects = d.get("subject")
    if not isinstance(subjects, list) or not subjects:
        problems.append("$.subject must be a non-empty list")
    else:
        for i, s in enumerate(subjects):
            _check_resource(s, f"$.subject[{i}]", problems, need_digest=True)
    if not isinstance(d.get("predicateType"), str) or not d.get("predicateType"):
        problems.append("$.predicateType must be a non-empty string (a URI)")
    predicate = d.get("predicate")
    if not isinstance(predicate, Mapping):
        problems.append("$.predicate must be an object")
    elif d.get("predicateType") == SLSA_PROVENANCE_V1:
        _check_slsa(predicate, problems)
    if problems:
        raise IntegrityError(
            "invalid in-toto statement: " + "; ".join(problems),
            hint="see in-toto attestation spec v1 statement.md and SLSA v1.0 provenance.md",
        )


def _check_slsa(predicate: Mapping[str, Any], problems: list[str]) -> None:
    bd = predicate.get("buildDefinition")
    if not isinstance(bd, Mapping):
        problems.append("$.predicate.buildDefinition must be an object")
    else:
        if not isinstance(bd.get("buildType"), str) or not bd.get("buildType"):
            problems.append("$.predicate.buildDefinition.buildType must be a non-empty string")
        if not isinstance(bd.get("externalParameters"), Mapping):
            problems.append("$.predicate.buildDefinition.externalParameters must be an object")
        if "internalParameters" in bd and not isinstance(bd["internalParameters"], Mapping):
            problems.append("$.predicate.buildDefinition.internalParameters must be an object")
        deps = bd.get("resolvedDependencies", [])
        if not isinstance(deps, list):
            problems.append("$.predicate.buildDefinition.resolvedDependencies must be a list")
        else:
            for i, dep in enumerate(deps):
                _check_resource(
                    dep, f"$.predicate.buildDefinition.resolvedDependencies[{i}]", problems
                )
    rd = predicate.get("runDetails")
    if not isinstance(rd, Mapping):
        problems.append("$.predicate.runDetails must be an object")
        return
    builder = rd.get("builder")
    if (
        not isinstance(builder, Mapping)
        or not isinstance(builder.get("id"), str)
        or not builder.get("id")
    ):
        problems.append("$.predicate.runDetails.builder.id must be a non-empty string (a URI)")
    elif "version" in builder and not (
        isinstance(builder["version"], Mapping)
        and all(isinstance(v, str) for v in builder["version"].values())
    ):
        problems.append("$.predicate.runDetails.builder.version must map names to version strings")
    meta = rd.get("metadata", {})
    if not isinstance(meta, Mapping):
        problems.append("$.predicate.runDetails.metadata must be an object")
    elif "invocationId" in meta and not isinstance(meta["invocationId"], str):
        problems.append("$.predicate.runDetails.metadata.invocationId must be a string")


def _check_resource(r: Any, path: str, problems: list[str], *, need_digest: bool = False) -> None:
    """resource_descriptor.md: one of uri/digest/content is REQUIRED; digest is a DigestSet."""
    if not isinstance(r, Mapping):
        problems.append(f"{path} must be an object")
        return
    if need_digest and "digest" not in r:
        problems.append(f"{path}.digest is required")
    if not any(k in r for k in ("uri", "digest", "content")):
        problems.append(f"{path} needs one of uri, digest, content")
    for key in ("name", "uri", "content", "downloadLocation", "mediaType"):
        if key in r and not isinstance(r[key], str):
            problems.append(f"{path}.{key} must be a string")
    if "annotations" in r and not isinstance(r["annotations"], Mapping):
        problems.append(f"{path}.annotations must be an object")
    if "digest" in r:
        digest = r["digest"]
        if not isinstance(digest, Mapping) or not digest:
            problems.append(f"{path}.digest must be a non-empty object {{algorithm: hex}}")
            return
        for alg, value in digest.items():
            if not isinstance(value, str) or not value:
                problems.append(f"{path}.digest.{alg} must be a non-empty string")
            elif alg in _HEX_LEN and (len(value) != _HEX_LEN[alg] or not _HEX_RE.match(value)):
                problems.append(
                    f"{path}.digest.{alg} must be {_HEX_LEN[alg]} lower-case hex digits"
                )
