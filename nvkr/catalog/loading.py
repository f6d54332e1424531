"""Loading a catalog's compatibility rules (:func:`load_rules`): the YAML read with its
locations, the model validated (:class:`~nvkr.catalog.rules.CompatibilityRules`), then what a
schema cannot say (versions that parse, constraints, keys that agree), each problem with its
file and line; :func:`find_rules` finds the rules file of a recipe's catalog.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from nvkr.catalog.constraints import parse_constraint
from nvkr.catalog.rules import (
    CLUSTER_LINE,
    PINS_AGREE,
    RULES_FILE,
    RULES_HINT,
    TABLE_CHECKS,
    CompatibilityRules,
    GpuArchitecturesRule,
    GpuDriverBranchRule,
    GpuOpenKernelModulesRule,
    KubernetesLinesRule,
    LoadedRules,
    Rule,
    VersionByLineRule,
)
from nvkr.catalog.versions import VersionError, parse_release_line
from nvkr.errors import RecipeError
from nvkr.recipe.yamlsource import LocationMap, where


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
    from nvkr.paths import display_path
    from nvkr.recipe.validation import validate
    from nvkr.recipe.yamlsource import read_yaml

    document = read_yaml(path, what="rules file")
    try:
        rules = validate(CompatibilityRules, document.data, document.locations)
    except RecipeError as exc:
        raise RecipeError(exc.message, hint=RULES_HINT) from None
    problems = _semantic_problems(rules, document.locations)
    if problems:
        raise RecipeError("\n".join(problems), hint=RULES_HINT)
    return LoadedRules(path=display_path(path), rules=rules)


def _semantic_problems(rules: CompatibilityRules, locations: LocationMap) -> list[str]:
    """What the schema cannot say about ``rules``, each problem with its file and line: rule ids
    first (reserved, duplicate; one rule per table check), then, when those are sound, each
    rule's contents against the tables."""
    problems = _id_problems(rules, locations)
    if problems:
        return problems
    for index, rule in enumerate(rules.rules):
        problems.extend(_rule_problems(rule, ("rules", index), rules, locations))
    return problems


def _id_problems(rules: CompatibilityRules, locations: LocationMap) -> list[str]:
    """Reserved and duplicate rule ids, and table checks without exactly one rule."""
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
    for check in TABLE_CHECKS:
        count = sum(1 for r in rules.rules if r.check == check)
        if count != 1:
            problems.append(
                f"{where(locations, ('rules',))}: needs exactly one rule with check '{check}' "
                f"(found {count})"
            )
    return problems


def _rule_problems(
    rule: Rule, at: tuple[str | int, ...], rules: CompatibilityRules, locations: LocationMap
) -> list[str]:
    """The problems of one rule (at ``at`` in the file): release lines and constraints that do
    not parse, keys that are no GPU generation or Kubernetes line of the tables (or do not
    cover them), architectures the architectures rule does not list."""
    problems: list[str] = []
    lines, arches, gens = set(rules.lines), set(rules.architectures), set(rules.generations)
    if isinstance(rule, KubernetesLinesRule):
        for i, line in enumerate(rule.lines):
            problems.extend(_parse_problem(parse_release_line, line, locations, (*at, "lines", i)))
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
