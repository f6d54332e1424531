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
      [1..n]          one entry per distinct action key (sorted by name, platform, digest), by
                      the spec artifact's ``kind``:
                      binary  an OCI artifact manifest (``artifactType`` from the spec,
                              ``platform`` set), layers = primary output + the rest
                      image   the image-index action's own OCI image index, as built (nested
                              in the release set index), with its whole closure: child
                              manifests, configs, layers, subjects
                      chart   a Helm chart manifest as ``helm push`` makes it: config = Helm's
                              config JSON, layers = the .tgz (+ .prov), no artifactType
      [n+1..]         one in-toto provenance manifest per entry, ``subject`` = that entry

Every entry carries the annotation ``dev.nvkr.artifact`` (the artifact's name); only the
``index.json`` entry carries ``org.opencontainers.image.ref.name``.

The metadata JSON (media type ``application/vnd.nvkr.release-set.metadata.v1+json``,
``schemaVersion`` 1; a reader must reject other versions) is canonical JSON; descriptors in it
are ``{"mediaType", "digest", "size"}``::

    {"schemaVersion": 1, "mediaType": "application/vnd.nvkr.release-set.metadata.v1+json",
     "name": str, "epoch": int (seconds), "created": "YYYY-MM-DDTHH:MM:SSZ", "nvkrVersion": str,
     "recipe": {"path", "digest"}, "lockfile": {"path", "digest"}, "variants": [variant, ...],
     "artifacts": [
       # every kind: "name", "kind", "variant", "actionKey", "builder", "provenance": descriptor
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

The descriptors inside the release set index carry no ``artifactType`` (the manifests
themselves do): containers/image before v5.32 (skopeo < 1.16, e.g. Debian's 1.9.3) drops that
field when it clones an index during ``skopeo copy --all`` and then writes the index re-serialised
under a new digest (containers/image#2460, fixed by #2475). Without it, skopeo keeps the original
bytes and the release set digest survives a copy. A release set holding an image cannot be
copied whole by skopeo at all: containers/image refuses an index nested in an index ("Unexpectedly
received a manifest list instead of a manifest for a single image", containers/image#2076, open);
``skopeo copy --all`` of the image index alone works, and so does any tool that walks nested
indexes (umoci, oras, containerd).

Every byte is a function of the spec and the artifacts' bytes: no wall-clock time (the epoch is
the only date), canonical JSON, sorted lists; so a rebuild gives the same release set digest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
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
    image_manifest,
    index_bytes,
    manifest_bytes,
    rfc3339,
    store_closure,
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
#: How a release set holds an artifact (the spec's ``kind``, from the builder's ``release_kind``).
KINDS: Final = ("binary", "image", "chart")


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

    def closure(self, root: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
        """Take ``root`` and everything it references (:func:`store_closure`) into the layout."""
        found = store_closure(self.store, root, referrer=what)
        for d in found:
            self.known.setdefault(d["digest"], (d["size"], d["mediaType"]))
        return found

    def read_checked(self, digest: str, what: str) -> bytes:
        data = self.store.read_blob(digest)
        if sha256_bytes(data) != digest:
            raise IntegrityError(
                f"{what}: store blob {digest} is corrupt",
                hint="delete it from the store and build again",
            )
        return data


def _group_by_action(spec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for art in spec.get("artifacts", []):
        entry = dict(art)
        entry["kind"] = entry.get("kind") or "binary"  # specs from before kinds hold binaries
        groups.setdefault(entry["actionKey"], []).append(entry)
    for key, members in groups.items():
        first = members[0]
        for field in (
            "kind",
            "builder",
            "builderVersion",
            "artifactType",
            "platform",
            "dependencies",
        ):
            values = {canonical_json(m.get(field)) for m in members}
            if len(values) > 1:
                raise BuildError(
                    f"release set {spec['name']}: artifacts sharing action key {key} disagree on "
                    f"{field!r} ({first['name']} and others)",
                    hint="the plan gave one action two identities; this is a bug in nvkr, please report it",
                )
        if first["kind"] not in KINDS:
            raise BuildError(
                f"release set {spec['name']}: artifact {first['name']} has kind "
                f"{first['kind']!r}, expected one of {', '.join(KINDS)}",
                hint="this nvkr cannot put such an artifact into a release set",
            )
    return groups


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
    result: Mapping[str, Any], blobs: _Blobs, what: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    outputs = list(result.get("outputs", []))
    primary = _one(outputs, "primary", what)
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


def _one(outputs: list[dict[str, Any]], role: str, what: str) -> dict[str, Any]:
    found = [o for o in outputs if o.get("role") == role]
    if len(found) != 1:
        raise BuildError(
            f"{what}: expected exactly one output with role {role!r}, found {len(found)}"
        )
    return found[0]


def _arch(platform: Mapping[str, Any] | None, variants: list[Any]) -> str | None:
    if platform:
        return str(platform["architecture"])
    arches = {v.get("arch") for v in variants if isinstance(v, Mapping)}
    return str(arches.pop()) if len(arches) == 1 and None not in arches else None


def _pack_binary(
    first: Mapping[str, Any],
    result: Mapping[str, Any],
    blobs: _Blobs,
    *,
    what: str,
    label: str,
    created: str,
    variants: list[Any],
) -> _Packed:
    """An OCI artifact manifest (``artifactType`` from the spec) wrapping the action's outputs."""
    platform = first.get("platform")
    layers, primary = _layers(result, blobs, what)
    annotations = {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_CREATED: created}
    arch = _arch(platform, variants)
    if arch:
        annotations[mt.ANN_NVKR_ARCH] = arch
    manifest = manifest_bytes(artifact_manifest(first["artifactType"], layers, annotations))
    blobs.put(manifest, mt.OCI_MANIFEST)
    mdesc = descriptor(
        mt.OCI_MANIFEST, manifest, annotations={mt.ANN_NVKR_ARTIFACT: label}, platform=platform
    )
    return _Packed(
        desc=mdesc,
        subjects=[{"name": primary["name"], "digest": digest_set(primary["digest"])}],
        fields={
            "artifactType": first["artifactType"],
            "manifest": _trim(mdesc),
            "primary": {k: primary[k] for k in ("name", "mediaType", "digest", "size")},
        },
    )


def _pack_image(
    members: list[dict[str, Any]],
    result: Mapping[str, Any],
    blobs: _Blobs,
    *,
    what: str,
    label: str,
) -> _Packed:
    """The image-index action's own OCI image index, with its whole closure, as it is."""
    out = _one(list(result.get("outputs", [])), "index", what)
    if out.get("mediaType") != mt.OCI_INDEX:
        raise BuildError(
            f"{what}: its index output has mediaType {out.get('mediaType')!r}, expected "
            f"{mt.OCI_INDEX}"
        )
    meta = result.get("metadata") or {}
    for field, value in (("indexDigest", out["digest"]), ("indexSize", out["size"])):
        if field in meta and meta[field] != value:
            raise BuildError(
                f"{what}: metadata {field} is {meta[field]!r}, its index output says {value!r}"
            )
    root = descriptor(mt.OCI_INDEX, out["digest"], out["size"])
    blobs.closure(root, f"{what} image index")
    index = json.loads(blobs.read_checked(out["digest"], what))
    platforms: list[dict[str, Any]] = []
    for m in index["manifests"]:
        p = m.get("platform")
        # buildx-style attestation manifests sit in an index as os "unknown": not a platform
        if isinstance(p, dict) and p.get("os") != "unknown" and p not in platforms:
            platforms.append(p)
    arches = {p.get("architecture") for p in platforms}
    for m in members:
        variant = m.get("variant")
        if isinstance(variant, Mapping) and variant.get("arch") not in (None, *arches):
            raise BuildError(
                f"{what}: image index {out['digest']} has no manifest for arch "
                f"{variant['arch']!r} (variant {canonical_json(variant).decode()})",
                hint="the plan joined the wrong images; this is a bug in nvkr, please report it",
            )
    idesc = descriptor(
        mt.OCI_INDEX, out["digest"], out["size"], annotations={mt.ANN_NVKR_ARTIFACT: label}
    )
    return _Packed(
        desc=idesc,
        subjects=[{"name": label, "digest": digest_set(out["digest"])}],
        fields={"index": _trim(idesc), "platforms": platforms},
    )


def _pack_chart(
    result: Mapping[str, Any], blobs: _Blobs, *, what: str, label: str, created: str
) -> _Packed:
    """A Helm chart manifest, shaped as ``helm push`` makes it (SPECS.md "Helm constants.go").

    config = the chart's config blob, layers = the .tgz (and a .prov if the action made one)
    sorted by digest, no ``artifactType``, no layer annotations; manifest annotations as Helm's
    ``generateOCIAnnotations`` derives them from the chart metadata, with ``created`` = the epoch.
    """
    outputs = list(result.get("outputs", []))
    tgz = _one(outputs, "primary", what)
    config_out = _one(outputs, "config", what)
    extra = [o for o in outputs if o is not tgz and o is not config_out]
    provs = [o for o in extra if o.get("mediaType") == mt.HELM_PROVENANCE]
    if len(provs) > 1 or len(extra) > len(provs):
        raise BuildError(
            f"{what}: a Helm chart manifest holds the chart, its config and at most one "
            f"provenance file; the action also made " + ", ".join(repr(o["name"]) for o in extra)
        )
    for out, media_type in ((tgz, mt.HELM_CHART_CONTENT), (config_out, mt.HELM_CONFIG)):
        if out.get("mediaType") != media_type:
            raise BuildError(
                f"{what}: output {out['name']!r} has mediaType {out.get('mediaType')!r}, "
                f"expected {media_type}"
            )
    for out in (tgz, config_out, *provs):
        blobs.reference(
            out["digest"], out["size"], out["mediaType"], f"{what} output {out['name']!r}"
        )
    meta = result.get("metadata") or {}
    chart = _chart_facts(meta, what)
    try:
        config = json.loads(blobs.read_checked(config_out["digest"], what))
    except ValueError as e:
        raise BuildError(f"{what}: the chart config is not JSON: {e}") from e
    if not isinstance(config, dict) or (config.get("name"), config.get("version")) != (
        chart["name"],
        chart["version"],
    ):
        raise BuildError(
            f"{what}: the chart config names {_name_version(config)}, the action metadata "
            f"{chart['name']} {chart['version']}",
            hint="the helm-chart builder disagrees with itself; this is a bug in nvkr, please report it",
        )
    layers = sorted(
        (descriptor(o["mediaType"], o["digest"], o["size"]) for o in (tgz, *provs)),
        key=lambda d: d["digest"],
    )
    annotations = helm_annotations(config, created)
    annotations[mt.ANN_NVKR_ARTIFACT] = label
    manifest = manifest_bytes(
        image_manifest(
            descriptor(mt.HELM_CONFIG, config_out["digest"], config_out["size"]),
            layers,
            annotations,
        )
    )
    blobs.put(manifest, mt.OCI_MANIFEST)
    mdesc = descriptor(mt.OCI_MANIFEST, manifest, annotations={mt.ANN_NVKR_ARTIFACT: label})
    return _Packed(
        desc=mdesc,
        subjects=[{"name": tgz["name"], "digest": digest_set(tgz["digest"])}],
        fields={
            "manifest": _trim(mdesc),
            "primary": {k: tgz[k] for k in ("name", "mediaType", "digest", "size")},
            "chart": chart,
        },
    )


def _name_version(config: Any) -> str:
    if not isinstance(config, dict):
        return "nothing (not a JSON object)"
    return f"{config.get('name')!r} {config.get('version')!r}"


def _chart_facts(meta: Mapping[str, Any], what: str) -> dict[str, str]:
    name, version = meta.get("chartName"), meta.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
        raise BuildError(
            f"{what}: the action metadata lacks chartName or version (got {name!r}, {version!r})"
        )
    app_version = meta.get("appVersion") or ""
    # Helm's push turns '+' (semver build metadata) into '_': OCI tags cannot hold '+'.
    tag = meta.get("tag") or version.replace("+", "_")
    if not isinstance(app_version, str) or not isinstance(tag, str):
        raise BuildError(f"{what}: appVersion and tag in the action metadata must be strings")
    return {"name": name, "version": version, "appVersion": app_version, "tag": tag}


#: Helm's ``immutableOciAnnotations``: chart annotations never override these (nor nvkr's own).
_HELM_IMMUTABLE: Final = frozenset({mt.ANN_TITLE, mt.ANN_VERSION, mt.ANN_NVKR_ARTIFACT})


def helm_annotations(chart: Mapping[str, Any], created: str) -> dict[str, str]:
    """The manifest annotations ``helm push`` derives from a chart's metadata.

    Follows helm/helm pkg/registry/chart.go ``generateOCIAnnotations``: description, title
    (name), version, url (home), created, source (first of sources), authors (maintainers as
    ``Name (email)``, comma-separated), each only when not blank; then the chart's own
    ``annotations``, which never override title or version. Unlike Helm, ``created`` is given
    (the epoch, RFC 3339), never the wall clock, and non-ASCII stays as is.

    Args:
        chart: the chart config JSON (Chart.yaml's fields: ``name``, ``version``, ...).
        created: ``YYYY-MM-DDTHH:MM:SSZ``.
    Returns:
        annotation key → value.
    """
    out: dict[str, str] = {}

    def add(key: str, value: Any) -> None:
        if isinstance(value, str) and value.strip():
            out[key] = value

    add(mt.ANN_DESCRIPTION, chart.get("description"))
    add(mt.ANN_TITLE, chart.get("name"))
    add(mt.ANN_VERSION, chart.get("version"))
    add(mt.ANN_URL, chart.get("home"))
    add(mt.ANN_CREATED, created)
    sources = chart.get("sources")
    if isinstance(sources, list) and sources:
        add(mt.ANN_SOURCE, sources[0])
    maintainers = chart.get("maintainers")
    if isinstance(maintainers, list) and maintainers:
        parts = []
        for m in maintainers:
            m = m if isinstance(m, Mapping) else {}
            email = m.get("email") or ""
            parts.append(f"{m.get('name') or ''}" + (f" ({email})" if email else ""))
        add(mt.ANN_AUTHORS, ", ".join(parts))
    extra = chart.get("annotations")
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            if key not in _HELM_IMMUTABLE and isinstance(value, str):
                out[str(key)] = value
    return out


def assemble(
    spec: dict[str, Any], artifacts: dict[str, dict[str, Any]], store: Store
) -> dict[str, Any]:
    """Write the release set described by ``spec`` into ``store`` as OCI layout blobs.

    Args:
        spec: the release-set action's params: ``name``, ``epoch`` (seconds), ``recipe`` and
            ``lockfile`` (``{"path", "digest"}``), ``nvkrVersion``, ``variants``, ``artifacts``
            (each ``{"name", "kind", "actionKey", "builder", "builderVersion", "variant",
            "platform", "artifactType", "dependencies"}``; ``kind`` is ``binary`` (the default),
            ``image`` or ``chart``), ``machineImages``, ``clusterRelease``, ``nodePoolReleases``.
        artifacts: action key → that action's cached result (``{"outputs": [{"name", "digest",
            "size", "mediaType", "role"}, ...], "metadata": {...}}``). Binary: exactly one output
            with role ``primary``. Image: one output with role ``index`` (an OCI image index in
            the store; metadata ``indexDigest``, ``indexSize``, ``mediaType``). Chart: role
            ``primary`` (the .tgz) and role ``config`` (Helm's config JSON), optionally a
            ``.prov``; metadata ``chartName``, ``version``, ``appVersion``, ``tag``. Every blob
            (for an image: its whole closure) must already be in ``store``.
        store: where the new blobs (manifests, statements, metadata, indexes) are added.
    Returns:
        an action result: ``{"outputs": [{"name": "blobs/sha256/<hex>", "digest", "size",
        "mediaType", "role": "blob"}, ... sorted by digest, {"name": "index.json", ...,
        "role": "index"}], "metadata": {"name", "releaseSetDigest": "sha256:<hex>"}}``.
        ``index.json`` is stored as a blob too; :func:`materialize` writes the directory.
    Raises:
        BuildError: a bad name or epoch, an unknown kind, an action key without a result, a
            result without the outputs or metadata its kind needs, artifacts sharing an action
            key with different identities, a dependency that is no valid ResourceDescriptor, or
            a ``clusterRelease`` naming an artifact the set does not hold (or of another kind).
        IntegrityError: a blob is missing from the store, has another size or is corrupt (for
            an image, anywhere in the index's closure; the message names the blob and the
            documents leading to it).
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
        label = ",".join(sorted({m["name"] for m in members}))  # one action, several names
        what = f"release set {name}: artifact {label} ({key})"
        result = artifacts.get(key)
        if result is None:
            raise BuildError(
                f"{what}: no result for its action",
                hint="the action did not run or its cache entry is gone; run the build again",
            )
        unique = {canonical_json(m["variant"]): m["variant"] for m in members if m.get("variant")}
        variant_list = sorted(unique.values(), key=order)
        if first["kind"] == "image":
            packed = _pack_image(members, result, blobs, what=what, label=label)
        elif first["kind"] == "chart":
            packed = _pack_chart(result, blobs, what=what, label=label, created=created)
        else:
            packed = _pack_binary(
                first,
                result,
                blobs,
                what=what,
                label=label,
                created=created,
                variants=variant_list,
            )
        pdesc = _provenance(
            spec, first, packed, blobs, what=what, label=label, key=key, variants=variant_list
        )
        plat = packed.desc.get("platform") or {}
        entries.append(
            {
                "sort": (
                    label,
                    plat.get("os", ""),
                    plat.get("architecture", ""),
                    plat.get("variant", ""),
                    packed.desc["digest"],
                ),
                "members": members,
                "packed": packed,
                "provenance": pdesc,
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
                *(e["packed"].desc for e in entries),
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


def _provenance(
    spec: Mapping[str, Any],
    first: Mapping[str, Any],
    packed: _Packed,
    blobs: _Blobs,
    *,
    what: str,
    label: str,
    key: str,
    variants: list[Any],
) -> dict[str, Any]:
    """The in-toto provenance manifest of one artifact (``subject`` = its descriptor)."""
    try:
        statement = slsa_statement(
            packed.subjects,
            build_type=BUILD_TYPE,
            external_parameters={
                "recipe": spec["recipe"],
                "lockfile": spec["lockfile"],
                "artifact": label,
                "variants": variants,
            },
            internal_parameters={
                "epoch": spec["epoch"],
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
        raise BuildError(f"{what}: cannot state its provenance: {e.message}", hint=e.hint) from e
    blobs.put(sbytes, mt.IN_TOTO_JSON)
    prov = manifest_bytes(
        artifact_manifest(
            mt.IN_TOTO_JSON,
            [descriptor(mt.IN_TOTO_JSON, sbytes)],
            {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_CREATED: rfc3339(spec["epoch"])},
            subject=packed.desc,
        )
    )
    blobs.put(prov, mt.OCI_MANIFEST)
    return descriptor(mt.OCI_MANIFEST, prov, annotations={mt.ANN_NVKR_ARTIFACT: label})


def _metadata(
    spec: Mapping[str, Any], created: str, entries: list[dict[str, Any]], order: _VariantOrder
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
        packed: _Packed = e["packed"]
        for m in e["members"]:
            item: dict[str, Any] = {
                "name": m["name"],
                "kind": m["kind"],
                "variant": m.get("variant"),
                "actionKey": m["actionKey"],
                "builder": m["builder"],
                **packed.fields,
                "provenance": _trim(e["provenance"]),
            }
            if m["kind"] == "binary" and m.get("platform"):
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
        "clusterRelease": _cluster_release(spec, entries, order),
        "nodePoolReleases": list(spec.get("nodePoolReleases") or []),
    }


def _cluster_release(
    spec: Mapping[str, Any], entries: list[dict[str, Any]], order: _VariantOrder
) -> dict[str, Any] | None:
    """The spec's ``clusterRelease`` with its ``charts`` and ``images`` names resolved.

    A name becomes one item per distinct descriptor it has across the variants (an image joined
    over fewer arches for one GPU generation is another index), each listing its ``variants``.

    Raises:
        BuildError: a name the release set does not hold, or one of another kind.
    """
    cluster = spec.get("clusterRelease")
    if cluster is None:
        return None
    resolved = dict(cluster)
    for field, kind in (("charts", "chart"), ("images", "image")):
        items: list[dict[str, Any]] = []
        for art_name in cluster.get(field) or []:
            found = []
            for e in entries:
                serving = [m for m in e["members"] if m["name"] == art_name]
                if not serving:
                    continue
                if serving[0]["kind"] != kind:
                    raise BuildError(
                        f"release set {spec['name']}: clusterRelease.{field} names "
                        f"{art_name!r}, whose kind is {serving[0]['kind']!r}",
                        hint=f"list only {kind} artifacts under clusterRelease.{field}",
                    )
                variants = sorted(
                    {canonical_json(m["variant"]): m["variant"] for m in serving}.values(),
                    key=order,
                )
                found.append((order(variants[0]) if variants else (0, b""), e, variants))
            if not found:
                raise BuildError(
                    f"release set {spec['name']}: clusterRelease.{field} names {art_name!r}, "
                    "which the release set does not hold",
                    hint="add it to releaseSet.artifacts (or leave that list out to take all)",
                )
            for _, e, variants in sorted(found, key=lambda f: (f[0], f[1]["sort"])):
                packed: _Packed = e["packed"]
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
