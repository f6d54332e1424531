"""The builder API: what the engine asks of a builder and what a builder gets and returns.

A builder checks an artifact of a variant from the recipe alone (:meth:`Builder.check`, which
``nvkr validate`` runs too), turns it into an :class:`~nvkr.action.Action` at plan time
(:meth:`Builder.plan`: params, inputs and tool versions, everything that goes into the action key)
and produces its outputs at build time (:meth:`Builder.run`, which writes only to its work dir and
hands files to the store through :class:`ActionContext`). The engine never special-cases one of
them: adding a builder means adding a package ``nvkr/builders/<name>/`` and a line in
:data:`nvkr.builders.table.BUILDER_TABLE`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from nvkr.action import RELEASED_KINDS as RELEASED_KINDS  # the action vocabulary's, re-exported
from nvkr.action import ActionOutput, ActionResult, ResultWarning
from nvkr.action import ReleaseKind as ReleaseKind
from nvkr.action import ResolvedSource as ResolvedSource
from nvkr.errors import UnknownBuilderError
from nvkr.jsondoc import JsonObject, JsonValue
from nvkr.monitor.events import ActionProgress
from nvkr.store_move import move_file

if TYPE_CHECKING:
    from nvkr.action import Action
    from nvkr.builders.table import BuilderLine
    from nvkr.recipe.base import ArtifactModel
    from nvkr.recipe.matrix import Variant
    from nvkr.secureboot.owner import OwnerCertificate
    from nvkr.store import Store


@dataclass(frozen=True)
class ActionSpec:
    """What a builder contributes to an action at plan time (all JSON-able, no floats).

    ``inputs`` maps a role to a digest (``sha256:<hex>``); ``sources`` maps the same roles to the
    sources the executor must put in the store before :meth:`Builder.run`; ``deps`` are action
    keys of other actions whose results the builder reads.

    ``hermetic`` declares that the action key covers every tool that can change the outputs'
    bytes (pinned inputs, or tool versions in ``tools``), so the result may be shared with
    another machine under that key; False when the builder relies on something outside the key
    (a Docker daemon and the base images it resolves). It is not part of the key.
    """

    params: JsonObject
    inputs: dict[str, str] = field(default_factory=dict)
    tools: dict[str, str] = field(default_factory=dict)
    sources: dict[str, ResolvedSource] = field(default_factory=dict)
    deps: tuple[str, ...] = ()
    hermetic: bool = True


class ActionContext:
    """What :meth:`Builder.run` gets: its action, the store, a private work dir and a log file,
    and ``deps``: the results of the actions it depends on, by action key.

    What it makes goes into the action's result (:class:`~nvkr.action.ActionResult`):
    ``outputs`` (:meth:`add_output`), ``metadata`` (a JSON object of the builder's) and
    ``warnings`` (:meth:`warn`): things the user should know about an output that is still
    built, shown on every build, cached or not.
    """

    def __init__(
        self, action: Action, store: Store, workdir: Path, deps: Mapping[str, ActionResult]
    ) -> None:
        self.action = action
        self.store = store
        self.workdir = workdir
        self.log_file = workdir / "build.log"
        self.deps = deps
        self.outputs: list[ActionOutput] = []
        self.metadata: dict[str, JsonValue] = {}
        self.warnings: list[ResultWarning] = []
        #: where :meth:`progress` reports go (the executor's monitor; by default nowhere)
        self.on_progress: Callable[[ActionProgress], None] = lambda p: None

    def progress(self, done: float, total: float | None, unit: str, what: str = "") -> None:
        """Report how far the builder is: ``done`` of ``total`` ``unit`` (``steps``,
        ``percent``, ``bytes``; ``total`` None when unknown), ``what`` it does now. Shown by the
        live display and, at most every 30 s, as a line in a CI log (:mod:`nvkr.monitor`)."""
        self.on_progress(ActionProgress(self.action, done, total, unit, what))

    def warn(self, message: str, *, hint: str | None = None) -> None:
        """Record a warning about the result (kept in its action record, so a cached result
        warns on every build that uses it, see :func:`nvkr.execute.execute`; also written to
        the action's log)."""
        self.warnings.append(ResultWarning(message, hint or None))
        with open(self.log_file, "a", encoding="utf-8") as f:
            f.write(f"warning: {message}\n" + (f"  hint: {hint}\n" if hint else ""))

    def input_path(self, role: str) -> Path:
        """Store path of the blob bound to input ``role``, checked against its seal first
        (:meth:`nvkr.store.Store.checked_path`: a corrupt blob raises IntegrityError)."""
        return self.store.checked_path(self.action.inputs[role])

    def add_output(
        self, path: Path, *, name: str, media_type: str, role: str = "primary"
    ) -> ActionOutput:
        """Move a produced file into the store and record it as an output of this action:
        ``path`` is gone after (:func:`nvkr.store_move.move_file`; read the output from the
        store, by its digest)."""
        info = move_file(self.store, path, what=f"output {name!r}")
        out = ActionOutput(name, info.digest, info.size, media_type, role)
        self.outputs.append(out)
        return out


class PlanRefs(Protocol):
    """What a builder may look up while planning one artifact of one variant.

    ``source(name)`` is the locked source; ``artifact(name)`` the action building another
    artifact of the same variant (add its key to ``ActionSpec.deps`` and read its result from
    ``ActionContext.deps`` at run time); ``image_index(name)`` the action joining a
    container-image artifact over the variant's arches (its result's metadata holds
    ``indexDigest``). ``locked_debs(name, arch, versions)``: the .debs of another arch that
    the lockfile pins for apt source ``name`` at exactly those versions, as a source to list in
    ``ActionSpec.sources`` (fetched like any), or None when the lock has no such entry (see
    :meth:`nvkr.lock.Resolver.locked_debs`).

    Raises (each): RecipeReferenceError for a missing name or a cycle.
    """

    def source(self, name: str) -> ResolvedSource: ...

    def locked_debs(
        self, name: str, arch: str, versions: Mapping[str, str]
    ) -> ResolvedSource | None: ...

    def artifact(self, name: str) -> Action: ...

    def image_index(self, name: str) -> Action: ...


#: One thing wrong with a variant's recipe, found without reading any source: the document path
#: it concerns (``("artifacts", "node", "rootfs")``), the message (``'kube' is a kube-packages
#: artifact, not a rootfs``) and a hint, or None (see :mod:`nvkr.plancheck`).
Problem = tuple[tuple[str | int, ...], str, str | None]


def source_kind_of(variant: Variant, name: str) -> str | None:
    """The kind (``url``, ``path``, ...) of ``variant``'s source ``name``; None when it has none
    (:mod:`nvkr.recipe.references` reports that)."""
    from nvkr.recipe.models import source_kind

    source = variant.recipe.sources.get(name)
    return None if source is None else source_kind(source)


def builder_of(variant: Variant, name: str) -> str | None:
    """The builder of ``variant``'s artifact ``name``; None when it has none."""
    artifact = variant.recipe.artifacts.get(name)
    return None if artifact is None else str(artifact.builder)


def a_kind(kind: str) -> str:
    """``a url source``/``an oci source``: the article for a kind or builder name."""
    return ("an " if kind[:1] in "aeio" else "a ") + kind  # a url, an oci


@dataclass(frozen=True)
class SbomInputs:
    """What the SBOM of a released action reads besides the action's own result (action keys).

    ``binaries``: actions whose results carry Go build info (output role ``buildinfo``) for the
    files the artifact holds; ``images``: image-index actions whose SBOMs a chart's document
    refers to (the planner plans them too).
    """

    binaries: tuple[str, ...] = ()
    images: tuple[str, ...] = ()


#: The artifact model a builder's :meth:`Builder.plan` takes (its recipe model).
A_contra = TypeVar("A_contra", bound="ArtifactModel", contravariant=True)


class Builder(Protocol[A_contra]):
    """A builder: what the engine asks of it. ``name`` and ``version`` enter every action key.

    ``artifact_model`` is the recipe model of its artifacts (the same as its line in
    :data:`nvkr.builders.table.BUILDER_TABLE`; None for the planner's own builders).
    ``per_arch`` says its output depends on the variant's arch (a Go binary, a per-arch image;
    not a chart), ``per_gpu`` that it depends on the GPU generation (a node image's labels): the
    action's label names them. ``release_kind`` says how a release set holds its artifacts
    (:class:`ReleaseKind`). A builder may also name ``run_metadata``: metadata keys that
    describe its run rather than its output (phase times); the executor files them under the
    record's ``run``, so metadata stays a function of the action's inputs.

    A builder subclasses this protocol with its model (``Builder[GoBinaryArtifact]``) and
    inherits the defaults of :meth:`sbom_inputs` and :meth:`release_fields`.

    Optional: ``host_arch(action) -> str | None``, the arch of the machine an action runs best
    on (a CI fan-out puts its unit on such a runner, :mod:`nvkr.fanout`); absent or None: any.
    """

    name: str
    version: str
    artifact_model: type[ArtifactModel] | None
    per_arch: bool
    per_gpu: bool = False
    release_kind: ReleaseKind

    def check(self, artifact_name: str, artifact: A_contra, variant: Variant) -> list[Problem]:
        """What is wrong with the artifact in ``variant``'s recipe, from the recipe alone (the
        kinds of the sources and artifacts it names): run by ``nvkr validate`` and before every
        plan (:func:`nvkr.plancheck.check_variant`), so :meth:`plan` may take it as checked."""
        ...

    def plan(
        self, artifact_name: str, artifact: A_contra, variant: Variant, refs: PlanRefs
    ) -> ActionSpec: ...

    def run(self, ctx: ActionContext) -> None: ...

    def sbom_inputs(self, action: Action, actions: Mapping[str, Action]) -> SbomInputs:
        """What the SBOM of ``action`` (one of this builder's, released) reads besides its
        result; ``actions`` holds every action planned so far. Default: nothing."""
        return SbomInputs()

    def release_fields(self, action: Action) -> JsonObject:
        """Fields the release-set spec's entry for ``action`` carries beyond the common ones
        (JSON-able; part of the release-set action's key). Default: none."""
        return {}

    def owner_certificates(
        self, action: Action, source_path: Callable[[ResolvedSource], Path]
    ) -> list[OwnerCertificate]:
        """The owner certificates ``action`` signs with (the owner's Secure Boot key,
        :mod:`nvkr.secureboot.owner`), read through ``source_path`` (a source's blob in the
        store, fetched if need be); the build checks the given key against them before anything
        runs. Default: none, the action signs nothing."""
        return []


class PlannerBuilder(Builder[Any]):
    """A builder the planner makes actions for itself (sbom, image-index, release-set): never named
    in a recipe, so it has no artifact model, nothing to check, and :meth:`plan` refuses with
    ``refusal`` (formatted with the artifact's name) and ``refusal_hint``."""

    per_arch = False
    artifact_model = None
    release_kind = ReleaseKind.INTERNAL
    refusal: str
    refusal_hint: str

    def check(self, artifact_name: str, artifact: Any, variant: Any) -> list[Problem]:
        return []  # made by the planner, never named in a recipe

    def plan(self, artifact_name: str, artifact: Any, variant: Any, refs: PlanRefs) -> ActionSpec:
        from nvkr.errors import RecipeError

        raise RecipeError(f"artifact {artifact_name!r}: {self.refusal}", hint=self.refusal_hint)


def _load(line: BuilderLine) -> Builder[Any]:
    """The builder of a table line, its module imported now (``module:Class``)."""
    module, _, cls = line.builder.partition(":")
    builder: Builder[Any] = getattr(importlib.import_module(module), cls)()
    return builder


def _registry() -> dict[str, Builder[Any]]:
    from nvkr.builders.table import BUILDER_TABLE

    return {line.name: _load(line) for line in BUILDER_TABLE}


REGISTRY: dict[str, Builder[Any]] = {}


def get_builder(name: str) -> Builder[Any]:
    """The builder called ``name``.

    Raises:
        UnknownBuilderError: no such builder (names the known ones).
    """
    if not REGISTRY:
        REGISTRY.update(_registry())
    try:
        return REGISTRY[name]
    except KeyError:
        raise UnknownBuilderError(
            f"unknown builder {name!r}", hint="known builders: " + ", ".join(sorted(REGISTRY))
        ) from None
