"""The ``helm-chart`` builder: a Helm chart packaged reproducibly, its images pinned by digest.

Input is a source holding the chart directory (for a path source, the deterministic tar of the
directory; ``subdir`` picks the chart inside it) and, for each ``images`` entry, the image-index
action of a container-image artifact, or the digest of an image the recipe pins by ``reference``
(one nvkr does not build, such as an upstream collector). The builder loads the chart as ``helm
package`` does (``.helmignore``, :mod:`nvkr.helm.chart`), requires ``apiVersion: v2`` and a chart
name Helm and OCI registries both accept, sets ``version`` and ``appVersion`` from the recipe,
writes each image's repository and digest, and the recipe's ``values``, into ``values.yaml``
(:mod:`nvkr.helm.values`), checks the packaged subcharts against ``Chart.lock``
(:mod:`nvkr.helm.dependencies`) and writes
``<name>-<version>.tgz`` with Helm's layout and fixed bytes (:mod:`nvkr.helm.package`). Helm
itself then lints the archive strictly and renders it, in the namespace and with the values of
the recipe's ``check`` (default: ``default`` and the chart's own values; :mod:`nvkr.helm.check`);
a pinned digest that no rendered manifest holds is a warning (the chart ignores the pin).

Outputs: the archive (role ``primary``, ``application/vnd.cncf.helm.chart.content.v1.tar+gzip``)
and the config blob Helm pushes with it (role ``config``, ``application/vnd.cncf.helm.config.v1+json``,
``json.Marshal(chart.Metadata)``). Metadata: ``chartName``, ``version``, ``appVersion``, ``tag``
(the OCI tag, ``+`` as ``_``) and ``images`` (``{KEY: "repository@sha256:<hex>"}``).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from nvkr.builders.api import (
    ActionContext,
    ActionSpec,
    Builder,
    PlanRefs,
    Problem,
    ReleaseKind,
    ResolvedSource,
    SbomInputs,
    a_kind,
    builder_of,
    source_kind_of,
)
from nvkr.builders.helm_chart.artifact import HelmChartArtifact
from nvkr.builders.helm_chart.params import CheckParams, HelmChartParams, ImageDigest, ImagePin
from nvkr.canonical import DIGEST_RE
from nvkr.errors import BuildError, RecipeError
from nvkr.fetch.entries import PathEntry
from nvkr.helm.chart import ChartFile, LoadedChart, load_dir
from nvkr.helm.check import helm_check
from nvkr.helm.dependencies import verify_dependencies
from nvkr.helm.metadata import API_VERSION_V2, metadata_json
from nvkr.helm.package import archive_name, oci_tag, package_bytes
from nvkr.helm.values import emitter_versions, set_images
from nvkr.oci.mediatypes import HELM_CHART_CONTENT, HELM_CONFIG
from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import PathSource
from nvkr.recipe.yamlsource import where
from nvkr.repro import extract_tar

__all__ = ["CHART_NAME_RE", "HelmChartBuilder", "check_chart_name", "oci_tag"]

if TYPE_CHECKING:
    from nvkr.action import Action


#: Helm's best practices ("lower case letters and numbers, words separated with dashes") — also a
#: valid OCI repository path component, which a chart name becomes when pushed.
CHART_NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
#: Helm's ``chartutil`` refuses longer names (``maxChartNameLength``).
CHART_NAME_MAX = 250
#: Source kinds a chart can come from: a tree, or a url source of a tar (a packaged chart).
CHART_SOURCE_KINDS = frozenset({"path", "git", "url"})


def check_chart_name(name: str, where: str) -> None:
    """Check a chart name against Helm's rules.

    Helm's loader and ``helm lint`` require a non-empty name without path separators
    (``name == filepath.Base(name)``); ``chartutil`` allows ``[a-zA-Z0-9._-]``, at most 250
    characters; Helm's chart best practices narrow that to lower-case letters, digits and dashes,
    which is also what an OCI repository path component accepts. nvkr enforces the narrow form.

    Raises:
        BuildError: naming ``where`` (the Chart.yaml) and the field.
    """
    if CHART_NAME_RE.match(name) and len(name) <= CHART_NAME_MAX:
        return
    raise BuildError(
        f"{where}: field 'name' is {name!r}: a chart name must be lower-case letters, digits and "
        f"dashes (starting and ending with a letter or digit, at most {CHART_NAME_MAX} characters)",
        hint="Helm's chart best practices, and the name becomes an OCI repository path; "
        "e.g. name: node-agent",
    )


class HelmChartBuilder(Builder[HelmChartArtifact]):
    name = "helm-chart"
    # 2: values.yaml edited in place (ruamel.yaml re-dumped it, re-indenting sequences); Chart.yaml
    # quotes what YAML 1.2 or go-yaml would read as a number (appVersion "1e3")
    version = "2"
    per_arch = False
    artifact_model = HelmChartArtifact
    release_kind = ReleaseKind.CHART

    def check(
        self, artifact_name: str, artifact: HelmChartArtifact, variant: Variant
    ) -> list[Problem]:
        """The chart's source is a tree (a path or git source, or a url source of a tar); each
        ``images`` entry names a container-image artifact."""
        problems: list[Problem] = []
        kind = source_kind_of(variant, artifact.source)
        if kind is not None and kind not in CHART_SOURCE_KINDS:
            problems.append(
                (
                    ("artifacts", artifact_name, "source"),
                    f"{artifact.source!r} is {a_kind(kind)} source; a chart is a directory (a path "
                    "or git source, or a url source of a tar)",
                    None,
                )
            )
        for key, image in sorted(artifact.images.items()):
            if image.artifact is None:
                continue  # a reference pinned by digest
            builder = builder_of(variant, image.artifact)
            if builder is not None and builder != "container-image":
                problems.append(
                    (
                        ("artifacts", artifact_name, "images", key, "artifact"),
                        f"{image.artifact!r} is {a_kind(builder)} artifact, not a container-image",
                        "a chart pins the digests of container-image artifacts",
                    )
                )
        return problems

    def plan(
        self, artifact_name: str, artifact: HelmChartArtifact, variant: Variant, refs: PlanRefs
    ) -> ActionSpec:
        """Params ``{"version", "appVersion", "subdir", "images": {KEY: {"repository",
        "index": <image-index action key>}}[, "check": {"namespace", "values"}]}`` (``check``
        only when the recipe sets it), input ``chart`` (the source's digest), the
        image-index actions as deps, and as tools the YAML emitters whose output ships in the
        archive (``{"pyyaml": ..., "ruamel.yaml": ...}``).

        Raises:
            RecipeReferenceError: an unknown source or image artifact (the fields are checked by
                the model, the kinds they name by :meth:`check`).
        """
        subdir = fc.relative_dir(artifact.subdir) if artifact.subdir is not None else None
        src = refs.source(artifact.source)
        if artifact.valuesFile is not None and isinstance(src.spec, PathSource):
            _check_values_file(artifact_name, artifact.valuesFile, src, subdir, variant)
        images: dict[str, ImagePin | ImageDigest] = {}
        for key, image in sorted(artifact.images.items()):
            if image.reference is not None:
                repository, _, digest = image.reference.rpartition("@")
                images[key] = ImageDigest(repository=repository, digest=digest, tag=image.tag)
                continue
            assert image.artifact is not None and image.repository is not None  # the model's
            index = refs.image_index(image.artifact)
            images[key] = ImagePin(repository=image.repository, index=index.key, tag=image.tag)
        check = artifact.check
        params = HelmChartParams(
            version=artifact.version,
            appVersion=artifact.appVersion,
            subdir=subdir,
            images=images,
            valuesFile=artifact.valuesFile,
            values=dict(sorted(artifact.values.items())),
            # absent, not null: recipes without one keep their keys (HelmChartParams.to_json)
            check=None
            if check is None
            else CheckParams(namespace=check.namespace, values=check.values),
        )
        return ActionSpec(
            params=params.to_json(),
            inputs={"chart": src.digest},
            tools=emitter_versions(),
            sources={"chart": src},
            deps=tuple(sorted({i.index for i in images.values() if isinstance(i, ImagePin)})),
        )

    def sbom_inputs(self, action: Action, actions: Mapping[str, Action]) -> SbomInputs:
        """The image indexes it pins: its SBOM refers to theirs."""
        return SbomInputs(
            images=tuple(
                d for d in action.deps if d in actions and actions[d].builder == "image-index"
            )
        )

    def run(self, ctx: ActionContext) -> None:
        p = HelmChartParams.model_validate(ctx.action.params)
        src = ctx.workdir / "src"
        src.mkdir()
        where = _chart_label(ctx)
        with open(ctx.input_path("chart"), "rb") as f:
            extract_tar(f, src, what=f"chart {where}", under=p.subdir or "")
        chart_dir = src / p.subdir if p.subdir else src
        if not chart_dir.is_dir():
            raise BuildError(
                f"{where}: no such directory in the source",
                hint="'subdir' names the chart directory relative to the source",
            )
        followed: list[str] = []
        chart = load_dir(chart_dir, where, ctx.warn, within=src, followed=followed)
        meta = chart.metadata
        if meta["apiVersion"] != API_VERSION_V2:
            raise BuildError(
                f"{where}/Chart.yaml: field 'apiVersion' is {meta['apiVersion']!r}: nvkr packages "
                "apiVersion v2 charts (Helm 3 and later)",
                hint="set apiVersion: v2 (dependencies move from requirements.yaml to Chart.yaml)",
            )
        check_chart_name(meta["name"], f"{where}/Chart.yaml")
        log = [f"chart {meta['name']}: version {meta.get('version')!r} -> {p.version!r}"]
        meta["version"] = p.version
        if p.appVersion is not None:
            log.append(f"appVersion {meta.get('appVersion')!r} -> {p.appVersion!r}")
            meta["appVersion"] = p.appVersion
        log += verify_dependencies(chart)
        log += [f"followed symlink {link}" for link in followed]
        if p.valuesFile is not None:
            log.append(_values_from_file(chart, p.valuesFile, where))

        images = _image_digests(ctx, where)
        by_digest, values = _pins_as_values(p, images, where)
        if images or values:
            data = chart.values.data if chart.values else None
            chart.values = ChartFile(
                "values.yaml", set_images(data, by_digest, f"{where}/values.yaml", values)
            )
            log += [
                f"values: {k}.repository={r} {k}.digest={d}"
                for k, (r, d) in sorted(by_digest.items())
            ]
            log += [f"values: {k}={v}" for k, v in sorted(values.items())]

        out = ctx.workdir / "out"
        out.mkdir()
        archive = out / archive_name(chart)
        archive.write_bytes(package_bytes(chart, epoch=ctx.action.epoch))
        checked, rendered = helm_check(
            archive,
            where=where,
            release=chart.name[:53],  # Helm's release name limit
            namespace=p.check.namespace if p.check else "default",
            values=p.check.values if p.check else None,
        )
        log += checked
        leaves = {k: "tag" if p.images[k].tag is not None else "digest" for k in images}
        for warning in _unused_pins(chart.name, images, rendered, leaves):
            ctx.warn(warning)
        config = out / "config.json"
        config.write_bytes(metadata_json(meta))
        with open(ctx.log_file, "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in log))

        ctx.add_output(archive, name=archive.name, media_type=HELM_CHART_CONTENT)
        ctx.add_output(
            config,
            name=f"{chart.name}-{chart.version}.config.json",
            media_type=HELM_CONFIG,
            role="config",
        )
        ctx.metadata.update(
            {
                "chartName": chart.name,
                "version": chart.version,
                "appVersion": meta.get("appVersion"),
                "tag": oci_tag(chart.version),
                "images": {k: f"{r}@{d}" for k, (r, d) in sorted(images.items())},
            }
        )


def _pins_as_values(
    p: HelmChartParams, images: dict[str, tuple[str, str]], where: str
) -> tuple[dict[str, tuple[str, str]], dict[str, str | bool | int]]:
    """The image pins written as KEY.repository and KEY.digest, and the recipe's values with the
    pins that ride in a tag (KEY.repository, KEY.tag = TAG@sha256:<hex>) added.

    Raises:
        BuildError: a recipe's value sets a key such a pin sets.
    """
    by_digest: dict[str, tuple[str, str]] = {}
    values = dict(p.values)
    for key, (repository, digest) in images.items():
        tag = p.images[key].tag
        if tag is None:
            by_digest[key] = (repository, digest)
            continue
        for leaf, value in (("repository", repository), ("tag", f"{tag}@{digest}")):
            if f"{key}.{leaf}" in values:
                raise BuildError(f"{where}: values key {key}.{leaf} is also {key!r}'s image pin")
            values[f"{key}.{leaf}"] = value
    return by_digest, values


def _unused_pins(
    chart: str,
    images: dict[str, tuple[str, str]],
    rendered: dict[str, str],
    leaves: dict[str, str],
) -> list[str]:
    """A warning for each pinned digest that no rendered manifest holds: the chart ignores the
    pin (a hard-coded image, another values key), so installing it runs something else than
    the image nvkr built (``leaves``: where each pin went, ``digest`` or ``tag``). NOTES.txt is
    text for the user, not a manifest."""
    manifests = [text for name, text in rendered.items() if not name.endswith("NOTES.txt")]
    return [
        f"chart {chart}: the image digest pinned at {key}.{leaves[key]} ({digest}) is in none of the "
        "rendered manifests: the chart ignores the pin (a hard-coded image, or another values key)"
        for key, (_, digest) in sorted(images.items())
        if not any(digest in text for text in manifests)
    ]


#: the YAML files at a chart's top that are never values (Helm's metadata, lock, v1 requirements)
_NOT_VALUES = frozenset({"Chart.yaml", "Chart.lock", "requirements.yaml", "requirements.lock"})


def _check_values_file(
    artifact_name: str, name: str, src: ResolvedSource, subdir: str | None, variant: Variant
) -> None:
    """A path source's chart is on disk when the plan is made: its ``valuesFile`` must be
    there (a git source's is checked when the chart is built, from the fetched tree).

    Raises:
        RecipeError: no such file in the chart directory (naming the recipe's line, the
            directory and the YAML files at its top).
    """
    assert isinstance(src.spec, PathSource)  # the caller's check
    chart_dir = src.base_dir / src.spec.path / (subdir or "")
    if not chart_dir.is_dir() or (chart_dir / name).is_file():
        return  # a missing directory is the build's error, with the source named
    at = where(variant.locations, ("artifacts", artifact_name, "valuesFile"))
    offered = _values_files(p.name for p in chart_dir.iterdir() if p.is_file())
    raise RecipeError(
        f"{at}: valuesFile {name!r}: the chart {chart_dir} has no such file{offered}",
        hint=_VALUES_FILE_HINT,
    )


_VALUES_FILE_HINT = "valuesFile names a file of the chart directory, relative to it"


def _values_files(names: Iterable[str]) -> str:
    """`` (its values files: a.yaml, b.yaml)`` for the YAML files among a chart's top-level
    file ``names`` that can be values (not Helm's metadata or lock files), or nothing."""
    offered = sorted(
        n for n in names if "/" not in n and n.endswith((".yaml", ".yml")) and n not in _NOT_VALUES
    )
    return f" (its values files: {', '.join(offered)})" if offered else ""


def _values_from_file(chart: LoadedChart, name: str, where: str) -> str:
    """Make the chart's file ``name`` its values.yaml (the recipe's ``valuesFile``); the log line.

    Raises:
        BuildError: the chart has no such file (naming the YAML files at its top it has).
    """
    found = [f for f in chart.files if f.name == name]
    if not found:
        names = [f.name for f in chart.files] + (["values.yaml"] if chart.values else [])
        raise BuildError(
            f"{where}: valuesFile {name!r}: the chart has no such file{_values_files(names)}",
            hint=_VALUES_FILE_HINT,
        )
    replaced = " (in place of its own values.yaml)" if chart.values is not None else ""
    chart.values = ChartFile("values.yaml", found[0].data)
    return f"values.yaml: {name}{replaced}"


def _chart_label(ctx: ActionContext) -> str:
    """How messages name the chart directory: the path source's path (plus subdir), or the
    source's name."""
    src = ctx.action.sources.get("chart")
    path = src.entry.path if src and isinstance(src.entry, PathEntry) else None
    base = path or (f"source {src.name!r}" if src else "chart source")
    subdir = HelmChartParams.model_validate(ctx.action.params).subdir
    return posixpath.join(base, subdir) if subdir else base


def _image_digests(ctx: ActionContext, where: str) -> dict[str, tuple[str, str]]:
    """``{KEY: (repository, "sha256:<hex>")}``: the recipe's digest, or the image-index's
    result in ``ctx.deps``."""
    images: dict[str, tuple[str, str]] = {}
    for key, image in HelmChartParams.model_validate(ctx.action.params).images.items():
        if isinstance(image, ImageDigest):
            images[key] = (image.repository, image.digest)
            continue
        result = ctx.deps.get(image.index)
        digest = None if result is None else result.metadata.get("indexDigest")
        if (
            not isinstance(digest, str)
            or not DIGEST_RE.match(digest)
            or not digest.startswith("sha256:")
        ):
            raise BuildError(
                f"{where}: image {key!r}: the image-index action {image.index[:19]} gave no "
                f"sha256 indexDigest (got {digest!r})"
            )
        images[key] = (image.repository, digest)
    return images
