"""What both backends of the ``container-image`` builder plan alike: the image config's execution
fields and the manifest annotations known at plan time."""

from __future__ import annotations

from typing import Any

from nvkr.builders import PlanRefs
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.oci import mediatypes as mt

ANN_REVISION = "org.opencontainers.image.revision"
ANN_SOURCE = "org.opencontainers.image.source"
ANN_BASE_DIGEST = "org.opencontainers.image.base.digest"
ANN_BASE_NAME = "org.opencontainers.image.base.name"


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
    where: str, artifact: ContainerImageArtifact, refs: PlanRefs, base: dict[str, Any] | None
) -> dict[str, str]:
    """The manifest annotations known at plan time (``created`` is added at run time)."""
    derived: dict[str, str] = {}
    if base is not None:
        derived[ANN_BASE_DIGEST] = str(base["digest"])
        if not str(base["ref"]).startswith("oci-layout:"):
            derived[ANN_BASE_NAME] = str(base["ref"])
    if artifact.version is not None:
        derived[mt.ANN_VERSION] = artifact.version
    if artifact.revisionSource is not None:
        entry = refs.source(artifact.revisionSource).entry
        if entry.get("commit"):
            derived[ANN_REVISION] = str(entry["commit"])
        if entry.get("url"):
            derived[ANN_SOURCE] = str(entry["url"])
    # the recipe's own annotations win over derived ones
    return dict(sorted({**derived, **artifact.annotations}.items()))
