"""The ``copy-source`` builder: copies a source's blob, whatever its kind, into a file."""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING

from nvkr.builders.api import ActionContext, ActionSpec, Builder, PlanRefs, Problem, ReleaseKind

from .copy_artifact import CopySourceArtifact

if TYPE_CHECKING:
    from nvkr.recipe.matrix import Variant


class CopySourceBuilder(Builder[CopySourceArtifact]):
    name = "copy-source"
    version = "1"
    artifact_model = CopySourceArtifact
    per_arch = False
    release_kind = ReleaseKind.BINARY

    def check(
        self, artifact_name: str, artifact: CopySourceArtifact, variant: Variant
    ) -> list[Problem]:
        return []

    def plan(
        self, artifact_name: str, artifact: CopySourceArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        src = refs.source(artifact.source)
        return ActionSpec(
            params={"filename": artifact.filename},
            inputs={"source": src.digest},
            sources={"source": src},
        )

    def run(self, ctx: ActionContext) -> None:
        path = ctx.workdir / str(ctx.action.params["filename"])
        shutil.copyfile(ctx.input_path("source"), path)
        ctx.add_output(path, name=path.name, media_type="text/plain")
