"""Checking a build record (:mod:`nvkr.releaseset.record`) against its release set, as
``nvkr verify`` and ``nvkr pull`` do: its subjects are the set's index and artifacts, its times
are ordered and well-formed, and its DSSE envelope (when there is one) signs its exact bytes
with a trusted key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.errors import IntegrityError
from nvkr.oci import mediatypes as mt
from nvkr.provenance import (
    SLSA_PROVENANCE_V1,
    parse_timestamp,
    validate_statement,
)
from nvkr.sign import PublicKey, check_envelope, envelope_parts

if TYPE_CHECKING:
    pass
from nvkr.releaseset.record import record_paths, record_subjects, record_warnings


# -- checking ------------------------------------------------------------------------------------
@dataclass
class BuildRecordCheck:
    """What :func:`check_build_record` found. ``present``: the record file exists; ``checked``:
    it was read and compared; ``signed``: an envelope is there; ``verified_by``: the given keys'
    ids that verified it; ``warnings``: the build's warnings the record keeps (``{"action",
    "message"[, "hint"]}``, no problem); ``problems``: messages (any makes verify exit 3)."""

    path: str
    present: bool = False
    checked: bool = False
    signed: bool = False
    verified_by: list[str] = field(default_factory=list)
    invocation_id: str | None = None
    started_on: str | None = None
    finished_on: str | None = None
    actions: int = 0
    warnings: list[dict[str, str]] = field(default_factory=list)
    problems: list[tuple[str, str | None]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "present": self.present,
            "checked": self.checked,
            "signed": self.signed,
            "verifiedBy": self.verified_by,
            "invocationId": self.invocation_id,
            "startedOn": self.started_on,
            "finishedOn": self.finished_on,
            "actions": self.actions,
            "warnings": self.warnings,
        }


def check_build_record(
    layout_dir: Path,
    metadata: Mapping[str, Any],
    release_set_digest: str,
    keys: Sequence[PublicKey] = (),
) -> BuildRecordCheck:
    """Check the build record beside ``layout_dir`` against the set's metadata and index digest.

    Its absence is no problem (``present`` False). Present, it must be a valid statement
    (:func:`nvkr.provenance.validate_statement`, SLSA provenance v1), name exactly the subjects
    :func:`record_subjects` gives (a record of another build or set names other digests: the
    problem names the artifact), hold RFC 3339 UTC times, none in the future (beyond
    :data:`CLOCK_SKEW`), with every ``startedOn`` <= its
    ``finishedOn`` and the metadata's span covering every byproduct's; an envelope beside it must
    carry its exact bytes, and with ``keys`` verify with one of them.
    """
    record_path, envelope_path = record_paths(layout_dir)
    check = BuildRecordCheck(path=str(record_path))
    try:
        data = record_path.read_bytes()
    except FileNotFoundError:
        return check
    except OSError as e:
        check.present = True
        check.problems.append((f"build record {record_path}: cannot read it: {e}", None))
        return check
    envelope: bytes | None = None
    try:
        envelope = envelope_path.read_bytes()
    except FileNotFoundError:
        pass
    except OSError as e:
        check.present = check.signed = True
        check.problems.append((f"build record envelope {envelope_path}: cannot read it: {e}", None))
        return check
    return check_record_bytes(
        data,
        envelope,
        metadata,
        release_set_digest,
        keys,
        check=check,
        envelope_name=str(envelope_path),
    )


def check_record_bytes(
    data: bytes,
    envelope: bytes | None,
    metadata: Mapping[str, Any],
    release_set_digest: str,
    keys: Sequence[PublicKey] = (),
    *,
    check: BuildRecordCheck,
    envelope_name: str,
) -> BuildRecordCheck:
    """:func:`check_build_record` on a record's bytes and its envelope's (None: unsigned), e.g.
    as :func:`nvkr.delivery.pull.pull_release_set` fetched them; fills and returns ``check`` (whose
    ``path`` names the record in messages)."""
    check.present = check.checked = True
    what = f"build record {check.path}"
    try:
        statement = json.loads(data)
        validate_statement(statement)
    except ValueError as e:
        check.problems.append((f"{what}: not JSON: {e}", None))
        return check
    except IntegrityError as e:
        check.problems.append((f"{what}: {e.message}", e.hint))
        return check
    if statement.get("predicateType") != SLSA_PROVENANCE_V1:
        check.problems.append(
            (
                f"{what}: predicateType is {statement.get('predicateType')!r}, expected "
                f"{SLSA_PROVENANCE_V1}",
                None,
            )
        )
        return check
    _check_subjects(check, what, statement, metadata, release_set_digest)
    _check_times(check, what, statement)
    check.warnings = record_warnings(statement)
    if envelope is not None:
        _check_envelope(check, envelope_name, envelope, data, keys)
    return check


def _pairs(subjects: Iterable[Any]) -> dict[str, set[str]]:
    """subject name → the ``sha256:<hex>`` digests the subjects of that name carry."""
    out: dict[str, set[str]] = {}
    for s in subjects:
        if isinstance(s, Mapping) and isinstance(s.get("digest"), Mapping):
            sha = s["digest"].get("sha256")
            out.setdefault(str(s.get("name")), set()).add(f"sha256:{sha}" if sha else "(none)")
    return out


def _check_subjects(
    check: BuildRecordCheck,
    what: str,
    statement: Mapping[str, Any],
    metadata: Mapping[str, Any],
    release_set_digest: str,
) -> None:
    try:
        wanted = _pairs(record_subjects(metadata, release_set_digest))
    except ValueError as e:
        check.problems.append((f"{what}: the release set's metadata: {e}", None))
        return
    named = _pairs(statement.get("subject") or [])
    hint = "the build record belongs to another build or release set, or was edited"
    for name, digests in wanted.items():
        label = "release set" if name == metadata.get("name") else "artifact"
        if name not in named:
            check.problems.append((f"{what} does not name {label} {name} ({min(digests)})", hint))
        elif named[name] != digests:
            check.problems.append(
                (
                    f"{what} names {label} {name} with digest {', '.join(sorted(named[name]))}; "
                    f"the release set holds {min(digests)}",
                    hint,
                )
            )
    for name in sorted(set(named) - set(wanted)):
        check.problems.append(
            (
                f"{what} names {name} ({', '.join(sorted(named[name]))}), which the release set "
                "does not hold",
                hint,
            )
        )


#: How far in the future a record's time may be (the verifying machine's clock may be behind
#: the building one's) before verify says it cannot have been recorded yet.
CLOCK_SKEW = timedelta(minutes=10)


def _time_problem(when: datetime, now: datetime) -> str | None:
    """What is wrong with a record's time on its own: not UTC, or later than ``now`` (allowing
    :data:`CLOCK_SKEW`)."""
    if when.utcoffset() != timedelta(0):
        return "is not UTC (nvkr records times with Z)"
    if when > now + CLOCK_SKEW:
        return f"is in the future (now is {now:%Y-%m-%dT%H:%M:%SZ})"
    return None


def _check_times(check: BuildRecordCheck, what: str, statement: Mapping[str, Any]) -> None:
    """RFC 3339 everywhere (the metadata's format is checked by validate_statement), UTC and
    not in the future, start before finish, and the metadata's span covering every
    byproduct's."""
    run = statement["predicate"]["runDetails"]
    meta = run.get("metadata") or {}
    check.invocation_id = meta.get("invocationId")
    check.started_on, check.finished_on = meta.get("startedOn"), meta.get("finishedOn")
    spans: list[tuple[str, Mapping[str, Any]]] = [("runDetails.metadata", meta)]
    byproducts = run.get("byproducts") or []
    check.actions = len(byproducts)
    for i, b in enumerate(byproducts):
        ann = b.get("annotations") or {}
        spans.append((f"runDetails.byproducts[{i}] ({b.get('name')})", ann))
    parsed: list[tuple[str, datetime | None, datetime | None]] = []
    now = datetime.now(UTC)
    hint = (
        "nvkr writes UTC times of the past; the record was edited or the builder's clock was wrong"
    )
    for where, holder in spans:
        times: list[datetime | None] = []
        for key in ("startedOn", "finishedOn"):
            value = holder.get(key)
            if value is None:
                times.append(None)
                continue
            try:
                when = parse_timestamp(value)
            except ValueError as e:
                check.problems.append((f"{what}: {where}.{key}: {e}", None))
                return
            problem = _time_problem(when, now)
            if problem:
                check.problems.append((f"{what}: {where}.{key} {value} {problem}", hint))
                return
            times.append(when)
        start, end = times
        if start is not None and end is not None and start > end:
            check.problems.append(
                (
                    f"{what}: {where} startedOn {holder['startedOn']} is after finishedOn "
                    f"{holder['finishedOn']}",
                    "the record was edited",
                )
            )
            return
        parsed.append((where, start, end))
    _, first, last = parsed[0]
    for where, start, end in parsed[1:]:
        if (first and start and start < first) or (last and end and end > last):
            check.problems.append(
                (
                    f"{what}: {where} ran outside runDetails.metadata's span "
                    f"{check.started_on} .. {check.finished_on}",
                    "the record was edited",
                )
            )
            return


def _check_envelope(
    check: BuildRecordCheck, name: str, raw: bytes, data: bytes, keys: Sequence[PublicKey]
) -> None:
    what = f"build record envelope {name}"
    check.signed = True
    try:
        envelope = json.loads(raw)
    except ValueError as e:
        check.problems.append((f"{what}: not JSON: {e}", None))
        return
    try:
        payload, payload_type, _ = envelope_parts(envelope, what)
    except IntegrityError as e:
        check.problems.append((e.message, e.hint))
        return
    if payload_type != mt.IN_TOTO_JSON or payload != data:
        check.problems.append(
            (
                f"{what}: does not sign the build record beside it (payloadType "
                f"{payload_type!r}, {len(payload)} payload bytes)",
                "the record or the envelope was replaced",
            )
        )
        return
    if keys:
        try:
            check.verified_by = list(check_envelope(envelope, keys, what).keyids)
        except IntegrityError as e:
            check.problems.append((e.message, e.hint))
