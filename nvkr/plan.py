"""Planning: variants and their locked sources become a DAG of actions with action keys.

An action key is the ``sha256:<hex>`` of the canonical JSON of the builder name and version, the
action's params, its input digests (source blobs and the keys of the actions it reads), the tool
versions and the epoch (osbuild's stage id, in spirit). Identical keys are one action: two
variants that need the same binary share it. Every artifact action a release set lists gets an
``sbom`` action describing it; the release-set action of each release set depends on the
artifact actions it lists and on their sbom actions; the plan's build digest is the digest of
all action keys.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import nvkr
from nvkr.action import Action, ReleaseKind, ResolvedSource, action_key
from nvkr.builders.api import ActionSpec, get_builder
from nvkr.builders.image_index.builder import ImageIndexBuilder
from nvkr.builders.release_set.builder import ReleaseSetBuilder
from nvkr.builders.sbom.builder import SbomBuilder, sbom_spec
from nvkr.canonical import digest_json
from nvkr.errors import RecipeReferenceError
from nvkr.fetch.api import descriptors
from nvkr.jsondoc import JsonObject
from nvkr.paths import display_path
from nvkr.plancheck import check_variant, released_artifacts
from nvkr.recipe.loader import LoadedRecipe
from nvkr.recipe.matrix import Variant
from nvkr.releasespec import (
    ClusterReleaseSpec,
    FileRef,
    NodePoolReleaseSpec,
    ReleaseSetSpec,
    SpecArtifact,
)

BINARY_ARTIFACT_TYPE = "application/vnd.nvkr.binary.v1"
#: artifactType of the OCI artifact manifest a release set wraps around each non-image kind.
ARTIFACT_TYPES = {
    ReleaseKind.BINARY: BINARY_ARTIFACT_TYPE,
    ReleaseKind.MACHINE_IMAGE: "application/vnd.nvkr.machine-image.v1",
}


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

    def to_json(self) -> JsonObject:
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


def project_root(recipe_path: Path) -> Path:
    """The directory a recipe's recorded paths are relative to: the parent of the ``recipes``
    directory the recipe lies in (the project checkout), else the recipe's own directory (the
    same rule as :func:`nvkr.lock.default_lock_path`)."""
    p = Path(os.path.abspath(recipe_path))
    for parent in p.parents:
        if parent.name == "recipes":
            return parent.parent
    return p.parent


def recorded_path(path: Path, root: Path) -> str:
    """``path`` as release sets and provenance record it: relative to ``root``
    (:func:`project_root`), so the same checkout gives the same bytes whatever the working
    directory or the checkout's location; an absolute path only for a file outside it (an
    explicit ``--lockfile`` elsewhere)."""
    p = Path(os.path.abspath(path))
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.as_posix()


def _new_action(
    builder: str,
    version: str,
    name: str,
    spec: ActionSpec,
    epoch: int,
    known: Mapping[str, Action],
    artifact: str,
) -> Action:
    """The action of ``spec``; ``known`` holds the actions planned so far (its deps among them);
    ``artifact`` is what it is planned for (:attr:`Action.artifact`).

    It is hermetic when its builder says so and every dependency is: a result read from a
    non-hermetic one can differ under the same key too. A dependency not in ``known`` counts as
    not hermetic (fail closed).
    """
    key = action_key(builder, version, spec.params, spec.inputs, spec.tools, epoch, spec.deps)
    hermetic = spec.hermetic and all(d in known and known[d].hermetic for d in spec.deps)
    return Action(
        artifact=artifact,
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
        hermetic=hermetic,
    )


#: :meth:`nvkr.lock.Resolver.locked_debs`: (variant, source name, arch, versions) → the .debs.
DebsFor = Callable[[Variant, str, str, Mapping[str, str]], ResolvedSource | None]


class _Refs:
    """What :meth:`Builder.plan` may ask about one variant (see
    :class:`nvkr.builders.api.PlanRefs`)."""

    def __init__(self, planner: _ArtifactPlanner, variant: Variant, artifact: str) -> None:
        self._planner = planner
        self._variant = variant
        self._artifact = artifact

    def source(self, name: str) -> ResolvedSource:
        if name not in self._variant.recipe.sources:
            raise RecipeReferenceError(
                f"artifact {self._artifact!r} refers to source {name!r}, which the recipe does not define",
                hint="defined sources: " + ", ".join(sorted(self._variant.recipe.sources)),
            )
        return self._planner.source_for(self._variant, name)

    def artifact(self, name: str) -> Action:
        return self._planner.action(self._variant, name)

    def locked_debs(
        self, name: str, arch: str, versions: Mapping[str, str]
    ) -> ResolvedSource | None:
        if self._planner.debs_for is None:
            return None
        return self._planner.debs_for(self._variant, name, arch, versions)

    def image_index(self, name: str) -> Action:
        return self._planner.image_index(self._variant, name)


class _ArtifactPlanner:
    """Plans artifacts on demand, per variant, following references between them.

    An artifact that uses another (an image holding the agent binary, a chart naming an image)
    plans it first; a reference back to an artifact still being planned is a cycle. A
    container-image artifact enters release sets as an ``image-index`` action that joins its
    per-arch images across the variants that differ only by ``arch``.
    """

    def __init__(
        self,
        variants: list[Variant],
        source_for: Callable[[Variant, str], ResolvedSource],
        epoch: int,
        debs_for: DebsFor | None = None,
    ) -> None:
        self.variants = variants
        self.source_for = source_for
        self.debs_for = debs_for
        self.epoch = epoch
        self.actions: dict[str, Action] = {}
        self._done: dict[tuple[str, str], Action] = {}
        self._stack: list[tuple[str, str]] = []

    def _add(self, action: Action, variant: Variant) -> Action:
        action = self.actions.setdefault(action.key, action)
        if variant.id not in action.variants:
            action.variants.append(variant.id)
        return action

    def action(self, variant: Variant, name: str) -> Action:
        """The action building artifact ``name`` of ``variant`` (for its own arch)."""
        cell = (variant.id, name)
        if cell in self._done:
            return self._done[cell]
        if cell in self._stack:
            chain = " -> ".join(
                n for v, n in self._stack[self._stack.index(cell) :] if v == variant.id
            )
            # check_variant refused every cycle of the recipe's references: a builder asked
            # for an artifact its model does not list among them.
            raise AssertionError(f"planning {variant.id}: {chain} -> {name} is a cycle")
        if name not in variant.recipe.artifacts:
            raise RecipeReferenceError(
                f"no artifact named {name!r}",
                hint="defined artifacts: " + ", ".join(sorted(variant.recipe.artifacts)),
            )
        self._stack.append(cell)
        try:
            artifact = variant.recipe.artifacts[name]
            builder = get_builder(artifact.builder)
            spec = builder.plan(name, artifact, variant, _Refs(self, variant, name))
            # a builder whose output differs per GPU generation names it too (node images)
            axes = [variant.gpu] if builder.per_gpu else []
            axes += [variant.arch] if builder.per_arch else []
            label = f"{name} [{' '.join(axes)}]" if axes else name
            action = self._add(
                _new_action(
                    builder.name, builder.version, label, spec, self.epoch, self.actions, name
                ),
                variant,
            )
        finally:
            self._stack.pop()
        self._done[cell] = action
        return action

    def image_index(self, variant: Variant, name: str) -> Action:
        """The image-index action joining image ``name`` over ``variant``'s sibling arches.

        Siblings are the planned variants with the same release set name, GPU generation and
        Kubernetes release; each contributes its arch's image.
        """
        siblings = sorted(
            (
                v
                for v in self.variants
                if v.gpu == variant.gpu
                and v.kubernetes == variant.kubernetes
                and v.recipe.releaseSet.name == variant.recipe.releaseSet.name
            ),
            key=lambda v: v.arch,
        )
        images = {v.arch: self.action(v, name) for v in siblings}
        spec = ActionSpec(
            params={
                "name": name,
                "platforms": [{"os": "linux", "architecture": arch} for arch in sorted(images)],
            },
            deps=tuple(images[arch].key for arch in sorted(images)),
        )
        index = _new_action(
            ImageIndexBuilder.name,
            ImageIndexBuilder.version,
            name,
            spec,
            self.epoch,
            self.actions,
            name,
        )
        for v in siblings:
            index = self._add(index, v)
        return index

    def release_action(self, variant: Variant, name: str) -> Action:
        """What the release set holds for artifact ``name``: its action, or its image index."""
        builder = get_builder(variant.recipe.artifacts[name].builder)
        if builder.release_kind == ReleaseKind.IMAGE:
            return self.image_index(variant, name)
        return self.action(variant, name)

    def sources_of(self, action: Action) -> dict[str, ResolvedSource]:
        """Every source ``action`` reads, directly or through the actions it depends on."""
        found: dict[str, ResolvedSource] = {}
        stack = [action]
        while stack:
            a = stack.pop()
            for src in a.sources.values():
                found.setdefault(src.digest, src)
            stack.extend(self.actions[d] for d in a.deps if d in self.actions)
        return found


def make_plan(
    loaded: LoadedRecipe,
    variants: list[Variant],
    source_for: Callable[[Variant, str], ResolvedSource],
    *,
    epoch: int,
    lockfile: dict[str, str],
    debs_for: DebsFor | None = None,
) -> Plan:
    """Plan every artifact of every variant, then one release-set action per release set name.

    Args:
        source_for: returns the locked source ``name`` of a variant (see :mod:`nvkr.lock`).
        debs_for: returns .debs of another arch the lock pins for a variant's apt source
            (:meth:`nvkr.lock.Resolver.locked_debs`); None: a builder asking gets none.
        lockfile: ``{"path": ..., "digest": "sha256:.."}`` of the lock the sources came from.
    Raises:
        RecipeError, RecipeReferenceError: what :func:`nvkr.plancheck.check_variant` finds.
        UnknownBuilderError: an artifact names a builder nvkr does not have.
    """
    for variant in variants:  # what needs no source is refused before any is read
        check_variant(variant)
    planner = _ArtifactPlanner(variants, source_for, epoch, debs_for)
    by_set: dict[str, list[tuple[Variant, dict[str, Action]]]] = {}
    for variant in variants:
        recipe = variant.recipe
        wanted = released_artifacts(variant.recipe)
        built = {name: planner.release_action(variant, name) for name in wanted}
        by_set.setdefault(recipe.releaseSet.name, []).append((variant, built))
    actions = planner.actions
    sboms = _plan_sboms(planner, by_set)

    release_sets: dict[str, str] = {}
    for set_name, members in sorted(by_set.items()):
        spec = _release_set_spec(set_name, members, planner, loaded, epoch, lockfile, sboms)
        built_keys = {a.key for _, built in members for a in built.values()}
        deps = tuple(sorted(built_keys | {sboms[k] for k in built_keys}))
        action = _new_action(
            ReleaseSetBuilder.name,
            ReleaseSetBuilder.version,
            f"release set {set_name}",
            ActionSpec(params=spec.to_params(), deps=deps),
            epoch,
            actions,
            set_name,
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


def _plan_sboms(
    planner: _ArtifactPlanner, by_set: dict[str, list[tuple[Variant, dict[str, Action]]]]
) -> dict[str, str]:
    """One ``sbom`` action per released artifact action; returns artifact key → sbom key.

    An SBOM describes an action, so artifacts sharing one action share its SBOM, named after
    all of them. An image's SBOM also depends on the artifacts its per-arch images hold as
    files (a Go binary's build info names the modules linked into that file); a chart's on the
    SBOMs of the images it pins (planned here even for an image the set does not hold).
    """
    released: dict[str, tuple[Action, ReleaseKind, set[str]]] = {}
    for members in by_set.values():
        for variant, built in members:
            for art_name, action in built.items():
                kind = get_builder(variant.recipe.artifacts[art_name].builder).release_kind
                released.setdefault(action.key, (action, kind, set()))[2].add(art_name)
    sboms: dict[str, str] = {}

    def sbom_of(action: Action, kind: ReleaseKind, names: set[str]) -> str:
        if action.key in sboms:
            return sboms[action.key]
        inputs = get_builder(action.builder).sbom_inputs(action, planner.actions)
        images: list[str] = []
        for dep_key in inputs.images:  # a chart's document refers to the images it pins
            dep = planner.actions[dep_key]
            dep_names = released[dep_key][2] if dep_key in released else {dep.artifact}
            images.append(sbom_of(dep, ReleaseKind.IMAGE, dep_names))
        binaries = list(inputs.binaries)
        spec = sbom_spec(
            ",".join(sorted(names)), kind, action.key, binaries, nvkr.__version__, images
        )
        sbom = _new_action(
            SbomBuilder.name,
            SbomBuilder.version,
            f"sbom {action.name}",
            spec,
            planner.epoch,
            planner.actions,
            ",".join(sorted(names)),
        )
        sbom = planner.actions.setdefault(sbom.key, sbom)
        sbom.variants.extend(v for v in action.variants if v not in sbom.variants)
        sboms[action.key] = sbom.key
        return sbom.key

    for _key, (action, kind, names) in sorted(released.items()):
        sbom_of(action, kind, names)
    return sboms


def _release_set_spec(
    name: str,
    members: list[tuple[Variant, dict[str, Action]]],
    planner: _ArtifactPlanner,
    loaded: LoadedRecipe,
    epoch: int,
    lockfile: dict[str, str],
    sboms: dict[str, str],
) -> ReleaseSetSpec:
    """The spec of a release-set action, which :func:`nvkr.releaseset.assemble` takes (its
    params are :meth:`~nvkr.releasespec.ReleaseSetSpec.to_params`)."""
    artifacts: list[SpecArtifact] = []
    node_pools: list[NodePoolReleaseSpec] = []
    cluster: ClusterReleaseSpec | None = None
    machine_images: list[str] = []
    for variant, built in members:
        rs = variant.recipe.releaseSet
        for art_name, action in built.items():
            builder = get_builder(variant.recipe.artifacts[art_name].builder)
            sources = sorted(planner.sources_of(action).values(), key=lambda s: (s.name, s.digest))
            artifacts.append(
                SpecArtifact(
                    name=art_name,
                    kind=builder.release_kind,
                    action_key=action.key,
                    sbom_action_key=sboms[action.key],
                    builder=builder.name,
                    builder_version=builder.version,
                    variant=variant.axes,
                    # An image index spans the arches; its manifests carry their own platforms.
                    platform=(
                        {"os": "linux", "architecture": variant.arch}
                        if builder.per_arch and builder.release_kind != ReleaseKind.IMAGE
                        else None
                    ),
                    artifact_type=ARTIFACT_TYPES.get(builder.release_kind),
                    dependencies=tuple(d for s in sources for d in descriptors(s)),
                    extra=builder.release_fields(action),
                )
            )
        for pool in rs.nodePoolReleases:
            node_pools.append(
                NodePoolReleaseSpec(
                    name=pool.name,
                    machine_image=pool.machineImage,
                    artifacts=tuple(pool.artifacts),
                    variant=variant.axes,
                )
            )
        if rs.clusterRelease is not None:
            c = rs.clusterRelease
            cluster = ClusterReleaseSpec(c.kubernetes, tuple(c.charts), tuple(c.images))
        machine_images = sorted({*machine_images, *rs.machineImages})
    return ReleaseSetSpec(
        name=name,
        epoch=epoch,
        recipe=FileRef(recorded_path(loaded.path, project_root(loaded.path)), loaded.digest),
        lockfile=FileRef(lockfile["path"], lockfile["digest"]),
        nvkr_version=nvkr.__version__,
        variants=tuple(v.axes for v, _ in members),
        artifacts=tuple(artifacts),
        machine_images=tuple(machine_images),
        cluster_release=cluster,
        node_pool_releases=tuple(node_pools),
    )
