"""``nvkr verify --rebuild --attest KEY``: the run's verdict as a signed VSA, kept for the set.

After the checks and the rebuild (:func:`nvkr.verify.verify_release_set`,
:func:`nvkr.verify.rebuild`), :meth:`Attester.attest` states the result as a SLSA Verification
Summary Attestation (:func:`nvkr.verify.vsa.vsa_statement`: PASSED when the report has no
problem, else FAILED, which is evidence too), signs its canonical JSON into a DSSE envelope with
the key (payloadType ``application/vnd.in-toto+json``, as nvkr's provenance, :mod:`nvkr.sign`)
and keeps it where the set is (:mod:`nvkr.verify.attestations`: ``dist/<name>.vsa/`` beside a
layout, a referrer of the index in a registry), and in ``--attest-out FILE`` too. This happens
before a policy's attestations rule counts (:mod:`nvkr.verify.gate`), so the run's own
attestation is among those counted. A rebuild that could not run (a build error, exit 1) states
nothing and writes nothing. :func:`summary_lines` words both for ``nvkr verify``'s text output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.atomic import write_atomic
from nvkr.bounds import read_limited
from nvkr.canonical import canonical_json
from nvkr.errors import NvkrError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.oci.layoutdir import FILE_MODE
from nvkr.provenance import digest_set, timestamp
from nvkr.releaseset.metadata import read_metadata
from nvkr.releaseset.signing import release_set_entry
from nvkr.sign import PrivateKey, key_id, sign_envelope
from nvkr.verify.attestations import AttestationPlace
from nvkr.verify.report import VerifyReport
from nvkr.verify.vsa import REBUILD_POLICY, statement_payload, vsa_statement


@dataclass(frozen=True)
class Attester:
    """Signs the run's VSA with ``key`` and keeps it in ``place`` (and ``out`` when given);
    ``policy`` is the ``--policy`` file the run applied (the VSA's ``policy``), if any."""

    key: PrivateKey
    place: AttestationPlace
    out: Path | None = None
    policy: Path | None = None

    def attest(self, report: VerifyReport, layout: Path, *, now: float | None = None) -> None:
        """Attest ``report`` (a finished verification of ``layout``) and record what was
        written in ``report.attestation`` (``{"where", "out", "keyid", "digest"`` of the
        envelope, ``"result", "levels", "timeVerified", "statement"}``).

        Raises:
            UsageError: the policy file cannot be read any more.
            RegistryError: the push failed (``out`` is written first).
            OSError: ``out`` or the attestation file could not be written.
        """
        entry = release_set_entry(LayoutReader(layout))
        name = str(entry["annotations"][mt.ANN_REF_NAME])
        try:
            meta: Mapping[str, Any] = read_metadata(layout, name)
        except NvkrError:  # a damaged set: its attestation names the index alone
            meta = {"name": name, "artifacts": []}
        when = timestamp(now)
        statement = vsa_statement(
            metadata=meta,
            index_digest=str(entry["digest"]),
            passed=report.ok,
            resource_uri=self.place.resource_uri,
            policy=self._policy(),
            input_attestations=self._inputs(report),
            time_verified=when,
        )
        envelope = canonical_json(
            sign_envelope(statement_payload(statement), mt.IN_TOTO_JSON, self.key)
        )
        kid = key_id(self.key)
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.out, envelope, mode=FILE_MODE)
        where = self.place.add(envelope, keyid=kid, time_verified=when, subject=entry)
        predicate = statement["predicate"]
        report.attestation = {
            "where": where,
            "out": str(self.out) if self.out is not None else None,
            "keyid": kid,
            "digest": "sha256:" + hashlib.sha256(envelope).hexdigest(),
            "result": predicate["verificationResult"],
            "levels": predicate["verifiedLevels"],
            "timeVerified": when,
            "statement": statement,
        }

    def _policy(self) -> dict[str, Any]:
        """The VSA's ``policy``: the --policy file by URI and digest, else the rebuild check."""
        if self.policy is None:
            return {"uri": REBUILD_POLICY}
        data = read_limited(self.policy, "policy")
        return {
            "uri": self.policy.absolute().as_uri(),
            "digest": {"sha256": hashlib.sha256(data).hexdigest()},
        }

    def _inputs(self, report: VerifyReport) -> list[dict[str, Any]]:
        """The provenance statements and attestations (a Secure Boot image's PCR predictions)
        the run checked, each once, by the digest of its bytes."""
        out: dict[str, dict[str, Any]] = {}
        for art in report.artifacts:
            checked = [(f"provenance of {art.name}", art.provenance, art.statement)]
            checked += [
                (f"{a.role} of {art.name}", a.digest, a.statement) for a in art.attestations
            ]
            for name, manifest, statement in checked:
                if manifest is None or statement is None:
                    continue
                digest = "sha256:" + hashlib.sha256(statement).hexdigest()
                out.setdefault(
                    digest,
                    {
                        "name": name,
                        "uri": self.place.statement_uri(manifest, digest),
                        "digest": digest_set(digest),
                        "mediaType": mt.IN_TOTO_JSON,
                    },
                )
        return list(out.values())


def summary_lines(doc: Mapping[str, Any]) -> list[str]:
    """``nvkr verify``'s text lines for the attestation written and those a policy counted
    (``doc`` is :meth:`VerifyReport.to_json`)."""
    lines = []
    written = doc.get("attestation")
    if written:
        lines.append(
            f"  attestation {written['result']} ({', '.join(written['levels'])}) signed by key "
            f"{written['keyid'][:12]}: {written['where']}"
            + (f", and {written['out']}" if written.get("out") else "")
        )
    considered = doc.get("attestations")
    if considered is not None:
        counted = sum(1 for c in considered if c["counted"])
        lines.append(f"  attestations: {counted} counted of {len(considered)} found")
        for c in considered:
            key = (c.get("keyid") or "?")[:12]
            state = "counted" if c["counted"] else f"ignored: {c['reason']}"
            lines.append(f"    {c['where']} (key {key}): {state}")
    return lines
