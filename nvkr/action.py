"""Actions: one build step of a plan and its action key, and the vocabulary around them: the
resolved source an action reads, the release kind of what it makes, and its result
(:class:`ActionResult`: its outputs by role, read from and written to the action record).

The planner (:mod:`nvkr.plan`) makes them, builders (:mod:`nvkr.builders`) read them at build
time and the executor, cache and store address results by their key. An action key is the
``sha256:<hex>`` of the canonical JSON of the builder name and version, the action's params, its
input digests (source blobs and the keys of the actions it reads), the tool versions and the
epoch (osbuild's stage id, in spirit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from nvkr.canonical import digest_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.jsondoc import JsonObject, JsonValue, json_kind

if TYPE_CHECKING:  # types only: the recipe's models (pydantic) and the fetch package stay
    # unloaded for a reader (a no-op answered by the plan memo reads results, never entries)
    from nvkr.fetch.entries import LockEntry
    from nvkr.recipe.base import Strict


@dataclass(frozen=True)
class ResolvedSource:
    """A source of one variant with its lockfile entry.

    ``spec`` is the recipe's source model (one of :mod:`nvkr.fetch.table`'s), ``entry`` its
    resolved identity, typed by its kind (see :func:`nvkr.fetch.api.resolve`); ``entry.digest``
    is the ``sha256:<hex>`` of the bytes the store holds for it. ``base_dir`` is the directory
    path sources are relative to. What an entry stands for in provenance (its descriptors) is its
    kind's to say: :func:`nvkr.fetch.api.descriptors`.
    """

    name: str
    spec: Strict
    entry: LockEntry
    base_dir: Path

    @property
    def digest(self) -> str:
        return self.entry.digest


class ReleaseKind(StrEnum):
    """How a release set holds a builder's artifacts (the release-set spec's ``kind``).

    ``binary``: an OCI artifact manifest wrapping the primary output; ``image``: the multi-arch
    image index the planner joins over the variant's arches (an ``image-index`` action);
    ``chart``: a Helm chart manifest; ``machine-image``: an OCI artifact manifest of a disk
    image. ``internal``: an intermediate a release set never holds (a rootfs, a staged package
    tar, and the planner's own sbom, image-index and release-set actions).
    """

    BINARY = "binary"
    IMAGE = "image"
    CHART = "chart"
    MACHINE_IMAGE = "machine-image"
    INTERNAL = "internal"


#: The kinds a release set holds, each with an SBOM (every :class:`ReleaseKind` but internal).
RELEASED_KINDS: tuple[ReleaseKind, ...] = tuple(k for k in ReleaseKind if k != "internal")


@dataclass(frozen=True)
class Action:
    """One build step. ``key`` is derived from everything else that enters a build (see module doc)."""

    key: str
    builder: str
    builder_version: str
    name: str
    params: JsonObject
    inputs: dict[str, str]
    tools: dict[str, str]
    epoch: int
    deps: tuple[str, ...] = ()
    sources: dict[str, ResolvedSource] = field(default_factory=dict, compare=False)
    variants: list[str] = field(default_factory=list, compare=False)
    #: the key covers every tool that can change the outputs' bytes, this action's own (its
    #: builder's :attr:`~nvkr.builders.api.ActionSpec.hermetic`) and every dependency's; outside
    #: the key, so a result that is not stays in the local store
    hermetic: bool = field(default=True, compare=False)
    #: what the action is planned for: the artifact name (an sbom's: the names it describes,
    #: joined by ","; a release set's: the set name). Not part of the key.
    artifact: str = field(default="", compare=False)

    @property
    def ref(self) -> str:
        """The action's reference, as ``nvkr build --action`` takes it
        (:mod:`nvkr.actionrefs`): ``BUILDER/ARTIFACT@VARIANT`` with the first variant that
        planned it (``go-binary/agent@gpu=hopper,kubernetes=1.36,arch=amd64``), or
        ``release-set/NAME``. No digest is in it: it changes with the recipe's structure only."""
        return ref_of(self)

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "key": self.key,
            "ref": self.ref,
            "builder": self.builder,
            "builderVersion": self.builder_version,
            "name": self.name,
            "params": self.params,
            "inputs": self.inputs,
            "tools": self.tools,
            "epoch": self.epoch,
            "deps": list(self.deps),
            "variants": self.variants,
            "hermetic": self.hermetic,
        }


#: The builder of the planner's release-set actions: their reference names the set, no variant.
RELEASE_SET = "release-set"


def ref_of(action: Action) -> str:
    """The canonical reference of ``action`` (:attr:`Action.ref`; the syntax is
    :mod:`nvkr.actionrefs`'s): ``BUILDER/ARTIFACT@VARIANT`` with the first variant that planned
    it, ``BUILDER/ARTIFACT`` for a release set or an action planned for no variant."""
    if action.builder == RELEASE_SET or not action.variants:
        return f"{action.builder}/{action.artifact}"
    return f"{action.builder}/{action.artifact}@{action.variants[0]}"


def action_key(
    builder: str,
    version: str,
    params: JsonValue,
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


# -- results ---------------------------------------------------------------------------------
#: The fields of an output nvkr writes, in the order it writes them (its JSON keys).
_OUTPUT_KEYS = ("name", "digest", "size", "mediaType", "role")
#: The fields of a result nvkr writes (its JSON keys); any other is kept as read (``extra``).
_RESULT_KEYS = (
    "key",
    "builder",
    "name",
    "outputs",
    "metadata",
    "hermetic",
    "warnings",
    "log",
    "run",
    "remote",
)


def _wrong(where: str, field: str, value: object, expected: str) -> IntegrityError:
    return IntegrityError(f"{where}: {field} is {json_kind(value)}, expected {expected}")


def _str(obj: dict[str, JsonValue], key: str, where: str, field: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise _wrong(where, field, value, "a string")
    return value


def _object(value: object, where: str, field: str) -> dict[str, JsonValue]:
    if not isinstance(value, dict):
        raise _wrong(where, field, value, "an object")
    return value


def _extra(obj: dict[str, JsonValue], known: tuple[str, ...]) -> dict[str, JsonValue]:
    return {k: v for k, v in obj.items() if k not in known}


@dataclass(frozen=True)
class ActionOutput:
    """One output of an action: a blob of the store (``digest``, ``size``, ``media_type``) the
    action made, its file ``name`` and its ``role`` (what the action's readers look it up by:
    ``primary``, ``index``, ``manifest``, ``sbom``, ...). ``extra`` holds fields of the record
    this nvkr does not write, kept as read."""

    name: str
    digest: str
    size: int
    media_type: str
    role: str
    extra: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str) -> ActionOutput:
        """The output ``obj`` (one of a record's ``outputs``; ``where`` names it in messages).

        Raises:
            IntegrityError: a field is missing or of another type (names it and what was
                expected).
        """
        doc = _object(obj, where, "the output")
        size = doc.get("size")
        if isinstance(size, bool) or not isinstance(size, int):
            raise _wrong(where, "size", size, "an integer")
        return cls(
            name=_str(doc, "name", where, "name"),
            digest=_str(doc, "digest", where, "digest"),
            size=size,
            media_type=_str(doc, "mediaType", where, "mediaType"),
            role=_str(doc, "role", where, "role"),
            extra=_extra(doc, _OUTPUT_KEYS),
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The output as its record holds it: ``{"name", "digest", "size", "mediaType",
        "role"}`` and the extra fields."""
        return {
            "name": self.name,
            "digest": self.digest,
            "size": self.size,
            "mediaType": self.media_type,
            "role": self.role,
            **self.extra,
        }

    def descriptor(self) -> dict[str, JsonValue]:
        """Its OCI descriptor: ``{"mediaType", "digest", "size"}``."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class ResultWarning:
    """Something the user should know about an output that was still built
    (:meth:`nvkr.builders.api.ActionContext.warn`): ``message`` and a ``hint`` (None: none)."""

    message: str
    hint: str | None = None
    extra: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str) -> ResultWarning:
        """The warning ``obj`` (``{"message"[, "hint"]}``). Raises IntegrityError, as
        :meth:`ActionOutput.from_json`."""
        doc = _object(obj, where, "the warning")
        hint = doc.get("hint")
        if hint is not None and not isinstance(hint, str):
            raise _wrong(where, "hint", hint, "a string")
        return cls(_str(doc, "message", where, "message"), hint, _extra(doc, ("message", "hint")))

    def to_json(self) -> dict[str, JsonValue]:
        doc: dict[str, JsonValue] = {"message": self.message}
        if self.hint is not None:
            doc["hint"] = self.hint
        return {**doc, **self.extra}


@dataclass(frozen=True, kw_only=True)
class Outputs:
    """What an action made: its ``outputs`` in the order it recorded them and its ``metadata``
    (a JSON object of its builder's: ``platform``, ``packages``, ``releaseSetDigest``...)."""

    outputs: tuple[ActionOutput, ...]
    metadata: JsonObject

    def outputs_with(self, role: str) -> tuple[ActionOutput, ...]:
        """Every output with ``role``, in the record's order."""
        return tuple(o for o in self.outputs if o.role == role)

    def output(self, role: str, what: str) -> ActionOutput:
        """The single output with ``role``.

        Raises:
            BuildError: none or several (names ``what``, the role and the count): a result that
                is not what its builder writes.
        """
        found = self.outputs_with(role)
        if len(found) != 1:
            raise BuildError(
                f"{what}: expected exactly one output with role {role!r}, found {len(found)}"
            )
        return found[0]


@dataclass(frozen=True, kw_only=True)
class ActionResult(Outputs):
    """The result of one action, as its record in the store's action cache holds it
    (``actions/<hex>.json``, canonical JSON of :meth:`to_json`).

    ``key``, ``builder`` and ``name`` are its action's; ``hermetic`` whether the key covers
    every tool that can change the outputs (:attr:`Action.hermetic`; None in a record of an
    nvkr before it was recorded); ``warnings`` what the builder warned about; ``log`` the digest
    of the build log in the store; ``run`` the run's details (``invocationId``, ``startedOn``,
    ``finishedOn`` and the builder's ``run_metadata`` keys; None in a record of an nvkr before
    times were stored, :mod:`nvkr.execute`); ``remote`` where a result taken from a remote
    cache came from (``{"cache", "manifest", "fetchedOn"}``, :mod:`nvkr.cache.remote`).
    ``extra`` holds fields of the record this nvkr does not write, kept as read.
    """

    key: str
    builder: str
    name: str
    hermetic: bool | None = None
    warnings: tuple[ResultWarning, ...] = ()
    log: str | None = None
    run: JsonObject | None = None
    remote: JsonObject | None = None
    extra: JsonObject = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: object, where: str) -> ActionResult:
        """The result an action record holds (``obj``, parsed JSON); ``where`` names the record
        in messages (``action record sha256:...``).

        Raises:
            IntegrityError: not an action record: a field is missing or of another type (the
                message names the record, the field and what was expected).
        """
        doc = _object(obj, where, "the record")
        outputs = doc.get("outputs")
        if not isinstance(outputs, list):
            raise _wrong(where, "outputs", outputs, "a list")
        hermetic = doc.get("hermetic")
        if hermetic is not None and not isinstance(hermetic, bool):
            raise _wrong(where, "hermetic", hermetic, "a boolean")
        warnings = doc.get("warnings")
        if warnings is not None and not isinstance(warnings, list):
            raise _wrong(where, "warnings", warnings, "a list")
        log = doc.get("log")
        if log is not None and not isinstance(log, str):
            raise _wrong(where, "log", log, "a digest (a string)")
        run, remote = doc.get("run"), doc.get("remote")
        extra = _extra(doc, _RESULT_KEYS)
        if warnings == []:  # never written so, but kept as read
            extra["warnings"] = warnings
        return cls(
            key=_str(doc, "key", where, "key"),
            builder=_str(doc, "builder", where, "builder"),
            name=_str(doc, "name", where, "name"),
            outputs=tuple(
                ActionOutput.from_json(o, f"{where}: outputs[{i}]") for i, o in enumerate(outputs)
            ),
            metadata=_object(doc.get("metadata"), where, "metadata"),
            hermetic=hermetic,
            warnings=tuple(
                ResultWarning.from_json(w, f"{where}: warnings[{i}]")
                for i, w in enumerate(warnings or ())
            ),
            log=log,
            run=None if run is None else _object(run, where, "run"),
            remote=None if remote is None else _object(remote, where, "remote"),
            extra=extra,
        )

    def to_json(self) -> dict[str, JsonValue]:
        """The record (the JSON object :meth:`from_json` read, field for field): ``{"key",
        "builder", "name", "outputs", "metadata"[, "hermetic"][, "warnings"][, "log"][,
        "run"][, "remote"]}`` and the extra fields (an empty ``warnings`` is written only
        when it was read so)."""
        doc: dict[str, JsonValue] = {
            "key": self.key,
            "builder": self.builder,
            "name": self.name,
            "outputs": [o.to_json() for o in self.outputs],
            "metadata": dict(self.metadata),
        }
        if self.hermetic is not None:
            doc["hermetic"] = self.hermetic
        if self.warnings:
            doc["warnings"] = [w.to_json() for w in self.warnings]
        if self.log is not None:
            doc["log"] = self.log
        if self.run is not None:
            doc["run"] = dict(self.run)
        if self.remote is not None:
            doc["remote"] = dict(self.remote)
        return {**doc, **self.extra}
