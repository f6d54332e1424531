"""Planning: variants and their locked sources become a DAG of actions with action keys.

An action key is the ``sha256:<hex>`` of the canonical JSON of the builder name and version, the
action's params, its input digests (source blobs and the keys of the actions it reads), the tool
versions and the epoch (osbuild's stage id, in spirit). Identical keys are one action: two
variants that need the same binary share it. The release-set action of each release set depends
on the artifact actions it lists; the plan's build digest is the digest of all action keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nvkr
from nvkr.builders import ActionSpec, ResolvedSource, get_builder
from nvkr.builders.release_set import ReleaseSetBuilder
from nvkr.canonical import digest_json
from nvkr.errors import RecipeReferenceError
from nvkr.recipe import LoadedRecipe, Variant

BINARY_ARTIFACT_TYPE = "application/vnd.nvkr.binary.v1"


@dataclass(frozen=True)
class Action:
    """One build step. ``key`` is derived from everything else that enters a build (see module doc)."""

    key: str
    builder: str
    builder_version: str
    name: str
    params: dict[str, Any]
    inputs: dict[str, str]
    tools: dict[str, str]
    epoch: int
    deps: tuple[str, ...] = ()
    sources: dict[str, ResolvedSource] = field(default_factory=dict, compare=False)
    variants: list[str] = field(default_factory=list, compare=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "builder": self.builder,
            "builderVersion": self.builder_version,
            "name": self.name,
            "params": self.params,
            "inputs": self.inputs,
            "tools": self.tools,
            "epoch": self.epoch,
            "deps": list(self.deps),
            "variants": self.variants,
        }


def action_key(
    builder: str,
    version: str,
    params: Any,
    inputs: dict[str, str],
    tools: dict[str, str],
    epoch: int,
    deps: tuple[str, ...] = (),
) -> str:
    """``sha256:<hex>`` of the canonical JSON of an action's identity."""
    return digest_json(
        {
            "builder": builder,
            "builderVersion": version,
            "params": params,
            "inputs": inputs,
            "deps": sorted(deps),
            "tools": tools,
            "epoch": epoch,
        }
    )


@dataclass
class Plan:
    """The DAG: ``actions`` by key in a topological order; ``roots`` are the release-set actions."""

    recipe: LoadedRecipe
    variants: list[Variant]
    epoch: int
    actions: dict[str, Action]
    roots: list[str]
    release_sets: dict[str, str]  # release set name -> action key

    @property
    def build_digest(self) -> str:
        return digest_json(sorted(self.actions))

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": {"path": display_path(self.recipe.path), "digest": self.recipe.digest},
            "buildDigest": self.build_digest,
            "epoch": self.epoch,
            "variants": [v.id for v in self.variants],
            "releaseSets": dict(sorted(self.release_sets.items())),
            "actions": [a.to_json() for a in self.actions.values()],
        }

    def mermaid(self) -> str:
        """The DAG as a Mermaid flowchart (sources as round nodes, actions as boxes)."""
        lines = ["flowchart LR"]
        ids = {key: f"a{i}" for i, key in enumerate(self.actions)}
        src_ids: dict[str, str] = {}
        for key, action in self.actions.items():
            lines.append(f'  {ids[key]}["{action.name}<br/>{action.builder} {key[7:19]}"]')
            for role, src in sorted(action.sources.items()):
                if src.digest not in src_ids:
                    src_ids[src.digest] = f"s{len(src_ids)}"
                    lines.append(f'  {src_ids[src.digest]}(["{src.name}<br/>{src.digest[7:19]}"])')
                lines.append(f"  {src_ids[src.digest]} -->|{role}| {ids[key]}")
            for dep in action.deps:
                lines.append(f"  {ids[dep]} --> {ids[key]}")
        return "\n".join(lines) + "\n"


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (stable across clones)."""
    p = Path(os.path.abspath(path))
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return p.as_posix()


def _new_action(builder: str, version: str, name: str, spec: ActionSpec, epoch: int) -> Action:
    key = action_key(builder, version, spec.params, spec.inputs, spec.tools, epoch, spec.deps)
    return Action(
        key=key,
        builder=builder,
        builder_version=version,
        name=name,
        params=spec.params,
        inputs=spec.inputs,
        tools=spec.tools,
        epoch=epoch,
        deps=tuple(sorted(spec.deps)),
        sources=spec.sources,
    )


def make_plan(
    loaded: LoadedRecipe,
    variants: list[Variant],
    source_for: Callable[[Variant, str], ResolvedSource],
    *,
    epoch: int,
    lockfile: dict[str, str],
) -> Plan:
    """Plan every artifact of every variant, then one release-set action per release set name.

    Args:
        source_for: returns the locked source ``name`` of a variant (see :mod:`nvkr.lock`).
        lockfile: ``{"path": ..., "digest": "sha256:.."}`` of the lock the sources came from.
    Raises:
        RecipeReferenceError: an artifact refers to a source that does not exist.
        UnknownBuilderError: an artifact names a builder nvkr does not have.
    """
    actions: dict[str, Action] = {}
    by_set: dict[str, list[tuple[Variant, dict[str, Action]]]] = {}

    for variant in variants:
        recipe = variant.recipe
        wanted = recipe.releaseSet.artifacts or list(recipe.artifacts)
        built: dict[str, Action] = {}
        for art_name in wanted:
            artifact = recipe.artifacts[art_name]
            builder = get_builder(artifact.builder)

            def lookup(src_name: str, _v: Variant = variant, _a: str = art_name) -> ResolvedSource:
                if src_name not in _v.recipe.sources:
                    raise RecipeReferenceError(
                        f"artifact {_a!r} refers to source {src_name!r}, which the recipe does not define",
                        hint="defined sources: " + ", ".join(sorted(_v.recipe.sources)),
                    )
                return source_for(_v, src_name)

            spec = builder.plan(art_name, artifact, variant, lookup)
            action = _new_action(
                builder.name, builder.version, f"{art_name} [{variant.arch}]", spec, epoch
            )
            action = actions.setdefault(action.key, action)
            action.variants.append(variant.id)
            built[art_name] = action
        by_set.setdefault(recipe.releaseSet.name, []).append((variant, built))

    release_sets: dict[str, str] = {}
    for set_name, members in sorted(by_set.items()):
        params = _release_set_spec(set_name, members, loaded, epoch, lockfile)
        deps = tuple(sorted({a.key for _, built in members for a in built.values()}))
        action = _new_action(
            ReleaseSetBuilder.name,
            ReleaseSetBuilder.version,
            f"release set {set_name}",
            ActionSpec(params=params, deps=deps),
            epoch,
        )
        action.variants.extend(v.id for v, _ in members)
        actions[action.key] = action
        release_sets[set_name] = action.key

    return Plan(
        recipe=loaded,
        variants=variants,
        epoch=epoch,
        actions=actions,
        roots=list(release_sets.values()),
        release_sets=release_sets,
    )


def _release_set_spec(
    name: str,
    members: list[tuple[Variant, dict[str, Action]]],
    loaded: LoadedRecipe,
    epoch: int,
    lockfile: dict[str, str],
) -> dict[str, Any]:
    """The params of a release-set action, in the shape :func:`nvkr.releaseset.assemble` takes."""
    artifacts: list[dict[str, Any]] = []
    node_pools: list[dict[str, Any]] = []
    cluster: dict[str, Any] | None = None
    machine_images: list[str] = []
    for variant, built in members:
        rs = variant.recipe.releaseSet
        for art_name, action in built.items():
            artifacts.append(
                {
                    "name": art_name,
                    "actionKey": action.key,
                    "builder": action.builder,
                    "builderVersion": action.builder_version,
                    "variant": variant.axes,
                    "platform": {"os": "linux", "architecture": variant.arch},
                    "artifactType": BINARY_ARTIFACT_TYPE,
                    "dependencies": [s.descriptor() for _, s in sorted(action.sources.items())],
                }
            )
        for pool in rs.nodePoolReleases:
            node_pools.append(
                {
                    "name": pool.name,
                    "machineImage": pool.machineImage,
                    "artifacts": list(pool.artifacts),
                    "variant": variant.axes,
                }
            )
        if rs.clusterRelease is not None:
            cluster = rs.clusterRelease.model_dump()
        machine_images = sorted({*machine_images, *rs.machineImages})
    return {
        "name": name,
        "epoch": epoch,
        "recipe": {"path": display_path(loaded.path), "digest": loaded.digest},
        "lockfile": lockfile,
        "nvkrVersion": nvkr.__version__,
        "variants": [v.axes for v, _ in members],
        "artifacts": artifacts,
        "machineImages": machine_images,
        "clusterRelease": cluster,
        "nodePoolReleases": node_pools,
    }
