"""One artifact as the release set holds it: the layout's blobs, binaries and images.

Between :mod:`nvkr.releaseset.spec` and :mod:`nvkr.releaseset.assemble`: for each action the
spec names, :func:`nvkr.releaseset.assemble` hands its cached result to a packer, which checks
the result's outputs against the store, adds any new manifest to the layout's blobs
(:class:`_Blobs`) and returns a :class:`_Packed`: the descriptor the release set index lists,
the in-toto subjects of its provenance and the kind's own metadata fields. A binary becomes an
OCI artifact manifest; an image is the image-index action's own index with its whole closure.
Charts are packed in :mod:`nvkr.releaseset.chart`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvkr.action import ActionOutput, ActionResult
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.jsondoc import json_object
from nvkr.oci import mediatypes as mt
from nvkr.oci.closure import store_closure
from nvkr.oci.layout import artifact_manifest, descriptor, manifest_bytes
from nvkr.provenance import digest_set
from nvkr.releasespec import SpecArtifact
from nvkr.store import Store


class _Blobs:
    """The blobs of the layout being assembled: digest → (size, mediaType), all in the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.known: dict[str, tuple[int, str]] = {}

    def put(self, data: bytes, media_type: str) -> str:
        info = self.store.add_bytes(data)
        self.known.setdefault(info.digest, (info.size, media_type))
        return info.digest

    def reference(self, digest: str, size: int, media_type: str, what: str) -> None:
        if not self.store.has_blob(digest):  # missing, or corrupt (then deleted and reported)
            raise IntegrityError(
                f"{what}: blob {digest} is not in the store {self.store.root}",
                hint="the cache entry is stale; run the build again to re-create it",
            )
        actual = self.store.blob_path(digest).stat().st_size
        if actual != size:
            raise IntegrityError(
                f"{what}: store blob {digest} is {actual} bytes, the action result says {size}"
            )
        self.known.setdefault(digest, (size, media_type))

    def closure(self, root: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
        """Take ``root`` and everything it references (:func:`store_closure`) into the layout."""
        found = store_closure(self.store, root, referrer=what)
        for d in found:
            self.known.setdefault(d["digest"], (d["size"], d["mediaType"]))
        return found

    def read_checked(self, digest: str, what: str) -> bytes:
        try:
            return self.store.read_blob(digest)  # hashed as it is read
        except IntegrityError as e:
            raise IntegrityError(f"{what}: {e.message}", hint=e.hint) from e


def _trim(desc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: desc[k] for k in ("mediaType", "digest", "size")}


@dataclass
class _Packed:
    """One artifact (one action) as the release set holds it.

    ``desc`` is its descriptor in the release set index, ``subjects`` the in-toto subjects of its
    provenance, ``fields`` the kind's own fields of its metadata entries.
    """

    desc: dict[str, Any]
    subjects: list[dict[str, Any]]
    fields: dict[str, Any]


def _layers(
    result: ActionResult, blobs: _Blobs, what: str, attested: frozenset[str] = frozenset()
) -> tuple[list[dict[str, Any]], ActionOutput]:
    """The manifest's layers: every output but those of the ``attested`` roles (attached as
    attestations of their own, :mod:`nvkr.releaseset.attestations`), and the primary output."""
    primary = result.output("primary", what)
    # Primary first (consumers take layers[0]); the rest in a fixed order, not the builder's.
    rest = sorted(
        (o for o in result.outputs if o.role != "primary" and o.role not in attested),
        key=lambda o: (o.role, o.name),
    )
    layers = []
    for out in [primary, *rest]:
        blobs.reference(out.digest, out.size, out.media_type, f"{what} output {out.name!r}")
        layers.append(
            descriptor(out.media_type, out.digest, out.size, annotations={mt.ANN_TITLE: out.name})
        )
    return layers, primary


def _arch(platform: Mapping[str, str] | None, variants: list[Mapping[str, str]]) -> str | None:
    if platform:
        return str(platform["architecture"])
    arches = {v.get("arch") for v in variants if isinstance(v, Mapping)}
    return str(arches.pop()) if len(arches) == 1 and None not in arches else None


def _pack_binary(
    first: SpecArtifact,
    result: ActionResult,
    blobs: _Blobs,
    *,
    what: str,
    label: str,
    created: str,
    variants: list[Mapping[str, str]],
    attested: frozenset[str] = frozenset(),
) -> _Packed:
    """An OCI artifact manifest (``artifactType`` from the spec) wrapping the action's outputs
    (but those of the ``attested`` roles).

    Raises:
        BuildError: the spec gives the artifact no ``artifactType``, or a result without the
            outputs it needs (:func:`_layers`).
    """
    if first.artifact_type is None:
        raise BuildError(f"{what}: the release-set spec gives it no artifactType")
    platform = dict(first.platform) if first.platform is not None else None
    layers, primary = _layers(result, blobs, what, attested)
    annotations = {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_CREATED: created}
    extra = json_object(result.metadata.get("annotations"))
    annotations.update({str(k): str(v) for k, v in sorted(extra.items())})
    arch = _arch(platform, variants)
    if arch:
        annotations[mt.ANN_NVKR_ARCH] = arch
    manifest = manifest_bytes(artifact_manifest(first.artifact_type, layers, annotations))
    blobs.put(manifest, mt.OCI_MANIFEST)
    mdesc = descriptor(
        mt.OCI_MANIFEST, manifest, annotations={mt.ANN_NVKR_ARTIFACT: label}, platform=platform
    )
    return _Packed(
        desc=mdesc,
        subjects=[{"name": primary.name, "digest": digest_set(primary.digest)}],
        fields={
            "artifactType": first.artifact_type,
            "manifest": _trim(mdesc),
            "primary": {
                "name": primary.name,
                "mediaType": primary.media_type,
                "digest": primary.digest,
                "size": primary.size,
            },
        },
    )


def _pack_image(
    members: list[SpecArtifact],
    result: ActionResult,
    blobs: _Blobs,
    *,
    what: str,
    label: str,
) -> _Packed:
    """The image-index action's own OCI image index, with its whole closure, as it is."""
    out = result.output("index", what)
    if out.media_type != mt.OCI_INDEX:
        raise BuildError(
            f"{what}: its index output has mediaType {out.media_type!r}, expected {mt.OCI_INDEX}"
        )
    meta = result.metadata
    for field, value in (("indexDigest", out.digest), ("indexSize", out.size)):
        if field in meta and meta[field] != value:
            raise BuildError(
                f"{what}: metadata {field} is {meta[field]!r}, its index output says {value!r}"
            )
    root = descriptor(mt.OCI_INDEX, out.digest, out.size)
    blobs.closure(root, f"{what} image index")
    index = json.loads(blobs.read_checked(out.digest, what))
    platforms: list[dict[str, Any]] = []
    for m in index["manifests"]:
        p = m.get("platform")
        # buildx-style attestation manifests sit in an index as os "unknown": not a platform
        if isinstance(p, dict) and p.get("os") != "unknown" and p not in platforms:
            platforms.append(p)
    arches = {p.get("architecture") for p in platforms}
    for m in members:
        variant = m.variant
        if variant is not None and variant.get("arch") not in (None, *arches):
            raise BuildError(
                f"{what}: image index {out.digest} has no manifest for arch "
                f"{variant['arch']!r} (variant {canonical_json(dict(variant)).decode()})",
                hint="the plan joined the wrong images; this is a bug in nvkr, please report it",
            )
    idesc = descriptor(
        mt.OCI_INDEX, out.digest, out.size, annotations={mt.ANN_NVKR_ARTIFACT: label}
    )
    return _Packed(
        desc=idesc,
        subjects=[{"name": label, "digest": digest_set(out.digest)}],
        fields={"index": _trim(idesc), "platforms": platforms},
    )
