"""Assembling a release set: packed artifacts, their provenance, the index, ``index.json``.

The heart of the ``release-set`` action (:mod:`nvkr.builders.release_set.builder`): :func:`assemble`
takes the spec (:mod:`nvkr.releaseset.spec`) and the cached results of the actions it names,
packs each action's artifact (:mod:`nvkr.releaseset.artifacts`, :mod:`nvkr.releaseset.chart`),
states its in-toto provenance, attaches its SPDX SBOM (the result of its ``sbom`` action, when
the spec names one) and the in-toto statements its action made about it that the spec names as
attestations (:mod:`nvkr.releaseset.attestations`: a Secure Boot image's PCR predictions), writes the metadata document (:mod:`nvkr.releaseset.metadata`)
and the release set index, and returns an action result listing every blob of the layout (shape
in the :mod:`nvkr.releaseset` docstring); :func:`nvkr.releaseset.materialize` writes it to disk.
"""

from __future__ import annotations

from collections.abc import Mapping

from nvkr.action import ActionOutput, ActionResult, Outputs, ReleaseKind
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.jsondoc import JsonObject, json_object
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import (
    artifact_manifest,
    blob_name,
    descriptor,
    image_index,
    index_bytes,
    manifest_bytes,
    rfc3339,
)
from nvkr.provenance import (
    BUILD_TYPE,
    BUILDER_ID,
    external_parameters,
    internal_parameters,
    slsa_statement,
    statement_bytes,
)
from nvkr.releaseset.artifacts import _Blobs, _pack_binary, _pack_image, _Packed
from nvkr.releaseset.attestations import _attestations
from nvkr.releaseset.chart import _pack_chart
from nvkr.releaseset.metadata import _Entry, _metadata
from nvkr.releaseset.spec import _group_by_action, _VariantOrder
from nvkr.releasespec import ReleaseSetSpec, SpecArtifact
from nvkr.sbom import SPDX_MEDIA_TYPE
from nvkr.store import Store


def assemble(spec: ReleaseSetSpec, artifacts: Mapping[str, ActionResult], store: Store) -> Outputs:
    """Write the release set described by ``spec`` into ``store`` as OCI layout blobs.

    Args:
        spec: the release-set action's params, read (:meth:`ReleaseSetSpec.from_params`
            checked the name, the epoch and every artifact's kind).
        artifacts: action key → that action's cached result (its outputs by role and its
            metadata, :class:`~nvkr.action.ActionResult`). Binary: exactly one output
            with role ``primary``. Image: one output with role ``index`` (an OCI image index in
            the store; metadata ``indexDigest``, ``indexSize``, ``mediaType``). Chart: role
            ``primary`` (the .tgz) and role ``config`` (Helm's config JSON), optionally a
            ``.prov``; metadata ``chartName``, ``version``, ``appVersion``, ``tag``. Every blob
            (for an image: its whole closure) must already be in ``store``. An ``sbomActionKey``'s
            result has one output with role ``sbom`` (an SPDX 2.3 JSON document) and metadata
            ``describes``: the ``sha256:<hex>`` of the binary, image index or chart .tgz it
            describes, which must be the artifact's own.
        store: where the new blobs (manifests, statements, metadata, indexes) are added.
    Returns:
        the release-set action's outputs and metadata (:class:`~nvkr.action.Outputs`):
        outputs ``{"name": "blobs/sha256/<hex>", "digest", "size", "mediaType", "role":
        "blob"}``, ... sorted by digest, then ``{"name": "index.json", ..., "role": "index"}``;
        metadata ``{"name", "releaseSetDigest": "sha256:<hex>"}``. ``index.json`` is stored as
        a blob too; :func:`materialize` writes the directory.
    Raises:
        BuildError: an action key without a result, a
            result without the outputs or metadata its kind needs, artifacts sharing an action
            key with different identities, a dependency that is no valid ResourceDescriptor, or
            a ``clusterRelease`` naming an artifact the set does not hold (or of another kind),
            an SBOM result without its document or describing another artifact.
        IntegrityError: a blob is missing from the store, has another size or is corrupt (for
            an image, anywhere in the index's closure; the message names the blob and the
            documents leading to it).
    """
    name = spec.name
    created = rfc3339(spec.epoch)
    blobs = _Blobs(store)
    blobs.put(mt.EMPTY_JSON, mt.OCI_EMPTY)  # referenced by every artifact's config

    order = _VariantOrder(spec.variants)
    entries: list[_Entry] = []  # one per distinct action: descriptors + metadata facts
    for key, members in _group_by_action(spec).items():
        first = members[0]
        label = ",".join(sorted({m.name for m in members}))  # one action, several names
        what = f"release set {name}: artifact {label} ({key})"
        result = artifacts.get(key)
        if result is None:
            raise BuildError(
                f"{what}: no result for its action",
                hint="the action did not run or its cache entry is gone; run the build again",
            )
        unique = {canonical_json(dict(m.variant)): m.variant for m in members if m.variant}
        variant_list = sorted(unique.values(), key=order)
        if first.kind == ReleaseKind.IMAGE:
            packed = _pack_image(members, result, blobs, what=what, label=label)
        elif first.kind == ReleaseKind.CHART:
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
                attested=frozenset(a.role for a in first.attestations),
            )
        qcow2 = json_object(result.metadata.get("disk")).get("qcow2")
        pdesc = _provenance(
            spec, first, packed, blobs, what=what, label=label, key=key, variants=variant_list,
            disk_image=qcow2 if isinstance(qcow2, Mapping) else None,
        )  # fmt: skip
        sdesc = _sbom(members, artifacts, packed, blobs, what=what, label=label, created=created)
        attached = _attestations(
            first, result, packed, blobs, what=what, label=label, created=created
        )
        plat = packed.desc.get("platform") or {}
        entries.append(
            _Entry(
                sort=(
                    label,
                    plat.get("os", ""),
                    plat.get("architecture", ""),
                    plat.get("variant", ""),
                    packed.desc["digest"],
                ),
                members=members,
                packed=packed,
                provenance=pdesc,
                sbom=sdesc,
                attestations=attached,
            )
        )
    entries.sort(key=lambda e: e.sort)

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
                *(e.packed.desc for e in entries),
                *(e.provenance for e in entries),
                *(e.sbom for e in entries if e.sbom is not None),
                *(a.desc for e in entries for a in e.attestations),
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

    outputs = [
        ActionOutput(blob_name(d), d, size, media_type, "blob")
        for d, (size, media_type) in sorted(blobs.known.items())
    ]
    outputs.append(
        ActionOutput("index.json", top_info.digest, top_info.size, mt.OCI_INDEX, "index")
    )
    return Outputs(outputs=tuple(outputs), metadata={"name": name, "releaseSetDigest": rs_digest})


def _provenance(
    spec: ReleaseSetSpec,
    first: SpecArtifact,
    packed: _Packed,
    blobs: _Blobs,
    *,
    what: str,
    label: str,
    key: str,
    variants: list[Mapping[str, str]],
    disk_image: JsonObject | None = None,
) -> JsonObject:
    """The in-toto provenance manifest of one artifact (``subject`` = its descriptor);
    ``disk_image``: a machine image's QCOW2 record (compressed or not), into internalParameters."""
    try:
        statement = slsa_statement(
            packed.subjects,
            build_type=BUILD_TYPE,
            external_parameters=external_parameters(spec, variants, artifact=label),
            internal_parameters=internal_parameters(
                spec,
                first.builder,
                first.builder_version,
                key,
                first.c_toolchain,
                disk_image,
            ),
            resolved_dependencies=first.dependencies,
            builder_id=BUILDER_ID,
            builder_version={"nvkr": spec.nvkr_version},
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
            {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_CREATED: rfc3339(spec.epoch)},
            subject=packed.desc,
        )
    )
    blobs.put(prov, mt.OCI_MANIFEST)
    return descriptor(mt.OCI_MANIFEST, prov, annotations={mt.ANN_NVKR_ARTIFACT: label})


def _sbom(
    members: list[SpecArtifact],
    artifacts: Mapping[str, ActionResult],
    packed: _Packed,
    blobs: _Blobs,
    *,
    what: str,
    label: str,
    created: str,
) -> JsonObject | None:
    """The SBOM manifest of one artifact, or None when the spec names no sbom action for it.

    An OCI artifact manifest (``artifactType`` and its one layer ``application/spdx+json``,
    ``subject`` = the artifact's descriptor), as ``oras attach --artifact-type`` makes one.
    """
    keys = {m.sbom_action_key for m in members}
    if keys == {None}:
        return None
    if len(keys) != 1 or None in keys:
        raise BuildError(
            f"{what}: artifacts sharing its action name different sbom actions",
            hint="the plan gave one action two SBOMs; this is a bug in nvkr, please report it",
        )
    key = str(keys.pop())
    result = artifacts.get(key)
    if result is None:
        raise BuildError(
            f"{what}: no result for its sbom action {key}",
            hint="the action did not run or its cache entry is gone; run the build again",
        )
    doc = result.output("sbom", f"{what} sbom action")
    if doc.media_type != SPDX_MEDIA_TYPE:
        raise BuildError(
            f"{what}: its SBOM has mediaType {doc.media_type!r}, expected {SPDX_MEDIA_TYPE}"
        )
    described = result.metadata.get("describes")
    subjects = {"sha256:" + s["digest"]["sha256"] for s in packed.subjects}
    if described not in subjects:
        raise BuildError(
            f"{what}: its SBOM describes {described!r}, the artifact is {', '.join(sorted(subjects))}",
            hint="the plan paired the wrong SBOM with it; this is a bug in nvkr, please report it",
        )
    blobs.reference(doc.digest, doc.size, SPDX_MEDIA_TYPE, f"{what} SBOM {doc.name!r}")
    layer = descriptor(SPDX_MEDIA_TYPE, doc.digest, doc.size, annotations={mt.ANN_TITLE: doc.name})
    manifest = manifest_bytes(
        artifact_manifest(
            SPDX_MEDIA_TYPE,
            [layer],
            {mt.ANN_NVKR_ARTIFACT: label, mt.ANN_CREATED: created},
            subject=packed.desc,
        )
    )
    blobs.put(manifest, mt.OCI_MANIFEST)
    return descriptor(mt.OCI_MANIFEST, manifest, annotations={mt.ANN_NVKR_ARTIFACT: label})
