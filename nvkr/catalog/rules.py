"""Compatibility rules of the recipe catalog (``recipes/compatibility.yaml``): their format.

After matrix expansion, every variant a command loads is checked against the rules of its catalog
(issue 7): ``validate`` reports them, ``lock``, ``plan`` and ``build`` refuse to go on with a
violation, ``recipes list`` shows which GPU generation x Kubernetes line x arch combinations the
rules support. The rules are data: each has an ``id`` (named in every violation), a ``check``
(one of :data:`CHECKS`, evaluated here) and the upstream ``source`` it encodes. Evaluation fails
closed: a GPU generation, Kubernetes line or architecture the rules do not list is a violation
("unsupported"), and so is a line with no containerd constraint. A rule needing a fact the variant
lacks (no kubelet staged) does not apply; :func:`evaluate_all` says which rules applied and why the
others did not. Two checks are nvkr's own and always on: :data:`CLUSTER_LINE` (the cluster version
lies in the variant's matrix line) and :data:`PINS_AGREE` (a version var agrees with the apt pin of
the same component).

This module holds the rules' models and the shapes of what evaluating them gives; they are loaded
and checked in :mod:`nvkr.catalog.loading` and evaluated in :mod:`nvkr.catalog.evaluation`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

RULES_FILE = "compatibility.yaml"
CLUSTER_LINE = "cluster.line"
PINS_AGREE = "pins.agree"
RULES_HINT = "the rules format is schema/compatibility.schema.json; see recipes/compatibility.yaml"
_ID_PATTERN = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"

RuleId = Annotated[str, Field(pattern=_ID_PATTERN, description="Required. e.g. skew.kubelet")]
Component = Literal[
    "kubelet",
    "kubeadm",
    "kubectl",
    "crictl",
    "containerd",
    "runc",
    "nvidia-container-toolkit",
    "spire-agent",
    "spire-server",
    "ovn",
    "ovn-kubernetes-client-go",
]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")


class _Rule(_Strict):
    id: RuleId
    source: str = Field(min_length=1, description="Required. the upstream document it encodes")


_R = TypeVar("_R", bound=_Rule)


class KubernetesLinesRule(_Rule):
    """The Kubernetes release lines the catalog supports; a variant on another line is unsupported."""

    check: Literal["kubernetes-lines"]
    lines: list[str] = Field(min_length=1, description='Required. e.g. ["1.34", "1.35"]')


class ArchitecturesRule(_Rule):
    """The CPU architectures the catalog supports."""

    check: Literal["architectures"]
    values: list[str] = Field(min_length=1, description="Required. e.g. [amd64, arm64]")


class GpuGeneration(_Strict):
    products: list[str] = Field(default_factory=list, description="Optional. e.g. [H100, GH200]")


class GpuGenerationsRule(_Rule):
    """The GPU generations the catalog supports."""

    check: Literal["gpu-generations"]
    generations: dict[str, GpuGeneration] = Field(min_length=1)


class GpuArchitecturesRule(_Rule):
    """Per GPU generation, the host architectures it exists on (every generation listed)."""

    check: Literal["gpu-architectures"]
    architectures: dict[str, list[str]]


class GpuDriverBranchRule(_Rule):
    """Per GPU generation, the oldest NVIDIA driver branch supporting it (every generation listed)."""

    check: Literal["gpu-driver-branch"]
    minimum: dict[str, Annotated[int, Field(ge=1)]]


class GpuOpenKernelModulesRule(_Rule):
    """Per GPU generation, the architectures on which NVIDIA's open kernel modules are required."""

    check: Literal["gpu-open-kernel-modules"]
    required: dict[str, list[str]]


class VersionSkewRule(_Rule):
    """``component`` at most ``newerMinors`` minor releases newer and ``olderMinors`` older than
    ``against`` (the cluster version, the kubelet, or the fleet's SPIRE server);
    ``samePatch``: the very same version."""

    check: Literal["version-skew"]
    component: Component
    against: Literal["cluster", "kubelet", "spire-server"]
    newerMinors: int = Field(ge=0)
    olderMinors: int = Field(ge=0)
    samePatch: bool = False


class VersionByLineRule(_Rule):
    """``component`` must satisfy the constraint of a Kubernetes line: the kubelet's line, the
    cluster version's or the matrix cell's (``line``). Every supported line needs a constraint."""

    check: Literal["version-by-line"]
    component: Component
    line: Literal["kubelet", "cluster", "matrix"]
    constraints: dict[str, str] = Field(min_length=1)


class OvsdbModels(_Strict):
    """Where a client's OVSDB database models are: libovsdb model files (modelgen's
    ``model.go``, which embeds the schema it was generated from as a JSON string) in the git
    sources of one repository."""

    git: str = Field(
        min_length=1,
        description="Required. the repository URL, as recipes pin it: every git source of it is read",
    )
    files: list[str] = Field(
        min_length=1,
        description="Required. paths in the repository, e.g. [go-controller/pkg/nbdb/model.go]",
    )


class OvsdbServer(_Strict):
    """Where the server's OVSDB schemas are: ``.ovsschema`` files in a Debian package."""

    package: str = Field(min_length=1, description="Required. e.g. ovn-central")
    files: list[str] = Field(
        min_length=1,
        description="Required. absolute paths in the package's data, e.g. [/usr/share/ovn/ovn-nb.ovsschema]",
    )


class OvsdbSchemaRule(_Rule):
    """Per database, the schema version a client's models were generated from at most the one
    the server package ships: read from the bytes (the pinned tree's model files, the locked
    .deb's schema files) when sources are locked, recorded in the lockfile and checked from it
    by ``plan`` and ``build`` (``validate`` reads no source). Applies when the variant has a git
    source of ``models.git`` and an apt source pinning ``server.package``."""

    check: Literal["ovsdb-schema"]
    models: OvsdbModels
    server: OvsdbServer

    @property
    def without_server(self) -> str:
        """Why the rule does not apply to a variant with the models and no server package."""
        return (
            f"no apt source installs {self.server.package}, so the models of {self.models.git} "
            "have no schema to be held to"
        )


Rule = Annotated[
    KubernetesLinesRule
    | ArchitecturesRule
    | GpuGenerationsRule
    | GpuArchitecturesRule
    | GpuDriverBranchRule
    | GpuOpenKernelModulesRule
    | VersionSkewRule
    | VersionByLineRule
    | OvsdbSchemaRule,
    Field(discriminator="check"),
]
CHECKS = (
    "kubernetes-lines",
    "architectures",
    "gpu-generations",
    "gpu-architectures",
    "gpu-driver-branch",
    "gpu-open-kernel-modules",
    "version-skew",
    "version-by-line",
    "ovsdb-schema",
)
# The checks that read the locked sources' bytes (lock, plan and build evaluate them; validate and
# recipes list cannot).
CONTENT_CHECKS = ("ovsdb-schema",)
# The checks that decide which cells exist at all; each must appear exactly once.
TABLE_CHECKS = ("kubernetes-lines", "architectures", "gpu-generations")
# The checks that read nothing but the cell; a violation of one makes the cell "unsupported".
CELL_CHECKS = (*TABLE_CHECKS, "gpu-architectures")


class CompatibilityRules(_Strict):
    """A rules file: ``apiVersion: nvkr.dev/v1alpha1``, ``kind: CompatibilityRules``, ``rules``."""

    apiVersion: Literal["nvkr.dev/v1alpha1"]
    kind: Literal["CompatibilityRules"]
    rules: list[Rule] = Field(min_length=1)

    def _one(self, kind: type[_R]) -> _R:
        return next(r for r in self.rules if isinstance(r, kind))

    @property
    def lines(self) -> list[str]:
        """The supported Kubernetes release lines, in file order."""
        return self._one(KubernetesLinesRule).lines

    @property
    def architectures(self) -> list[str]:
        """The supported architectures, in file order."""
        return self._one(ArchitecturesRule).values

    @property
    def generations(self) -> list[str]:
        """The supported GPU generations, in file order."""
        return list(self._one(GpuGenerationsRule).generations)


@dataclass(frozen=True)
class LoadedRules:
    """A validated rules file and where it came from (``path`` for messages)."""

    path: str
    rules: CompatibilityRules


@dataclass(frozen=True)
class Violation:
    """One rule a variant breaks.

    Attributes:
        rule: the rule id, e.g. ``skew.kubelet``.
        message: what is wrong, with the values, e.g. ``ampere supports amd64, not arm64``.
        values: the values involved, by name (strings), for ``--json`` output.
        unsupported: the cell itself is outside the rules' table (GPU generation, line, arch).
    """

    rule: str
    message: str
    values: dict[str, str] = field(default_factory=dict)
    unsupported: bool = False


@dataclass(frozen=True)
class Evaluation:
    """The result of :func:`evaluate_all`: violations, the rules that applied, and for each rule
    that did not apply, why (``{id: reason}``)."""

    violations: list[Violation]
    applied: list[str]
    not_applicable: dict[str, str]


def json_schema_bytes() -> bytes:
    """The JSON Schema (draft 2020-12) of a rules file, as committed in
    ``schema/compatibility.schema.json`` (sorted keys, 2-space indent, newline); generated from
    :class:`CompatibilityRules`, a unit test fails when the file drifts."""
    from nvkr.canonical import canonical_json_file

    return canonical_json_file(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://nvkr.dev/schemas/compatibility-v1alpha1.json",
            **CompatibilityRules.model_json_schema(),
            "title": "nvkr compatibility rules (nvkr.dev/v1alpha1)",
        }
    )
