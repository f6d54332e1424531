"""The recipe catalog: compatibility rules (``recipes/compatibility.yaml``), the facts of a variant
they are evaluated on, and the listing of supported combinations (``nvkr recipes list``).

The surface used by the CLI, each name from the module that defines it::

    from nvkr.catalog.evaluation import check_variants

    report = check_variants(Path("recipes/catalog/hopper-k8s1.36.yaml"), variants)
    report.rules_path, report.applied, report.not_applicable

Issue 7 items 1-2; the rules' format is :class:`nvkr.catalog.rules.CompatibilityRules`, loaded by
:mod:`nvkr.catalog.loading`, evaluated (:mod:`nvkr.catalog.evaluation`) on the facts of
:mod:`nvkr.catalog.facts`. This package imports nothing, so the recipe's models can check a version
with :mod:`nvkr.catalog.versions` (which imports no recipe code) without loading the rules.
"""
