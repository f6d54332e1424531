"""An artifact's attestations: in-toto statements its action made about it, attached to it.

Besides its provenance (:func:`nvkr.releaseset.assemble`'s ``_provenance``, which nvkr states),
an action may output a statement of its own about the artifact: a Secure Boot node image's PCR
predictions (``pcr-predictions.intoto.json``, :mod:`nvkr.builders.node_image.secureboot`). The
builder names such outputs in the release-set spec (the ``attestations`` release field,
:attr:`nvkr.releasespec.SpecArtifact.attestations`: the output's role and the predicateType its
statement must carry); the release set then holds each as a manifest of its own, attached to
the artifact, and not as a layer of the artifact's manifest::

    release set index entry: mediaType application/vnd.oci.image.manifest.v1+json, annotations
                             dev.nvkr.artifact=<name>, dev.nvkr.attachment=<role>
    manifest:  artifactType application/vnd.in-toto+json, config = the empty descriptor,
               one layer application/vnd.in-toto+json (the statement's exact bytes; annotations
               org.opencontainers.image.title=<output name>, in-toto.io/predicate-type=<type>),
               annotations dev.nvkr.artifact, dev.nvkr.attachment, org.opencontainers.image.created,
               subject = the artifact's manifest (or index)

So it is signed as the provenance is (:func:`nvkr.releaseset.signing.sign_release_set` signs
every in-toto manifest of the set), published as a referrer of the artifact, pulled and copied
with the set, and listed in the metadata (the artifact entry's ``attestations``: ``[{"role",
"predicateType", "mediaType", "digest", "size"}]``). ``dev.nvkr.attachment`` tells it apart from
the provenance, which carries none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from nvkr.action import ActionResult
from nvkr.errors import BuildError, IntegrityError
from nvkr.jsondoc import JsonObject
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import artifact_manifest, descriptor, manifest_bytes
from nvkr.provenance import validate_statement
from nvkr.releaseset.artifacts import _Blobs, _Packed, _trim
from nvkr.releasespec import SpecArtifact


@dataclass(frozen=True)
class _Attached:
    """One attestation of an artifact as assembled: its ``role``, its statement's
    ``predicate_type`` and its manifest's descriptor in the release set index (``desc``)."""

    role: str
    predicate_type: str
    desc: JsonObject

    def to_metadata(self) -> dict[str, Any]:
        return {"role": self.role, "predicateType": self.predicate_type, **_trim(self.desc)}


def _attestations(
    first: SpecArtifact,
    result: ActionResult,
    packed: _Packed,
    blobs: _Blobs,
    *,
    what: str,
    label: str,
    created: str,
) -> tuple[_Attached, ...]:
    """The attestation manifests of one artifact (module docstring), one per attestation the
    spec names for it.

    Raises:
        BuildError: the result lacks the output (or has several), or its statement is no valid
            in-toto Statement v1, has another predicateType, or is about another artifact.
        IntegrityError: the statement's blob is missing from the store or corrupt.
    """
    found: list[_Attached] = []
    for att in first.attestations:
        out = result.output(att.role, f"{what} ({att.role})")
        where = f"{what}: its {att.role} output {out.name!r}"
        if out.media_type != mt.IN_TOTO_JSON:
            raise BuildError(
                f"{where} has mediaType {out.media_type!r}, expected {mt.IN_TOTO_JSON}"
            )
        blobs.reference(out.digest, out.size, mt.IN_TOTO_JSON, where)
        data = blobs.read_checked(out.digest, where)
        try:
            statement = json.loads(data)
            validate_statement(statement)
        except (ValueError, IntegrityError) as e:
            reason = e.message if isinstance(e, IntegrityError) else f"not JSON: {e}"
            raise BuildError(f"{where} is no valid in-toto statement: {reason}") from e
        if statement.get("predicateType") != att.predicate_type:
            raise BuildError(
                f"{where} has predicateType {statement.get('predicateType')!r}, expected "
                f"{att.predicate_type}"
            )
        named = {
            "sha256:" + str(s["digest"]["sha256"])
            for s in statement["subject"]
            if isinstance(s.get("digest"), dict) and "sha256" in s["digest"]
        }
        own = {"sha256:" + s["digest"]["sha256"] for s in packed.subjects}
        if not named or not named <= own:
            raise BuildError(
                f"{where} is about {', '.join(sorted(named)) or 'no sha256 digest'}, the "
                f"artifact is {', '.join(sorted(own))}",
                hint="the builder stated it about another file; this is a bug in nvkr, please "
                "report it",
            )
        layer = descriptor(
            mt.IN_TOTO_JSON,
            out.digest,
            out.size,
            annotations={mt.ANN_TITLE: out.name, mt.ANN_IN_TOTO_PREDICATE_TYPE: att.predicate_type},
        )
        labels = {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_NVKR_ATTACHMENT: att.role}
        manifest = manifest_bytes(
            artifact_manifest(
                mt.IN_TOTO_JSON,
                [layer],
                {**labels, mt.ANN_CREATED: created},
                subject=packed.desc,
            )
        )
        blobs.put(manifest, mt.OCI_MANIFEST)
        desc = descriptor(mt.OCI_MANIFEST, manifest, annotations=labels)
        found.append(_Attached(att.role, att.predicate_type, desc))
    return tuple(found)
