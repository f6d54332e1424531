"""Fan-out: a recipe's build as units of work a CI system runs on many machines.

After the plan (:mod:`nvkr.plan`), before any pipeline (:mod:`nvkr.ci`). A **unit** is one
``nvkr build`` invocation with the units it ``needs``; the runners share their results through a
remote action cache, and a **final** unit assembles the release sets from the caches without
running a builder (``nvkr build --cached-only``). Two ways to cut the work:

- ``by="variant"``: one unit per variant (``nvkr build --variant ...``), which builds that
  variant's partial plan; a ``join`` unit (a full build) then builds what spans variants (the
  multi-arch image indexes, the charts pinning them, the release sets), all its inputs cached.
  Actions that several variants share are built by each of their units (the first cache writer
  wins). Needs the matrix only, no lockfile: the catalog's unlocked leaves fan out this way.
- ``by="action"``: one unit per action of the full plan (``nvkr build --action REF``), an
  artifact's SBOM with its artifact; no action is built twice. Needs the plan, so the lock.

Unit ids are DNS-1123 labels (``node-image-hopper-amd64``: usable as a Kubernetes name and a
GitHub or GitLab job id) made from artifact names and the axes that tell units apart; no digest
enters an id or an argv, so a pipeline made from the fan-out changes only when the recipe's
structure does. A unit's ``arch`` is the machine it runs best on (its builders'
``host_arch``: a root filesystem runs its packages' maintainer scripts, natively or under
qemu-user; a Go build runs its toolchain wheel's arch; a variant's unit, the arch its actions
prefer, see :func:`_variant_arch`) or None for any; its ``estimate`` sums
the run times the store's action records hold for its actions.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from nvkr.action import Action
from nvkr.builders.api import get_builder
from nvkr.plan import Plan
from nvkr.recipe.matrix import Variant
from nvkr.store import Store

BY = ("variant", "action")
#: DNS-1123 label: lower-case alphanumerics and '-', starting and ending alphanumeric, <= 63.
MAX_ID = 63
_NOT_ID = re.compile(r"[^a-z0-9-]+")
FINAL = "final"
JOIN = "join"


@dataclass(frozen=True)
class Estimate:
    """``seconds`` the store's records give for ``timed`` of the unit's ``actions`` (JSON:
    ``milliseconds``, an int, as every verb's durations)."""

    seconds: float
    timed: int
    actions: int

    def to_json(self) -> dict[str, Any]:
        return {
            "milliseconds": round(self.seconds * 1000),
            "timed": self.timed,
            "actions": self.actions,
        }


@dataclass(frozen=True)
class Unit:
    """One ``nvkr build`` invocation: ``argv`` (``["nvkr", "build", RECIPE, ...]``), the unit
    ids it ``needs``, the ``arch`` of the runner it suits (None: any), the action refs it
    builds (``actions``, empty when unknown), the variants it builds (``variants``), the
    ``estimate`` (None without timed records) and whether it is the ``final`` unit."""

    id: str
    argv: list[str]
    needs: list[str]
    arch: str | None
    actions: list[str] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    estimate: Estimate | None = None
    final: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "argv": list(self.argv),
            "needs": list(self.needs),
            "arch": self.arch,
            "actions": list(self.actions),
            "variants": list(self.variants),
            "estimate": self.estimate.to_json() if self.estimate is not None else None,
            "final": self.final,
        }


@dataclass(frozen=True)
class FanOut:
    """The units of one recipe, dependencies first, the final unit last."""

    recipe: str
    name: str
    by: str
    units: list[Unit]

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "name": self.name,
            "by": self.by,
            "units": [u.to_json() for u in self.units],
        }


def dns_label(text: str) -> str:
    """``text`` as a DNS-1123 label (lower case, ``[a-z0-9-]``, at most 63 characters), starting
    with a letter (GitHub job ids must). A cut label ends in 8 hex digits of ``text``'s sha256,
    so distinct long names stay distinct."""
    label = _NOT_ID.sub("-", text.lower()).strip("-")
    label = re.sub(r"-{2,}", "-", label) or "unit"
    if not label[0].isalpha():
        label = "u-" + label
    if len(label) > MAX_ID:
        label = label[: MAX_ID - 9].rstrip("-") + "-" + _short_hash(text)
    return label


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _axis_label(axis: str, value: str) -> str:
    return f"k8s{value}" if axis == "kubernetes" else value


def _varying(variants: Sequence[Variant]) -> list[str]:
    """The axes whose value differs among ``variants``, in axis order."""
    axes = ("gpu", "kubernetes", "arch")
    return [a for a in axes if len({v.axes[a] for v in variants}) > 1]


def _unique(wanted: list[tuple[str, str]], reserved: set[str]) -> list[str]:
    """Ids for ``(label, ref)`` pairs: the label, or label + a hash of the ref where two labels
    (or a reserved id) collide."""
    counts: dict[str, int] = {}
    for label, _ in wanted:
        counts[label] = counts.get(label, 0) + 1
    out: list[str] = []
    for label, ref in wanted:
        if counts[label] > 1 or label in reserved:
            label = dns_label(label[: MAX_ID - 9] + "-" + _short_hash(ref))
        out.append(label)
    return out


def _seconds(store: Store | None, key: str) -> float | None:
    """The run time an action record holds (``run.startedOn``..``finishedOn``), if any."""
    if store is None:
        return None
    try:
        run = json.loads(store.action_path(key).read_bytes()).get("run") or {}
        start = datetime.fromisoformat(run["startedOn"])
        end = datetime.fromisoformat(run["finishedOn"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return max(0.0, (end - start).total_seconds())


def _estimate(store: Store | None, keys: Sequence[str]) -> Estimate | None:
    times = [t for t in (_seconds(store, k) for k in keys) if t is not None]
    return Estimate(sum(times), len(times), len(keys)) if times else None


def host_arch(action: Action) -> str | None:
    """The arch of the machine ``action`` runs best on, from its builder's optional
    ``host_arch(action)`` (None: any machine)."""
    method = getattr(get_builder(action.builder), "host_arch", None)
    return method(action) if method is not None else None


def _variant_arch(
    variant: Variant, keys: Sequence[str], plan: Plan | None, store: Store | None
) -> str:
    """The runner arch of a variant's unit: the one its actions' builders prefer when they agree
    (a Go build whose toolchain wheel is x86_64 runs on amd64 for an arm64 target too); when they
    disagree, the arch whose actions took longest by the store's run times; else, and when no
    action prefers any, the variant's own arch."""
    if plan is None:
        return variant.arch
    weight: dict[str, float] = {}
    for key in keys:
        arch = host_arch(plan.actions[key])
        if arch is not None:
            weight[arch] = weight.get(arch, 0.0) + (_seconds(store, key) or 0.0)
    if len(weight) == 1:
        return next(iter(weight))
    if len(weight) > 1 and any(weight.values()):
        return max(sorted(weight), key=lambda a: weight[a])
    return variant.arch


def _base_argv(recipe: str, lockfile: str | None) -> list[str]:
    argv = ["nvkr", "build", recipe, "--locked"]
    return argv + (["--lockfile", lockfile] if lockfile else [])


def by_action(
    plan: Plan, recipe: str, *, store: Store | None = None, lockfile: str | None = None
) -> FanOut:
    """One unit per action of ``plan`` (an sbom action rides with the action it describes), then
    the final unit, which needs the units of the release sets.

    Args:
        recipe: the recipe path as the units' argv name it (relative to the checkout).
        store: where run times are read for the estimates (None: no estimates).
        lockfile: a ``--lockfile`` the units pass on (None: the default lockfile).
    """
    owner: dict[str, str] = {}  # action key -> the key of the unit's main action
    for key, action in plan.actions.items():
        subject = action.params.get("subject") if action.builder == "sbom" else None
        owner[key] = subject if isinstance(subject, str) and subject in plan.actions else key
    members: dict[str, list[str]] = {}
    for key in plan.actions:
        members.setdefault(owner[key], []).append(key)
    mains = list(members)
    varying = _varying(plan.variants)
    by_id = {v.id: v for v in plan.variants}
    labels = []
    for key in mains:
        action = plan.actions[key]
        labels.append((_action_label(action, varying, by_id), action.ref))
    ids = dict(zip(mains, _unique(labels, {FINAL}), strict=True))
    base = _base_argv(recipe, lockfile)
    units: list[Unit] = []
    for key in mains:
        keys = members[key]
        needs = sorted(
            {ids[owner[d]] for k in keys for d in plan.actions[k].deps if owner[d] != key},
            key=list(ids.values()).index,
        )
        refs = [plan.actions[k].ref for k in keys]
        argv = base + [arg for ref in refs for arg in ("--action", ref)]
        arches = [a for a in (host_arch(plan.actions[k]) for k in keys) if a is not None]
        units.append(
            Unit(
                id=ids[key],
                argv=argv,
                needs=needs,
                arch=arches[0] if arches else None,
                actions=refs,
                variants=list(plan.actions[key].variants),
                estimate=_estimate(store, keys),
            )
        )
    final_needs = [ids[owner[k]] for k in plan.release_sets.values()]
    units.append(_final(base, final_needs, [v.id for v in plan.variants]))
    return FanOut(recipe, plan.recipe.recipe.metadata.name, "action", units)


def _action_label(action: Action, varying: list[str], by_id: dict[str, Variant]) -> str:
    if action.builder == "release-set":
        return dns_label(f"set-{action.artifact}")
    base = f"{action.artifact}-index" if action.builder == "image-index" else action.artifact
    mine = [by_id[v] for v in action.variants if v in by_id]
    parts = [base]
    for axis in varying:
        values = {v.axes[axis] for v in mine}
        if len(values) == 1:
            parts.append(_axis_label(axis, values.pop()))
    return dns_label("-".join(parts))


def _final(base: list[str], needs: list[str], variants: list[str]) -> Unit:
    return Unit(
        id=FINAL,
        argv=[*base, "--cached-only"],
        needs=needs,
        arch=None,
        variants=variants,
        final=True,
    )


def by_variant(
    variants: list[Variant],
    recipe: str,
    name: str,
    *,
    partial_plan: Callable[[list[Variant]], Plan] | None = None,
    full_plan: Plan | None = None,
    store: Store | None = None,
    lockfile: str | None = None,
) -> FanOut:
    """One unit per variant, a ``join`` unit needing them all (a full build: what spans
    variants), and the final unit needing the join.

    Args:
        variants: the recipe's variants, in matrix order.
        partial_plan, full_plan: when the recipe can be planned (its lock is complete), the
            plan of some variants and the full plan: the units then list their actions and
            estimates; without them, only the variants.
    """
    varying = _varying(variants) or ["arch"]
    labels = [
        (dns_label("-".join(_axis_label(a, v.axes[a]) for a in varying)), v.id) for v in variants
    ]
    ids = _unique(labels, {FINAL, JOIN})
    base = _base_argv(recipe, lockfile)
    units: list[Unit] = []
    covered: set[str] = set()
    for variant, uid in zip(variants, ids, strict=True):
        refs: list[str] = []
        keys: list[str] = []
        estimate = None
        if partial_plan is not None and full_plan is not None:
            keys = [k for k in partial_plan([variant]).actions if k in full_plan.actions]
            covered.update(keys)
            refs = [full_plan.actions[k].ref for k in keys]
            estimate = _estimate(store, keys)
        units.append(
            Unit(
                id=uid,
                argv=[*base, "--variant", variant.id],
                needs=[],
                arch=_variant_arch(variant, keys, full_plan, store),
                actions=refs,
                variants=[variant.id],
                estimate=estimate,
            )
        )
    rest = [k for k in full_plan.actions if k not in covered] if full_plan is not None else []
    units.append(
        Unit(
            id=JOIN,
            argv=list(base),
            needs=list(ids),
            arch=None,
            actions=[full_plan.actions[k].ref for k in rest] if full_plan is not None else [],
            variants=[v.id for v in variants],
            estimate=_estimate(store, rest),
        )
    )
    units.append(_final(base, [JOIN], [v.id for v in variants]))
    return FanOut(recipe, name, "variant", units)
