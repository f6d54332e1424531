"""What ``nvkr verify`` found: the report every check writes into, printed as text or JSON.

:func:`nvkr.verify.verify_release_set` fills a :class:`VerifyReport` (the closure, each
artifact's provenance, SBOMs and signatures, the keys, the policy), :func:`nvkr.verify.rebuild`
adds its comparison, and ``nvkr verify --json`` prints :meth:`VerifyReport.to_json`. A problem is
a failed check; any problem makes the command exit 3 (integrity failure).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Problem:
    """One failed check: ``check`` (``closure``, ``metadata``, ``provenance``, ``signature``,
    ``build-record``, ``policy``, ``rebuild`` or ``attestation``), a ``message`` naming what and where, and an optional ``hint``."""

    check: str
    message: str
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"check": self.check, "message": self.message}
        if self.hint:
            doc["hint"] = self.hint
        return doc


@dataclass
class SignatureReport:
    """One DSSE signature attachment: its manifest ``digest``, the key ids in its envelope, the
    given keys' ids that ``verified`` it (empty when no ``--key``), and whether it was checked."""

    digest: str
    keyids: list[str]
    verified: list[str] = field(default_factory=list)
    checked: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "keyids": self.keyids,
            "verifiedBy": self.verified,
            "checked": self.checked,
        }


@dataclass
class AttestationReport:
    """One attestation of an artifact (:mod:`nvkr.releaseset.attestations`: a Secure Boot
    image's PCR predictions): its ``role``, its statement's ``predicate_type``, its manifest's
    ``digest``, the statement's bytes once checked, and the signatures over them."""

    role: str
    predicate_type: str
    digest: str
    statement: bytes | None = None
    signatures: list[SignatureReport] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "predicateType": self.predicate_type,
            "digest": self.digest,
            "signatures": [s.to_json() for s in self.signatures],
        }


@dataclass
class ArtifactReport:
    """One artifact of the release set (one entry of its index).

    ``digest`` is its manifest or index (``sha256:<hex>``), ``subjects`` the digests its
    provenance statement may name (the primary blob, or the index itself), ``provenance`` the
    provenance manifest's digest (None when it has none), ``builder_id`` and ``dependencies``
    (``{"name", "uri", "digest"}``) from the statement, ``sboms`` the SBOM manifests' digests,
    ``signatures`` those over its provenance (or over nothing it holds), ``attestations`` its
    other in-toto statements with their own signatures, ``variants`` the matrix cells
    (``{"gpu", "kubernetes", "arch"}``) the metadata lists it for.
    """

    name: str
    kind: str
    digest: str
    media_type: str
    subjects: list[str] = field(default_factory=list)
    provenance: str | None = None
    statement: bytes | None = None
    builder_id: str | None = None
    dependencies: list[dict[str, Any]] = field(default_factory=list)
    sboms: list[str] = field(default_factory=list)
    signatures: list[SignatureReport] = field(default_factory=list)
    attestations: list[AttestationReport] = field(default_factory=list)
    variants: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "variants": self.variants,
            "digest": self.digest,
            "mediaType": self.media_type,
            "provenance": self.provenance,
            "builderId": self.builder_id,
            "sboms": self.sboms,
            "signatures": [s.to_json() for s in self.signatures],
            "attestations": [a.to_json() for a in self.attestations],
        }


@dataclass
class VerifyReport:
    """Everything ``nvkr verify`` checked, and what failed (``problems``; empty = verified).

    ``blobs``/``bytes`` count the closure (each blob once), ``seconds`` the wall time of the
    checks (rebuild excluded), ``keys`` the given public keys (``{"keyid", "algorithm",
    "keyBits", "securityBits"}``), ``rebuild`` the :func:`nvkr.verify.rebuild` result or None,
    ``build_record`` what :func:`nvkr.releaseset.recordcheck.check_build_record` found (``{"path",
    "present", "checked"[, "signed", "verifiedBy", "invocationId", "startedOn", "finishedOn",
    "actions"]}``; ``checked`` False when there is none or an earlier check failed),
    ``attestation`` the one this run wrote (:func:`nvkr.verify.attest.attest`; None without
    ``--attest``) and ``attestations`` every one a policy's attestations rule considered
    (:class:`nvkr.verify.gate.AttestationGate`; None without that rule).
    """

    path: str
    name: str | None = None
    digest: str | None = None
    blobs: int = 0
    bytes: int = 0
    artifacts: list[ArtifactReport] = field(default_factory=list)
    signatures: list[SignatureReport] = field(default_factory=list)
    keys: list[dict[str, Any]] = field(default_factory=list)
    policy: dict[str, Any] | None = None
    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    rebuild: dict[str, Any] | None = None
    build_record: dict[str, Any] | None = None
    attestation: dict[str, Any] | None = None
    attestations: list[dict[str, Any]] | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, check: str, message: str, hint: str | None = None) -> None:
        """Record a failed check."""
        self.problems.append(Problem(check, message, hint))

    def artifact(self, digest: str) -> ArtifactReport | None:
        """The artifact whose manifest or index is ``digest``."""
        return next((a for a in self.artifacts if a.digest == digest), None)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data (``--json``): camelCase keys, the wall time as
        ``milliseconds`` (an int)."""
        return {
            "path": self.path,
            "ok": self.ok,
            "releaseSet": {
                "name": self.name,
                "digest": self.digest,
                "signatures": [s.to_json() for s in self.signatures],
            },
            "blobs": {"count": self.blobs, "bytes": self.bytes},
            "artifacts": [a.to_json() for a in self.artifacts],
            "keys": self.keys,
            "policy": self.policy,
            "problems": [p.to_json() for p in self.problems],
            "warnings": self.warnings,
            "rebuild": self.rebuild,
            "buildRecord": self.build_record,
            "attestation": self.attestation,
            "attestations": self.attestations,
            "milliseconds": round(self.seconds * 1000),
        }
