"""Checking and walking OCI documents, shared by the layout reader
(:class:`~nvkr.oci.layout.LayoutReader`) and the store closure
(:func:`~nvkr.oci.closure.store_closure`): a descriptor's digest and size, inline ``data``, a
JSON document's media type, and the children (manifests, config, layers, a referrer's subject)
a manifest or index names.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

from nvkr.canonical import DIGEST_RE
from nvkr.errors import IntegrityError
from nvkr.jsondoc import json_kind, load_json_object
from nvkr.oci import mediatypes as mt


def check_descriptor(desc: Mapping[str, Any], referrer: str) -> tuple[str, int]:
    if not isinstance(desc, Mapping):
        raise IntegrityError(
            f"{referrer}: a descriptor must be a JSON object, got {json_kind(desc)}"
        )
    digest, size, media_type = desc.get("digest"), desc.get("size"), desc.get("mediaType")
    if not isinstance(digest, str) or not DIGEST_RE.match(digest):
        raise IntegrityError(f"{referrer}: malformed digest {digest!r}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise IntegrityError(f"{referrer}: descriptor of {digest} has a bad size {size!r}")
    if not isinstance(media_type, str) or not media_type:
        raise IntegrityError(f"{referrer}: descriptor of {digest} has no mediaType")
    return digest, size


def check_bytes(data: bytes, digest: str, size: int, referrer: str, *, where: str) -> None:
    if len(data) != size:
        raise IntegrityError(
            f"blob {digest} (referenced by {referrer}) is {len(data)} bytes, expected {size}",
            hint=f"{where} was truncated or replaced",
        )
    alg = digest.split(":", 1)[0]
    actual = f"{alg}:{hashlib.new(alg, data).hexdigest()}"
    if actual != digest:
        raise IntegrityError(
            f"blob {digest} (referenced by {referrer}) is corrupt: its content hashes to {actual}",
            hint=f"{where} was modified",
        )


def check_data(desc: Mapping[str, Any], referrer: str) -> None:
    try:
        data = base64.b64decode(str(desc["data"]), validate=True)
    except (binascii.Error, ValueError) as e:
        raise IntegrityError(
            f"{referrer}: descriptor of {desc['digest']} has bad base64 data"
        ) from e
    check_bytes(
        data, str(desc["digest"]), int(desc["size"]), f"{referrer} (embedded data)", where="data"
    )


def json_document(data: bytes, desc: Mapping[str, Any], referrer: str) -> dict[str, Any]:
    """``data`` (the checked bytes of ``desc``) as a JSON object whose own ``mediaType``, when
    set, is the descriptor's (image-spec manifest.md/image-index.md: they MUST match)."""
    doc = load_json_object(
        data, f"blob {desc['digest']} (referenced by {referrer})", error=IntegrityError
    )
    if (
        desc.get("mediaType") in mt.MANIFEST_TYPES
        and doc.get("mediaType", desc["mediaType"]) != desc["mediaType"]
    ):
        raise IntegrityError(
            f"blob {desc['digest']} (referenced by {referrer}) says mediaType "
            f"{doc.get('mediaType')!r}, its descriptor says {desc['mediaType']!r}"
        )
    return doc


def document_label(media_type: str, digest: str) -> str:
    return f"{'index' if media_type in mt.INDEX_TYPES else 'manifest'} {digest}"


def subject_link(doc: Mapping[str, Any], here: str) -> tuple[Mapping[str, Any], str] | None:
    subject = doc.get("subject")
    if subject is None:
        return None
    referrer = f"{here} subject"
    check_descriptor(subject, referrer)
    return subject, referrer


def children_of(doc: Mapping[str, Any], media_type: str, here: str) -> list[tuple[Any, str]]:
    """The descriptors a manifest or index references, each with where it was found.

    Only called for :data:`~nvkr.oci.mediatypes.MANIFEST_TYPES`: indexes (OCI image index,
    Docker manifest list) list ``manifests``; image manifests (OCI, Docker schema 2) a ``config``
    and ``layers``. Both are ``schemaVersion`` 2.
    """
    if doc.get("schemaVersion") != 2:
        raise IntegrityError(f"{here}: schemaVersion is {doc.get('schemaVersion')!r}, expected 2")
    if media_type in mt.INDEX_TYPES:
        manifests = doc.get("manifests")
        if not isinstance(manifests, list):
            raise IntegrityError(f"{here}: 'manifests' is not a list")
        return [(m, f"{here} manifests[{i}]") for i, m in enumerate(manifests)]
    config, layers = doc.get("config"), doc.get("layers")
    if not isinstance(layers, list):
        raise IntegrityError(f"{here}: 'layers' is not a list")
    return [(config, f"{here} config"), *((m, f"{here} layers[{i}]") for i, m in enumerate(layers))]
