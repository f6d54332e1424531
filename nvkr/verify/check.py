"""Verifying a release set layout: its closure, provenance, SBOMs and signatures.

The consumer's end of the data flow: ``nvkr verify dist/<name>`` calls
:func:`verify_release_set`, which reads the layout (:class:`nvkr.oci.layout.LayoutReader`), finds
the release set (:func:`nvkr.releaseset.signing.release_set_entry`) and checks, in order, each
step only when the one before passed (a corrupt blob would only make every later check fail too):

1. closure: every blob reachable from ``index.json`` exists at its size and hashes to its digest
   (manifests and indexes while walking, every other blob once afterwards); a failure names the
   blob, what references it and the artifact it belongs to;
2. metadata: the release set's metadata lists exactly the artifacts and provenance the index pins;
3. provenance: each statement is a valid in-toto Statement v1 / SLSA v1
   (:func:`nvkr.provenance.validate_statement`), attached (``subject``) to an artifact of the set,
   and names that artifact's own digest (the primary blob, or the image index): a statement
   copied from another artifact fails, naming both;
4. signatures (:mod:`nvkr.releaseset.signing` attachments): each envelope carries the exact
   provenance statement of the artifact it is attached to (or, for the release set index, a
   statement naming the index's digest); with keys, every signature by a given key must verify
   and the release set and every artifact with provenance need one that does. The index pins
   every member by digest, so a member replaced by an older, validly signed one shows as a digest
   mismatch or as a release set signature naming another index;
5. the build record beside the layout (``<dir>.build-record.json``,
   :func:`nvkr.releaseset.recordcheck.check_build_record`), when there is one: a valid statement
   naming exactly this set's index and artifacts by digest (a record of another build or set
   fails, naming the artifact), RFC 3339 times in order, and its DSSE envelope (when present)
   signing its exact bytes, verified with the keys. A set without one (pulled, or built by an
   older nvkr) passes; the report says whether a record was checked.

Problems are collected in a :class:`nvkr.verify.report.VerifyReport`, not raised, so one run
reports all of them; the CLI turns any into exit 3.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from nvkr.errors import IntegrityError, NvkrError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob, LayoutReader
from nvkr.provenance import validate_statement
from nvkr.releaseset.metadata import read_metadata
from nvkr.releaseset.record import record_paths
from nvkr.releaseset.recordcheck import check_build_record
from nvkr.releaseset.signing import (
    DSSE_ENVELOPE,
    RELEASE_SET_PREDICATE,
    attestation_role,
    release_set_entry,
    statement_layer,
)
from nvkr.sign import PublicKey, check_envelope, envelope_parts
from nvkr.verify.documents import (
    artifact_kind,
    document_label,
    hash_leaf,
    is_sbom,
    key_facts,
    metadata_artifacts,
    metadata_attestations,
    primary_digests,
    sha256_subjects,
)
from nvkr.verify.policy import Policy, apply_policy
from nvkr.verify.report import (
    ArtifactReport,
    AttestationReport,
    SignatureReport,
    VerifyReport,
)


def verify_release_set(
    path: Path,
    *,
    keys: Sequence[PublicKey] = (),
    policy: Policy | None = None,
    policy_path: str | None = None,
) -> VerifyReport:
    """Check the release set layout at ``path`` (module docstring for what and in which order).

    Args:
        path: an OCI image layout holding one release set (``dist/<name>/``).
        keys: public keys (:func:`nvkr.sign.load_public_key`); when given, signatures are
            required and every signature by one of them must verify.
        policy: checked last (:func:`nvkr.verify.policy.apply_policy`).
        policy_path: the policy file's name, for the report.
    Returns:
        the report; ``report.ok`` is False when any check failed (``report.problems``).
    Raises:
        IntegrityError: ``path`` is no OCI layout, or its ``index.json`` is unreadable or names
            no release set (there is nothing to report on).
    """
    started = time.perf_counter()
    verifier = _Verifier(LayoutReader(path), keys)
    report = verifier.report
    if verifier.closure():
        verifier.collect()
        if report.ok:
            verifier.provenance()
            verifier.attestations()
            verifier.signatures()
        if report.ok:
            verifier.build_record()
        if report.ok and policy is not None:
            apply_policy(policy, report, path=policy_path)
    if report.build_record is None:  # an earlier step failed: say whether there is one
        record = record_paths(path)[0]
        report.build_record = {"path": str(record), "present": record.is_file(), "checked": False}
    report.seconds = time.perf_counter() - started
    return report


_Attachment = tuple[dict[str, Any], dict[str, Any]]  # (descriptor, manifest)


class _Verifier:
    """One verification run: the layout, the keys, the report, and what earlier steps found."""

    def __init__(self, reader: LayoutReader, keys: Sequence[PublicKey]) -> None:
        self.reader = reader
        self.keys = list(keys)
        self.entry = release_set_entry(reader)
        self.report = VerifyReport(path=str(reader.path), digest=str(self.entry["digest"]))
        self.report.name = str(self.entry["annotations"][mt.ANN_REF_NAME])
        self.report.keys = [key_facts(k) for k in self.keys]
        self.where = f"release set {self.report.name}"
        self._docs: dict[str, dict[str, Any]] = {}
        self.index: dict[str, Any] = {}
        self.members: list[dict[str, Any]] = []
        self.provenances: list[_Attachment] = []
        self.attestation_manifests: list[_Attachment] = []
        self.signature_manifests: list[_Attachment] = []
        self.sboms: list[_Attachment] = []
        self.failed_provenance: set[str] = set()
        self.metadata: dict[str, Any] = {}

    def doc(self, desc: Mapping[str, Any], referrer: str = "index.json") -> dict[str, Any]:
        """A manifest or index of the layout, read (and its digest checked) once."""
        digest = str(desc["digest"])
        if digest not in self._docs:
            self._docs[digest] = self.reader.read_json(desc, referrer=referrer)
        return self._docs[digest]

    # -- 1. closure ------------------------------------------------------------------------------
    def closure(self) -> bool:
        """Walk every root (the release set's members, then the other ``index.json`` entries),
        then hash every other blob once. Every damaged root and blob is reported (a root's walk
        stops at its first failure: what lies below a damaged manifest cannot be trusted).
        Returns whether all of it checked out."""
        report, reader = self.report, self.reader
        try:
            self.index = self.doc(self.entry, f"index.json ({self.where})")
        except IntegrityError as e:
            report.fail("closure", f"{self.where} index: {e.message}", e.hint)
            return False
        self.members = [m for m in self.index.get("manifests") or [] if isinstance(m, dict)]
        roots = [(m, f"{self.where} manifests[{i}]") for i, m in enumerate(self.members)]
        roots += [
            (m, f"index.json manifests[{i}]")
            for i, m in enumerate(reader.index["manifests"])
            if m.get("digest") != self.entry["digest"]
        ]
        reached = [LayoutBlob(self.entry["digest"], self.entry["size"], mt.OCI_INDEX, "index.json")]
        seen = {self.entry["digest"]}
        leaves: list[tuple[LayoutBlob, str]] = []
        damaged: set[str] = set()
        for desc, referrer in roots:
            try:
                doc = self.doc(desc, referrer) if desc.get("mediaType") in mt.MANIFEST_TYPES else {}
                label = f"{referrer} ({document_label(desc, doc)})"
                for blob in reader.walk(root=desc, deep=False):
                    if blob.digest in seen:
                        continue
                    seen.add(blob.digest)
                    reached.append(blob)
                    if blob.media_type not in mt.MANIFEST_TYPES:
                        leaves.append((blob, label))
            except IntegrityError as e:
                if e.message not in damaged:  # a blob shared by several roots: named once
                    damaged.add(e.message)
                    report.fail("closure", f"{referrer}: {e.message}", e.hint)
        report.blobs = len(reached)
        report.bytes = sum(b.size for b in reached)
        # Leaves are hashed in parallel (hashlib releases the GIL): machine images are hundreds
        # of MiB each. Failures are reported in walk order, as a sequential walk would.
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            problems = list(
                pool.map(lambda leaf: hash_leaf(reader.blob_path(leaf[0].digest), leaf[0]), leaves)
            )
        for (blob, label), problem in zip(leaves, problems, strict=True):
            if problem:
                report.fail(
                    "closure",
                    f"{label}: blob {blob.digest} ({blob.media_type}, referenced by "
                    f"{blob.referrer}) {problem}",
                    hint=f"{reader.blob_path(blob.digest)} was modified or replaced; rebuild or "
                    "pull the release set again",
                )
        if not report.ok:
            return False
        unreferenced = reader.unreferenced(reached)
        if unreferenced:
            report.warnings.append(
                f"{len(unreferenced)} blob(s) under blobs/ are not referenced: "
                + ", ".join(unreferenced[:3])
                + (" ..." if len(unreferenced) > 3 else "")
            )
        return True

    # -- 2. members and metadata -----------------------------------------------------------------
    def collect(self) -> None:
        """Sort the release set's members (and the other ``index.json`` entries) into artifacts,
        provenance, SBOMs and signatures; check them against the metadata."""
        report = self.report
        try:
            meta = read_metadata(self.reader.path, report.name)
        except NvkrError as e:
            report.fail("metadata", f"{self.where}: {e.message}", e.hint)
            return
        # index.json's ref.name is not covered by any digest; the metadata's name is (the release
        # set index pins the metadata manifest). A renamed entry must not pass as the signed set.
        if meta.get("name") != report.name:
            report.fail(
                "metadata",
                f"{self.where}: index.json names it {report.name!r}, its metadata (covered by the "
                f"release set digest) names it {meta.get('name')!r}",
                hint="index.json was edited: restore the ref.name annotation or rebuild",
            )
            report.name = str(meta.get("name"))
            return
        self.metadata = meta
        kinds, variants, meta_provenance = metadata_artifacts(meta)
        members = self.members[1:]  # [0] is the metadata manifest
        member_digests = {m["digest"] for m in members}
        extra = [m for m in self.reader.index["manifests"] if m["digest"] != self.entry["digest"]]
        for desc in [*members, *extra]:
            self._sort_member(desc, desc["digest"] in member_digests, kinds, variants)
        self._check_held(kinds, meta_provenance)
        for desc, doc in self.sboms:
            subject = (doc.get("subject") or {}).get("digest")
            for art in report.artifacts:
                if subject == art.digest or subject in self._children(art):
                    art.sboms.append(str(desc["digest"]))

    def _sort_member(
        self,
        desc: dict[str, Any],
        is_member: bool,
        kinds: dict[str, str],
        variants: dict[str, list[dict[str, str]]],
    ) -> None:
        """File one ``index.json`` entry (a release set member when ``is_member``) as a
        provenance statement, a signature, an SBOM or an artifact; warn about anything else."""
        report = self.report
        doc = self.doc(desc)
        artifact_type = doc.get("artifactType") if desc["mediaType"] == mt.OCI_MANIFEST else None
        if artifact_type == mt.IN_TOTO_JSON and attestation_role(doc):
            self.attestation_manifests.append((desc, doc))
        elif artifact_type == mt.IN_TOTO_JSON:
            self.provenances.append((desc, doc))
        elif artifact_type == DSSE_ENVELOPE:
            self.signature_manifests.append((desc, doc))
        elif is_sbom(doc):
            self.sboms.append((desc, doc))
        elif is_member:
            name = (desc.get("annotations") or {}).get(mt.ANN_NVKR_ARTIFACT, "?")
            report.artifacts.append(
                ArtifactReport(
                    name=str(name),
                    kind=artifact_kind(desc, doc, kinds),
                    digest=str(desc["digest"]),
                    media_type=str(desc["mediaType"]),
                    subjects=primary_digests(doc, desc),
                    variants=variants.get(str(desc["digest"]), []),
                )
            )
        else:
            report.warnings.append(
                f"index.json lists {desc['digest']} ({desc['mediaType']}), which is neither "
                "the release set nor a signature or SBOM of it"
            )

    def _check_held(self, kinds: dict[str, str], meta_provenance: dict[str, str]) -> None:
        """Fail for each artifact and provenance statement the metadata names and the index
        does not hold."""
        report = self.report
        held = {a.digest for a in report.artifacts}
        for digest in sorted(set(kinds) - held):
            report.fail(
                "metadata",
                f"{self.where}: its metadata lists artifact {digest}, which its index does not hold",
                hint="the release set index and its metadata disagree: rebuild it",
            )
        provenance_held = {d["digest"] for d, _ in self.provenances}
        for digest, prov in sorted(meta_provenance.items()):
            if prov not in provenance_held:
                report.fail(
                    "metadata",
                    f"{self.where}: its metadata names provenance {prov} for artifact {digest}, "
                    "which its index does not hold",
                )
        attestations_held = {d["digest"] for d, _ in self.attestation_manifests}
        for digest, (role, owner) in sorted(metadata_attestations(self.metadata).items()):
            if digest not in attestations_held:
                report.fail(
                    "metadata",
                    f"{self.where}: its metadata names {role} {digest} for artifact {owner}, "
                    "which its index does not hold",
                )

    def _children(self, art: ArtifactReport) -> list[str]:
        """Digests of the manifests an image index lists (an SBOM may attach to one of them)."""
        if art.media_type not in mt.INDEX_TYPES:
            return []
        index = self.doc({"digest": art.digest, "mediaType": art.media_type})
        return [str(m.get("digest")) for m in index.get("manifests") or []]

    # -- 3. provenance ---------------------------------------------------------------------------
    def provenance(self) -> None:
        """Each statement valid, attached to an artifact, and naming that artifact's digest."""
        report = self.report
        for desc, doc in self.provenances:
            subject = (doc.get("subject") or {}).get("digest")
            art = report.artifact(str(subject))
            if art is None:
                report.fail(
                    "provenance",
                    f"provenance {desc['digest']} is attached to {subject}, which is not an "
                    f"artifact of {self.where}",
                )
                continue
            what = f"provenance {desc['digest']} of artifact {art.name} ({art.digest})"
            self.failed_provenance.add(art.digest)  # until it passed
            read = self._statement(doc, what)
            if read is None:
                continue
            _, data, statement = read
            named = sha256_subjects(statement)
            foreign = [d for d in named if d not in art.subjects]
            if not named or foreign:
                report.fail("provenance", self._copied(what, art, foreign or ["no sha256 digest"]))
                continue
            if art.provenance is not None:
                report.fail(
                    "provenance",
                    f"artifact {art.name} ({art.digest}) has two provenance "
                    f"statements: {art.provenance} and {desc['digest']}",
                )
                continue
            art.provenance = str(desc["digest"])
            art.statement = data
            self.failed_provenance.discard(art.digest)
            predicate = statement.get("predicate") or {}
            builder = (predicate.get("runDetails") or {}).get("builder") or {}
            art.builder_id = builder.get("id")
            deps = (predicate.get("buildDefinition") or {}).get("resolvedDependencies") or []
            art.dependencies = [d for d in deps if isinstance(d, dict)]

    def _statement(
        self, doc: Mapping[str, Any], what: str
    ) -> tuple[dict[str, Any], bytes, dict[str, Any]] | None:
        """The in-toto statement an attestation manifest ``doc`` holds: its layer, its exact
        bytes and the statement, checked; None (with the failure reported) when it is missing,
        corrupt, not JSON or not a valid statement."""
        try:
            layer = statement_layer(doc, what)
            data = self.reader.read_blob(layer, referrer=what)
            statement = json.loads(data)
            validate_statement(statement)
        except IntegrityError as e:
            self.report.fail("provenance", f"{what}: {e.message}", e.hint)
            return None
        except ValueError as e:
            self.report.fail("provenance", f"{what}: the statement is not JSON: {e}")
            return None
        return dict(layer), data, statement

    def attestations(self) -> None:
        """Each attestation of an artifact (a Secure Boot image's PCR predictions) is a valid
        statement of the predicateType its layer names, attached to an artifact and about that
        artifact's own digest."""
        report = self.report
        for desc, doc in self.attestation_manifests:
            role = str(attestation_role(doc))
            subject = (doc.get("subject") or {}).get("digest")
            art = report.artifact(str(subject))
            if art is None:
                report.fail(
                    "provenance",
                    f"{role} {desc['digest']} is attached to {subject}, which is not an artifact "
                    f"of {self.where}",
                )
                continue
            what = f"{role} {desc['digest']} of artifact {art.name} ({art.digest})"
            attestation = AttestationReport(
                role=role, predicate_type="", digest=str(desc["digest"])
            )
            art.attestations.append(attestation)
            read = self._statement(doc, what)
            if read is None:
                continue
            layer, data, statement = read
            attestation.predicate_type = str(statement.get("predicateType"))
            stated = (layer.get("annotations") or {}).get(mt.ANN_IN_TOTO_PREDICATE_TYPE)
            if stated is not None and stated != attestation.predicate_type:
                report.fail(
                    "provenance",
                    f"{what}: the statement's predicateType is {attestation.predicate_type!r}, "
                    f"its layer says {stated!r}",
                )
                continue
            named = sha256_subjects(statement)
            foreign = [d for d in named if d not in art.subjects]
            if not named or foreign:
                report.fail("provenance", self._copied(what, art, foreign or ["no sha256 digest"]))
                continue
            attestation.statement = data

    def _copied(self, what: str, art: ArtifactReport, foreign: list[str]) -> str:
        owner = next((a for a in self.report.artifacts if foreign[0] in a.subjects), None)
        source = f" (artifact {owner.name}, {owner.digest})" if owner else ""
        return (
            f"{what} describes {foreign[0]}{source}, not this artifact, whose digest is "
            f"{art.subjects[0]}: a statement copied from another artifact"
        )

    # -- 4. signatures ---------------------------------------------------------------------------
    def signatures(self) -> None:
        """Each envelope signs what it is attached to; with keys, each verifies and the release
        set and every artifact with provenance carry one."""
        report = self.report
        for desc, doc in self.signature_manifests:
            subject = str((doc.get("subject") or {}).get("digest"))
            art = report.artifact(subject)
            if art is None and subject != self.entry["digest"]:
                report.fail(
                    "signature",
                    f"signature {desc['digest']} is attached to {subject}, which is neither "
                    f"{self.where} ({self.entry['digest']}) nor one of its artifacts",
                    hint="the release set index was replaced after signing (a member swapped?), "
                    "or the signature belongs to another release set",
                )
                continue
            target = f"artifact {art.name} ({art.digest})" if art else f"{self.where} ({subject})"
            what = f"signature {desc['digest']} of {target}"
            envelope = self._envelope(desc, doc, what)
            if envelope is None:
                continue
            raw, (payload, payload_type, sigs) = envelope
            sig_report = SignatureReport(
                digest=str(desc["digest"]), keyids=[str(s.get("keyid", "")) for s in sigs]
            )
            attested = (
                next((a for a in art.attestations if a.statement == payload), None) if art else None
            )
            if attested is not None:
                what = f"signature {desc['digest']} of the {attested.role} of {target}"
                attested.signatures.append(sig_report)
            else:
                (art.signatures if art else report.signatures).append(sig_report)
            if payload_type != mt.IN_TOTO_JSON:
                report.fail(
                    "signature",
                    f"{what}: payloadType is {payload_type!r}, expected {mt.IN_TOTO_JSON}",
                )
            elif art is None:
                self._release_set_statement(payload, what)
            elif attested is None:
                self._artifact_statement(art, payload, what)
            given = {k["keyid"] for k in report.keys}
            if self.keys and (given & set(sig_report.keyids) or "" in sig_report.keyids):
                # signatures by other keys only are another party's: not ours to judge
                sig_report.checked = True
                try:
                    verified = check_envelope(raw, self.keys, what)
                except IntegrityError as e:
                    report.fail("signature", e.message, e.hint)
                    continue
                sig_report.verified = list(verified.keyids)
        if self.keys:
            self._require_signatures()

    def _artifact_statement(self, art: ArtifactReport, payload: bytes, what: str) -> None:
        """A signature attached to ``art`` that signs none of its attestations: it must sign its
        provenance."""
        if art.digest in self.failed_provenance:
            return  # reported under provenance; the payload has nothing sound to match
        if art.statement is None:
            self.report.fail("signature", f"{what}: the artifact has no provenance to compare with")
        elif payload != art.statement:
            others = "".join(f" nor its {a.role} ({a.digest})" for a in art.attestations)
            self.report.fail(
                "signature",
                f"{what}: the signed statement is "
                + ("neither" if others else "not")
                + f" the artifact's provenance ({art.provenance}){others}",
                hint="the statement or the signature was replaced",
            )

    def _envelope(
        self, desc: Mapping[str, Any], doc: Mapping[str, Any], what: str
    ) -> tuple[Any, tuple[bytes, str, list[Any]]] | None:
        """The envelope in a signature manifest's one DSSE layer, and its parts."""
        layers = [
            la
            for la in doc.get("layers") or []
            if isinstance(la, dict) and la.get("mediaType") == DSSE_ENVELOPE
        ]
        if len(layers) != 1:
            self.report.fail("signature", f"{what}: {len(layers)} DSSE envelope layers, expected 1")
            return None
        try:
            envelope = json.loads(self.reader.read_blob(layers[0], referrer=what))
            parts = envelope_parts(envelope, what)
        except IntegrityError as e:
            message = e.message if e.message.startswith(what) else f"{what}: {e.message}"
            self.report.fail("signature", message, e.hint)
            return None
        except ValueError as e:
            self.report.fail("signature", f"{what}: the envelope is not JSON: {e}")
            return None
        return envelope, parts

    def _release_set_statement(self, payload: bytes, what: str) -> None:
        try:
            statement = json.loads(payload)
            validate_statement(statement)
        except (ValueError, IntegrityError) as e:
            self.report.fail("signature", f"{what}: the signed payload is no valid statement: {e}")
            return
        if statement.get("predicateType") != RELEASE_SET_PREDICATE:
            self.report.fail(
                "signature",
                f"{what}: predicateType is {statement.get('predicateType')!r}, expected "
                f"{RELEASE_SET_PREDICATE}",
            )
            return
        named = sha256_subjects(statement)
        if named != [self.entry["digest"]]:
            self.report.fail(
                "signature",
                f"{what}: the signed statement names release set index "
                f"{', '.join(named) or '(none)'}, the layout holds {self.entry['digest']}",
                hint="the release set index was replaced after signing (a member swapped for "
                "another?)",
            )

    def _require_signatures(self) -> None:
        """The release set and every artifact with provenance need a signature that verified
        with a given key (one that failed was reported already)."""
        given = ", ".join(k["keyid"] for k in self.report.keys)
        subjects = [(f"{self.where} ({self.entry['digest']})", self.report.signatures)]
        subjects += [
            (f"artifact {art.name} ({art.digest})", art.signatures)
            for art in self.report.artifacts
            if art.provenance is not None
        ]
        subjects += [
            (f"the {att.role} {att.digest} of artifact {art.name} ({art.digest})", att.signatures)
            for art in self.report.artifacts
            for att in art.attestations
            if att.statement is not None
        ]
        for what, sigs in subjects:
            if any(s.verified or s.checked for s in sigs):
                continue
            if not sigs:
                self.report.fail(
                    "signature",
                    f"{what} is not signed, and --key {given} requires a signature",
                    hint="sign it with `nvkr build --sign KEY`, or verify without --key",
                )
                continue
            signers = ", ".join(sorted({k or "(none)" for s in sigs for k in s.keyids}))
            self.report.fail(
                "signature",
                f"{what} is not signed by any given key (signed by key id {signers}; given "
                f"{given})",
                hint="pass the public key of the key that signed it with --key",
            )

    # -- 5. the build record -------------------------------------------------------------------
    def build_record(self) -> None:
        """The build record beside the layout, when there is one (module docstring)."""
        check = check_build_record(
            self.reader.path, self.metadata, str(self.entry["digest"]), self.keys
        )
        self.report.build_record = check.to_json()
        for message, hint in check.problems:
            self.report.fail("build-record", message, hint)
        if check.present and self.keys and not check.signed:
            self.report.warnings.append(
                f"build record {check.path} is not signed (no {record_paths(self.reader.path)[1].name})"
            )
