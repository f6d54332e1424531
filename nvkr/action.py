"""Actions: one build step of a plan and its action key, and the vocabulary around them: the
resolved source an action reads, the release kind of what it makes, the one output of a result
with a role.

The planner (:mod:`nvkr.plan`) makes them, builders (:mod:`nvkr.builders`) read them at build
time and the executor, cache and store address results by their key. An action key is the
``sha256:<hex>`` of the canonical JSON of the builder name and version, the action's params, its
input digests (source blobs and the keys of the actions it reads), the tool versions and the
epoch (osbuild's stage id, in spirit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.canonical import digest_json
from nvkr.errors import BuildError
from nvkr.fetch.entries import LockEntry

if TYPE_CHECKING:  # a type only: the recipe's models (pydantic) stay unloaded for a reader
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
    params: dict[str, Any]
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

    def to_json(self) -> dict[str, Any]:
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


def one_output(result: Mapping[str, Any], role: str, what: str) -> dict[str, Any]:
    """The single output of an action's result (a stored record: ``{"outputs": [{"role",
    "digest", "size", ...}], ...}``) with ``role``: the record's own dict, not a copy.

    Raises:
        BuildError: none or several (names ``what``, the role and the count): a result that is
            not what its builder writes.
    """
    found = [o for o in result.get("outputs") or [] if o.get("role") == role]
    if len(found) != 1:
        raise BuildError(
            f"{what}: expected exactly one output with role {role!r}, found {len(found)}"
        )
    out: dict[str, Any] = found[0]
    return out
