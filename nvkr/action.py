"""Actions: one build step of a plan and its action key.

The planner (:mod:`nvkr.plan`) makes them, builders (:mod:`nvkr.builders`) read them at build
time and the executor, cache and store address results by their key. An action key is the
``sha256:<hex>`` of the canonical JSON of the builder name and version, the action's params, its
input digests (source blobs and the keys of the actions it reads), the tool versions and the
epoch (osbuild's stage id, in spirit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from nvkr.canonical import digest_json
from nvkr.errors import BuildError

if TYPE_CHECKING:
    from nvkr.builders import ResolvedSource


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
    #: builder's :attr:`~nvkr.builders.ActionSpec.hermetic`) and every dependency's; outside the
    #: key, so a result that is not stays in the local store
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
        from nvkr.actionrefs import ref_of

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
