"""What the planner checks about a variant before it reads anything: ``nvkr validate`` runs it too.

After matrix expansion each value of a variant is valid on its own (the models and
:mod:`nvkr.recipe.fieldchecks`) and every name it uses exists (:mod:`nvkr.recipe.references`).
What is left needs the builders' knowledge, yet no lockfile, no source and no host tool: which
kinds of source and artifact a field may name (a node image's rootfs is a rootfs artifact, a
chart pins container images, a Go toolchain is a pypi wheel), which artifacts a release set holds
and names (never an intermediate one such as a rootfs or kube-packages tar; a node-pool release
names only what the set holds), and that artifacts do not use each other in a cycle.
:func:`check_variant` checks all of it from the recipe; ``nvkr validate`` calls it after
expanding, and :func:`nvkr.cli.common.open_session` (every verb that plans or locks) and
:func:`nvkr.plan.make_plan` before planning, so a recipe ``validate`` passes is one ``plan`` takes.

Each builder states its own rules in ``check`` (:class:`nvkr.builders.api.Builder`), returning
:data:`Problem` tuples; this module adds the release set's and the cycles, and reports every
problem of a variant at once, one ``FILE:LINE: field: message`` line each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nvkr.action import ReleaseKind
from nvkr.builders.api import Problem, get_builder
from nvkr.errors import RecipeError, RecipeReferenceError
from nvkr.recipe.yamlsource import DocPath, where

if TYPE_CHECKING:
    from nvkr.recipe.matrix import Variant
    from nvkr.recipe.models import Recipe

#: What each field of ``releaseSet`` may name: the release kind of the artifact's builder
#: (:attr:`nvkr.builders.api.Builder.release_kind`); None for any kind the set holds.
_RELEASE_FIELDS: dict[str, tuple[ReleaseKind | None, str]] = {
    "machineImages": (ReleaseKind.MACHINE_IMAGE, "a machine image"),
    "machineImage": (ReleaseKind.MACHINE_IMAGE, "a machine image"),
    "charts": (ReleaseKind.CHART, "a chart"),
    "images": (ReleaseKind.IMAGE, "a container image"),
    "artifacts": (None, ""),
}


def check_variant(variant: Variant) -> None:
    """Check ``variant`` (from :func:`nvkr.recipe.matrix.expand`) from its recipe alone.

    Raises:
        RecipeReferenceError: artifacts use each other in a cycle (naming the chain).
        RecipeError: every other problem, one ``FILE:LINE: field: message`` line each, the hints
            of them all in the hint.
    """
    _check_cycles(variant)
    problems: list[Problem] = []
    for name, artifact in sorted(variant.recipe.artifacts.items()):
        problems += get_builder(artifact.builder).check(name, artifact, variant)
    problems += _release_set_problems(variant.recipe)
    if not problems:
        return
    lines = list(dict.fromkeys(f"{where(variant.locations, p)}: {m}" for p, m, _ in problems))
    hints = list(dict.fromkeys(h for _, _, h in problems if h))
    raise RecipeError("\n".join(lines), hint="; ".join(hints) or None)


def released_artifacts(recipe: Recipe) -> list[str]:
    """The artifacts a variant's release set holds: ``releaseSet.artifacts`` when given (an
    intermediate one there is a problem :func:`check_variant` reports), else every artifact
    whose builder makes something a release set can hold (not a rootfs or a staged package tar),
    in recipe order."""
    listed = recipe.releaseSet.artifacts
    names = listed if listed is not None else list(recipe.artifacts)
    return [
        name
        for name in names
        if name in recipe.artifacts
        and get_builder(recipe.artifacts[name].builder).release_kind != ReleaseKind.INTERNAL
    ]


def _release_set_problems(recipe: Recipe) -> list[Problem]:
    release = recipe.releaseSet
    held = set(released_artifacts(recipe))
    problems: list[Problem] = []
    uses: list[tuple[DocPath, str, str]] = []
    for index, name in enumerate(release.artifacts or []):
        uses.append((("releaseSet", "artifacts", index), name, "artifacts"))
    for index, name in enumerate(release.machineImages):
        uses.append((("releaseSet", "machineImages", index), name, "machineImages"))
    if release.clusterRelease is not None:
        for field in ("charts", "images"):
            for index, name in enumerate(getattr(release.clusterRelease, field)):
                uses.append((("releaseSet", "clusterRelease", field, index), name, field))
    for pool_index, pool in enumerate(release.nodePoolReleases):
        pool_path: DocPath = ("releaseSet", "nodePoolReleases", pool_index)
        if pool.machineImage is not None:
            uses.append(((*pool_path, "machineImage"), pool.machineImage, "machineImage"))
        for index, name in enumerate(pool.artifacts):
            uses.append(((*pool_path, "artifacts", index), name, "artifacts"))
    for path, name, field in uses:
        artifact = recipe.artifacts.get(name)
        if artifact is None:
            continue  # nvkr.recipe.references names it
        kind = get_builder(artifact.builder).release_kind
        wanted, label = _RELEASE_FIELDS[field]
        if kind == ReleaseKind.INTERNAL:
            problems.append(
                (
                    path,
                    f"{name!r} is a {artifact.builder} artifact, an intermediate one a release "
                    "set cannot hold",
                    "name what is built from it (a node-image) instead",
                )
            )
        elif wanted is not None and kind != wanted:
            problems.append((path, f"{name!r} is a {artifact.builder} artifact, not {label}", None))
        elif name not in held:
            problems.append(
                (
                    path,
                    f"{name!r} is not in releaseSet.artifacts, so the release set does not hold it",
                    "add it to releaseSet.artifacts (or leave that list out to take all)",
                )
            )
    return problems


def _check_cycles(variant: Variant) -> None:
    """Artifacts that use each other (an image holding itself, two images holding each other).

    Raises:
        RecipeReferenceError: ``artifacts refer to each other in a cycle: a -> b -> a``.
    """
    artifacts = variant.recipe.artifacts
    uses = {
        name: [v for _, kind, v in artifact.references() if kind == "artifact" and v in artifacts]
        for name, artifact in artifacts.items()
    }
    done: set[str] = set()

    def visit(name: str, chain: list[str]) -> None:
        if name in chain:
            cycle = [*chain[chain.index(name) :], name]
            raise RecipeReferenceError(
                f"artifacts refer to each other in a cycle: {' -> '.join(cycle)}",
                hint="an artifact cannot use itself, directly or through others",
            )
        if name in done:
            return
        for used in uses[name]:
            visit(used, [*chain, name])
        done.add(name)

    for name in sorted(artifacts):
        visit(name, [])
