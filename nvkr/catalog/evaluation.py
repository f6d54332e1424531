"""Evaluating the compatibility rules on a variant's facts: :func:`evaluate_all` says which
rules applied (and why the others did not) and what they found; :func:`check_variants` checks a
recipe's variants against its catalog's rules, as ``validate``, ``lock``, ``plan`` and ``build`` do.
Evaluation fails closed (:mod:`nvkr.catalog.rules`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nvkr.catalog.constraints import satisfies
from nvkr.catalog.facts import CLIENT_GO, DRIVER, Fact, RuleSchemas, VariantFacts
from nvkr.catalog.loading import find_rules, load_rules
from nvkr.catalog.rules import (
    CELL_CHECKS,
    CLUSTER_LINE,
    PINS_AGREE,
    ArchitecturesRule,
    CompatibilityRules,
    Evaluation,
    GpuArchitecturesRule,
    GpuDriverBranchRule,
    GpuGenerationsRule,
    GpuOpenKernelModulesRule,
    KubernetesLinesRule,
    OvsdbSchemaRule,
    Rule,
    VersionByLineRule,
    VersionSkewRule,
    Violation,
)
from nvkr.catalog.versions import DriverVersion, UpstreamVersion
from nvkr.errors import RecipeError


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
        if rule.check in CELL_CHECKS:
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
        elif isinstance(rule, OvsdbSchemaRule):
            self._ovsdb(rule)

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
            branch = driver.version.branch
            supported = [g for g, least in rule.minimum.items() if least <= branch]
            supports = _names(supported) if supported else f"none of {_names(list(rule.minimum))}"
            self._fail(
                rule.id,
                f"{f.gpu} needs NVIDIA driver branch {minimum} or newer, got {driver.text} "
                f"(branch {branch}, which supports {supports}; {driver.where})",
                {
                    "gpu": f.gpu,
                    "driver": driver.text,
                    "branch": branch,
                    "minimum": minimum,
                    "supports": ", ".join(supported),
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
            pins = "; ".join(f.proprietary_pins) or "the apt pins"
            self._fail(
                rule.id,
                f"{f.gpu} on {f.arch} needs NVIDIA's open GPU kernel modules, but the apt pins "
                f"install the proprietary flavour ({pins}): pin NVIDIA's nvidia-open or "
                "Debian's nvidia-open-kernel-dkms instead of cuda-drivers or nvidia-kernel-dkms",
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
        if against == "spire-server":
            return (
                self.facts.components.get(against),
                "the SPIRE server",
                f"no SPIRE server version of the fleet ({_declared(against, pins=False)})",
            )
        return (
            self.facts.components.get(against),
            against,
            f"no {against} staged ({_declared(against, pins=False)})",
        )

    def _skew(self, rule: VersionSkewRule) -> None:
        f = self.facts
        fact = f.components.get(rule.component)
        reference, ref_name, missing = self._reference(rule.against)
        if fact is None:
            self._skip(
                rule.id, f"no {rule.component} staged ({_declared(rule.component, pins=False)})"
            )
            return
        if reference is None:
            self._skip(rule.id, missing)
            return
        self.applied.append(rule.id)
        v, r = fact.version, reference.version
        assert isinstance(v, UpstreamVersion) and isinstance(r, UpstreamVersion)
        values: dict[str, object] = {"component": rule.component, "version": v, "reference": r}
        # client-go v0.X.Y is held as Kubernetes 1.X.Y: name both
        shown = f"{fact.text} (Kubernetes {v})" if rule.component == CLIENT_GO else str(v)
        if v.major != r.major:
            self._fail(
                rule.id,
                f"{rule.component} {shown} and {ref_name} {r} have different major versions",
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
                f"{rule.component} {shown} is {_minors(ahead)} newer than {ref_name} {r} "
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
                f"{rule.component} {shown} is {_minors(-ahead)} older than {ref_name} {r} "
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
            self._skip(rule.id, f"no {rule.component} staged ({_declared(rule.component)})")
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

    def _ovsdb(self, rule: OvsdbSchemaRule) -> None:
        f = self.facts
        if f.schemas is None:
            self._skip(
                rule.id,
                "read from the locked sources' bytes: checked by lock, plan and build",
            )
            return
        found = f.schemas.get(rule.id) or RuleSchemas()
        if not found.has_models:
            self._skip(rule.id, f"no git source of {rule.models.git} holds the models")
            return
        if not found.has_server:
            self._skip(rule.id, rule.without_server)
            return
        self.applied.append(rule.id)
        for problem in found.unread:
            self._fail(rule.id, problem, {})
        package = rule.server.package
        for model in found.models:
            same = [s for s in found.servers if s.database == model.database]
            if not same and not found.unread:
                self._fail(
                    rule.id,
                    f"{model.database} {model.text} ({model.where}): {package} ships no schema "
                    f"of that database (read: {', '.join(rule.server.files)})",
                    {"database": model.database, "models": model.text},
                )
            for server in same:
                if model.version > server.version:
                    self._fail(
                        rule.id,
                        f"the {model.database} models are generated from schema {model.text} "
                        f"({model.where}), newer than the {model.database} {server.text} that "
                        f"{package} ships ({server.where}): the models must be at most the "
                        f"server's schema; pin a commit whose models are generated from "
                        f"{model.database} {server.text} or older, or pin {package} at a "
                        "version shipping a newer schema",
                        {"database": model.database, "models": model.text, "server": server.text},
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


def _declared(component: str, *, pins: bool = True) -> str:
    """Where a recipe declares ``component``'s version, for messages: ``vars.NAME`` (``or an
    apt pin`` with ``pins``), or ``an apt pin`` for a component no var names (OVN)."""
    from nvkr.catalog.facts import VERSION_VARS

    var = next((name for name, c in VERSION_VARS.items() if c == component), None)
    if var is None:
        return "an apt pin"
    return f"vars.{var} or an apt pin" if pins else f"vars.{var}"


# -- checking recipes --------------------------------------------------------------------------
#: a variant and the rules -> per ``ovsdb-schema`` rule id, what it read (a Variant: typed as
#: object here, as ``variants`` is, so that the rules import no recipe code)
SchemasOf = Callable[[Any, CompatibilityRules], dict[str, RuleSchemas]]


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
    recipe: Path,
    variants: Sequence[object],
    rules_path: Path | None = None,
    *,
    schemas: SchemasOf | None = None,
) -> CheckReport:
    """Check every variant of ``recipe`` against its catalog's rules (``rules_path``, else
    :func:`find_rules`); nothing to check for a recipe outside any catalog.

    Args:
        recipe: the recipe file, as the user named it.
        variants: :class:`~nvkr.recipe.matrix.Variant` objects from
            :func:`nvkr.recipe.matrix.expand`.
        rules_path: a rules file overriding the catalog's (``validate --rules``).
        schemas: what the ``ovsdb-schema`` rules read of a variant's locked sources
            (:class:`nvkr.catalog.schemas.SourceSchemas`); without it they do not apply.
    Returns:
        A :class:`CheckReport` when every variant satisfies the rules.
    Raises:
        RecipeError: every violation of every variant, one line each:
            ``FILE: variant gpu=...,kubernetes=...,arch=...: rule ID: message``.
        RecipeError: an invalid rules file (see :func:`load_rules`).
        VersionError: a version in the recipe that does not parse (naming ``FILE:LINE: vars.X``).
    """
    from nvkr.catalog.facts import variant_facts
    from nvkr.paths import display_path
    from nvkr.recipe.matrix import Variant

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
        facts = variant_facts(variant, file)
        if schemas is not None:
            facts = replace(facts, schemas=schemas(variant, loaded.rules))
        result = evaluate_all(facts, loaded.rules)
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


def _names(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return " and ".join([", ".join(items[:-1]), items[-1]]) if len(items) > 1 else "".join(items)
