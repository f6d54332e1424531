"""What ``nvkr verify`` reads off a release set's documents (:mod:`nvkr.verify.check`): an
artifact's kind and primary digests, what the metadata says of each artifact, whether a
manifest is an SBOM, a statement's sha256 subjects, a key's facts for the report, a leaf blob's
hash.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutBlob
from nvkr.releaseset.signing import (
    ANN_KEYID,
    DSSE_ENVELOPE,
    attestation_role,
)
from nvkr.sbom import SPDX_MEDIA_TYPE
from nvkr.sign import PublicKey, key_id, key_strength

_CHUNK = 1 << 20


def key_facts(key: PublicKey) -> dict[str, Any]:
    strength = key_strength(key)
    return {
        "keyid": key_id(key),
        "algorithm": strength.algorithm,
        "keyBits": strength.key_bits,
        "securityBits": strength.security_bits,
    }


def document_label(desc: Mapping[str, Any], doc: Mapping[str, Any]) -> str:
    """How a root of the closure walk is named in messages."""
    ann = desc.get("annotations") or {}
    name = ann.get(mt.ANN_NVKR_ARTIFACT)
    kind = doc.get("artifactType")
    if kind == mt.IN_TOTO_JSON:
        return f"{attestation_role(doc) or 'provenance'} of {name}"
    if kind == DSSE_ENVELOPE:
        target = name or ann.get(mt.ANN_NVKR_RELEASE_SET) or "?"
        return f"signature of {target}, key {str(ann.get(ANN_KEYID, '?'))[:12]}"
    if is_sbom(doc):
        return f"SBOM of {name}"
    if kind == mt.NVKR_RELEASE_SET:
        return "release set metadata"
    return f"artifact {name}" if name else f"manifest {desc['digest']}"


def hash_leaf(path: Path, blob: LayoutBlob) -> str | None:
    """None when ``path`` has ``blob``'s size and digest, else what is wrong with it."""
    alg = blob.digest.split(":", 1)[0]
    h = hashlib.new(alg)
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
                size += len(chunk)
    except OSError:
        return "is missing"
    if size != blob.size:
        return f"is {size} bytes, expected {blob.size}"
    actual = f"{alg}:{h.hexdigest()}"
    return None if actual == blob.digest else f"is corrupt: its content hashes to {actual}"


def primary_digests(doc: Mapping[str, Any], desc: Mapping[str, Any]) -> list[str]:
    """What a provenance statement about this artifact may name, primary first: an index names
    itself; a Helm chart manifest its .tgz; any other artifact manifest its first layer (the
    primary output); a manifest may also be named itself."""
    if desc.get("mediaType") in mt.INDEX_TYPES:
        return [str(desc["digest"])]
    layers = [la for la in doc.get("layers") or [] if isinstance(la, dict)]
    if (doc.get("config") or {}).get("mediaType") == mt.HELM_CONFIG:
        primary = [
            str(la["digest"]) for la in layers if la.get("mediaType") == mt.HELM_CHART_CONTENT
        ]
    else:
        primary = [str(layers[0]["digest"])] if layers else []
    return [*primary, str(desc["digest"])]


def artifact_kind(desc: Mapping[str, Any], doc: Mapping[str, Any], kinds: Mapping[str, str]) -> str:
    """The artifact's kind: the metadata's word, else read from its shape."""
    if desc["digest"] in kinds:
        return kinds[str(desc["digest"])]
    if desc.get("mediaType") in mt.INDEX_TYPES:
        return "image"
    if (doc.get("config") or {}).get("mediaType") == mt.HELM_CONFIG:
        return "chart"
    if doc.get("artifactType") == mt.NVKR_MACHINE_IMAGE:
        return "machine-image"
    return "binary"


def metadata_artifacts(
    meta: dict[str, Any],
) -> tuple[dict[str, str], dict[str, list[dict[str, str]]], dict[str, str]]:
    """What the metadata says of each artifact, by the digest of its index or manifest: its
    kind, the variants it is built for, and its provenance statement's digest."""
    kinds: dict[str, str] = {}
    variants: dict[str, list[dict[str, str]]] = {}
    meta_provenance: dict[str, str] = {}
    for art in meta.get("artifacts", []):
        digest = str((art.get("index") or art.get("manifest") or {}).get("digest"))
        kinds[digest] = str(art.get("kind"))
        if isinstance(art.get("variant"), dict):
            variants.setdefault(digest, []).append(
                {str(k): str(v) for k, v in sorted(art["variant"].items())}
            )
        if art.get("provenance"):
            meta_provenance[digest] = str(art["provenance"]["digest"])
    return kinds, variants, meta_provenance


def metadata_attestations(meta: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """The attestation manifests the metadata names (an artifact entry's ``attestations``):
    manifest digest -> (role, the digest of the artifact's manifest or index)."""
    found: dict[str, tuple[str, str]] = {}
    for art in meta.get("artifacts") or []:
        digest = str((art.get("index") or art.get("manifest") or {}).get("digest"))
        for att in art.get("attestations") or []:
            if isinstance(att, dict):
                found[str(att.get("digest"))] = (str(att.get("role")), digest)
    return found


def is_sbom(doc: Mapping[str, Any]) -> bool:
    return doc.get("artifactType") == SPDX_MEDIA_TYPE or any(
        isinstance(la, dict) and la.get("mediaType") == SPDX_MEDIA_TYPE
        for la in doc.get("layers") or []
    )


def sha256_subjects(statement: Mapping[str, Any]) -> list[str]:
    """``sha256:<hex>`` of every statement subject that has a sha256 digest."""
    return [
        f"sha256:{s['digest']['sha256']}"
        for s in statement.get("subject") or []
        if isinstance(s, dict) and isinstance(s.get("digest"), dict) and "sha256" in s["digest"]
    ]
