"""The builder table: one line per builder, the one place that lists them.

Each line names a builder, where its :class:`~nvkr.builders.api.Builder` lives
(``module:Class``, imported when first asked for, so reading a recipe never loads a builder's
code) and the artifact model a recipe declares it with (None for the builders the planner makes
itself). :mod:`nvkr.recipe.models` derives the recipe's artifact union, and with it the JSON
Schema, from the models here; :func:`nvkr.builders.api.get_builder` finds builders here. This
module imports the artifact models only (``nvkr/builders/<name>/artifact.py``), which import
nothing of the engine.

Adding a builder is a package ``nvkr/builders/<name>/`` (``builder.py`` and ``artifact.py``) and
one line below. The order of the lines with a model is the order of the recipe schema's
``oneOf``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.builders.go_binary.artifact import GoBinaryArtifact
from nvkr.builders.helm_chart.artifact import HelmChartArtifact
from nvkr.builders.kube_packages.artifact import KubePackagesArtifact
from nvkr.builders.node_image.artifact import NodeImageArtifact
from nvkr.builders.rootfs.artifact import RootfsArtifact
from nvkr.builders.signed_modules.artifact import SignedModulesArtifact
from nvkr.builders.uki.artifact import SignedUkiArtifact, UkiArtifact
from nvkr.recipe.base import ArtifactModel


@dataclass(frozen=True)
class BuilderLine:
    """One line of the table: ``name`` (the recipe's ``builder:``), ``builder`` as
    ``module:Class`` and ``artifact``, its recipe model (None: made by the planner only)."""

    name: str
    builder: str
    artifact: type[ArtifactModel] | None = None


# fmt: off
BUILDER_TABLE: tuple[BuilderLine, ...] = (
    BuilderLine("go-binary", "nvkr.builders.go_binary.builder:GoBinaryBuilder", GoBinaryArtifact),
    BuilderLine(
        "container-image",
        "nvkr.builders.container_image.builder:ContainerImageBuilder",
        ContainerImageArtifact,
    ),
    BuilderLine(
        "helm-chart", "nvkr.builders.helm_chart.builder:HelmChartBuilder", HelmChartArtifact
    ),
    BuilderLine(
        "kube-packages",
        "nvkr.builders.kube_packages.builder:KubePackagesBuilder",
        KubePackagesArtifact,
    ),
    BuilderLine("rootfs", "nvkr.builders.rootfs.builder:RootfsBuilder", RootfsArtifact),
    BuilderLine(
        "node-image", "nvkr.builders.node_image.builder:NodeImageBuilder", NodeImageArtifact
    ),
    BuilderLine(
        "signed-modules",
        "nvkr.builders.signed_modules.builder:SignedModulesBuilder",
        SignedModulesArtifact,
    ),
    BuilderLine("uki", "nvkr.builders.uki.builder:UkiBuilder", UkiArtifact),
    BuilderLine("signed-uki", "nvkr.builders.uki.signing:SignedUkiBuilder", SignedUkiArtifact),
    BuilderLine("image-index", "nvkr.builders.image_index.builder:ImageIndexBuilder"),
    BuilderLine("release-set", "nvkr.builders.release_set.builder:ReleaseSetBuilder"),
    BuilderLine("sbom", "nvkr.builders.sbom.builder:SbomBuilder"),
)
# fmt: on
