"""The ``helm-chart`` artifact model: what a recipe says about a Helm chart."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from nvkr.recipe import fieldchecks as fc
from nvkr.recipe.base import ArtifactModel, Strict


class ChartImage(Strict):
    """The image a chart's values.yaml pins: a container-image artifact the build makes (with the
    repository it is published under), or an image nvkr does not build, by its ``reference``."""

    artifact: str | None = Field(
        default=None, description="a container-image artifact (with repository)"
    )
    repository: fc.ImageRepository | None = Field(
        default=None,
        description="with artifact: image repository in lower case, without tag or digest, e.g. "
        "ghcr.io/nvkr/node-agent",
    )
    reference: fc.PinnedImage | None = Field(
        default=None,
        description="an image nvkr does not build, pinned by digest: REPOSITORY@sha256:<hex>",
    )
    tag: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$",
        description="Optional. for a chart that takes its image as repository and tag (printing "
        "repository:tag): the tag, with the digest riding in it (KEY.tag = TAG@sha256:<hex>, "
        "no KEY.digest), e.g. 1.2.0",
    )

    @model_validator(mode="after")
    def _one_origin(self) -> ChartImage:
        if self.reference is not None:
            if self.artifact is not None or self.repository is not None:
                raise ValueError(
                    "a chart image is an artifact with its repository, or a reference; not both"
                )
        elif self.artifact is None or self.repository is None:
            raise ValueError(
                "a chart image needs artifact and repository (an image the build makes), or "
                "reference (REPOSITORY@sha256:<hex>, an image nvkr does not build)"
            )
        return self


#: A Kubernetes namespace name: an RFC 1123 label (lower-case alphanumerics and '-', at most 63).
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class ChartCheck(Strict):
    """How the helm-chart builder checks a chart: the namespace and values ``helm lint`` and
    ``helm template`` get, as a user would install it (``--namespace NS -f values``). Only the
    check sees them; the packaged values.yaml is the chart's own (with the image pins)."""

    namespace: str = Field(
        default="default",
        pattern=NAMESPACE_PATTERN,
        description="Optional. namespace to render the chart in (an RFC 1123 label); default: default",
    )
    values: fc.NoFloats = Field(
        default_factory=dict,
        description="Optional. values for the check, over the chart's values.yaml (no floats: quote them)",
    )


class HelmChartArtifact(ArtifactModel):
    """A Helm chart packaged reproducibly (``<name>-<version>.tgz``) with Helm's OCI media types."""

    builder: Literal["helm-chart"]
    source: str = Field(description="Required. the source holding the chart directory")
    subdir: fc.RelativeDir | None = Field(
        default=None, description="Optional. chart directory in the source"
    )
    version: fc.ChartVersion = Field(description='Required. chart version (SemVer 2), e.g. "0.1.0"')
    appVersion: fc.AppVersion | None = Field(
        default=None, description="Optional. appVersion, a non-empty printable string"
    )
    images: dict[fc.ValuesKey, ChartImage] = Field(
        default_factory=dict,
        description="Optional. values.yaml key (dotted) -> image (an artifact with its repository, or a "
        "reference pinned by digest); sets KEY.repository and KEY.digest",
    )
    valuesFile: fc.ValuesFile | None = Field(
        default=None,
        description="Optional. the chart's values file to package as its values.yaml (a chart "
        "without a root values.yaml, such as OVN-Kubernetes', ships one per mode, e.g. "
        "values-single-node-zone.yaml); the image pins and values are set in it",
    )
    values: dict[fc.ValuesKey, fc.ValuesLeaf] = Field(
        default_factory=dict,
        description="Optional. values.yaml key (dotted) -> string, boolean or integer (no floats), "
        "written into the packaged values.yaml in place as the image pins are (a fleet's "
        "defaults, e.g. otlp.endpoint; a chart's switches, e.g. tags.ovs-node: false)",
    )
    check: ChartCheck | None = Field(
        default=None,
        description="Optional. {namespace, values} Helm lints and renders the chart with; default: "
        "namespace default, the chart's own values",
    )

    def references(self) -> list[tuple[tuple[str, ...], str, str]]:
        refs: list[tuple[tuple[str, ...], str, str]] = [(("source",), "source", self.source)]
        for key, image in self.images.items():
            if image.artifact is not None:
                refs.append((("images", key, "artifact"), "artifact", image.artifact))
        return refs
