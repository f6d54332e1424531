"""Signing a materialised release set: DSSE envelopes attached beside it, its digest unchanged.

After :func:`nvkr.releaseset.materialize` has written ``dist/<name>/``, ``nvkr build --sign KEY``
calls :func:`sign_release_set`. A consumer compares release set digests across signed and
unsigned builds, so signing must not change the release set index: every signature is an OCI
artifact *outside* it, listed in the layout's ``index.json`` after the release set entry and
pointing at what it signs through ``subject`` (image-spec v1.1.0 manifest.md; cosign's
ATTESTATION_SPEC puts a DSSE envelope in a layer the same way)::

    index.json manifests:
      [0]   the release set index (ref.name = <name>), untouched
      [1..] one signature manifest per (signed thing, key), each:
              descriptor: artifactType application/vnd.dsse.envelope.v1+json, annotations
                dev.nvkr.attachment=signature, dev.nvkr.keyid=<64 hex>, and
                dev.nvkr.artifact=<name> (or dev.nvkr.release-set=<set name>), and for an
                attestation's in-toto.io/predicate-type=<its statement's predicateType>; no
                ref.name
              manifest:   artifactType application/vnd.dsse.envelope.v1+json, config = the empty
                          descriptor, one layer application/vnd.dsse.envelope.v1+json (the
                          envelope, canonical JSON), subject = the signed manifest or index

What is signed: for each provenance manifest in the set, its statement's exact bytes (payloadType
``application/vnd.in-toto+json``), attached to the artifact the statement describes; the same for
each attestation of an artifact (:mod:`nvkr.releaseset.attestations`: a Secure Boot image's PCR
predictions), whose signature also carries ``in-toto.io/predicate-type``; and an
in-toto Statement naming the release set index by digest (predicateType
:data:`RELEASE_SET_PREDICATE`), attached to the release set index. The index pins every member by
digest, so that one signature covers the whole closure; the per-artifact ones let a consumer that
pulls one artifact check it alone.

Signing is idempotent: signatures are deterministic (Ed25519; ECDSA with RFC 6979), an earlier
signature by the same key is replaced, signatures by other keys are kept. New blobs and
``index.json`` are written under temporary names and renamed into place, blobs before the index,
so a reader sees the old or the new layout, never a dangling reference.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from nvkr.atomic import write_atomic
from nvkr.canonical import canonical_json
from nvkr.errors import IntegrityError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import (
    LayoutReader,
    artifact_manifest,
    blob_name,
    descriptor,
    index_bytes,
    manifest_bytes,
)
from nvkr.oci.layoutdir import BLOB_MODE, FILE_MODE
from nvkr.provenance import STATEMENT_TYPE, digest_set, validate_statement
from nvkr.sign import PrivateKey, key_id, sign_envelope

#: DSSE envelope (secure-systems-lab/dsse envelope.md): artifactType and layer media type.
DSSE_ENVELOPE: Final = "application/vnd.dsse.envelope.v1+json"
#: predicateType of the statement that names the release set index.
RELEASE_SET_PREDICATE: Final = "https://nvkr.dev/attestations/release-set/v1"
#: Descriptor annotation in ``index.json`` saying what an attachment is (``signature``).
ANN_ATTACHMENT: Final = mt.ANN_NVKR_ATTACHMENT
#: Descriptor and manifest annotation: the key id (sha256 hex of the DER SubjectPublicKeyInfo).
ANN_KEYID: Final = "dev.nvkr.keyid"
SIGNATURE: Final = "signature"


# -- reading a release set layout's parts ------------------------------------------------------
def release_set_entry(reader: LayoutReader) -> dict[str, Any]:
    """The ``index.json`` descriptor of the layout's release set: the one entry with a ref.name.

    Raises:
        IntegrityError: none or several entries carry ``org.opencontainers.image.ref.name``, or
            it is not an OCI image index.
    """
    named = [
        m
        for m in reader.index["manifests"]
        if isinstance(m, dict)
        and isinstance(m.get("annotations"), dict)
        and mt.ANN_REF_NAME in m["annotations"]
    ]
    if len(named) != 1:
        raise IntegrityError(
            f"{reader.path}/index.json: {len(named)} entries carry a ref.name, expected the one "
            "release set",
            hint="is this a release set layout written by nvkr build (dist/<name>/)?",
        )
    entry = dict(named[0])
    if entry.get("mediaType") != mt.OCI_INDEX:
        raise IntegrityError(
            f"{reader.path}/index.json: the release set entry has mediaType "
            f"{entry.get('mediaType')!r}, expected {mt.OCI_INDEX}"
        )
    return entry


def statement_layer(manifest: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The one ``application/vnd.in-toto+json`` layer descriptor of a provenance manifest.

    Raises:
        IntegrityError: none or several such layers.
    """
    layers = [
        layer
        for layer in manifest.get("layers") or []
        if isinstance(layer, dict) and layer.get("mediaType") == mt.IN_TOTO_JSON
    ]
    if len(layers) != 1:
        raise IntegrityError(f"{what}: {len(layers)} in-toto statement layers, expected 1")
    return layers[0]


def attestation_role(manifest: Mapping[str, Any]) -> str | None:
    """The role of an artifact's attestation (``pcr-predictions``,
    :mod:`nvkr.releaseset.attestations`): the ``dev.nvkr.attachment`` of an in-toto manifest;
    None for a provenance manifest (which carries none) or any other manifest."""
    annotations = manifest.get("annotations")
    if manifest.get("artifactType") != mt.IN_TOTO_JSON or not isinstance(annotations, dict):
        return None
    role = annotations.get(ANN_ATTACHMENT)
    return str(role) if role else None


def release_set_statement(name: str, index_digest: str, created: str | None) -> bytes:
    """The in-toto Statement v1 (canonical JSON) that signing the release set index signs.

    ``{"_type": "https://in-toto.io/Statement/v1", "subject": [{"name": <name>, "digest":
    {"sha256": <hex>}}], "predicateType": RELEASE_SET_PREDICATE, "predicate": {"name",
    "artifactType": "application/vnd.nvkr.release-set.v1+json"[, "created"]}}``.
    """
    predicate: dict[str, Any] = {"name": name, "artifactType": mt.NVKR_RELEASE_SET}
    if created:
        predicate["created"] = created
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": digest_set(index_digest)}],
        "predicateType": RELEASE_SET_PREDICATE,
        "predicate": predicate,
    }
    validate_statement(statement)
    return canonical_json(statement)


# -- signing -------------------------------------------------------------------------------------
def sign_release_set(layout_dir: Path, key: PrivateKey) -> None:
    """Sign the release set in ``layout_dir`` (``dist/<name>/``) with ``key``, in place.

    Checks the whole closure first (every blob's digest and size; every provenance statement
    valid), so nvkr never signs a corrupt set; then attaches one DSSE envelope per provenance
    and attestation manifest and one for the release set index (shapes in the module docstring). The release set
    index and its digest do not change; ``index.json`` gains the signature entries.

    Args:
        layout_dir: an OCI image layout written by :func:`nvkr.releaseset.materialize`.
        key: an ECDSA or Ed25519 private key (:func:`nvkr.sign.load_private_key`).
    Raises:
        IntegrityError: ``layout_dir`` is not a release set layout, a blob fails its digest or
            size, or a provenance statement is invalid (nothing is written then).
        OSError: the file system refused; ``index.json`` is then as it was.
    """
    layout_dir = Path(layout_dir)
    reader = LayoutReader(layout_dir)
    entry = release_set_entry(reader)
    reader.walk(deep=True)  # every digest and size, before anything gets signed
    index = reader.read_json(entry, referrer="index.json (the release set)")
    name = str(entry["annotations"][mt.ANN_REF_NAME])
    created = (index.get("annotations") or {}).get(mt.ANN_CREATED)
    kid = key_id(key)

    new_blobs: dict[str, bytes] = {}
    signed: list[tuple[int, dict[str, Any]]] = []  # (position of the subject, descriptor)

    def attach(
        position: int,
        payload: bytes,
        subject: Mapping[str, Any],
        labels: dict[str, str],
    ) -> None:
        envelope = canonical_json(sign_envelope(payload, mt.IN_TOTO_JSON, key))
        annotations = {**labels, ANN_KEYID: kid}
        if created:
            annotations[mt.ANN_CREATED] = created
        manifest = manifest_bytes(
            artifact_manifest(
                DSSE_ENVELOPE,
                [descriptor(DSSE_ENVELOPE, envelope)],
                annotations,
                subject=subject,
            )
        )
        new_blobs[descriptor(DSSE_ENVELOPE, envelope)["digest"]] = envelope
        new_blobs[descriptor(mt.OCI_MANIFEST, manifest)["digest"]] = manifest
        signed.append(
            (
                position,
                descriptor(
                    mt.OCI_MANIFEST,
                    manifest,
                    annotations={ANN_ATTACHMENT: SIGNATURE, **labels, ANN_KEYID: kid},
                    artifact_type=DSSE_ENVELOPE,
                ),
            )
        )

    attach(
        -1,
        release_set_statement(name, entry["digest"], created),
        entry,
        {mt.ANN_NVKR_RELEASE_SET: name},
    )
    members = {m["digest"]: (i, m) for i, m in enumerate(index["manifests"])}
    for m in index["manifests"]:
        if m.get("mediaType") != mt.OCI_MANIFEST:
            continue
        what = f"release set {name}: manifest {m['digest']}"
        manifest = reader.read_json(m, referrer=what)
        if manifest.get("artifactType") != mt.IN_TOTO_JSON:
            continue
        layer = statement_layer(manifest, what)
        statement = reader.read_blob(layer, referrer=f"{what} layers")
        validate_statement(json.loads(statement))
        subject = manifest.get("subject")
        if not isinstance(subject, dict) or subject.get("digest") not in members:
            raise IntegrityError(f"{what}: provenance whose subject is not in the release set")
        position, member = members[subject["digest"]]
        label = (member.get("annotations") or {}).get(mt.ANN_NVKR_ARTIFACT, subject["digest"])
        labels = {mt.ANN_NVKR_ARTIFACT: str(label)}
        if attestation_role(manifest):  # tells it from the provenance's signature
            labels[mt.ANN_IN_TOTO_PREDICATE_TYPE] = str(json.loads(statement)["predicateType"])
        attach(position, statement, member, labels)

    _write_signatures(reader, entry, kid, new_blobs, [d for _, d in sorted(signed, key=_order)])


def _order(item: tuple[int, dict[str, Any]]) -> tuple[int, str]:
    return item[0], item[1]["digest"]


def _is_signature_by(desc: Mapping[str, Any], kid: str) -> bool:
    ann = desc.get("annotations") or {}
    return bool(ann.get(ANN_ATTACHMENT) == SIGNATURE and ann.get(ANN_KEYID) == kid)


def _write_signatures(
    reader: LayoutReader,
    entry: dict[str, Any],
    kid: str,
    new_blobs: dict[str, bytes],
    ours: list[dict[str, Any]],
) -> None:
    """Put ``new_blobs`` into the layout and rewrite ``index.json`` (blobs first, then the index);
    then delete the blobs of this key's replaced signatures that nothing references any more."""
    layout = reader.path
    others = [
        m
        for m in reader.index["manifests"]
        if m.get("digest") != entry["digest"] and not _is_signature_by(m, kid)
    ]
    replaced = [m for m in reader.index["manifests"] if _is_signature_by(m, kid)]
    top = dict(reader.index)
    top["manifests"] = [entry, *others, *ours]
    data = index_bytes(top)
    if data == reader.index_bytes and all(reader.blob_path(d).is_file() for d in new_blobs):
        return  # signed by this key already, with these very bytes
    for digest, blob in sorted(new_blobs.items()):
        path = layout / blob_name(digest)
        if not path.is_file():
            _write(path, blob, BLOB_MODE)
    _write(layout / "index.json", data, FILE_MODE)
    stale = set()
    for m in replaced:
        stale.add(m["digest"])
        with contextlib.suppress(OSError, ValueError, IntegrityError):
            for layer in reader.read_json(m).get("layers") or []:
                stale.add(layer["digest"])
    if stale:
        reachable = {b.digest for b in LayoutReader(layout).walk(deep=False)}
        for digest in sorted(stale - reachable):
            with contextlib.suppress(FileNotFoundError):
                (layout / blob_name(digest)).unlink()


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, mode=mode)


# -- keeping signatures across an unchanged rebuild ---------------------------------------------
def keep_signed_layout(target: Path, index_json: bytes) -> bool:
    """True when ``target`` holds this very release set plus signature attachments only.

    :func:`nvkr.releaseset.materialize` asks this before rewriting ``dist/<name>/``: a rebuild
    that gives the same release set (the same ``index.json`` entry, so the same closure) leaves
    a signed layout, and its still-valid signatures, alone. Its closure is walked as
    :func:`nvkr.oci.layoutdir.write_layout` checks a new one (manifests hashed, other blobs'
    sizes); ``nvkr verify`` re-hashes everything.

    Args:
        index_json: the unsigned ``index.json`` bytes materialize would write (one entry).
    """
    try:
        current = json.loads((target / "index.json").read_bytes())
        wanted = json.loads(index_json)
        manifests = current["manifests"]
        if len(manifests) < 2 or manifests[:1] != wanted["manifests"]:
            return False
        rest = {k: v for k, v in current.items() if k != "manifests"}
        if rest != {k: v for k, v in wanted.items() if k != "manifests"}:
            return False
        if not all(
            (m.get("annotations") or {}).get(ANN_ATTACHMENT) == SIGNATURE for m in manifests[1:]
        ):
            return False
        LayoutReader(target).walk(deep=False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IntegrityError):
        return False
    return True


__all__ = [
    "ANN_ATTACHMENT",
    "ANN_KEYID",
    "DSSE_ENVELOPE",
    "RELEASE_SET_PREDICATE",
    "SIGNATURE",
    "attestation_role",
    "keep_signed_layout",
    "release_set_entry",
    "release_set_statement",
    "sign_release_set",
    "statement_layer",
]
