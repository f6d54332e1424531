"""Compatibility rules of the recipe catalog (``recipes/compatibility.yaml``) and their evaluation.

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
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from nvkr.catalog.facts import DRIVER, Fact, VariantFacts
from nvkr.catalog.versions import (
    DriverVersion,
    UpstreamVersion,
    VersionError,
    parse_constraint,
    parse_release_line,
    satisfies,
)
from nvkr.errors import RecipeError
from nvkr.recipe.yamlsource import LocationMap, where

RULES_FILE = "compatibility.yaml"
CLUSTER_LINE = "cluster.line"
PINS_AGREE = "pins.agree"
RULES_HINT = "the rules format is schema/compatibility.schema.json; see recipes/compatibility.yaml"
_ID_PATTERN = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$"

RuleId = Annotated[str, Field(pattern=_ID_PATTERN, description="Required. e.g. skew.kubelet")]
Component = Literal[
    "kubelet", "kubeadm", "kubectl", "crictl", "containerd", "runc", "nvidia-container-toolkit"
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
    ``against`` (the cluster version or the kubelet); ``samePatch``: the very same version."""

    check: Literal["version-skew"]
    component: Component
    against: Literal["cluster", "kubelet"]
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


Rule = Annotated[
    KubernetesLinesRule
    | ArchitecturesRule
    | GpuGenerationsRule
    | GpuArchitecturesRule
    | GpuDriverBranchRule
    | GpuOpenKernelModulesRule
    | VersionSkewRule
    | VersionByLineRule,
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
)
# The checks that decide which cells exist at all; each must appear exactly once.
_TABLE_CHECKS = ("kubernetes-lines", "architectures", "gpu-generations")
# The checks that read nothing but the cell; a violation of one makes the cell "unsupported".
_CELL_CHECKS = (*_TABLE_CHECKS, "gpu-architectures")


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


# -- loading -----------------------------------------------------------------------------------
def load_rules(path: Path) -> LoadedRules:
    """Read and validate a rules file.

    Raises:
        RecipeError: unreadable file or YAML error; schema errors (``FILE:LINE: rules[3].minimum:
            ...``, one line each); and, naming the file and field: duplicate ids, a table check
            (kubernetes-lines, architectures, gpu-generations) missing or given twice, a release
            line or constraint that does not parse, a GPU generation or architecture not in the
            tables, a GPU map or containerd constraint table that leaves a generation or line out.
    """
    from nvkr.plan import display_path
    from nvkr.recipe.validation import validate
    from nvkr.recipe.yamlsource import read_yaml

    document = read_yaml(path)
    try:
        rules = validate(CompatibilityRules, document.data, document.locations)
    except RecipeError as exc:
        raise RecipeError(exc.message, hint=RULES_HINT) from None
    problems = _semantic_problems(rules, document.locations)
    if problems:
        raise RecipeError("\n".join(problems), hint=RULES_HINT)
    return LoadedRules(path=display_path(path), rules=rules)


def _semantic_problems(rules: CompatibilityRules, locations: LocationMap) -> list[str]:
    problems: list[str] = []
    seen: dict[str, int] = {}
    for index, rule in enumerate(rules.rules):
        if rule.id in (CLUSTER_LINE, PINS_AGREE):
            problems.append(
                f"{where(locations, ('rules', index, 'id'))}: '{rule.id}' is reserved for "
                "nvkr's own check"
            )
        elif rule.id in seen:
            problems.append(
                f"{where(locations, ('rules', index, 'id'))}: duplicate rule id '{rule.id}' "
                f"(also rules[{seen[rule.id]}])"
            )
        seen.setdefault(rule.id, index)
    for check in _TABLE_CHECKS:
        count = sum(1 for r in rules.rules if r.check == check)
        if count != 1:
            problems.append(
                f"{where(locations, ('rules',))}: needs exactly one rule with check '{check}' "
                f"(found {count})"
            )
    if problems:
        return problems
    lines, arches, gens = set(rules.lines), set(rules.architectures), set(rules.generations)
    for index, rule in enumerate(rules.rules):
        at = ("rules", index)
        if isinstance(rule, KubernetesLinesRule):
            for i, line in enumerate(rule.lines):
                problems.extend(
                    _parse_problem(parse_release_line, line, locations, (*at, "lines", i))
                )
        elif isinstance(rule, GpuArchitecturesRule | GpuOpenKernelModulesRule):
            table = rule.architectures if isinstance(rule, GpuArchitecturesRule) else rule.required
            name = "architectures" if isinstance(rule, GpuArchitecturesRule) else "required"
            problems.extend(
                _key_problems(
                    table,
                    gens,
                    locations,
                    (*at, name),
                    "GPU generation",
                    cover=name == "architectures",
                )
            )
            for gen, values in table.items():
                for i, arch in enumerate(values):
                    if arch not in arches:
                        problems.append(
                            f"{where(locations, (*at, name, gen, i))}: architecture '{arch}' is "
                            f"not in the architectures rule ({', '.join(rules.architectures)})"
                        )
        elif isinstance(rule, GpuDriverBranchRule):
            problems.extend(
                _key_problems(
                    rule.minimum, gens, locations, (*at, "minimum"), "GPU generation", cover=True
                )
            )
        elif isinstance(rule, VersionByLineRule):
            problems.extend(
                _key_problems(
                    rule.constraints,
                    lines,
                    locations,
                    (*at, "constraints"),
                    "Kubernetes line",
                    cover=True,
                )
            )
            for line, text in rule.constraints.items():
                place = (*at, "constraints", line)
                problems.extend(_parse_problem(_upstream_constraint, text, locations, place))
    return problems


def _upstream_constraint(text: str) -> object:
    return parse_constraint(text, "upstream")


def _parse_problem(
    parse: Callable[[str], object], text: str, locations: LocationMap, path: tuple[str | int, ...]
) -> list[str]:
    try:
        parse(text)
    except VersionError as exc:
        return [f"{where(locations, path)}: {exc.message}"]
    return []


def _key_problems(
    table: Mapping[str, object],
    known: set[str],
    locations: LocationMap,
    path: tuple[str | int, ...],
    noun: str,
    *,
    cover: bool,
) -> list[str]:
    problems = [
        f"{where(locations, (*path, key))}: {noun} '{key}' is not in the rules' table "
        f"({', '.join(sorted(known))})"
        for key in table
        if key not in known
    ]
    if cover:
        missing = sorted(known - set(table))
        if missing:
            problems.append(
                f"{where(locations, path)}: no entry for {noun} {', '.join(repr(m) for m in missing)} "
                "(every one needs one: the rules fail closed)"
            )
    return problems


def find_rules(recipe: Path) -> Path | None:
    """The rules of the catalog ``recipe`` belongs to: ``compatibility.yaml`` in the nearest
    ancestor directory named ``recipes`` that holds one (as :func:`nvkr.lock.default_lock_path`
    finds ``recipes/``); None for a recipe outside any catalog."""
    p = Path(os.path.abspath(recipe))
    for parent in p.parents:
        if parent.name == "recipes" and (parent / RULES_FILE).is_file():
            return parent / RULES_FILE
    return None


# -- evaluation --------------------------------------------------------------------------------
def evaluate(facts: VariantFacts, rules: CompatibilityRules) -> list[Violation]:
    """The violations of ``facts`` (see :func:`evaluate_all`)."""
    return evaluate_all(facts, rules).violations


def evaluate_cell(
    gpu: str, kubernetes: str, arch: str, rules: CompatibilityRules
) -> list[Violation]:
    """The violations of a bare matrix cell: the table checks and the GPU architectures (all
    marked ``unsupported``); empty when the rules support the cell."""
    run = _Run(VariantFacts(file="", variant="", gpu=gpu, kubernetes=kubernetes, arch=arch), rules)
    for rule in rules.rules:
        if rule.check in _CELL_CHECKS:
            run.rule(rule)
    return run.violations


def evaluate_all(facts: VariantFacts, rules: CompatibilityRules) -> Evaluation:
    """Evaluate every rule on ``facts``, then nvkr's own checks (:data:`CLUSTER_LINE`,
    :data:`PINS_AGREE`).

    Returns:
        An :class:`Evaluation`; ``violations`` in rule order.
    Raises nothing for any facts: versions are parsed already, constraints when the rules loaded.
    """
    out = _Run(facts, rules)
    for rule in rules.rules:
        out.rule(rule)
    out.cluster_line()
    out.pins_agree()
    return Evaluation(out.violations, out.applied, out.not_applicable)


class _Run:
    def __init__(self, facts: VariantFacts, rules: CompatibilityRules) -> None:
        self.facts = facts
        self.rules = rules
        self.violations: list[Violation] = []
        self.applied: list[str] = []
        self.not_applicable: dict[str, str] = {}
        self.known_gpu = facts.gpu in rules.generations

    def _skip(self, rule: str, reason: str) -> None:
        self.not_applicable[rule] = reason

    def _fail(
        self, rule: str, message: str, values: dict[str, object], *, unsupported: bool = False
    ) -> None:
        self.violations.append(
            Violation(rule, message, {k: str(v) for k, v in values.items()}, unsupported)
        )

    def rule(self, rule: Rule) -> None:
        f = self.facts
        if isinstance(rule, KubernetesLinesRule):
            self.applied.append(rule.id)
            if f.kubernetes not in rule.lines:
                self._fail(
                    rule.id,
                    f"Kubernetes {f.kubernetes} is not a supported release line "
                    f"(supported: {', '.join(rule.lines)})",
                    {"kubernetes": f.kubernetes, "supported": ", ".join(rule.lines)},
                    unsupported=True,
                )
        elif isinstance(rule, ArchitecturesRule):
            self.applied.append(rule.id)
            if f.arch not in rule.values:
                self._fail(
                    rule.id,
                    f"architecture {f.arch} is not supported (supported: {', '.join(rule.values)})",
                    {"arch": f.arch, "supported": ", ".join(rule.values)},
                    unsupported=True,
                )
        elif isinstance(rule, GpuGenerationsRule):
            self.applied.append(rule.id)
            if f.gpu not in rule.generations:
                self._fail(
                    rule.id,
                    f"GPU generation '{f.gpu}' is not supported "
                    f"(supported: {', '.join(rule.generations)})",
                    {"gpu": f.gpu, "supported": ", ".join(rule.generations)},
                    unsupported=True,
                )
        elif not self.known_gpu and rule.check.startswith("gpu-"):
            self._skip(rule.id, f"GPU generation '{f.gpu}' is unknown")
        elif isinstance(rule, GpuArchitecturesRule):
            self.applied.append(rule.id)
            allowed = rule.architectures[f.gpu]
            if f.arch not in allowed:
                self._fail(
                    rule.id,
                    f"{f.gpu} supports {', '.join(allowed)}, not {f.arch}",
                    {"gpu": f.gpu, "arch": f.arch, "supported": ", ".join(allowed)},
                    unsupported=True,
                )
        elif isinstance(rule, GpuDriverBranchRule):
            self._driver_branch(rule)
        elif isinstance(rule, GpuOpenKernelModulesRule):
            self._open_modules(rule)
        elif isinstance(rule, VersionSkewRule):
            self._skew(rule)
        elif isinstance(rule, VersionByLineRule):
            self._by_line(rule)

    def _driver_branch(self, rule: GpuDriverBranchRule) -> None:
        f = self.facts
        driver = f.components.get(DRIVER)
        if driver is None:
            self._skip(rule.id, "no NVIDIA driver staged (vars.nvidiaDriverVersion or an apt pin)")
            return
        self.applied.append(rule.id)
        assert isinstance(driver.version, DriverVersion)
        minimum = rule.minimum[f.gpu]
        if driver.version.branch < minimum:
            self._fail(
                rule.id,
                f"{f.gpu} needs NVIDIA driver branch {minimum} or newer, got {driver.text} "
                f"(branch {driver.version.branch}, {driver.where})",
                {
                    "gpu": f.gpu,
                    "driver": driver.text,
                    "branch": driver.version.branch,
                    "minimum": minimum,
                },
            )

    def _open_modules(self, rule: GpuOpenKernelModulesRule) -> None:
        f = self.facts
        archs = rule.required.get(f.gpu, [])
        if f.arch not in archs:
            self._skip(rule.id, f"{f.gpu} on {f.arch} may use either kernel module flavour")
            return
        if not f.kernel_modules:
            self._skip(
                rule.id,
                "no NVIDIA kernel module flavour pinned (nvidia-open*, nvidia-kernel-open*, "
                "cuda-drivers*, nvidia-kernel-dkms)",
            )
            return
        self.applied.append(rule.id)
        if "proprietary" in f.kernel_modules:
            self._fail(
                rule.id,
                f"{f.gpu} on {f.arch} needs NVIDIA's open GPU kernel modules, but the apt pins "
                "install the proprietary flavour (pin nvidia-open instead of cuda-drivers or "
                "nvidia-kernel-dkms)",
                {"gpu": f.gpu, "arch": f.arch, "flavour": "proprietary"},
            )

    def _reference(self, against: str) -> tuple[Fact | None, str, str]:
        """(fact, how it is named in messages, why it is missing)."""
        if against == "cluster":
            return (
                self.facts.cluster,
                "the cluster (kube-apiserver)",
                "no cluster version (releaseSet.clusterRelease.kubernetes)",
            )
        return (
            self.facts.components.get(against),
            against,
            f"no {against} staged (vars.{against}Version)",
        )

    def _skew(self, rule: VersionSkewRule) -> None:
        f = self.facts
        fact = f.components.get(rule.component)
        reference, ref_name, missing = self._reference(rule.against)
        if fact is None:
            self._skip(rule.id, f"no {rule.component} staged (vars.{_var(rule.component)})")
            return
        if reference is None:
            self._skip(rule.id, missing)
            return
        self.applied.append(rule.id)
        v, r = fact.version, reference.version
        assert isinstance(v, UpstreamVersion) and isinstance(r, UpstreamVersion)
        values: dict[str, object] = {"component": rule.component, "version": v, "reference": r}
        if v.major != r.major:
            self._fail(
                rule.id,
                f"{rule.component} {v} and {ref_name} {r} have different major versions",
                values,
            )
            return
        ahead = v.minor - r.minor
        if ahead > rule.newerMinors:
            allowed = (
                "not newer"
                if rule.newerMinors == 0
                else f"at most {_minors(rule.newerMinors)} newer"
            )
            self._fail(
                rule.id,
                f"{rule.component} {v} is {_minors(ahead)} newer than {ref_name} {r} "
                f"(allowed: {allowed}; {fact.where})",
                values,
            )
        elif -ahead > rule.olderMinors:
            allowed = (
                "the same minor"
                if rule.olderMinors == 0
                else f"at most {_minors(rule.olderMinors)} older"
            )
            self._fail(
                rule.id,
                f"{rule.component} {v} is {_minors(-ahead)} older than {ref_name} {r} "
                f"(allowed: {allowed}; {fact.where})",
                values,
            )
        elif rule.samePatch and v != r:
            self._fail(
                rule.id,
                f"{rule.component} {v} does not match {ref_name} {r} (it must be the same "
                f"version; {fact.where})",
                values,
            )

    def _by_line(self, rule: VersionByLineRule) -> None:
        f = self.facts
        fact = f.components.get(rule.component)
        if fact is None:
            self._skip(
                rule.id, f"no {rule.component} staged (vars.{_var(rule.component)} or an apt pin)"
            )
            return
        if rule.line == "matrix":
            line, by = f.kubernetes, "the variant's Kubernetes line"
        else:
            reference, ref_name, missing = self._reference(rule.line)
            if reference is None:
                self._skip(rule.id, missing)
                return
            assert isinstance(reference.version, UpstreamVersion)
            line, by = str(reference.version.release_line), f"{ref_name} {reference.version}"
        self.applied.append(rule.id)
        constraint = rule.constraints.get(line)
        values: dict[str, object] = {
            "component": rule.component,
            "version": fact.version,
            "line": line,
        }
        if constraint is None:
            self._fail(
                rule.id,
                f"no {rule.component} constraint for Kubernetes {line} ({by}); the rules know "
                f"{', '.join(rule.constraints)}",
                values,
            )
        elif not satisfies(fact.version, constraint):
            self._fail(
                rule.id,
                f"{rule.component} {fact.version} ({fact.where}) does not satisfy {constraint}, "
                f"required for Kubernetes {line} ({by})",
                {**values, "constraint": constraint},
            )

    def cluster_line(self) -> None:
        f = self.facts
        if f.cluster is None:
            self._skip(CLUSTER_LINE, "no cluster version (releaseSet.clusterRelease.kubernetes)")
            return
        self.applied.append(CLUSTER_LINE)
        assert isinstance(f.cluster.version, UpstreamVersion)
        if str(f.cluster.version.release_line) != f.kubernetes:
            self._fail(
                CLUSTER_LINE,
                f"cluster version {f.cluster.version} ({f.cluster.where}) is not in the variant's "
                f"Kubernetes line {f.kubernetes}",
                {"cluster": f.cluster.version, "kubernetes": f.kubernetes},
            )

    def pins_agree(self) -> None:
        f = self.facts
        self.applied.append(PINS_AGREE)
        for d in f.disagreements:
            self._fail(
                PINS_AGREE,
                f"{d.component} {d.var.text} ({d.var.where}) disagrees with the pin "
                f"{d.pin.text} ({d.pin.where}, upstream {d.pin.version})",
                {"component": d.component, "var": d.var.text, "pin": d.pin.text},
            )


def _minors(n: int) -> str:
    return f"{n} minor version" + ("" if n == 1 else "s")


def _var(component: str) -> str:
    from nvkr.catalog.facts import VERSION_VARS

    return next(name for name, c in VERSION_VARS.items() if c == component)


# -- checking recipes --------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckReport:
    """What :func:`check_variants` checked.

    Attributes:
        rules_path: the rules file (for messages), None when no rules apply.
        applied: rule ids that applied to at least one variant, in rule order.
        not_applicable: ``{id: reasons}`` for rules that applied to no variant (the distinct
            reasons of the variants, joined by ``; ``).
    """

    rules_path: str | None
    applied: list[str]
    not_applicable: dict[str, str]


def check_variants(
    recipe: Path, variants: Sequence[object], rules_path: Path | None = None
) -> CheckReport:
    """Check every variant of ``recipe`` against its catalog's rules (``rules_path``, else
    :func:`find_rules`); nothing to check for a recipe outside any catalog.

    Args:
        recipe: the recipe file, as the user named it.
        variants: :class:`~nvkr.recipe.Variant` objects from :func:`nvkr.recipe.expand`.
        rules_path: a rules file overriding the catalog's (``validate --rules``).
    Returns:
        A :class:`CheckReport` when every variant satisfies the rules.
    Raises:
        RecipeError: every violation of every variant, one line each:
            ``FILE: variant gpu=...,kubernetes=...,arch=...: rule ID: message``.
        RecipeError: an invalid rules file (see :func:`load_rules`).
        VersionError: a version in the recipe that does not parse (naming ``FILE:LINE: vars.X``).
    """
    from nvkr.catalog.facts import variant_facts
    from nvkr.plan import display_path
    from nvkr.recipe import Variant

    path = rules_path if rules_path is not None else find_rules(recipe)
    if path is None:
        return CheckReport(None, [], {})
    loaded = load_rules(path)
    file = display_path(recipe)
    applied: dict[str, None] = {}
    skipped: dict[str, dict[str, None]] = {}
    lines: list[str] = []
    for variant in variants:
        assert isinstance(variant, Variant)
        result = evaluate_all(variant_facts(variant, file), loaded.rules)
        applied.update(dict.fromkeys(result.applied))
        for rule, reason in result.not_applicable.items():
            skipped.setdefault(rule, {})[reason] = None
        lines.extend(
            f"{file}: variant {variant.id}: rule {v.rule}: {v.message}" for v in result.violations
        )
    if lines:
        raise RecipeError(
            "\n".join(lines),
            hint=f"the rules are in {loaded.path}; `nvkr recipes list` shows the supported combinations",
        )
    order = [r.id for r in loaded.rules.rules] + [CLUSTER_LINE, PINS_AGREE]
    return CheckReport(
        rules_path=loaded.path,
        applied=[r for r in order if r in applied],
        not_applicable={
            r: "; ".join(skipped[r]) for r in order if r in skipped and r not in applied
        },
    )
