"""An image's config and manifest, and the OCI platform of a variant, as canonical JSON.

The step after :mod:`nvkr.oci.image.layers`: both backends of the ``container-image`` builder
give the layers' ``diff_id`` values (and a base image's config, from
:mod:`nvkr.oci.image.stored`) to :func:`image_config`, store its bytes, and give the config and
layer descriptors to :func:`image_manifest`; the image-index action then lists the manifests
under the platforms :func:`platform_of` names. Shapes follow image-spec v1.1.0 config.md,
manifest.md and image-index.md.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from nvkr.canonical import canonical_json
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import manifest_bytes, rfc3339

#: image-index.md "Platform Variants": arm64 images are ``v8`` unless they say otherwise.
PLATFORM_VARIANTS: Final = {"arm64": "v8"}


def platform_of(arch: str) -> dict[str, str]:
    """The OCI platform of a variant arch: ``{"os": "linux", "architecture": arch}``, plus
    ``"variant": "v8"`` for arm64 (image-index.md "Platform Variants")."""
    platform = {"os": "linux", "architecture": arch}
    if arch in PLATFORM_VARIANTS:
        platform["variant"] = PLATFORM_VARIANTS[arch]
    return platform


def platform_label(platform: Mapping[str, Any]) -> str:
    """``os/architecture[/variant]``, e.g. ``linux/arm64/v8``."""
    parts = [str(platform.get("os", "?")), str(platform.get("architecture", "?"))]
    if platform.get("variant"):
        parts.append(str(platform["variant"]))
    return "/".join(parts)


# -- config and manifest -------------------------------------------------------------------------
def _env_list(base: Sequence[str], env: Mapping[str, str]) -> list[str]:
    merged: dict[str, str] = {}
    for item in base:
        key, _, value = str(item).partition("=")
        merged[key] = value
    for key in sorted(env):  # the action key hashes sorted JSON: the bytes must not hang on order
        merged[key] = env[key]
    return [f"{k}={v}" for k, v in merged.items()]


def image_config(
    *,
    arch: str,
    diff_ids: list[str],
    epoch: int,
    entrypoint: Sequence[str] | None = None,
    cmd: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
    workdir: str | None = None,
    labels: Mapping[str, str] | None = None,
    history: list[dict[str, Any]] | None = None,
    base_config: Mapping[str, Any] | None = None,
) -> bytes:
    """An OCI image config (image-spec config.md) as canonical JSON bytes.

    ``created`` is ``epoch`` in RFC 3339 UTC (``1970-01-01T00:00:00Z`` form); ``os`` is linux,
    ``architecture`` is ``arch`` (plus ``variant`` ``v8`` for arm64). ``rootfs.diff_ids`` are the
    base's followed by ``diff_ids`` (``sha256:<hex>`` of each uncompressed layer). ``history``
    entries (``created_by``, ``comment``, ``empty_layer``, ...) are appended to the base's with
    ``created`` set to the epoch; by default one entry per new layer. The execution config
    (``config``) starts from the base's: ``env`` merges by key, ``labels`` merge, ``entrypoint``,
    ``cmd``, ``user`` and ``workdir`` replace when given (None or empty: keep the base's), and a
    new entrypoint without a cmd drops the base's cmd (Docker's ENTRYPOINT rule). Other fields of
    ``base_config`` are kept as they are (they come from a pinned base, so they are reproducible).

    Raises:
        ValueError: ``epoch`` is negative or not an integer.
        TypeError: ``base_config`` holds floats (no canonical JSON form).
    """
    created = rfc3339(epoch)
    base: dict[str, Any] = copy.deepcopy(dict(base_config)) if base_config else {}
    cfg: dict[str, Any] = dict(base.get("config") or {})
    if env:
        cfg["Env"] = _env_list(cfg.get("Env") or [], env)
    if entrypoint:
        cfg["Entrypoint"] = list(entrypoint)
        if not cmd:
            cfg.pop("Cmd", None)
    if cmd:
        cfg["Cmd"] = list(cmd)
    if user:
        cfg["User"] = user
    if workdir:
        cfg["WorkingDir"] = workdir
    if labels:
        cfg["Labels"] = {**(cfg.get("Labels") or {}), **dict(sorted(labels.items()))}
    rootfs = base.get("rootfs") or {}
    new_history = [{"created_by": "nvkr"} for _ in diff_ids] if history is None else list(history)
    doc: dict[str, Any] = {
        **base,
        "created": created,
        "architecture": arch,
        "os": "linux",
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": [*(rootfs.get("diff_ids") or []), *diff_ids]},
        "history": [
            *(base.get("history") or []),
            *({**dict(h), "created": created} for h in new_history),
        ],
    }
    doc.pop("variant", None)
    if arch in PLATFORM_VARIANTS:
        doc["variant"] = PLATFORM_VARIANTS[arch]
    return canonical_json(doc)


def image_manifest(
    config: Mapping[str, Any],
    layers: Sequence[Mapping[str, Any]],
    annotations: Mapping[str, str],
) -> bytes:
    """An OCI image manifest (image-spec manifest.md) as canonical JSON bytes.

    Args:
        config: the config descriptor ``{"mediaType": application/vnd.oci.image.config.v1+json,
            "digest": "sha256:<hex>", "size": <bytes>}``.
        layers: layer descriptors, base first (as :meth:`Layer.descriptor` gives them).
        annotations: manifest annotations (string to string); omitted when empty.
    Raises:
        ValueError: no layers (manifest.md: layers SHOULD have at least one entry; nvkr insists).
        TypeError: non-string annotations, floats.
    """
    manifest: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "config": dict(config),
        "layers": [dict(layer) for layer in layers],
    }
    if annotations:
        for k, v in annotations.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError(f"annotation {k!r}: keys and values must be strings")
        manifest["annotations"] = dict(sorted(annotations.items()))
    return manifest_bytes(manifest)
