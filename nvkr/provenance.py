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

The times live in the build record instead (:mod:`nvkr.releaseset.record`): a statement of the
same shape, written beside the release set (``dist/<name>.build-record.json``), never inside it,
whose ``runDetails.metadata`` has a random ``invocationId`` (a UUID per ``nvkr build``) and the
``startedOn``/``finishedOn`` the executor stored with each action (:func:`timestamp`), and whose
``byproducts`` list every action with its own times. Both kinds of statement take their
``buildDefinition`` parameters from :func:`external_parameters` and :func:`internal_parameters`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from nvkr.canonical import DIGEST_RE, canonical_json
from nvkr.errors import IntegrityError
from nvkr.jsondoc import json_kind
from nvkr.releasespec import ReleaseSetSpec

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE_V1: Final = "https://slsa.dev/provenance/v1"
#: buildType of every nvkr action: the recipe + lockfile + action key define the build.
BUILD_TYPE: Final = "https://nvkr.dev/buildtypes/recipe/v1"
#: builder.id: nvkr itself; its version goes in builder.version {"nvkr": "<version>"}.
BUILDER_ID: Final = "https://nvkr.dev/builders/nvkr"

#: Fields that hold wall-clock times in SLSA v1.0; nvkr writes them only into build records,
#: never into a statement of a release set (module docstring).
TIME_FIELDS: Final = frozenset({"startedOn", "finishedOn"})
#: RFC 3339 section 5.6 date-time (``T``/``Z`` in either case, optional fraction and offset).
_RFC3339_RE = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

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


def timestamp(seconds: float | None = None) -> str:
    """``seconds`` since 1970 (default: now) as an RFC 3339 UTC timestamp to the second,
    ``YYYY-MM-DDTHH:MM:SSZ`` (the form SLSA v1.0's ``startedOn``/``finishedOn`` take)."""
    return time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if seconds is None else seconds)
    )


def parse_timestamp(text: Any) -> datetime:
    """An RFC 3339 date-time (section 5.6: ``2026-11-30T03:52:04Z``, a fraction and a
    ``+HH:MM`` offset allowed) as an aware :class:`~datetime.datetime`.

    Raises:
        ValueError: not a string of that form, or no valid date or time (naming the value).
    """
    if not isinstance(text, str) or not _RFC3339_RE.match(text):
        raise ValueError(f"{text!r} is no RFC 3339 timestamp (expected e.g. 2026-11-30T03:52:04Z)")
    try:
        return datetime.fromisoformat(text.upper().replace("Z", "+00:00"))
    except ValueError as e:
        raise ValueError(f"{text!r} is no valid RFC 3339 timestamp: {e}") from None


def external_parameters(
    spec: ReleaseSetSpec,
    variants: Sequence[Mapping[str, str] | None],
    *,
    artifact: str | None = None,
    release_set: str | None = None,
) -> dict[str, Any]:
    """SLSA ``externalParameters`` of an nvkr build: what the user controls.

    ``{"recipe": {"path", "digest"}, "lockfile": {"path", "digest"}, "variants": [...]}`` from
    the release-set spec (:func:`nvkr.releaseset.assemble`), plus ``"artifact"`` (the label of
    one artifact's statement) or ``"releaseSet"`` (the set's name, in its build record).
    """
    params: dict[str, Any] = {"recipe": spec.recipe.to_json(), "lockfile": spec.lockfile.to_json()}
    if artifact is not None:
        params["artifact"] = artifact
    if release_set is not None:
        params["releaseSet"] = release_set
    params["variants"] = [dict(v) if v is not None else None for v in variants]
    return params


def internal_parameters(
    spec: ReleaseSetSpec,
    builder: str,
    builder_version: str,
    action_key: str,
    c_toolchain: Mapping[str, Any] | None = None,
    disk_image: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """SLSA ``internalParameters`` of an nvkr build: ``{"epoch": <seconds>, "builder",
    "builderVersion", "actionKey"[, "cToolchain"][, "diskImage"]}`` (what nvkr set; the epoch
    from the release-set spec); ``cToolchain`` (``{"cc", "packages": {name: version}}``) for a
    cgo binary, whose compiler came from a tools tree; ``diskImage`` for a machine image
    (compressed or not): how its QCOW2 was made (qemu-img's version and options, the
    compression) and the raw disk's digest (the node-image action's
    ``disk.qcow2`` metadata, :func:`nvkr.builders.node_image.builder._compression_record`)."""
    params: dict[str, Any] = {
        "epoch": spec.epoch,
        "builder": builder,
        "builderVersion": builder_version,
        "actionKey": action_key,
    }
    if c_toolchain:
        params["cToolchain"] = dict(c_toolchain)
    if disk_image:
        params["diskImage"] = dict(disk_image)
    return params


def slsa_statement(
    subjects: Sequence[Mapping[str, Any]],
    *,
    build_type: str,
    external_parameters: Mapping[str, Any],
    internal_parameters: Mapping[str, Any],
    resolved_dependencies: Sequence[Mapping[str, Any]],
    builder_id: str,
    builder_version: Mapping[str, str],
    invocation_id: str | None,
    started_on: str | None = None,
    finished_on: str | None = None,
    byproducts: Sequence[Mapping[str, Any]] = (),
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
        invocation_id: a deterministic id of this build (action key or build digest) in a
            release set's statements; a build record's is the UUID of an ``nvkr build``
            (None: left out).
        started_on, finished_on: RFC 3339 times (:func:`timestamp`); only build records have
            them (module docstring).
        byproducts: ResourceDescriptors for ``runDetails.byproducts`` (left out when empty).
    Returns:
        ``{"_type", "subject", "predicateType", "predicate": {"buildDefinition": {...},
        "runDetails": {"builder": {"id", "version"}, "metadata": {"invocationId"[,
        "startedOn", "finishedOn"]}[, "byproducts"]}}}``.
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
                "metadata": {},
            },
        },
    }
    run = statement["predicate"]["runDetails"]
    for key, value in (
        ("invocationId", invocation_id),
        ("startedOn", started_on),
        ("finishedOn", finished_on),
    ):
        if value is not None:
            run["metadata"][key] = value
    if byproducts:
        run["byproducts"] = [dict(b) for b in byproducts]
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
    ``metadata.invocationId`` (string, optional), ``metadata.startedOn``/``finishedOn`` (RFC 3339
    timestamps, optional: build records and other producers' statements carry them; nvkr's
    statements inside a release set never do), ``runDetails.byproducts`` (ResourceDescriptors,
    optional).

    Raises:
        IntegrityError: listing every problem found, each with its JSON path.
    """
    problems: list[str] = []
    if not isinstance(d, Mapping):
        raise IntegrityError(f"in-toto statement: expected a JSON object, got {json_kind(d)}")
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
    """SLSA v1.0 provenance.md: the predicate's buildDefinition and runDetails, each problem
    appended to ``problems`` with its JSON path."""
    bd = predicate.get("buildDefinition")
    if not isinstance(bd, Mapping):
        problems.append("$.predicate.buildDefinition must be an object")
    else:
        _check_build_definition(bd, problems)
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
    _check_run_metadata(rd.get("metadata", {}), problems)
    byproducts = rd.get("byproducts", [])
    if not isinstance(byproducts, list):
        problems.append("$.predicate.runDetails.byproducts must be a list")
    else:
        for i, b in enumerate(byproducts):
            _check_resource(b, f"$.predicate.runDetails.byproducts[{i}]", problems)


def _check_build_definition(bd: Mapping[str, Any], problems: list[str]) -> None:
    """buildType, externalParameters, internalParameters and resolvedDependencies."""
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
            _check_resource(dep, f"$.predicate.buildDefinition.resolvedDependencies[{i}]", problems)


def _check_run_metadata(meta: Any, problems: list[str]) -> None:
    """runDetails.metadata: an object whose invocationId is a string and whose times parse."""
    if not isinstance(meta, Mapping):
        problems.append("$.predicate.runDetails.metadata must be an object")
        return
    if "invocationId" in meta and not isinstance(meta["invocationId"], str):
        problems.append("$.predicate.runDetails.metadata.invocationId must be a string")
    for key in sorted(TIME_FIELDS & set(meta)):
        try:
            parse_timestamp(meta[key])
        except ValueError as e:
            problems.append(f"$.predicate.runDetails.metadata.{key}: {e}")


def resource_problems(r: Any, path: str, *, need_digest: bool = False) -> list[str]:
    """What is wrong with ``r`` as an in-toto ResourceDescriptor (resource_descriptor.md), each
    problem with its JSON ``path``; [] when nothing is (other predicates' fields use it:
    :mod:`nvkr.verify.vsa`)."""
    problems: list[str] = []
    _check_resource(r, path, problems, need_digest=need_digest)
    return problems


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
