"""The ``sbom`` builder: one SPDX 2.3 document per artifact a release set holds.

The planner (:func:`nvkr.plan.make_plan`) makes one sbom action per released artifact action,
with :func:`sbom_spec`: it depends on that action (for an image, the image-index action) and,
for an image, on the actions of the Go binaries the image was built with, so their build info
is at hand. At run time it reads the artifact's outputs from the store and describes them
(:mod:`nvkr.sbom`); its one output is the document (role ``sbom``, ``application/spdx+json``),
which the release-set action attaches to the artifact.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from nvkr.action import ActionResult
from nvkr.builders.api import (
    RELEASED_KINDS,
    ActionContext,
    ActionSpec,
    PlannerBuilder,
    ReleaseKind,
)
from nvkr.builders.sbom.params import SbomParams
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError
from nvkr.oci.layout import rfc3339
from nvkr.sbom import (
    SPDX_MEDIA_TYPE,
    SpdxDocument,
    describe_binary,
    describe_chart,
    describe_image,
    parse_buildinfo,
)
from nvkr.sbom.describe import OtherSbom

#: The kinds of artifact an SBOM describes (a release set's ``kind``s).
SBOM_KINDS = tuple(k.value for k in RELEASED_KINDS)
_FILE_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sbom_spec(
    artifact: str,
    kind: str,
    subject: str,
    binaries: list[str],
    nvkr_version: str,
    images: list[str] | None = None,
) -> ActionSpec:
    """The action of the SBOM of one released artifact.

    Args:
        artifact: the artifact's name (several names sharing one action joined by ``,``).
        kind: ``binary``, ``image`` or ``chart`` (the builder's ``release_kind``).
        subject: action key (``sha256:<hex>``) of the artifact's action, or of its image-index
            action for an image.
        binaries: action keys of the artifacts an image holds as files (Go binaries among them).
        nvkr_version: goes into ``creationInfo.creators``, so it is part of the key.
        images: for a chart, the keys of the sbom actions of the images it pins, which its
            document refers to.
    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in SBOM_KINDS:
        raise ValueError(f"no SBOM for artifacts of kind {kind!r}")
    keys, others = sorted(set(binaries)), sorted(set(images or []))
    return ActionSpec(
        params=SbomParams(
            artifact=artifact,
            kind=str(kind),
            subject=subject,
            binaries=keys,
            images=others,
            nvkrVersion=nvkr_version,
        ).to_json(),
        deps=tuple(sorted({subject, *keys, *others})),
    )


def _buildinfo(ctx: ActionContext, result: ActionResult, what: str) -> dict[str, Any] | None:
    """The parsed build info of a Go binary's result (output role ``buildinfo``), if it has one."""
    if not result.outputs_with("buildinfo"):
        return None
    out = result.output("buildinfo", what)
    try:
        data = ctx.store.read_blob(out.digest)
    except OSError as e:
        raise BuildError(
            f"{what}: its build info {out.digest} is not in the store",
            hint="the cache entry is stale; run the build again",
        ) from e
    return parse_buildinfo(data, f"{what} output {out.name!r}")


def _other_sbom(ctx: ActionContext, key: str) -> OtherSbom:
    """The SBOM another sbom action made, as a document may refer to it."""
    result = ctx.deps[key]
    out = result.output("sbom", f"sbom action {key[:19]}")
    data = ctx.store.read_blob(out.digest)
    meta = result.metadata
    return OtherSbom(
        describes=str(meta.get("describes")),
        name=str(json.loads(data).get("name")),
        namespace=str(meta.get("documentNamespace")),
        sha1=hashlib.sha1(data, usedforsecurity=False).hexdigest(),
    )


class SbomBuilder(PlannerBuilder):
    """Builder ``sbom``: made by the planner for every released artifact, never named in recipes."""

    name = "sbom"
    version = "1"
    refusal = "the sbom builder is run by the planner, not named in recipes"
    refusal_hint = "every artifact of a release set gets its SBOM automatically"

    @staticmethod
    def _binaries(ctx: ActionContext, keys: list[str]) -> dict[str, dict[str, Any]]:
        """``{primary output digest: Go build info}`` of the binary actions ``keys``."""
        binaries: dict[str, dict[str, Any]] = {}
        for key in keys:
            dep = ctx.deps[key]
            info = _buildinfo(ctx, dep, f"artifact {dep.name}")
            if info is not None:
                binaries[dep.output("primary", f"artifact {dep.name}").digest] = info
        return binaries

    def run(self, ctx: ActionContext) -> None:
        """Write the SPDX document; metadata ``describes`` is the ``sha256:<hex>`` of what its
        root package stands for (binary, image index or chart .tgz), ``documentNamespace`` and
        the counts of ``packages`` and ``files``.

        Raises:
            BuildError: a dependency's result lacks the outputs its kind needs, or a blob cannot
                be read as what it should be. IntegrityError: a blob is missing or corrupt.
        """
        p = SbomParams.model_validate(ctx.action.params)
        label, kind = p.artifact, p.kind
        what = f"SBOM of {label}"
        result = ctx.deps.get(p.subject)
        if result is None:
            raise BuildError(f"{what}: no result for its artifact's action {p.subject[:19]}")
        if kind == ReleaseKind.BINARY:
            meta = result.metadata
            platform = "/".join(str(meta[k]) for k in ("goos", "goarch") if meta.get(k))
            doc = SpdxDocument(f"{label} ({platform})" if platform else label, label)
            info = _buildinfo(ctx, result, f"artifact {label}")
            describes = describe_binary(doc, ctx.store, result, label, info)
        elif kind == ReleaseKind.IMAGE:
            doc = SpdxDocument(label, label)
            describes = describe_image(
                doc, ctx.store, result, label, self._binaries(ctx, p.binaries)
            )
        elif kind == ReleaseKind.CHART:
            doc = SpdxDocument(label, label)
            others = [_other_sbom(ctx, key) for key in p.images]
            describes = describe_chart(
                doc, ctx.store, result, label, {o.describes: o for o in others}
            )
        elif kind == ReleaseKind.MACHINE_IMAGE:
            from nvkr.sbom.debian import describe_machine_image

            meta = result.metadata
            doc = SpdxDocument(f"{label} (linux/{meta.get('arch', '?')})", label)
            describes = describe_machine_image(
                doc, ctx.store, result, label, self._binaries(ctx, p.binaries)
            )
        else:
            raise BuildError(f"{what}: no SBOM for artifacts of kind {kind!r}")
        document = doc.to_json(
            created=rfc3339(ctx.action.epoch), creators=[f"Tool: nvkr-{p.nvkrVersion}"]
        )
        path = ctx.workdir / f"{_FILE_UNSAFE.sub('-', label)}.spdx.json"
        path.write_bytes(canonical_json(document))
        ctx.add_output(path, name=path.name, media_type=SPDX_MEDIA_TYPE, role="sbom")
        ctx.metadata.update(
            {
                "describes": describes,
                "documentNamespace": document["documentNamespace"],
                "packages": len(document["packages"]),
                "files": len(document["files"]),
            }
        )
