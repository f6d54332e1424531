"""The build record: when the actions of a release set ran, written beside the set, never in it.

The per-artifact provenance inside a release set carries no wall-clock time, so the set's layout
(``index.json`` included) is the same bytes on every rebuild and machine. The times SLSA v1.0
puts in ``runDetails.metadata`` (``invocationId``, ``startedOn``, ``finishedOn``) live here
instead: ``nvkr build`` writes ``dist/<name>.build-record.json`` next to ``dist/<name>/`` (and,
with ``--sign``, ``dist/<name>.build-record.dsse.json``, the DSSE envelope of its exact bytes);
``nvkr verify`` checks it when it is there (:func:`nvkr.releaseset.recordcheck.check_build_record`); ``nvkr publish`` pushes
it as a referrer of the release set index. Its digest is never part of any artifact's.

The record is an in-toto Statement v1 (canonical JSON) with a SLSA provenance v1 predicate::

    subject        the release set index ({"name": <set>, "digest", "mediaType"}), then every
                   artifact as the set's metadata lists it: "name" = "<artifact> (<variant>)"
                   (variant as gpu=..,kubernetes=..,arch=..; the bare name when the artifact is
                   variant-independent), "digest" = its manifest or image index, "mediaType"
    predicate.buildDefinition   as the per-artifact statements have it (:mod:`nvkr.provenance`):
                   buildType, externalParameters {recipe, lockfile, releaseSet, variants},
                   internalParameters {epoch, builder, builderVersion, actionKey} of the
                   release-set action, resolvedDependencies = every artifact's, once each
    predicate.runDetails.builder    {"id": BUILDER_ID, "version": {"nvkr": <version>}}
    predicate.runDetails.metadata   {"invocationId", "startedOn", "finishedOn"}
    predicate.runDetails.byproducts one ResourceDescriptor per action the set is made of (the
                   release-set action and everything it needs, transitively): "name" = the
                   action's name (artifact and variant axes), "digest" = its main output,
                   "annotations" {"actionKey", "builder", "cached", "invocationId", "startedOn",
                   "finishedOn"[, "warnings": [{"message"[, "hint"]}] the builder's warnings,
                   e.g. a chart that ignores a digest pin]}

Every time comes from the action cache: :func:`nvkr.execute.run_action` stores ``run``
(``invocationId`` of the ``nvkr build`` that ran it, ``startedOn``, ``finishedOn``) in each record
it writes, and a cached action keeps the times of the run that built it. ``metadata.invocationId``
is that of the run that assembled the set (the release-set action, which runs whenever anything
of the set ran); ``startedOn``/``finishedOn`` are the earliest start and the latest finish over the
byproducts; ``cached`` is true for an action built by an earlier invocation than that one. So the
record is a function of the plan and the action cache: a no-op rebuild leaves it byte-identical,
and a rebuild that runs anything gives it the new invocation. An action cached before nvkr
recorded times has no ``run``: its byproduct carries no times and counts as cached, and when the
release-set action is such a one, ``metadata`` holds only the times known.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from nvkr.action import ActionOutput, ActionResult
from nvkr.atomic import write_atomic
from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError
from nvkr.jsondoc import JsonObject
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import artifact_manifest, descriptor, manifest_bytes
from nvkr.oci.layoutdir import FILE_MODE
from nvkr.provenance import (
    BUILD_TYPE,
    BUILDER_ID,
    digest_set,
    external_parameters,
    internal_parameters,
    parse_timestamp,
    slsa_statement,
    statement_bytes,
)
from nvkr.releaseset.signing import ANN_ATTACHMENT, DSSE_ENVELOPE
from nvkr.releasespec import ReleaseSetSpec
from nvkr.sign import PrivateKey, envelope_parts, sign_envelope

if TYPE_CHECKING:
    from nvkr.execute import BuildReport
    from nvkr.plan import Plan
    from nvkr.store import Store

#: ``dist/<name>`` + this: the build record (in-toto statement, canonical JSON).
RECORD_SUFFIX: Final = ".build-record.json"
#: ``dist/<name>`` + this: its DSSE envelope (payloadType application/vnd.in-toto+json).
ENVELOPE_SUFFIX: Final = ".build-record.dsse.json"
#: Value of the ``dev.nvkr.attachment`` annotation of a published build record.
BUILD_RECORD: Final = "build-record"
#: Role precedence for the output a byproduct names (the action's main output).
_MAIN_ROLES: Final = ("index", "primary", "sbom", "manifest")
_AXES: Final = ("gpu", "kubernetes", "arch")
_EMPTY_DIGEST: Final = descriptor(mt.OCI_EMPTY, mt.EMPTY_JSON)["digest"]


def record_paths(layout_dir: Path) -> tuple[Path, Path]:
    """``(dist/<name>.build-record.json, dist/<name>.build-record.dsse.json)`` for
    ``layout_dir`` = ``dist/<name>`` (a trailing ``/`` or a relative ``.`` is resolved first)."""
    layout = Path(os.path.abspath(layout_dir))
    return (
        layout.with_name(layout.name + RECORD_SUFFIX),
        layout.with_name(layout.name + ENVELOPE_SUFFIX),
    )


def variant_label(variant: Mapping[str, Any] | None) -> str:
    """``gpu=hopper,kubernetes=1.36,arch=amd64`` (the ``--variant`` syntax; axes in matrix order,
    any other keys after them sorted); ``""`` for None."""
    if not variant:
        return ""
    keys = [k for k in _AXES if k in variant] + sorted(k for k in variant if k not in _AXES)
    return ",".join(f"{k}={variant[k]}" for k in keys)


def record_subjects(metadata: Mapping[str, Any], release_set_digest: str) -> list[dict[str, Any]]:
    """The subjects a build record of this set must have, in order: the release set index, then
    every ``metadata["artifacts"]`` entry (its manifest, or index for an image).

    Raises:
        ValueError: a digest is malformed or an artifact has no manifest or index.
    """
    subjects = [
        {
            "name": str(metadata.get("name")),
            "digest": digest_set(release_set_digest),
            "mediaType": mt.OCI_INDEX,
        }
    ]
    for art in metadata.get("artifacts") or []:
        desc = art.get("index") or art.get("manifest")
        if not isinstance(desc, Mapping):
            raise ValueError(f"artifact {art.get('name')!r} has no manifest or index descriptor")
        label = variant_label(art.get("variant"))
        subjects.append(
            {
                "name": f"{art['name']} ({label})" if label else str(art["name"]),
                "digest": digest_set(str(desc["digest"])),
                "mediaType": str(desc["mediaType"]),
            }
        )
    return subjects


def _main_output(record: ActionResult) -> ActionOutput | None:
    for role in _MAIN_ROLES:
        found = record.outputs_with(role)
        if len(found) == 1:
            return found[0]
    return record.outputs[0] if record.outputs else None


def _dependencies(spec: ReleaseSetSpec) -> list[JsonObject]:
    """Every artifact's resolvedDependencies, each once, sorted by name then canonical bytes."""
    unique: dict[bytes, JsonObject] = {}
    for art in spec.artifacts:
        for dep in art.dependencies:
            unique.setdefault(canonical_json(dep), dict(dep))
    return [unique[k] for k in sorted(unique, key=lambda k: (str(unique[k].get("name")), k))]


def _warnings(value: Any) -> list[dict[str, str]]:
    """The ``{"message"[, "hint"]}`` warnings of an action record (anything else left out)."""
    out: list[dict[str, str]] = []
    for w in value if isinstance(value, list) else []:
        if isinstance(w, Mapping) and isinstance(w.get("message"), str):
            out.append({k: str(w[k]) for k in ("message", "hint") if isinstance(w.get(k), str)})
    return out


def record_warnings(statement: Mapping[str, Any]) -> list[dict[str, str]]:
    """Every build warning a build record keeps: ``{"action", "message"[, "hint"]}``, in the
    byproducts' order (by action name)."""
    run = (statement.get("predicate") or {}).get("runDetails") or {}
    out: list[dict[str, str]] = []
    for b in run.get("byproducts") or []:
        ann = b.get("annotations") if isinstance(b, Mapping) else None
        if isinstance(ann, Mapping):
            for w in _warnings(ann.get("warnings")):
                out.append({"action": str(b.get("name")), **w})
    return out


def build_record(
    spec: ReleaseSetSpec,
    set_action: Mapping[str, str],
    metadata: Mapping[str, Any],
    release_set_digest: str,
    records: Sequence[ActionResult],
) -> dict[str, Any]:
    """The build record of one release set (shape in the module docstring).

    Args:
        spec: the release-set action's spec (:func:`nvkr.releaseset.assemble`'s).
        set_action: ``{"key", "builder", "builderVersion"}`` of the release-set action.
        metadata: the set's metadata JSON (:func:`nvkr.releaseset.read_metadata`).
        release_set_digest: ``sha256:<hex>`` of the release set index.
        records: the action results of every action of the set (the release-set action
            among them), with their ``run`` (``{"invocationId", "startedOn", "finishedOn"}``)
            when recorded; a result without outputs is left out.
    Returns:
        the statement (valid per :func:`nvkr.provenance.validate_statement`).
    Raises:
        IntegrityError: a record's times are no RFC 3339 timestamps, or the statement would be
            invalid.
    """
    by_key = {r.key: r for r in records}
    own = by_key.get(set_action["key"])
    invocation = (own.run or {}).get("invocationId") if own is not None else None
    byproducts: list[dict[str, Any]] = []
    starts: list[tuple[datetime, str]] = []
    ends: list[tuple[datetime, str]] = []
    for key, record in sorted(by_key.items(), key=lambda kv: (kv[1].name, kv[0])):
        out = _main_output(record)
        if out is None:
            continue
        run = record.run or {}
        annotations: dict[str, Any] = {
            "actionKey": key,
            "builder": record.builder,
            "cached": not run or invocation is None or run.get("invocationId") != invocation,
        }
        for field_name in ("invocationId", "startedOn", "finishedOn"):
            if isinstance(run.get(field_name), str):
                annotations[field_name] = run[field_name]
        warnings = [
            {"message": w.message, **({"hint": w.hint} if w.hint is not None else {})}
            for w in record.warnings
        ]
        if warnings:
            annotations["warnings"] = warnings
        try:
            if "startedOn" in annotations:
                started = annotations["startedOn"]
                starts.append((parse_timestamp(started), started))
            if "finishedOn" in annotations:
                finished = annotations["finishedOn"]
                ends.append((parse_timestamp(finished), finished))
        except ValueError as e:
            raise IntegrityError(
                f"action cache record {key}: {e}",
                hint="the record was edited; delete it from the store's actions/ and build again",
            ) from e
        byproducts.append(
            {
                "name": record.name or key,
                "digest": digest_set(out.digest),
                "annotations": annotations,
            }
        )
    return slsa_statement(
        record_subjects(metadata, release_set_digest),
        build_type=BUILD_TYPE,
        external_parameters=external_parameters(spec, spec.variants, release_set=spec.name),
        internal_parameters=internal_parameters(
            spec, set_action["builder"], set_action["builderVersion"], set_action["key"]
        ),
        resolved_dependencies=_dependencies(spec),
        builder_id=BUILDER_ID,
        builder_version={"nvkr": spec.nvkr_version},
        invocation_id=invocation if isinstance(invocation, str) else None,
        started_on=min(starts)[1] if starts else None,
        finished_on=max(ends)[1] if ends else None,
        byproducts=byproducts,
    )


def action_closure(plan: Plan, root: str) -> list[str]:
    """``root`` and every action key it needs, transitively (sorted)."""
    seen: set[str] = set()
    stack = [root]
    while stack:
        key = stack.pop()
        if key in seen or key not in plan.actions:
            continue
        seen.add(key)
        stack.extend(plan.actions[key].deps)
    return sorted(seen)


def _cached_record(store: Store, key: str) -> ActionResult | None:
    """The action cache record of ``key`` as stored (its blobs need not be there any more);
    None when there is none, or it is not an action record."""
    try:
        return ActionResult.from_json(
            json.loads(store.action_path(key).read_bytes()), f"action record {key}"
        )
    except (OSError, ValueError, IntegrityError):
        return None


def plan_build_record(
    plan: Plan, report: BuildReport, set_name: str, layout_dir: Path, store: Store
) -> dict[str, Any]:
    """The build record of release set ``set_name`` after :func:`nvkr.execute.execute` (its
    ``report``) and :func:`nvkr.releaseset.materialize` (``layout_dir``).

    The records of actions the executor did not look at (below a cached one) are read from the
    action cache; an action with no record at all is left out of the byproducts.

    Raises:
        IntegrityError: the layout's metadata fails its digests, or a record holds bad times.
    """
    from nvkr.releaseset.metadata import read_metadata

    key = plan.release_sets[set_name]
    action = plan.actions[key]
    records = []
    for k in action_closure(plan, key):
        record = report.results.get(k) or _cached_record(store, k)
        if record is not None:
            records.append(replace(record, key=k))
    result = report.results.get(key) or _cached_record(store, key)
    digest = str(None if result is None else result.metadata.get("releaseSetDigest"))
    return build_record(
        ReleaseSetSpec.from_params(action.params),
        {"key": key, "builder": action.builder, "builderVersion": action.builder_version},
        read_metadata(layout_dir, set_name),
        digest,
        records,
    )


def write_build_record(
    layout_dir: Path, statement: Mapping[str, Any], key: PrivateKey | None = None
) -> tuple[Path, Path | None]:
    """Write ``statement`` to ``dist/<name>.build-record.json`` (and with ``key`` its DSSE
    envelope to ``.build-record.dsse.json``), each atomically (temp file + rename, mode 0644).

    A file already holding the same bytes is not rewritten. Without ``key``, an envelope left by
    an earlier signed build is kept while it signs these very bytes, else removed (it would no
    longer match).

    Returns:
        the record's path and the envelope's (None when there is none).
    Raises:
        IntegrityError: the statement is invalid. OSError: the file system refused; the files
            are then as they were.
    """
    data = statement_bytes(statement)
    record_path, envelope_path = record_paths(layout_dir)
    _replace(record_path, data)
    if key is not None:
        _replace(envelope_path, canonical_json(sign_envelope(data, mt.IN_TOTO_JSON, key)))
        return record_path, envelope_path
    try:
        payload, _, _ = envelope_parts(json.loads(envelope_path.read_bytes()))
    except FileNotFoundError:
        return record_path, None
    except (OSError, ValueError, IntegrityError):
        payload = b""
    if payload == data:
        return record_path, envelope_path
    with contextlib.suppress(FileNotFoundError):
        envelope_path.unlink()
    return record_path, None


def _replace(path: Path, data: bytes) -> None:
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, mode=FILE_MODE)


# -- publishing ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Attachment:
    """A build record (or its envelope) as an OCI artifact manifest: ``manifest`` (its bytes,
    ``application/vnd.oci.image.manifest.v1+json``), ``artifact_type``, ``blobs`` (``sha256:<hex>``
    → bytes: the empty config and the one layer)."""

    manifest: bytes
    artifact_type: str
    blobs: dict[str, bytes]


def build_record_attachments(
    layout_dir: Path, subject: Mapping[str, Any], set_name: str
) -> list[Attachment]:
    """The build record beside ``layout_dir`` and its envelope as referrers of ``subject`` (the
    release set index's descriptor): artifactType ``application/vnd.in-toto+json`` and
    ``application/vnd.dsse.envelope.v1+json``, the file as the one layer, annotations
    ``dev.nvkr.attachment: build-record`` and ``dev.nvkr.release-set: <name>``; [] without a
    record. Deterministic: the same files give the same manifests."""
    record_path, envelope_path = record_paths(layout_dir)
    out: list[Attachment] = []
    for path, artifact_type in ((record_path, mt.IN_TOTO_JSON), (envelope_path, DSSE_ENVELOPE)):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            break  # no record: nothing; no envelope: the record alone
        layer = descriptor(artifact_type, data)
        manifest = manifest_bytes(
            artifact_manifest(
                artifact_type,
                [layer],
                {ANN_ATTACHMENT: BUILD_RECORD, mt.ANN_NVKR_RELEASE_SET: set_name},
                subject={k: subject[k] for k in ("mediaType", "digest", "size")},
            )
        )
        out.append(
            Attachment(
                manifest, artifact_type, {layer["digest"]: data, _EMPTY_DIGEST: mt.EMPTY_JSON}
            )
        )
    return out


def is_build_record(desc: Mapping[str, Any]) -> bool:
    """Whether a referrers index entry (or manifest) is a build record attachment."""
    return (desc.get("annotations") or {}).get(ANN_ATTACHMENT) == BUILD_RECORD


__all__ = [
    "BUILD_RECORD",
    "DSSE_ENVELOPE",
    "ENVELOPE_SUFFIX",
    "RECORD_SUFFIX",
    "Attachment",
    "action_closure",
    "build_record",
    "build_record_attachments",
    "is_build_record",
    "plan_build_record",
    "record_paths",
    "record_subjects",
    "variant_label",
    "write_build_record",
]
