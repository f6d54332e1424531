"""The ``release-set`` builder: assembles artifacts, provenance and metadata into an OCI layout.

Its params are the release set spec that :mod:`nvkr.plan` derives from the recipe (name, recipe
and lockfile digests, variants, artifacts with their dependencies and sbom action keys); its
dependencies are the artifact actions and their ``sbom`` actions. The work itself is
:func:`nvkr.releaseset.assemble`; every blob of the layout ends up in the store and is listed as
an output, ``index.json`` last.
"""

from __future__ import annotations

from typing import Any

from nvkr.builders import ActionContext, ActionSpec, Builder, PlanRefs, Problem, ReleaseKind
from nvkr.errors import RecipeError


class ReleaseSetBuilder(Builder[Any]):
    name = "release-set"
    version = "3"
    per_arch = False
    artifact_model = None
    release_kind = ReleaseKind.INTERNAL

    def check(self, artifact_name: str, artifact: Any, variant: Any) -> list[Problem]:
        return []  # made by the planner, never named in a recipe

    def plan(self, artifact_name: str, artifact: Any, variant: Any, refs: PlanRefs) -> ActionSpec:
        raise RecipeError(
            f"artifact {artifact_name!r}: the release-set builder is not for artifacts",
            hint="list artifacts under releaseSet instead",
        )

    def run(self, ctx: ActionContext) -> None:
        from nvkr.releaseset import assemble

        result = assemble(ctx.action.params, ctx.deps, ctx.store)
        ctx.outputs.extend(result["outputs"])
        ctx.metadata.update(result["metadata"])
