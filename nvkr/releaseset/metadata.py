"""The release set's metadata document: written by assemble, read back by :func:`read_metadata`.

:func:`nvkr.releaseset.assemble` makes it the config of the metadata manifest (the first entry
of the release set index); :func:`read_metadata` finds it again in a materialised layout (from
:func:`nvkr.releaseset.materialize`), checking every digest on the way.

The metadata JSON (media type ``application/vnd.nvkr.release-set.metadata.v1+json``,
``schemaVersion`` 1; a reader must reject other versions) is canonical JSON; descriptors in it
are ``{"mediaType", "digest", "size"}``::

    {"schemaVersion": 1, "mediaType": "application/vnd.nvkr.release-set.metadata.v1+json",
     "name": str, "epoch": int (seconds), "created": "YYYY-MM-DDTHH:MM:SSZ", "nvkrVersion": str,
     "recipe": {"path", "digest"}, "lockfile": {"path", "digest"}, "variants": [variant, ...],
     "artifacts": [
       # every kind: "name", "kind", "variant", "actionKey", "builder", "provenance": descriptor,
       # "sbom": descriptor of its SPDX SBOM manifest when the set holds one, and
       # "attestations": [{"role", "predicateType", "mediaType", "digest", "size"}, ...] when
       # its action made statements of its own about it (nvkr.releaseset.attestations)
       {"kind": "binary", "artifactType", ["platform"], "manifest": descriptor,
        "primary": {"name", "mediaType", "digest", "size"}, ...},
       {"kind": "image", "index": descriptor,
        "platforms": [{"os", "architecture"[, "variant"]}, ...], ...},
       {"kind": "chart", "manifest": descriptor, "primary": {... the .tgz},
        "chart": {"name", "version", "appVersion", "tag"}, ...}, ...],
     "machineImages": [...],
     "clusterRelease": null | {"kubernetes": "1.36.3", ...the spec's other keys,
       "charts": [{"name", "chart", "version", "digest": manifest digest, "variants"}, ...],
       "images": [{"name", "digest": index digest, "platforms", "variants"}, ...]},
     "nodePoolReleases": [...]}

One ``artifacts`` entry per (artifact name, variant); entries of a shared action point at the
same descriptors. ``clusterRelease`` lists, per chart or image name, one item per distinct
descriptor with the variants it serves (e.g. an image joined over amd64 only for one GPU
generation and over amd64+arm64 for another is two indexes). ``machineImages`` and
``nodePoolReleases`` are the spec's, verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.jsondoc import JsonObject
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.releaseset.artifacts import _Packed, _trim
from nvkr.releaseset.attestations import _Attached
from nvkr.releaseset.spec import _VariantOrder
from nvkr.releasespec import ReleaseSetSpec, SpecArtifact

#: Version of the metadata JSON shape (the config of the metadata manifest); bumped on any change
#: a reader must know about, together with a new media type suffix.
METADATA_SCHEMA_VERSION: Final = 1


@dataclass(frozen=True)
class _Entry:
    """One distinct action of the set as assembled: the spec's artifacts it serves
    (``members``), how the set holds it (``packed``), its provenance and SBOM manifests'
    descriptors, its attestations, and its place in the release set index (``sort``)."""

    sort: tuple[str, str, str, str, str]
    members: list[SpecArtifact]
    packed: _Packed
    provenance: JsonObject
    sbom: JsonObject | None
    attestations: tuple[_Attached, ...] = ()


def _metadata(
    spec: ReleaseSetSpec, created: str, entries: list[_Entry], order: _VariantOrder
) -> dict[str, Any]:
    """The release set's table of contents, the metadata manifest's config (schemaVersion 1).

    ``artifacts`` has one entry per (artifact name, variant), sorted by name then by the variant's
    place in ``variants``; entries of one shared action point at the same descriptors.
    ``clusterRelease`` names resolve to descriptors (:func:`_cluster_release`);
    ``machineImages`` and ``nodePoolReleases`` are the spec's, verbatim (they name artifacts; look
    those up in ``artifacts``).
    """
    arts = []
    for e in entries:
        for m in e.members:
            item: dict[str, Any] = {
                "name": m.name,
                "kind": m.kind.value,
                "variant": dict(m.variant) if m.variant is not None else None,
                "actionKey": m.action_key,
                "builder": m.builder,
                **e.packed.fields,
                "provenance": _trim(e.provenance),
            }
            if e.sbom is not None:
                item["sbom"] = _trim(e.sbom)
            if e.attestations:
                item["attestations"] = [a.to_metadata() for a in e.attestations]
            if m.kind in ("binary", "machine-image") and m.platform:
                item["platform"] = dict(m.platform)
            arts.append(item)
    arts.sort(key=lambda a: (a["name"], order(a["variant"])))
    return {
        "schemaVersion": METADATA_SCHEMA_VERSION,
        "mediaType": mt.NVKR_RELEASE_SET_METADATA,
        "name": spec.name,
        "epoch": spec.epoch,
        "created": created,
        "nvkrVersion": spec.nvkr_version,
        "recipe": spec.recipe.to_json(),
        "lockfile": spec.lockfile.to_json(),
        "variants": [dict(v) for v in spec.variants],
        "artifacts": arts,
        "machineImages": list(spec.machine_images),
        "clusterRelease": _cluster_release(spec, entries, order),
        "nodePoolReleases": [p.to_json() for p in spec.node_pool_releases],
    }


def _cluster_release(
    spec: ReleaseSetSpec, entries: list[_Entry], order: _VariantOrder
) -> dict[str, Any] | None:
    """The spec's ``clusterRelease`` with its ``charts`` and ``images`` names resolved.

    A name becomes one item per distinct descriptor it has across the variants (an image joined
    over fewer arches for one GPU generation is another index), each listing its ``variants``.

    Raises:
        BuildError: a name the release set does not hold, or one of another kind.
    """
    cluster = spec.cluster_release
    if cluster is None:
        return None
    resolved: dict[str, Any] = dict(cluster.to_json())
    for field, kind, names in (
        ("charts", "chart", cluster.charts),
        ("images", "image", cluster.images),
    ):
        items: list[dict[str, Any]] = []
        for art_name in names:
            found = []
            for e in entries:
                serving = [m for m in e.members if m.name == art_name]
                if not serving:
                    continue
                if serving[0].kind != kind:
                    raise BuildError(
                        f"release set {spec.name}: clusterRelease.{field} names "
                        f"{art_name!r}, whose kind is {serving[0].kind.value!r}",
                        hint=f"list only {kind} artifacts under clusterRelease.{field}",
                    )
                unique = {canonical_json(_axes(m.variant)): _axes(m.variant) for m in serving}
                variants = sorted(unique.values(), key=order)
                found.append((order(variants[0]) if variants else (0, b""), e, variants))
            if not found:
                raise BuildError(
                    f"release set {spec.name}: clusterRelease.{field} names {art_name!r}, "
                    "which the release set does not hold",
                    hint="add it to releaseSet.artifacts (or leave that list out to take all)",
                )
            for _, e, variants in sorted(found, key=lambda f: (f[0], f[1].sort)):
                packed = e.packed
                item: dict[str, Any] = {"name": art_name}
                if kind == "chart":
                    chart = packed.fields["chart"]
                    item.update(chart=chart["name"], version=chart["version"])
                item["digest"] = packed.desc["digest"]
                if kind == "image":
                    item["platforms"] = packed.fields["platforms"]
                item["variants"] = variants
                items.append(item)
        resolved[field] = items
    return resolved


def _axes(variant: Mapping[str, str] | None) -> dict[str, str] | None:
    return dict(variant) if variant is not None else None


def read_metadata(layout_dir: Path, name: str | None = None) -> dict[str, Any]:
    """The metadata JSON of the release set in ``layout_dir`` (checked against its digests).

    Args:
        name: the ref.name; default the only entry of ``index.json`` that has one.
    Returns:
        the metadata JSON (module docstring), ``schemaVersion`` :data:`METADATA_SCHEMA_VERSION`.
    Raises:
        IntegrityError: not a release set layout, a blob on the way fails its digest, or the
            metadata has another media type or schemaVersion.
        UsageError: ``name`` is not in the layout.
    """
    reader = LayoutReader(layout_dir)
    if name is None:
        # Signatures and other attachments sit beside the release set in index.json; only the
        # release set carries a ref.name.
        named = [
            m
            for m in reader.index["manifests"]
            if isinstance(m, dict) and mt.ANN_REF_NAME in (m.get("annotations") or {})
        ]
        if len(named) != 1:
            raise IntegrityError(
                f"{layout_dir}/index.json: expected one release set (one entry with "
                f"{mt.ANN_REF_NAME}), found {len(named)}"
            )
        root = named[0]
    else:
        root = reader.resolve(name)
    index = reader.read_json(root, referrer="index.json")
    if index.get("artifactType") != mt.NVKR_RELEASE_SET or not index.get("manifests"):
        raise IntegrityError(f"{layout_dir}: {root['digest']} is not an nvkr release set index")
    meta_desc = index["manifests"][0]
    meta_manifest = reader.read_json(
        meta_desc, referrer=f"release set {root['digest']} manifests[0]"
    )
    config = meta_manifest.get("config")
    if meta_manifest.get("artifactType") != mt.NVKR_RELEASE_SET or not isinstance(config, dict):
        raise IntegrityError(
            f"{layout_dir}: {meta_desc['digest']} is not a release set metadata manifest"
        )
    if config.get("mediaType") != mt.NVKR_RELEASE_SET_METADATA:
        raise IntegrityError(
            f"{layout_dir}: metadata config has mediaType {config.get('mediaType')!r}",
            hint=f"this nvkr reads {mt.NVKR_RELEASE_SET_METADATA}; a newer nvkr may read this set",
        )
    meta = reader.read_json(config, referrer=f"metadata manifest {meta_desc['digest']} config")
    if meta.get("schemaVersion") != METADATA_SCHEMA_VERSION:
        raise IntegrityError(
            f"{layout_dir}: release set metadata schemaVersion is {meta.get('schemaVersion')!r}, "
            f"this nvkr reads {METADATA_SCHEMA_VERSION}",
            hint="use the nvkr version that built the release set (metadata nvkrVersion)",
        )
    return meta
