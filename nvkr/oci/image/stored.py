"""Images already in the store: a base pulled by the ``oci`` fetcher, read back for one platform.

Before any layer is written: the daemonless backend of the ``container-image`` builder starts
from a base image that the ``oci`` fetcher stored (OCI or Docker schema 2, an index or a single
manifest); :func:`load_image` picks the variant's platform from an index (:func:`select_manifest`)
and returns its manifest, config and layers, whose config goes on into
:func:`nvkr.oci.image.image_config`. :func:`media_type_of` is shared with the fetcher, which
follows the same documents over the network. Shapes follow image-spec v1.1.0 manifest.md and
image-index.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nvkr.errors import BuildError, IntegrityError
from nvkr.jsondoc import load_json_object
from nvkr.oci import mediatypes as mt
from nvkr.oci.image.config import PLATFORM_VARIANTS, platform_label
from nvkr.store import Store

#: Docker layer and config media types as their OCI equivalents (the bytes are the same).
OCI_EQUIVALENT: Final = {
    mt.DOCKER_LAYER_TAR_GZIP: mt.OCI_LAYER_TAR_GZIP,
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip": (
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"
    ),
    mt.DOCKER_CONFIG: mt.OCI_IMAGE_CONFIG,
}


# -- reading stored images -------------------------------------------------------------------------
@dataclass(frozen=True)
class StoredImage:
    """One platform's image in the store.

    ``manifest_digest`` (``sha256:<hex>``) and ``manifest`` (parsed, OCI or Docker schema 2);
    ``config`` the parsed config; ``layers`` the manifest's layer descriptors with Docker media
    types replaced by their OCI equivalents (:data:`OCI_EQUIVALENT`), base first.
    """

    manifest_digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]
    layers: list[dict[str, Any]]


def media_type_of(doc: Mapping[str, Any], fallback: str | None = None) -> str:
    """A manifest's or index's media type: its own ``mediaType``, else ``fallback``, else guessed
    from its shape (``manifests`` → OCI index, ``config`` → OCI manifest)."""
    own = doc.get("mediaType")
    if isinstance(own, str) and own:
        return own
    if fallback:
        return fallback
    if doc.get("schemaVersion") == 1:
        return "application/vnd.docker.distribution.manifest.v1+json"
    return mt.OCI_INDEX if "manifests" in doc else mt.OCI_MANIFEST


def _read_json(store: Store, digest: str, what: str) -> dict[str, Any]:
    try:
        data = store.read_blob(digest)
    except FileNotFoundError as e:
        raise IntegrityError(
            f"{what}: blob {digest} is not in the store",
            hint="the source was not fetched completely; run the build again (without --offline)",
        ) from e
    return load_json_object(data, f"{what}: blob {digest}", error=IntegrityError)


def _platform_rank(candidate: Mapping[str, Any], wanted: Mapping[str, str]) -> int | None:
    """0 for an exact match, 1 when only the wanted variant is missing, None for no match."""
    if candidate.get("os") != wanted["os"]:
        return None
    if candidate.get("architecture") != wanted["architecture"]:
        return None
    have, want = candidate.get("variant"), wanted.get("variant")
    if have == want:
        return 0
    if have is None and want == PLATFORM_VARIANTS.get(wanted["architecture"]):
        return 1  # arm64 images often leave out the default variant v8
    return None


def select_manifest(
    store: Store, digest: str, platform: Mapping[str, str], *, what: str
) -> tuple[str, dict[str, Any]]:
    """The image manifest for ``platform`` reached from ``digest`` (a manifest or an index).

    From an index (OCI or Docker manifest list; nested ones followed) the exact platform wins,
    then one lacking only the default variant. A single manifest must match when its config
    names an architecture.

    Returns:
        ``(manifest digest "sha256:<hex>", parsed manifest)``.
    Raises:
        BuildError: no manifest for ``platform`` (the message lists the platforms there are).
        IntegrityError: a document is missing from the store or malformed.
    """
    doc = _read_json(store, digest, what)
    media_type = media_type_of(doc)
    if media_type in mt.IMAGE_MANIFEST_TYPES:
        config = _read_json(store, str(doc["config"]["digest"]), what)
        have: dict[str, Any] = {
            k: config[k] for k in ("os", "architecture", "variant") if k in config
        }
        if "architecture" in have and _platform_rank({"os": "linux", **have}, platform) is None:
            raise BuildError(
                f"{what}: {digest} is an image for {platform_label(have)}, not "
                f"{platform_label(platform)}",
                hint="pin the digest of a multi-platform index, or of this platform's image",
            )
        return digest, doc
    if media_type not in mt.INDEX_TYPES:
        raise BuildError(f"{what}: {digest} is a {media_type}, not an image or image index")
    found: list[tuple[int, str]] = []
    seen: list[str] = []
    for desc in doc.get("manifests") or []:
        cand = desc.get("platform") or {}
        seen.append(platform_label(cand))
        rank = _platform_rank(cand, platform)
        if rank is not None and desc.get("mediaType") in mt.MANIFEST_TYPES:
            found.append((rank, str(desc["digest"])))
    if not found:
        raise BuildError(
            f"{what}: the index {digest} has no image for {platform_label(platform)}; it has "
            + (", ".join(sorted(set(seen))) or "no platforms"),
            hint="pick a base image published for every arch of the matrix",
        )
    found.sort(key=lambda f: f[0])  # stable: among equals the index's order decides
    return select_manifest(store, found[0][1], platform, what=what)


def load_image(store: Store, digest: str, platform: Mapping[str, str], *, what: str) -> StoredImage:
    """The manifest, config and layer descriptors of ``platform``'s image under ``digest``.

    ``what`` names the image in messages, e.g. ``"base 'debian' (registry.example/debian)"``.

    Raises:
        BuildError, IntegrityError: as :func:`select_manifest`; a layer blob missing from the
            store is an IntegrityError.
    """
    manifest_digest, manifest = select_manifest(store, digest, platform, what=what)
    config = _read_json(store, str(manifest["config"]["digest"]), what)
    layers: list[dict[str, Any]] = []
    for desc in manifest.get("layers") or []:
        layer = dict(desc)
        layer["mediaType"] = OCI_EQUIVALENT.get(layer["mediaType"], layer["mediaType"])
        if not store.has_blob(layer["digest"]):
            raise IntegrityError(
                f"{what}: layer {layer['digest']} is not in the store",
                hint="the source was not fetched completely; run the build again",
            )
        layers.append(layer)
    return StoredImage(
        manifest_digest=manifest_digest, manifest=manifest, config=config, layers=layers
    )
