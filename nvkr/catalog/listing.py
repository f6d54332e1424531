"""The catalog's combinations: every GPU generation x Kubernetes line x arch of the compatibility
rules, with the leaf recipes covering it and its status (``nvkr recipes list``, issue 7 item 2).

A catalog directory (``recipes/``) holds layer files (``kind: RecipeLayer``), the rules
(``kind: CompatibilityRules``) and leaf recipes (``kind: Recipe``). Every other ``*.yaml`` below it
is loaded as a leaf; a file that fails to load is listed as broken with its error. Each leaf's
variants are expanded and evaluated against the rules (:mod:`nvkr.catalog.rules`); nothing is
fetched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.catalog.evaluation import evaluate, evaluate_cell
from nvkr.catalog.facts import variant_facts
from nvkr.catalog.rules import LoadedRules, Violation
from nvkr.errors import NvkrError

NOT_LEAVES = ("RecipeLayer", "CompatibilityRules")
STATUSES = ("ok", "invalid", "unsupported", "no recipe")


@dataclass(frozen=True)
class Broken:
    """A ``*.yaml`` file of the catalog that fails to load, expand or parse (its error message)."""

    recipe: str
    error: str


@dataclass
class Combination:
    """One matrix cell of the catalog.

    Attributes:
        gpu, kubernetes, arch: the cell.
        status: ``ok`` (a covering leaf passes every rule; other covering leaves may not, their
            violations are listed), ``invalid`` (every covering leaf breaks a rule),
            ``unsupported`` (the rules exclude the cell) or ``no recipe``.
        recipes: the leaf recipes whose matrix covers the cell (display paths).
        violations: ``(recipe, violation)``; recipe is ``""`` for the cell's own (unsupported).
    """

    gpu: str
    kubernetes: str
    arch: str
    status: str = "no recipe"
    recipes: list[str] = field(default_factory=list)
    violations: list[tuple[str, Violation]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Stable keys: gpu, kubernetes, arch, status, recipes, violations (recipe, rule,
        message, values), error (None)."""
        return {
            "gpu": self.gpu,
            "kubernetes": self.kubernetes,
            "arch": self.arch,
            "status": self.status,
            "recipes": list(self.recipes),
            "violations": [
                {"recipe": r or None, "rule": v.rule, "message": v.message, "values": v.values}
                for r, v in self.violations
            ],
            "error": None,
        }


@dataclass
class Listing:
    """:func:`list_catalog`'s result: the combinations (table cells first, in rule order, then
    cells leaves cover outside the table), the broken files, and the leaves that break a rule
    (``nvkr validate`` fails them) with how many of their variants do: a cell another leaf
    covers stays ``ok``, so a failing leaf is named here too, not only under its cells."""

    rules: str
    combinations: list[Combination]
    broken: list[Broken]
    failing_leaves: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> list[dict[str, Any]]:
        """One object per combination, then one per broken file (``status: broken``, ``recipes``
        its path, ``error`` its message, the cell keys null)."""
        return [c.to_json() for c in self.combinations] + [
            {
                "gpu": None,
                "kubernetes": None,
                "arch": None,
                "status": "broken",
                "recipes": [b.recipe],
                "violations": [],
                "error": b.error,
            }
            for b in self.broken
        ]


def list_catalog(directory: Path, rules: LoadedRules) -> Listing:
    """Scan ``directory`` recursively for leaf recipes and combine them with ``rules``' table.

    Returns:
        The :class:`Listing`.
    Raises nothing for a bad recipe (it is listed as broken); OSError only if ``directory``
    cannot be walked.
    """
    from nvkr.paths import display_path

    table = rules.rules
    cells: dict[tuple[str, str, str], Combination] = {
        (g, k, a): Combination(g, k, a)
        for g in table.generations
        for k in table.lines
        for a in table.architectures
    }
    broken: list[Broken] = []
    failing_leaves: dict[str, int] = {}
    rules_file = Path(rules.path).resolve()
    for path in sorted(directory.rglob("*.yaml")):
        if path.resolve() == rules_file or not path.is_file():
            continue
        shown = display_path(path)
        try:
            evaluated = _evaluate_leaf(path, shown, rules)
        except NvkrError as exc:
            broken.append(Broken(shown, exc.message))
            continue
        for (gpu, kubernetes, arch), violations in evaluated:
            if violations:
                failing_leaves[shown] = failing_leaves.get(shown, 0) + 1
            combo = cells.setdefault((gpu, kubernetes, arch), Combination(gpu, kubernetes, arch))
            combo.recipes.append(shown)
            combo.violations.extend((shown, v) for v in violations)
    for combo in cells.values():
        unsupported = evaluate_cell(combo.gpu, combo.kubernetes, combo.arch, table)
        if unsupported:
            combo.status = "unsupported"
            combo.violations = [("", v) for v in unsupported]
        elif not combo.recipes:
            combo.status = "no recipe"
        else:  # ok when one covering leaf passes; the others' violations stay listed
            failing = {recipe for recipe, _ in combo.violations}
            combo.status = "ok" if any(r not in failing for r in combo.recipes) else "invalid"
    return Listing(
        rules=rules.path,
        combinations=list(cells.values()),
        broken=broken,
        failing_leaves=failing_leaves,
    )


def _evaluate_leaf(
    path: Path, shown: str, rules: LoadedRules
) -> list[tuple[tuple[str, str, str], list[Violation]]]:
    """``[(cell, violations)]`` for each variant of the leaf at ``path``; ``[]`` for a layer or a
    rules file.

    Raises:
        NvkrError: the file does not load or expand, or a version in it does not parse.
    """
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
    from nvkr.recipe.yamlsource import read_yaml

    if read_yaml(path).data.get("kind") in NOT_LEAVES:
        return []
    out = []
    for variant in expand(load_recipe(path)):
        facts = variant_facts(variant, shown)
        out.append(((variant.gpu, variant.kubernetes, variant.arch), evaluate(facts, rules.rules)))
    return out
