"""The ``release-set`` builder: assembles artifacts, provenance and metadata into an OCI layout.

Its params are the release set spec that :mod:`nvkr.plan` derives from the recipe (name, recipe
and lockfile digests, variants, artifacts with their dependencies and sbom action keys); its
dependencies are the artifact actions and their ``sbom`` actions. The work itself is
:func:`nvkr.releaseset.assemble`; every blob of the layout ends up in the store and is listed as
an output, ``index.json`` last.
"""

from __future__ import annotations

from nvkr.builders.api import ActionContext, PlannerBuilder


class ReleaseSetBuilder(PlannerBuilder):
    name = "release-set"
    version = "3"
    refusal = "the release-set builder is not for artifacts"
    refusal_hint = "list artifacts under releaseSet instead"

    def run(self, ctx: ActionContext) -> None:
        from nvkr.releaseset import assemble
        from nvkr.releasespec import ReleaseSetSpec

        result = assemble(ReleaseSetSpec.from_params(ctx.action.params), ctx.deps, ctx.store)
        ctx.outputs.extend(result.outputs)
        ctx.metadata.update(result.metadata)
