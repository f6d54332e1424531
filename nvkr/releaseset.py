"""The release set: assembled from cached artifacts into the store, then materialised on disk.

Last step of the data flow (DESIGN.md): the ``release-set`` action gets the release set's spec
(its params) and the cached results of the actions it names, and :func:`assemble` writes an OCI
image layout's worth of blobs into the store; its result is an ordinary action result, so an
unchanged release set is a cache hit. :func:`materialize` then puts that layout at
``dist/<name>/`` atomically; ``publish`` pushes the same blobs to a registry.

Shape of the layout (image-spec v1.1.0 image-layout.md)::

    index.json        one descriptor: the release set index, ref.name = <name>
    release set index artifactType application/vnd.nvkr.release-set.v1+json; manifests:
      [0]             metadata manifest: config = the metadata JSON (METADATA_SCHEMA_VERSION)
      [1..n]          one artifact manifest per distinct action key (sorted by name, platform,
                      digest; ``platform`` set for binaries), layers = primary output + the rest
      [n+1..]         one in-toto provenance manifest per artifact, ``subject`` = that artifact

The metadata JSON (media type ``application/vnd.nvkr.release-set.metadata.v1+json``,
``schemaVersion`` 1; a reader must reject other versions) is canonical JSON::

    {"schemaVersion": 1, "mediaType": "application/vnd.nvkr.release-set.metadata.v1+json",
     "name": str, "epoch": int (seconds), "created": "YYYY-MM-DDTHH:MM:SSZ", "nvkrVersion": str,
     "recipe": {"path", "digest"}, "lockfile": {"path", "digest"}, "variants": [variant, ...],
     "artifacts": [{"name", "variant", "actionKey", "builder", "artifactType", ["platform"],
                    "manifest": {"mediaType", "digest", "size"},
                    "primary": {"name", "mediaType", "digest", "size"},
                    "provenance": {"mediaType", "digest", "size"}}, ...],
     "machineImages": [...], "clusterRelease": {...} | null, "nodePoolReleases": [...]}

One ``artifacts`` entry per (artifact name, variant); entries of a shared action point at the
same manifest. The last three fields are the spec's, verbatim.

The descriptors inside the release set index carry no ``artifactType`` (the manifests
themselves do): containers/image before v5.32 (skopeo < 1.16, e.g. Debian's 1.9.3) drops that
field when it clones an index during ``skopeo copy --all`` and then writes the index re-serialised
under a new digest (containers/image#2460, fixed by #2475). Without it, skopeo keeps the original
bytes and the release set digest survives a copy.

Every byte is a function of the spec and the artifacts' bytes: no wall-clock time (the epoch is
the only date), canonical JSON, sorted lists; so a rebuild gives the same release set digest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from nvkr.canonical import canonical_json, sha256_bytes
from nvkr.errors import BuildError, IntegrityError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import (
    LayoutReader,
    artifact_manifest,
    blob_name,
    descriptor,
    image_index,
    index_bytes,
    manifest_bytes,
    rfc3339,
)
from nvkr.oci.layoutdir import write_layout
from nvkr.provenance import (
    BUILD_TYPE,
    BUILDER_ID,
    digest_set,
    slsa_statement,
    statement_bytes,
)
from nvkr.store import Store

#: Version of the metadata JSON shape (the config of the metadata manifest); bumped on any change
#: a reader must know about, together with a new media type suffix.
METADATA_SCHEMA_VERSION: Final = 1

# A directory name and an OCI ref.name at once (image-spec annotations.md ref grammar, minus '/').
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(name: Any) -> str:
    """A release set name usable as ``dist/<name>`` and as ``ref.name``.

    Raises:
        BuildError: empty, not a string, has '/' or starts with '.' or '-'.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise BuildError(
            f"release set name {name!r} is not usable as a directory and OCI ref.name",
            hint="use letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    return name


class _VariantOrder:
    """Sort key for variants: their place in ``spec["variants"]`` (the recipe's matrix order),
    then canonical JSON for any variant not listed there (and ``None``, variant-independent)."""

    def __init__(self, variants: list[Any]) -> None:
        self._rank = {canonical_json(v): i for i, v in enumerate(variants)}

    def __call__(self, variant: Any) -> tuple[int, bytes]:
        raw = canonical_json(variant)
        return self._rank.get(raw, len(self._rank)), raw


# -- assemble ------------------------------------------------------------------------------------
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
        path = self.store.blob_path(digest)
        try:
            actual = path.stat().st_size
        except OSError as e:
            raise IntegrityError(
                f"{what}: blob {digest} is not in the store {self.store.root}",
                hint="the cache entry is stale; run the build again to re-create it",
            ) from e
        if actual != size:
            raise IntegrityError(
                f"{what}: store blob {digest} is {actual} bytes, the action result says {size}"
            )
        self.known.setdefault(digest, (size, media_type))


def _group_by_action(spec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for art in spec.get("artifacts", []):
        groups.setdefault(art["actionKey"], []).append(dict(art))
    for key, members in groups.items():
        first = members[0]
        for field in ("builder", "builderVersion", "artifactType", "platform", "dependencies"):
            values = {canonical_json(m.get(field)) for m in members}
            if len(values) > 1:
                raise BuildError(
                    f"release set {spec['name']}: artifacts sharing action key {key} disagree on "
                    f"{field!r} ({first['name']} and others)",
                    hint="the plan gave one action two identities; this is a bug in nvkr, please report it",
                )
    return groups


def _layers(
    result: Mapping[str, Any], blobs: _Blobs, what: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    outputs = list(result.get("outputs", []))
    primaries = [o for o in outputs if o.get("role") == "primary"]
    if len(primaries) != 1:
        raise BuildError(
            f"{what}: expected exactly one output with role 'primary', found {len(primaries)}"
        )
    primary = primaries[0]
    # Primary first (consumers take layers[0]); the rest in a fixed order, not the builder's.
    rest = sorted(
        (o for o in outputs if o is not primary), key=lambda o: (o.get("role", ""), o["name"])
    )
    layers = []
    for out in [primary, *rest]:
        blobs.reference(
            out["digest"], out["size"], out["mediaType"], f"{what} output {out['name']!r}"
        )
        layers.append(
            descriptor(
                out["mediaType"],
                out["digest"],
                out["size"],
                annotations={mt.ANN_TITLE: out["name"]},
            )
        )
    return layers, primary


def _arch(platform: Mapping[str, Any] | None, variants: list[Any]) -> str | None:
    if platform:
        return str(platform["architecture"])
    arches = {v.get("arch") for v in variants if isinstance(v, Mapping)}
    return str(arches.pop()) if len(arches) == 1 and None not in arches else None


def assemble(
    spec: dict[str, Any], artifacts: dict[str, dict[str, Any]], store: Store
) -> dict[str, Any]:
    """Write the release set described by ``spec`` into ``store`` as OCI layout blobs.

    Args:
        spec: the release-set action's params: ``name``, ``epoch`` (seconds), ``recipe`` and
            ``lockfile`` (``{"path", "digest"}``), ``nvkrVersion``, ``variants``, ``artifacts``
            (each ``{"name", "actionKey", "builder", "builderVersion", "variant", "platform",
            "artifactType", "dependencies"}``), ``machineImages``, ``clusterRelease``,
            ``nodePoolReleases``.
        artifacts: action key → that action's cached result (``{"outputs": [{"name", "digest",
            "size", "mediaType", "role"}, ...], ...}``); exactly one output has role ``primary``.
            Every output blob must already be in ``store``.
        store: where the new blobs (manifests, statements, metadata, indexes) are added.
    Returns:
        an action result: ``{"outputs": [{"name": "blobs/sha256/<hex>", "digest", "size",
        "mediaType", "role": "blob"}, ... sorted by digest, {"name": "index.json", ...,
        "role": "index"}], "metadata": {"name", "releaseSetDigest": "sha256:<hex>"}}``.
        ``index.json`` is stored as a blob too; :func:`materialize` writes the directory.
    Raises:
        BuildError: a bad name or epoch, an action key without a result, a result without
            exactly one primary output, artifacts sharing an action key with different
            identities, or a dependency that is no valid ResourceDescriptor.
        IntegrityError: an output blob is missing from the store or has another size.
    """
    name = check_name(spec.get("name"))
    epoch = spec.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise BuildError(
            f"release set {name}: epoch is {epoch!r}, expected seconds since 1970 (int)"
        )
    created = rfc3339(epoch)
    blobs = _Blobs(store)
    blobs.put(mt.EMPTY_JSON, mt.OCI_EMPTY)  # referenced by every artifact's config

    order = _VariantOrder(list(spec.get("variants", [])))
    entries: list[dict[str, Any]] = []  # one per distinct action: descriptors + metadata facts
    for key, members in _group_by_action(spec).items():
        first = members[0]
        names = sorted({m["name"] for m in members})
        label = ",".join(names)  # one action serving several recipe artifacts: all its names
        what = f"release set {name}: artifact {label} ({key})"
        result = artifacts.get(key)
        if result is None:
            raise BuildError(
                f"{what}: no result for its action",
                hint="the action did not run or its cache entry is gone; run the build again",
            )
        unique = {canonical_json(m["variant"]): m["variant"] for m in members if m.get("variant")}
        variant_list = sorted(unique.values(), key=order)
        platform = first.get("platform")
        layers, primary = _layers(result, blobs, what)

        annotations = {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_CREATED: created}
        arch = _arch(platform, variant_list)
        if arch:
            annotations[mt.ANN_NVKR_ARCH] = arch
        manifest = manifest_bytes(artifact_manifest(first["artifactType"], layers, annotations))
        blobs.put(manifest, mt.OCI_MANIFEST)
        mdesc = descriptor(
            mt.OCI_MANIFEST,
            manifest,
            annotations={mt.ANN_NVKR_ARTIFACT: label},
            platform=platform,
        )

        try:
            statement = slsa_statement(
                [{"name": primary["name"], "digest": digest_set(primary["digest"])}],
                build_type=BUILD_TYPE,
                external_parameters={
                    "recipe": spec["recipe"],
                    "lockfile": spec["lockfile"],
                    "artifact": label,
                    "variants": variant_list,
                },
                internal_parameters={
                    "epoch": epoch,
                    "builder": first["builder"],
                    "builderVersion": first["builderVersion"],
                    "actionKey": key,
                },
                resolved_dependencies=first.get("dependencies", []),
                builder_id=BUILDER_ID,
                builder_version={"nvkr": spec["nvkrVersion"]},
                invocation_id=key,  # deterministic: the same action is the same invocation
            )
            sbytes = statement_bytes(statement)
        except IntegrityError as e:
            raise BuildError(
                f"{what}: cannot state its provenance: {e.message}", hint=e.hint
            ) from e
        blobs.put(sbytes, mt.IN_TOTO_JSON)
        prov = manifest_bytes(
            artifact_manifest(
                mt.IN_TOTO_JSON,
                [descriptor(mt.IN_TOTO_JSON, sbytes)],
                {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_CREATED: created},
                subject=mdesc,
            )
        )
        blobs.put(prov, mt.OCI_MANIFEST)
        pdesc = descriptor(mt.OCI_MANIFEST, prov, annotations={mt.ANN_NVKR_ARTIFACT: label})
        plat = platform or {}
        entries.append(
            {
                "sort": (
                    label,
                    plat.get("os", ""),
                    plat.get("architecture", ""),
                    plat.get("variant", ""),
                    mdesc["digest"],
                ),
                "members": members,
                "manifest": mdesc,
                "provenance": pdesc,
                "primary": primary,
            }
        )
    entries.sort(key=lambda e: e["sort"])

    metadata = _metadata(spec, created, entries, order)
    config = canonical_json(metadata)
    blobs.put(config, mt.NVKR_RELEASE_SET_METADATA)
    meta_manifest = manifest_bytes(
        artifact_manifest(
            mt.NVKR_RELEASE_SET,
            [mt.empty_descriptor()],
            {mt.ANN_TITLE: name, mt.ANN_CREATED: created},
            config=descriptor(mt.NVKR_RELEASE_SET_METADATA, config),
        )
    )
    blobs.put(meta_manifest, mt.OCI_MANIFEST)
    release_set = index_bytes(
        image_index(
            [
                descriptor(mt.OCI_MANIFEST, meta_manifest),
                *(e["manifest"] for e in entries),
                *(e["provenance"] for e in entries),
            ],
            {mt.ANN_TITLE: name, mt.ANN_CREATED: created, mt.ANN_NVKR_RELEASE_SET: name},
            artifact_type=mt.NVKR_RELEASE_SET,
        )
    )
    rs_digest = blobs.put(release_set, mt.OCI_INDEX)
    top = index_bytes(
        image_index(
            [
                descriptor(
                    mt.OCI_INDEX,
                    release_set,
                    annotations={mt.ANN_REF_NAME: name},
                    artifact_type=mt.NVKR_RELEASE_SET,
                )
            ]
        )
    )
    top_info = store.add_bytes(top)  # not in the layout's blobs/: it is the layout's index.json

    outputs: list[dict[str, Any]] = [
        {"name": blob_name(d), "digest": d, "size": size, "mediaType": media_type, "role": "blob"}
        for d, (size, media_type) in sorted(blobs.known.items())
    ]
    outputs.append(
        {
            "name": "index.json",
            "digest": top_info.digest,
            "size": top_info.size,
            "mediaType": mt.OCI_INDEX,
            "role": "index",
        }
    )
    return {"outputs": outputs, "metadata": {"name": name, "releaseSetDigest": rs_digest}}


def _metadata(
    spec: Mapping[str, Any], created: str, entries: list[dict[str, Any]], order: _VariantOrder
) -> dict[str, Any]:
    """The release set's table of contents, the metadata manifest's config (schemaVersion 1).

    ``artifacts`` has one entry per (artifact name, variant), sorted by name then by the variant's
    place in ``variants``; entries of one shared action
    point at the same manifest. ``machineImages``, ``clusterRelease`` and ``nodePoolReleases`` are
    the spec's, verbatim (they name artifacts; look those up in ``artifacts``).
    """
    arts = []
    for e in entries:
        for m in e["members"]:
            item: dict[str, Any] = {
                "name": m["name"],
                "variant": m.get("variant"),
                "actionKey": m["actionKey"],
                "builder": m["builder"],
                "artifactType": m["artifactType"],
                "manifest": {k: e["manifest"][k] for k in ("mediaType", "digest", "size")},
                "primary": {k: e["primary"][k] for k in ("name", "mediaType", "digest", "size")},
                "provenance": {k: e["provenance"][k] for k in ("mediaType", "digest", "size")},
            }
            if m.get("platform"):
                item["platform"] = m["platform"]
            arts.append(item)
    arts.sort(key=lambda a: (a["name"], order(a["variant"])))
    return {
        "schemaVersion": METADATA_SCHEMA_VERSION,
        "mediaType": mt.NVKR_RELEASE_SET_METADATA,
        "name": spec["name"],
        "epoch": spec["epoch"],
        "created": created,
        "nvkrVersion": spec["nvkrVersion"],
        "recipe": spec["recipe"],
        "lockfile": spec["lockfile"],
        "variants": list(spec.get("variants", [])),
        "artifacts": arts,
        "machineImages": list(spec.get("machineImages") or []),
        "clusterRelease": spec.get("clusterRelease"),
        "nodePoolReleases": list(spec.get("nodePoolReleases") or []),
    }


def read_metadata(layout_dir: Path, name: str | None = None) -> dict[str, Any]:
    """The metadata JSON of the release set in ``layout_dir`` (checked against its digests).

    Args:
        name: the ref.name; default the only manifest in ``index.json``.
    Returns:
        the metadata JSON (module docstring), ``schemaVersion`` :data:`METADATA_SCHEMA_VERSION`.
    Raises:
        IntegrityError: not a release set layout, a blob on the way fails its digest, or the
            metadata has another media type or schemaVersion.
        UsageError: ``name`` is not in the layout.
    """
    reader = LayoutReader(layout_dir)
    if name is None:
        if len(reader.index["manifests"]) != 1:
            raise IntegrityError(
                f"{layout_dir}/index.json: expected one release set, found several"
            )
        root = reader.index["manifests"][0]
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


# -- materialize ---------------------------------------------------------------------------------
def materialize(result: dict[str, Any], store: Store, out_dir: Path) -> Path:
    """Write the layout of an :func:`assemble` result to ``out_dir/<name>/`` atomically.

    ``out_dir/<name>/`` gets ``oci-layout`` (``{"imageLayoutVersion":"1.0.0"}``), ``index.json``
    and ``blobs/sha256/*`` (hard links from the store where possible), built in
    ``out_dir/.<name>.tmp-XXXX`` and swapped in (:func:`nvkr.oci.layoutdir.write_layout`). An
    existing directory with the same ``index.json`` bytes and every blob is left alone. Modes do
    not depend on the umask: directories 0755, ``index.json``/``oci-layout`` 0644, blobs 0444.

    Returns:
        ``out_dir/<name>``.
    Raises:
        BuildError: the result has a bad name or not exactly one ``index.json`` output.
        IntegrityError: a blob is missing from the store or differs from its digest.
        OSError: the file system refused. On any failure no temp dir is left and an existing
            ``out_dir/<name>`` is as it was.
    """
    name = check_name(result.get("metadata", {}).get("name"))
    outputs = result.get("outputs", [])
    index_out = [o for o in outputs if o.get("role") == "index"]
    if len(index_out) != 1:
        raise BuildError(
            f"release set {name}: the result has {len(index_out)} index.json outputs, expected 1"
        )
    index_digest = index_out[0]["digest"]
    try:
        index_data = store.read_blob(index_digest)
    except OSError as e:
        raise IntegrityError(
            f"release set {name}: index.json ({index_digest}) is not in the store",
            hint="build again",
        ) from e
    if sha256_bytes(index_data) != index_digest:
        raise IntegrityError(
            f"release set {name}: store blob {index_digest} (index.json) is corrupt"
        )
    blobs = [(o["digest"], o["size"]) for o in outputs if o.get("role") == "blob"]
    target = Path(out_dir) / name
    write_layout(target, index_data, blobs, store.blob_path)
    return target
