"""The ``image-index`` builder: joins per-arch container images into one OCI image index.

The planner makes one for every container-image artifact a release set holds, over the variants
that differ only by arch (image-spec "image-index.md"). Its dependencies are the per-arch
container-image actions, whose results carry a ``manifest`` output and ``platform`` metadata; its
one output is the index (role ``index``), and its metadata names the index digest, which charts
use to pin their images.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from nvkr.action import ActionOutput
from nvkr.builders.api import (
    ActionContext,
    PlannerBuilder,
    SbomInputs,
    get_builder,
)
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError
from nvkr.jsondoc import json_object

if TYPE_CHECKING:
    from nvkr.action import Action


INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"


class ImageIndexBuilder(PlannerBuilder):
    name = "image-index"
    version = "1"
    refusal = "image-index is made by the planner, not named in recipes"
    refusal_hint = "use builder: container-image; its arches are joined automatically"

    def sbom_inputs(self, action: Action, actions: Mapping[str, Action]) -> SbomInputs:
        """What its per-arch images' SBOMs would read: the binaries they hold as files."""
        binaries: list[str] = []
        for key in action.deps:
            image = actions.get(key)
            if image is not None:
                binaries += get_builder(image.builder).sbom_inputs(image, actions).binaries
        return SbomInputs(binaries=tuple(binaries))

    def run(self, ctx: ActionContext) -> None:
        manifests = []
        for key in ctx.action.deps:
            result = ctx.deps[key]
            what = f"image index {ctx.action.params['name']!r}: action {key[:19]}"
            out = result.output("manifest", what)
            if "platform" not in result.metadata:
                raise BuildError(f"{what}: its image manifest has no platform")
            manifests.append({**out.descriptor(), "platform": result.metadata["platform"]})
        manifests.sort(
            key=lambda m: (
                str(json_object(m["platform"]).get("architecture", "")),
                str(m["digest"]),
            )
        )
        index = {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": manifests}
        data = canonical_json(index)
        info = ctx.store.add_bytes(data)
        ctx.outputs.append(
            ActionOutput("index.json", info.digest, info.size, INDEX_MEDIA_TYPE, "index")
        )
        ctx.metadata.update(
            {"indexDigest": info.digest, "indexSize": info.size, "mediaType": INDEX_MEDIA_TYPE}
        )
