"""What both backends of the ``container-image`` builder do alike: the image config's execution
fields and the manifest annotations known at plan time, and the result's outputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nvkr.action import ActionOutput
from nvkr.builders.api import ActionContext, PlanRefs
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.fetch.entries import GitEntry, OciEntry, PypiEntry, UrlEntry
from nvkr.oci import mediatypes as mt
from nvkr.oci.image.layers import OCI_LAYER_TAR_ZSTD

ANN_REVISION = "org.opencontainers.image.revision"
ANN_SOURCE = "org.opencontainers.image.source"
ANN_BASE_DIGEST = "org.opencontainers.image.base.digest"
ANN_BASE_NAME = "org.opencontainers.image.base.name"
#: Output names of layers by media type: ``layer-0.tar.gz`` (another type: no suffix).
LAYER_SUFFIX = {
    mt.OCI_LAYER_TAR_GZIP: ".tar.gz",
    OCI_LAYER_TAR_ZSTD: ".tar.zst",
}


def execution_params(artifact: ContainerImageArtifact) -> dict[str, Any]:
    """The params both backends share: the image config's execution fields (entrypoint, cmd,
    env, user, workdir, labels; maps sorted) and the layer compression."""
    return {
        "entrypoint": list(artifact.entrypoint),
        "cmd": list(artifact.cmd),
        "env": dict(sorted(artifact.env.items())),
        "user": artifact.user,
        "workdir": artifact.workdir,
        "labels": dict(sorted(artifact.labels.items())),
        "compression": artifact.compression,
    }


def image_annotations(
    where: str, artifact: ContainerImageArtifact, refs: PlanRefs, base: OciEntry | None
) -> dict[str, str]:
    """The manifest annotations known at plan time (``created`` is added at run time)."""
    derived: dict[str, str] = {}
    if base is not None:
        derived[ANN_BASE_DIGEST] = base.digest
        if not base.ref.startswith("oci-layout:"):
            derived[ANN_BASE_NAME] = base.ref
    if artifact.version is not None:
        derived[mt.ANN_VERSION] = artifact.version
    if artifact.revisionSource is not None:
        entry = refs.source(artifact.revisionSource).entry
        if isinstance(entry, GitEntry) and entry.commit:
            derived[ANN_REVISION] = entry.commit
        if isinstance(entry, GitEntry | UrlEntry | PypiEntry) and entry.url:
            derived[ANN_SOURCE] = entry.url
    # the recipe's own annotations win over derived ones
    return dict(sorted({**derived, **artifact.annotations}.items()))


def record_image(
    ctx: ActionContext,
    layers: list[dict[str, Any]],
    config: Mapping[str, Any],
    manifest: Mapping[str, Any],
    platform: Mapping[str, Any],
) -> None:
    """Record an image whose blobs the store holds as the action's outputs, the shape both
    backends' results have: every layer (role ``layer``, ``layer-N`` and its suffix), the config
    (``config.json``) and the manifest (``manifest.json``), each by its descriptor's
    ``mediaType``, ``digest`` and ``size``; ``platform``, ``manifestDigest`` and
    ``configDigest`` in the metadata."""
    named = [
        (f"layer-{i}{LAYER_SUFFIX.get(d['mediaType'], '')}", d, "layer")
        for i, d in enumerate(layers)
    ]
    for name, desc, role in [
        *named,
        ("config.json", config, "config"),
        ("manifest.json", manifest, "manifest"),
    ]:
        ctx.outputs.append(
            ActionOutput(name, desc["digest"], desc["size"], desc["mediaType"], role)
        )
    ctx.metadata.update(
        {
            "platform": dict(platform),
            "manifestDigest": manifest["digest"],
            "configDigest": config["digest"],
        }
    )
