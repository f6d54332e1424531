"""The recipe catalog: compatibility rules (``recipes/compatibility.yaml``), the facts of a variant
they are evaluated on, and the listing of supported combinations (``nvkr recipes list``).

The public surface used by the CLI::

    report = check_variants(Path("recipes/catalog/hopper-k8s1.36.yaml"), variants)
    report.rules_path, report.applied, report.not_applicable

Issue 7 items 1-2; the rules' format is :class:`nvkr.catalog.rules.CompatibilityRules`.
"""

from nvkr.catalog.evaluation import (
    CheckReport,
    check_variants,
    evaluate,
    evaluate_all,
    evaluate_cell,
)
from nvkr.catalog.facts import Fact, VariantFacts, variant_facts
from nvkr.catalog.loading import find_rules, load_rules
from nvkr.catalog.rules import CompatibilityRules, Evaluation, LoadedRules, Violation

__all__ = [
    "CheckReport",
    "CompatibilityRules",
    "Evaluation",
    "Fact",
    "LoadedRules",
    "VariantFacts",
    "Violation",
    "check_variants",
    "evaluate",
    "evaluate_all",
    "evaluate_cell",
    "find_rules",
    "load_rules",
    "variant_facts",
]
