"""The promotion gate: a policy's ``attestations`` rule, counted over a set's rebuild attestations.

``nvkr verify --policy FILE`` with ``attestations: {minimum: N, keys: [...]}`` (:class:`~nvkr.verify.policy.AttestationRule`)
asks for N independent rebuilders that agree: :meth:`AttestationGate.apply` reads every
attestation kept for the set (:mod:`nvkr.verify.attestations`: beside the layout, or the REF's
referrers), after this run's own attestation was written, and counts one when, in this order,

1. its envelope is a DSSE envelope of an in-toto statement (payloadType
   ``application/vnd.in-toto+json``);
2. a signature in it verifies with one of the policy's keys (an envelope by no trusted key is
   "untrusted"; one whose signature by a trusted key id fails is "does not verify");
3. its statement is a well-formed VSA v1 (:func:`nvkr.verify.vsa.read_summary`);
4. its subjects name this release set's index digest;
5. its ``verifier.id`` is one of ``verifierIds``, when the rule lists any;
6. its ``verificationResult`` is PASSED and ``verifiedLevels`` holds ``NVKR_REBUILD_IDENTICAL``;
7. its key has not been counted already: N attestations by one key are one rebuilder (the
   earliest by ``timeVerified`` counts, whatever order the registry lists them in).

Every other attestation is listed in the report as ignored, with the first of these it failed;
none of them is ever counted. Fewer than ``minimum`` counted is a policy violation (exit 3)
saying how many counted and why each of the others did not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.sign import (
    PublicKey,
    check_envelope,
    envelope_parts,
    key_id,
    load_public_key,
    parse_public_key,
)
from nvkr.verify.attestations import AttestationPlace, FoundAttestation
from nvkr.verify.policy import AttestationRule, Policy
from nvkr.verify.report import VerifyReport
from nvkr.verify.vsa import PASSED, REBUILD_IDENTICAL, MalformedSummary, Summary, read_summary


@dataclass
class Considered:
    """One attestation the gate looked at: ``where`` it was, the ``keyid`` of its first
    signature (as the envelope claims it), what it says (``summary``, None when unreadable),
    whether it ``counted`` and, when not, the ``reason``."""

    where: str
    keyid: str | None = None
    summary: Summary | None = None
    counted: bool = False
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "keyid": self.keyid,
            **(self.summary.to_json() if self.summary else {}),
            "counted": self.counted,
            "reason": self.reason,
        }


@dataclass
class AttestationGate:
    """A policy's attestations rule with its keys loaded (:meth:`from_policy`)."""

    rule: AttestationRule
    keys: list[PublicKey]
    policy_path: str
    considered: list[Considered] = field(default_factory=list)

    @property
    def key_ids(self) -> list[str]:
        """The ids of the keys the rule trusts (64 hex each)."""
        return [key_id(k) for k in self.keys]

    @classmethod
    def from_policy(cls, policy: Policy | None, path: str | None) -> AttestationGate | None:
        """The gate of ``policy`` (None when it has no ``attestations`` rule), its keys read.

        Raises:
            UsageError: a key is missing or no public key, naming the policy and the key's index.
        """
        if policy is None or policy.attestations is None:
            return None
        rule = policy.attestations
        keys: list[PublicKey] = []
        first: dict[str, int] = {}  # key id -> the index that named it first
        for i, ref in enumerate(rule.keys):
            where = f"policy {path}: attestations.keys[{i}]"
            try:
                key = (
                    parse_public_key(ref.encode(), where)
                    if ref.startswith("-----BEGIN")
                    else load_public_key(ref)
                )
            except UsageError as e:
                if e.message.startswith(where):
                    raise
                raise UsageError(f"{where}: {e.message}", hint=e.hint) from e
            kid = key_id(key)
            if kid in first:  # one rebuilder twice: its attestations count once
                raise UsageError(
                    f"{where} is the key of attestations.keys[{first[kid]}] again ({kid[:12]})",
                    hint="list each rebuilder's public key once",
                )
            first[kid] = i
            keys.append(key)
        if rule.minimum > len(keys):
            raise UsageError(
                f"policy {path}: attestations.minimum {rule.minimum} is more than the "
                f"{len(keys)} distinct key(s) it trusts: no release set could pass",
                hint="trust more rebuilders' keys, or lower the minimum",
            )
        return cls(rule, keys, str(path))

    def apply(self, report: VerifyReport, place: AttestationPlace) -> None:
        """Count the attestations ``place`` keeps for ``report``'s release set; record them in
        ``report.attestations`` and a ``policy`` problem when fewer than ``minimum`` count.

        Raises:
            RegistryError: the registry failed while listing or fetching them.
        """
        seen: dict[str, str] = {}  # keyid counted -> where
        items = [self._consider(found, str(report.digest)) for found in place.read()]
        # the earliest of a key's attestations counts (a registry lists them in digest order)
        items.sort(key=lambda c: (c.summary.time_verified if c.summary else "", c.where))
        for item in items:
            if item.counted and item.keyid is not None:
                if item.keyid in seen:
                    item.counted = False
                    item.reason = f"key {item.keyid} was counted already ({seen[item.keyid]})"
                else:
                    seen[item.keyid] = item.where
            self.considered.append(item)
        counted = len(seen)
        report.attestations = [c.to_json() for c in self.considered]
        if report.policy is not None:
            report.policy["attestations"] = {
                "minimum": self.rule.minimum,
                "counted": counted,
                "trustedKeys": self.key_ids,
            }
        if counted >= self.rule.minimum:
            return
        ignored = [c for c in self.considered if not c.counted]
        why = "; ".join(f"{c.where}: {c.reason}" for c in ignored)
        report.fail(
            "policy",
            f"policy attestations: {counted} PASSED rebuild attestation(s) by distinct trusted "
            f"keys for {report.name} ({report.digest}), the policy requires "
            f"{self.rule.minimum}"
            + (f"; ignored: {why}" if why else "; none found" if not self.considered else ""),
            hint="attest with `nvkr verify --rebuild --attest KEY` by another rebuilder whose "
            f"public key {self.policy_path} trusts",
        )
        if report.policy is not None:
            report.policy["violations"] = report.policy.get("violations", 0) + 1

    def _consider(self, found: FoundAttestation, digest: str) -> Considered:
        item = Considered(found.where)
        if found.data is None:
            item.reason = f"unreadable: {found.problem}"
            return item
        try:
            envelope = json.loads(found.data)
            payload, payload_type, sigs = envelope_parts(envelope, found.where)
        except ValueError:
            item.reason = "malformed envelope: not JSON"
            return item
        except IntegrityError as e:
            item.reason = f"malformed envelope: {e.message}"
            return item
        item.keyid = str(sigs[0].get("keyid") or "") or None
        if payload_type != mt.IN_TOTO_JSON:
            item.reason = f"payloadType is {payload_type!r}, expected {mt.IN_TOTO_JSON}"
            return item
        try:
            verified = check_envelope(envelope, self.keys, found.where)
        except IntegrityError as e:
            claimed = {str(s.get("keyid") or "") for s in sigs}
            if claimed & set(self.key_ids):
                item.reason = f"signature does not verify: {e.message}"
            else:
                signers = ", ".join(sorted(k or "(none)" for k in claimed))
                item.reason = f"untrusted key: signed by key id {signers}, not by a policy key"
            return item
        item.keyid = verified.keyids[0]
        try:
            item.summary = summary = read_summary(json.loads(payload))
        except ValueError as e:  # MalformedSummary, or a payload that is no JSON
            reason = str(e) if isinstance(e, MalformedSummary) else "the payload is not JSON"
            item.reason = f"malformed: {reason}"
            return item
        item.reason = self._refusal(summary, digest)
        item.counted = item.reason is None
        return item

    def _refusal(self, summary: Summary, digest: str) -> str | None:
        """Why a verified, well-formed VSA does not count (checks 4 to 6), or None."""
        if digest not in summary.subjects:
            return (
                f"attests another digest: its subjects are {', '.join(summary.subjects[:2])}"
                f"{', ...' if len(summary.subjects) > 2 else ''}, not release set index {digest}"
            )
        ids = self.rule.verifier_ids
        if ids is not None and summary.verifier_id not in ids:
            return f"verifier {summary.verifier_id} is not one of verifierIds ({', '.join(ids)})"
        if summary.result != PASSED:
            return f"verificationResult {summary.result} (levels {', '.join(summary.levels)})"
        if REBUILD_IDENTICAL not in summary.levels:
            return (
                f"verifiedLevels {', '.join(summary.levels)} do not include {REBUILD_IDENTICAL}: "
                "not a rebuild attestation"
            )
        return None
