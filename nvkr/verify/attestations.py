"""Where the verification summary attestations of a release set live, and how they get there.

A VSA (:mod:`nvkr.verify.vsa`) is never part of the release set: the set's digest is the same
before and after anyone attests it. ``nvkr verify --rebuild --attest KEY`` adds one, ``nvkr
verify --policy`` and ``nvkr release-set show`` read them back, from one of two places:

beside a layout (``nvkr verify DIR``), one file per attestation, the DSSE envelope as canonical
JSON::

    dist/<name>/                                         the release set, untouched
    dist/<name>.vsa/<keyid>-<YYYYMMDDTHHMMSSZ>.dsse.json  keyid: the signing key's (64 hex);
                                                          the time: timeVerified

Every ``*.json`` file there is read, so attestations made elsewhere are gathered by copying
their envelopes in (``--attest-out FILE`` writes one where you want it);

in a registry (``nvkr verify REF``), as referrers of the release set index, the way ``nvkr
publish`` attaches a build record's envelope (:mod:`nvkr.releaseset.record`): an OCI artifact
manifest, ``artifactType application/vnd.dsse.envelope.v1+json``, the empty config, the envelope
as its one layer (same media type), ``subject`` = the release set index, annotations
``dev.nvkr.attachment: verification-summary``, ``dev.nvkr.release-set: <name>``,
``dev.nvkr.keyid: <64 hex>`` and ``org.opencontainers.image.created: <timeVerified>``; listed by
the referrers API where the registry has one, else in the fallback tag ``sha256-<hex>``
(:func:`nvkr.oci.referrers.update_referrers_tag`). ``nvkr pull`` leaves these referrers out of
the layout it writes (they are no signatures of the set).

Nothing here trusts what it reads: a file or referrer that cannot be read is handed on with its
problem, and :mod:`nvkr.verify.gate` decides what counts; :func:`describe` words one for
``nvkr release-set show`` without checking its signature.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from nvkr.atomic import write_atomic
from nvkr.bounds import read_limited
from nvkr.errors import IntegrityError, LimitError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob, artifact_manifest, descriptor, manifest_bytes
from nvkr.oci.layoutdir import FILE_MODE
from nvkr.oci.referrers import list_referrers, referrer_descriptor, update_referrers_tag
from nvkr.releaseset.signing import ANN_ATTACHMENT, ANN_KEYID, DSSE_ENVELOPE
from nvkr.sign import envelope_parts
from nvkr.verify.vsa import read_summary

#: ``dist/<name>`` + this: the directory of the set's attestations.
VSA_SUFFIX: Final = ".vsa"
#: Value of the ``dev.nvkr.attachment`` annotation of a pushed attestation.
VERIFICATION_SUMMARY: Final = "verification-summary"
#: Largest envelope read, in bytes: a VSA of a default release set is a few KiB.
MAX_ENVELOPE: Final = 1 << 20


@dataclass(frozen=True)
class FoundAttestation:
    """One attestation as read: ``where`` (its file, or ``REGISTRY/REPO@<manifest digest>``) and
    its envelope's bytes, or the ``problem`` that kept them from being read (``data`` None)."""

    where: str
    data: bytes | None
    problem: str | None = None


class AttestationPlace(Protocol):
    """Where a release set's attestations are kept: beside its layout or in a registry."""

    @property
    def resource_uri(self) -> str:
        """The VSA's ``resourceUri`` of the set verified here."""
        ...

    def statement_uri(self, manifest_digest: str, statement_digest: str) -> str:
        """A URI of a provenance statement of the set (its manifest, or its blob)."""
        ...

    def read(self) -> list[FoundAttestation]:
        """Every attestation kept here, in a stable order."""
        ...

    def add(
        self, envelope: bytes, *, keyid: str, time_verified: str, subject: Mapping[str, Any]
    ) -> str:
        """Keep ``envelope`` (canonical JSON); returns where it went."""
        ...


def vsa_dir(layout: Path) -> Path:
    """``dist/<name>.vsa/`` for ``layout`` = ``dist/<name>`` (made absolute first)."""
    path = Path(os.path.abspath(layout))
    return path.with_name(path.name + VSA_SUFFIX)


def file_name(keyid: str, time_verified: str) -> str:
    """``<keyid>-<YYYYMMDDTHHMMSSZ>.dsse.json`` for an RFC 3339 UTC ``time_verified``."""
    stamp = "".join(c for c in time_verified if c.isalnum()).upper()
    return f"{keyid}-{stamp}.dsse.json"


def is_verification_summary(desc: Mapping[str, Any]) -> bool:
    """Whether a referrers index entry (or manifest) is an attestation attached by nvkr."""
    return (desc.get("annotations") or {}).get(ANN_ATTACHMENT) == VERIFICATION_SUMMARY


@dataclass(frozen=True)
class LayoutAttestations:
    """The attestations beside the layout ``dist/<name>`` (module docstring)."""

    layout: Path

    @property
    def resource_uri(self) -> str:
        return Path(os.path.abspath(self.layout)).as_uri()

    def statement_uri(self, manifest_digest: str, statement_digest: str) -> str:
        hexpart = statement_digest.split(":", 1)[1]
        return (Path(os.path.abspath(self.layout)) / "blobs" / "sha256" / hexpart).as_uri()

    def read(self) -> list[FoundAttestation]:
        folder = vsa_dir(self.layout)
        try:
            paths = sorted(p for p in folder.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return []
        except OSError as e:
            return [FoundAttestation(str(folder), None, f"cannot list it: {e.strerror}")]
        found = []
        for path in paths:
            try:
                found.append(
                    FoundAttestation(str(path), read_limited(path, "attestation", MAX_ENVELOPE))
                )
            except LimitError as e:
                found.append(FoundAttestation(str(path), None, e.message))
            except OSError as e:
                found.append(FoundAttestation(str(path), None, f"cannot read it: {e.strerror}"))
        return found

    def add(
        self, envelope: bytes, *, keyid: str, time_verified: str, subject: Mapping[str, Any]
    ) -> str:
        path = vsa_dir(self.layout) / file_name(keyid, time_verified)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, envelope, mode=FILE_MODE)
        return str(path)


@dataclass(frozen=True)
class AttestationRow:
    """One attestation as ``nvkr release-set show`` lists it, its signature NOT checked (``nvkr
    verify --policy`` does that): ``where``, the ``keyid`` its envelope claims, ``verifier``,
    ``result``, ``levels``, ``time`` (timeVerified), whether its subjects name ``this_set``, or
    the ``problem`` that keeps it from being read (the other fields then None or empty)."""

    where: str
    keyid: str | None = None
    verifier: str | None = None
    result: str | None = None
    levels: tuple[str, ...] = ()
    time: str | None = None
    this_set: bool = False
    problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "keyid": self.keyid,
            "verifier": self.verifier,
            "result": self.result,
            "levels": list(self.levels),
            "timeVerified": self.time,
            "thisReleaseSet": self.this_set,
            "problem": self.problem,
        }


def describe(found: FoundAttestation, digest: str) -> AttestationRow:
    """What ``found`` says about release set index ``digest``, unverified (:class:`AttestationRow`)."""
    if found.data is None:
        return AttestationRow(found.where, problem=found.problem)
    try:
        payload, _, sigs = envelope_parts(json.loads(found.data), found.where)
    except ValueError:
        return AttestationRow(found.where, problem="not JSON")
    except IntegrityError as e:
        return AttestationRow(found.where, problem=e.message)
    keyid = str(sigs[0].get("keyid") or "") or None
    try:
        summary = read_summary(json.loads(payload))
    except ValueError as e:
        return AttestationRow(found.where, keyid, problem=str(e) or "the payload is not JSON")
    return AttestationRow(
        found.where,
        keyid,
        summary.verifier_id,
        summary.result,
        summary.levels,
        summary.time_verified,
        digest in summary.subjects,
    )


class RegistryClients(Protocol):
    """How to reach a registry (:class:`nvkr.oci.access.RegistryAccess`): a
    :class:`~nvkr.oci.registry.RegistryClient` (a context manager) per registry host."""

    def client(self, registry: str, **options: Any) -> Any: ...


@dataclass(frozen=True)
class RegistryAttestations:
    """The attestations attached to release set index ``digest`` in ``registry``/``repository``
    (module docstring), reached with ``access``'s settings and credentials."""

    access: RegistryClients
    registry: str
    repository: str
    digest: str

    @property
    def resource_uri(self) -> str:
        return f"oci://{self.registry}/{self.repository}@{self.digest}"

    def statement_uri(self, manifest_digest: str, statement_digest: str) -> str:
        return f"oci://{self.registry}/{self.repository}@{manifest_digest}"

    def read(self) -> list[FoundAttestation]:
        """Raises: RegistryError: the registry failed or is unreachable (no evidence either
        way); IntegrityError: its referrers tag is not JSON."""
        found = []
        with self.access.client(self.registry) as client:
            for desc in sorted(
                list_referrers(client, self.repository, self.digest), key=lambda d: d["digest"]
            ):
                if is_verification_summary(desc):
                    found.append(self._fetch(client, str(desc["digest"])))
        return found

    def _fetch(self, client: Any, digest: str) -> FoundAttestation:
        where = f"{self.registry}/{self.repository}@{digest}"
        try:
            data, _, actual = client.get_manifest(self.repository, digest)
            doc = json.loads(data)
        except IntegrityError as e:
            return FoundAttestation(where, None, e.message)
        except ValueError:
            return FoundAttestation(where, None, "its manifest is not JSON")
        except RegistryError as e:
            if e.status != 404:
                raise
            return FoundAttestation(where, None, "listed as a referrer, but no such manifest")
        if actual != digest or not isinstance(doc, dict):
            return FoundAttestation(where, None, f"the registry served {actual}")
        subject = (doc.get("subject") or {}).get("digest")
        if subject != self.digest:
            return FoundAttestation(
                where, None, f"listed as a referrer of {self.digest}, its manifest names {subject}"
            )
        layers = [
            la
            for la in doc.get("layers") or []
            if isinstance(la, dict) and la.get("mediaType") == DSSE_ENVELOPE
        ]
        size = layers[0].get("size") if len(layers) == 1 else None
        if not isinstance(size, int) or not 0 < size <= MAX_ENVELOPE:
            return FoundAttestation(
                where, None, f"expected one DSSE envelope layer of at most {MAX_ENVELOPE} bytes"
            )
        buf = io.BytesIO()
        try:
            client.get_blob(self.repository, str(layers[0]["digest"]), buf, size=size)
        except IntegrityError as e:
            return FoundAttestation(where, None, e.message)
        return FoundAttestation(where, buf.getvalue())

    def add(
        self, envelope: bytes, *, keyid: str, time_verified: str, subject: Mapping[str, Any]
    ) -> str:
        """Push the envelope as a referrer of ``subject`` (blobs, the manifest, then the
        referrers tag where the registry has no referrers API). Raises: RegistryError."""
        layer = descriptor(DSSE_ENVELOPE, envelope)
        annotations = {
            ANN_ATTACHMENT: VERIFICATION_SUMMARY,
            mt.ANN_NVKR_RELEASE_SET: str((subject.get("annotations") or {}).get(mt.ANN_REF_NAME)),
            ANN_KEYID: keyid,
            mt.ANN_CREATED: time_verified,
        }
        manifest = manifest_bytes(
            artifact_manifest(
                DSSE_ENVELOPE,
                [layer],
                annotations,
                subject={k: subject[k] for k in ("mediaType", "digest", "size")},
            )
        )
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        repo = self.repository
        with self.access.client(self.registry) as client:
            for blob_digest, data in (
                (str(layer["digest"]), envelope),
                (str(mt.empty_descriptor()["digest"]), mt.EMPTY_JSON),
            ):
                if not client.blob_exists(repo, blob_digest):
                    client.push_blob(
                        repo, blob_digest, len(data), functools.partial(io.BytesIO, data)
                    )
            client.push_manifest(repo, digest, manifest, mt.OCI_MANIFEST)
            if not client.has_referrers_api(repo, self.digest):
                blob = LayoutBlob(digest, len(manifest), mt.OCI_MANIFEST, "attestation")
                entry = referrer_descriptor(blob, json.loads(manifest))
                update_referrers_tag(client, repo, self.digest, [entry])
        return f"{self.registry}/{repo}@{digest}"


__all__ = [
    "MAX_ENVELOPE",
    "VERIFICATION_SUMMARY",
    "VSA_SUFFIX",
    "AttestationPlace",
    "AttestationRow",
    "FoundAttestation",
    "LayoutAttestations",
    "RegistryAttestations",
    "RegistryClients",
    "describe",
    "file_name",
    "is_verification_summary",
    "vsa_dir",
]
