"""The release-set spec as the assembler groups it: artifacts by action, variants in order.

First stop in :mod:`nvkr.releaseset`: the spec itself is :class:`nvkr.releasespec.ReleaseSetSpec`
(the planner's typed params, with the name rule :func:`~nvkr.releasespec.check_name`, also used
by :func:`nvkr.releaseset.materialize` for ``dist/<name>``); here its artifacts are grouped by
action key with each group's identity checked, and its ``variants`` give the order every list
of variants in the set follows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nvkr.canonical import canonical_json
from nvkr.errors import BuildError
from nvkr.releasespec import ReleaseSetSpec, SpecArtifact


class _VariantOrder:
    """Sort key for variants: their place in the spec's ``variants`` (the recipe's matrix
    order), then canonical JSON for any variant not listed there (and ``None``,
    variant-independent)."""

    def __init__(self, variants: Sequence[Mapping[str, str]]) -> None:
        self._rank = {canonical_json(dict(v)): i for i, v in enumerate(variants)}

    def __call__(self, variant: Mapping[str, str] | None) -> tuple[int, bytes]:
        raw = canonical_json(dict(variant) if variant is not None else None)
        return self._rank.get(raw, len(self._rank)), raw


def _group_by_action(spec: ReleaseSetSpec) -> dict[str, list[SpecArtifact]]:
    """The spec's artifacts by action key, in the spec's order.

    Raises:
        BuildError: artifacts sharing an action key disagree on their identity
            (:meth:`~nvkr.releasespec.SpecArtifact.identity`: kind, builder and version,
            artifact type, platform, dependencies, C toolchain).
    """
    groups: dict[str, list[SpecArtifact]] = {}
    for art in spec.artifacts:
        groups.setdefault(art.action_key, []).append(art)
    for key, members in groups.items():
        first = members[0].identity()
        for field in first:
            values = {canonical_json(m.identity()[field]) for m in members}
            if len(values) > 1:
                raise BuildError(
                    f"release set {spec.name}: artifacts sharing action key {key} disagree on "
                    f"{field!r} ({members[0].name} and others)",
                    hint="the plan gave one action two identities; this is a bug in nvkr, please report it",
                )
    return groups
