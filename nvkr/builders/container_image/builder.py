"""The ``container-image`` builder: one OCI image per variant arch, bit for bit the same anywhere.

Two backends: the daemonless one (the default, :mod:`nvkr.builders.container_image.daemonless`:
no daemon, no tool) and ``backend: docker`` (:mod:`nvkr.builders.container_image.docker_backend`,
imported only when a recipe asks for it); this module only dispatches. Either way the result has
the same shape: every layer (role ``layer``), the config (``config``) and the manifest
(``manifest``), and ``platform``, ``manifestDigest`` and ``configDigest`` in the metadata, which
the planner's ``image-index`` action joins across arches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    SbomInputs,
)
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.builders.container_image.daemonless import check_files, plan_daemonless, run_daemonless
from nvkr.builders.container_image.params import (
    ArtifactFile,
    DaemonlessParams,
    DockerParams,
    image_params,
)
from nvkr.recipe.matrix import Variant

if TYPE_CHECKING:
    from nvkr.action import Action


class ContainerImageBuilder(Builder[ContainerImageArtifact]):
    """Builder ``container-image``: per-arch OCI images, joined by the planner's image index."""

    name = "container-image"
    version = "1"
    per_arch = True
    artifact_model = ContainerImageArtifact
    release_kind = ReleaseKind.IMAGE

    def check(
        self, artifact_name: str, artifact: ContainerImageArtifact, variant: Variant
    ) -> list[Problem]:
        """See :func:`check_files`, and for ``backend: docker`` the context's kind."""
        problems = check_files(artifact_name, artifact, variant)
        if artifact.backend == "docker":
            from nvkr.builders.container_image import docker_backend

            problems += docker_backend.check(artifact_name, artifact, variant)
        return problems

    def plan(
        self, artifact_name: str, artifact: ContainerImageArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        """See :func:`plan_daemonless`, or :func:`nvkr.builders.container_image.docker_backend.plan` for
        ``backend: docker``."""
        if artifact.backend == "docker":
            from nvkr.builders.container_image import docker_backend

            return docker_backend.plan(artifact_name, artifact, variant, refs)
        return plan_daemonless(artifact_name, artifact, variant, refs)

    def sbom_inputs(self, action: Action, actions: Mapping[str, Action]) -> SbomInputs:
        """The artifacts the image holds as files (a Go binary's build info names the modules
        linked into that file)."""
        p = image_params(action.params)
        files = p.files if isinstance(p, DaemonlessParams) else []
        return SbomInputs(binaries=tuple(f.action for f in files if isinstance(f, ArtifactFile)))

    def run(self, ctx: ActionContext) -> None:
        """See :func:`run_daemonless`, or :func:`nvkr.builders.container_image.docker_backend.run`.

        Raises:
            pydantic.ValidationError: params no plan of this builder writes.
        """
        p = image_params(ctx.action.params)
        if isinstance(p, DockerParams):
            from nvkr.builders.container_image import docker_backend

            docker_backend.run(ctx)
            return
        run_daemonless(ctx, p)
