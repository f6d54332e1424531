"""Action references: naming one action of a plan without its key, for ``nvkr build --action``.

A plan's actions are keyed by digests that change with every input; a CI pipeline that names
them must not. An action reference names an action by what it is for::

    BUILDER/ARTIFACT@VARIANT        go-binary/agent@gpu=hopper,kubernetes=1.36,arch=amd64
    release-set/NAME                release-set/nvkr-default-k8s1.36

``BUILDER`` is the action's builder (``image-index`` for the multi-arch index of a
container-image artifact, ``sbom`` for the SBOM of an artifact), ``ARTIFACT`` the artifact it is
planned for, ``VARIANT`` any variant that plans it, in the ``--variant`` syntax (any subset of
the axes: ``go-binary/agent@arch=amd64``). Within one variant an artifact has one action per
builder, so a full variant id always names exactly one action; a subset names one when every
matching variant shares it. The canonical reference of an action (:func:`nvkr.action.ref_of`,
``ref`` in ``nvkr plan --json``) uses the first variant that planned it (the planner walks the
variants in matrix order), so it depends on the recipe's structure only, never on a digest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from nvkr.errors import UsageError

if TYPE_CHECKING:
    from nvkr.action import Action
    from nvkr.plan import Plan

_SYNTAX = "BUILDER/ARTIFACT@gpu=...,kubernetes=...,arch=... or release-set/NAME"


@dataclass(frozen=True)
class ActionRef:
    """A parsed reference: ``builder``, ``artifact`` and the variant selection (axis → value;
    empty: every variant)."""

    text: str
    builder: str
    artifact: str
    selection: dict[str, str]

    def matches(self, action: Action) -> bool:
        """True when ``action`` is of this builder and artifact and planned for a variant the
        selection matches."""
        if action.builder != self.builder:
            return False
        names = action.artifact.split(",") if action.builder == "sbom" else [action.artifact]
        if self.artifact not in names:
            return False
        if not self.selection:
            return True
        return any(_selected(self.selection, variant) for variant in action.variants)


def _selected(selection: dict[str, str], variant_id: str) -> bool:
    axes = dict(part.split("=", 1) for part in variant_id.split(","))
    return all(axes.get(axis) == value for axis, value in selection.items())


def parse_ref(text: str) -> ActionRef:
    """Parse one ``--action`` value.

    Raises:
        UsageError: no ``/``, an empty builder or artifact, or a bad variant selection (as
            ``--variant`` reports it).
    """
    from nvkr.recipe.matrix import parse_variant_option

    head, at, tail = text.partition("@")
    builder, slash, artifact = head.partition("/")
    if not slash or not builder or not artifact or (at and not tail):
        raise UsageError(f"--action {text!r} is not an action reference", hint=f"use {_SYNTAX}")
    selection = parse_variant_option(tail) if at else {}
    return ActionRef(text=text, builder=builder, artifact=artifact, selection=selection)


def resolve(plan: Plan, texts: list[str] | tuple[str, ...]) -> list[str]:
    """The keys of the actions ``texts`` name, in the plan's order, each once.

    Raises:
        UsageError: a reference that is malformed, names no action of the plan (listing the
            references of the builder's actions, or of every action), or names several (listing
            them: give more of the variant's axes).
    """
    chosen: set[str] = set()
    values: dict[str, list[str]] = {}  # axis -> the values of the planned variants, in order
    for variant in plan.variants:
        for axis, value in variant.axes.items():
            if value not in values.setdefault(axis, []):
                values[axis].append(value)
    for text in texts:
        ref = parse_ref(text)
        for axis, value in ref.selection.items():
            if value not in values.get(axis, []):
                raise UsageError(
                    f"--action {text!r}: {axis} {value!r} is not in the matrix of the plan "
                    f"(allowed: {', '.join(values.get(axis, []))})"
                )
        found = [a for a in plan.actions.values() if ref.matches(a)]
        if not found:
            same = [a.ref for a in plan.actions.values() if a.builder == ref.builder]
            known = same or [a.ref for a in plan.actions.values()]
            raise UsageError(
                f"--action {text!r} names no action of the plan",
                hint="actions: " + ", ".join(known),
            )
        if len(found) > 1:
            raise UsageError(
                f"--action {text!r} names {len(found)} actions: " + ", ".join(a.ref for a in found),
                hint="name the variant's other axes too",
            )
        chosen.add(found[0].key)
    return [key for key in plan.actions if key in chosen]
