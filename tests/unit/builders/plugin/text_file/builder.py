"""The ``text-file`` builder: writes a recipe field into a file, one per arch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvkr.builders.api import ActionContext, ActionSpec, Builder, PlanRefs, Problem, ReleaseKind

from .artifact import TextFileArtifact

if TYPE_CHECKING:
    from nvkr.recipe.matrix import Variant


class TextFileBuilder(Builder[TextFileArtifact]):
    name = "text-file"
    version = "1"
    artifact_model = TextFileArtifact
    per_arch = True
    release_kind = ReleaseKind.BINARY

    def check(
        self, artifact_name: str, artifact: TextFileArtifact, variant: Variant
    ) -> list[Problem]:
        if not artifact.text:
            return [(("artifacts", artifact_name, "text"), "text is empty", None)]
        return []

    def plan(
        self, artifact_name: str, artifact: TextFileArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        return ActionSpec(
            params={"text": f"{artifact.text} ({variant.arch})\n", "filename": artifact.filename}
        )

    def run(self, ctx: ActionContext) -> None:
        path = ctx.workdir / str(ctx.action.params["filename"])
        path.write_text(str(ctx.action.params["text"]), encoding="utf-8")
        ctx.add_output(path, name=path.name, media_type="text/plain")
