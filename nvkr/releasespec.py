"""The release-set spec: what the planner tells the release-set assembler, typed.

:mod:`nvkr.plan` derives a :class:`ReleaseSetSpec` from the recipe for each release set name and
stores it, as :meth:`ReleaseSetSpec.to_params`, in the params of that set's ``release-set``
action (so it is part of the action key: the canonical JSON of the params is what it always was,
and ``tests/golden/plan.json`` holds it). The ``release-set`` builder reads it back with
:meth:`ReleaseSetSpec.from_params` and hands it to :func:`nvkr.releaseset.assemble`; the build
record (:mod:`nvkr.releaseset.record`) and the provenance statements
(:mod:`nvkr.provenance`) read the same object.

The params' JSON shape (every key is written by the planner; a spec written before an artifact
had a ``kind`` holds binaries, and the other per-artifact keys may be left out by callers that
make a spec by hand)::

    {"name", "epoch": <seconds>, "recipe": {"path", "digest"}, "lockfile": {"path", "digest"},
     "nvkrVersion", "variants": [{"gpu", "kubernetes", "arch"}, ...],
     "artifacts": [{"name", "kind", "actionKey", "sbomActionKey", "builder", "builderVersion",
                    "variant", "platform": {"os", "architecture"} | null, "artifactType",
                    "dependencies": [ResourceDescriptor, ...], <the builder's release_fields>}],
                    # release fields the assembler reads: "cToolchain" (a cgo binary's) and
                    # "attestations": [{"role", "predicateType"}] (SpecArtifact.attestations)
     "machineImages": [name, ...], "clusterRelease": {"kubernetes", "charts", "images"} | null,
     "nodePoolReleases": [{"name", "machineImage", "artifacts", "variant"}, ...]}

This module imports no builder, store or recipe model: the planner, the assembler and the
provenance code all depend on it, and it on none of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nvkr.action import RELEASED_KINDS, ReleaseKind
from nvkr.errors import BuildError
from nvkr.jsondoc import JsonObject, JsonValue, json_kind

# A directory name and an OCI ref.name at once (image-spec annotations.md ref grammar, minus '/').
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(name: object) -> str:
    """A release set name usable as ``dist/<name>`` and as ``ref.name``.

    Raises:
        BuildError: empty, not a string, has '/' or starts with '.' or '-'.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name) or ".." in name:
        raise BuildError(
            f"release set name {name!r} is not usable as a directory and OCI ref.name",
            hint="use letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    return name


#: How a release set holds an artifact (the spec's ``kind``, from the builder's ``release_kind``).
KINDS: Final = tuple(k.value for k in RELEASED_KINDS)

#: The variant axes of a cell: ``{"gpu": ..., "kubernetes": ..., "arch": ...}``.
Axes = Mapping[str, str]


@dataclass(frozen=True)
class FileRef:
    """A file the build read, as provenance names it: its recorded ``path`` and ``digest``."""

    path: str
    digest: str

    def to_json(self) -> JsonObject:
        return {"path": self.path, "digest": self.digest}


@dataclass(frozen=True)
class Attestation:
    """An output of an artifact's action that the release set attaches to the artifact as an
    in-toto statement of its own (``role``: the output's role, ``predicate_type``: what its
    statement must say it is)."""

    role: str
    predicate_type: str

    def to_json(self) -> JsonObject:
        return {"role": self.role, "predicateType": self.predicate_type}


@dataclass(frozen=True)
class SpecArtifact:
    """One artifact of one variant in the set (several may share an action: one per variant a
    variant-independent action serves, or per name an action is built under).

    ``extra`` holds the builder's :meth:`~nvkr.builders.api.Builder.release_fields`
    (``cToolchain`` of a cgo binary), verbatim.
    """

    name: str
    action_key: str
    builder: str
    builder_version: str
    kind: ReleaseKind = ReleaseKind.BINARY
    sbom_action_key: str | None = None
    variant: Axes | None = None
    platform: Mapping[str, str] | None = None
    artifact_type: str | None = None
    dependencies: tuple[JsonObject, ...] = ()
    extra: JsonObject = field(default_factory=dict)

    @property
    def c_toolchain(self) -> JsonObject | None:
        """``{"cc", "packages": {name: version}}`` of a cgo binary (its provenance names the
        compiler of its tools tree), else None."""
        value = self.extra.get("cToolchain")
        return value if isinstance(value, Mapping) else None

    @property
    def attestations(self) -> tuple[Attestation, ...]:
        """The in-toto statements among the action's outputs that the release set attaches to
        the artifact as attestations of their own (a Secure Boot image's PCR predictions), from
        the builder's ``attestations`` release field (``[{"role", "predicateType"}]``); () for
        none.

        Raises:
            BuildError: the field is not a list of such objects.
        """
        value = self.extra.get("attestations")
        if value is None:
            return ()
        items = value if isinstance(value, Sequence) and not isinstance(value, str) else None
        found: list[Attestation] = []
        for i, item in enumerate(items if items is not None else [value]):
            role = item.get("role") if isinstance(item, Mapping) else None
            ptype = item.get("predicateType") if isinstance(item, Mapping) else None
            if items is None or not isinstance(role, str) or not isinstance(ptype, str):
                raise BuildError(
                    f"artifact {self.name} ({self.action_key}): attestations[{i}] is "
                    f"{json_kind(item)}, expected {{role, predicateType}} strings",
                    hint="the release-set action's params are the planner's; this is a bug in "
                    "nvkr or an edited plan, please report it",
                )
            found.append(Attestation(role, ptype))
        return tuple(found)

    def identity(self) -> dict[str, JsonValue]:
        """What every artifact sharing this one's action must agree on, by its params key."""
        return {
            "kind": self.kind.value,
            "builder": self.builder,
            "builderVersion": self.builder_version,
            "artifactType": self.artifact_type,
            "platform": dict(self.platform) if self.platform is not None else None,
            "dependencies": [dict(d) for d in self.dependencies],
            "cToolchain": self.c_toolchain,
            "attestations": [a.to_json() for a in self.attestations],
        }

    def to_params(self) -> JsonObject:
        return {
            "name": self.name,
            "kind": self.kind.value,
            "actionKey": self.action_key,
            "sbomActionKey": self.sbom_action_key,
            "builder": self.builder,
            "builderVersion": self.builder_version,
            "variant": dict(self.variant) if self.variant is not None else None,
            "platform": dict(self.platform) if self.platform is not None else None,
            "artifactType": self.artifact_type,
            "dependencies": [dict(d) for d in self.dependencies],
            **self.extra,
        }


@dataclass(frozen=True)
class ClusterReleaseSpec:
    """The recipe's ``releaseSet.clusterRelease``: the Kubernetes release and the names of the
    charts and images a cluster of it runs (resolved to descriptors in the metadata)."""

    kubernetes: str
    charts: tuple[str, ...] = ()
    images: tuple[str, ...] = ()

    def to_json(self) -> JsonObject:
        return {
            "kubernetes": self.kubernetes,
            "charts": list(self.charts),
            "images": list(self.images),
        }


@dataclass(frozen=True)
class NodePoolReleaseSpec:
    """One ``releaseSet.nodePoolReleases`` entry of one variant: the machine image and artifacts
    (by name) a node pool of that variant runs."""

    name: str
    machine_image: str | None = None
    artifacts: tuple[str, ...] = ()
    variant: Axes | None = None

    def to_json(self) -> JsonObject:
        return {
            "name": self.name,
            "machineImage": self.machine_image,
            "artifacts": list(self.artifacts),
            "variant": dict(self.variant) if self.variant is not None else None,
        }


#: the artifact keys the spec itself defines; any other key is a builder's release field
_ARTIFACT_KEYS: Final = frozenset(
    {"name", "kind", "actionKey", "sbomActionKey", "builder", "builderVersion", "variant",
     "platform", "artifactType", "dependencies"}
)  # fmt: skip


@dataclass(frozen=True)
class ReleaseSetSpec:
    """The params of a ``release-set`` action (module docstring for the JSON shape)."""

    name: str
    epoch: int
    recipe: FileRef
    lockfile: FileRef
    nvkr_version: str
    variants: tuple[Axes, ...] = ()
    artifacts: tuple[SpecArtifact, ...] = ()
    machine_images: tuple[str, ...] = ()
    cluster_release: ClusterReleaseSpec | None = None
    node_pool_releases: tuple[NodePoolReleaseSpec, ...] = ()

    def to_params(self) -> JsonObject:
        """The action's params: the JSON the planner has always written (same keys, same
        order), so the release-set action key does not move."""
        return {
            "name": self.name,
            "epoch": self.epoch,
            "recipe": self.recipe.to_json(),
            "lockfile": self.lockfile.to_json(),
            "nvkrVersion": self.nvkr_version,
            "variants": [dict(v) for v in self.variants],
            "artifacts": [a.to_params() for a in self.artifacts],
            "machineImages": list(self.machine_images),
            "clusterRelease": (
                self.cluster_release.to_json() if self.cluster_release is not None else None
            ),
            "nodePoolReleases": [p.to_json() for p in self.node_pool_releases],
        }

    @classmethod
    def from_params(cls, params: Mapping[str, object]) -> ReleaseSetSpec:
        """Read a release-set action's params.

        Raises:
            BuildError: a name unusable as ``dist/<name>`` and ``ref.name``, an epoch that is no
                non-negative int, a kind that is no released kind, or any field of another type
                than the module docstring's shape; the message names the set, the field (as a
                params path, ``artifacts[2].actionKey``) and what was expected.
        """
        name = check_name(params.get("name"))
        read = _Reader(f"release set {name}")
        epoch = params.get("epoch")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise BuildError(
                f"release set {name}: epoch is {epoch!r}, expected seconds since 1970 (int)"
            )
        cluster = params.get("clusterRelease")
        return cls(
            name=name,
            epoch=epoch,
            recipe=read.file_ref(params, "recipe"),
            lockfile=read.file_ref(params, "lockfile"),
            nvkr_version=read.string(params, "nvkrVersion"),
            variants=tuple(read.axes(v, f"variants[{i}]") for i, v in enumerate(read.items(params, "variants"))),
            artifacts=tuple(
                read.artifact(a, f"artifacts[{i}]")
                for i, a in enumerate(read.items(params, "artifacts"))
            ),
            machine_images=read.names(params, "machineImages"),
            cluster_release=(
                None if cluster is None else read.cluster_release(cluster, "clusterRelease")
            ),
            node_pool_releases=tuple(
                read.node_pool(p, f"nodePoolReleases[{i}]")
                for i, p in enumerate(read.items(params, "nodePoolReleases"))
            ),
        )  # fmt: skip


class _Reader:
    """Typed reads of the params' fields, each failure naming the set, the path and what was
    expected."""

    def __init__(self, what: str) -> None:
        self.what = what

    def fail(self, path: str, value: object, expected: str) -> BuildError:
        return BuildError(
            f"{self.what}: {path} is {json_kind(value)}, expected {expected}",
            hint="the release-set action's params are the planner's; this is a bug in nvkr "
            "or an edited plan, please report it",
        )

    def obj(self, value: object, path: str) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            raise self.fail(path, value, "an object")
        return value

    def string(self, parent: Mapping[str, object], key: str, path: str = "") -> str:
        value = parent.get(key)
        if not isinstance(value, str):
            raise self.fail(path + key, value, "a string")
        return value

    def optional_string(self, parent: Mapping[str, object], key: str, path: str) -> str | None:
        value = parent.get(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(path + key, value, "a string or null")
        return value

    def items(self, parent: Mapping[str, object], key: str, path: str = "") -> list[object]:
        value = parent.get(key)
        if value is None:
            return []
        if not isinstance(value, list | tuple):
            raise self.fail(path + key, value, "a list")
        return list(value)

    def names(self, parent: Mapping[str, object], key: str, path: str = "") -> tuple[str, ...]:
        out = []
        for i, value in enumerate(self.items(parent, key, path)):
            if not isinstance(value, str):
                raise self.fail(f"{path}{key}[{i}]", value, "a string")
            out.append(value)
        return tuple(out)

    def axes(self, value: object, path: str) -> dict[str, str]:
        mapping = self.obj(value, path)
        for axis, v in mapping.items():
            if not isinstance(v, str):
                raise self.fail(f"{path}.{axis}", v, "a string")
        return {str(k): str(v) for k, v in mapping.items()}

    def optional_axes(self, value: object, path: str) -> dict[str, str] | None:
        return None if value is None else self.axes(value, path)

    def file_ref(self, parent: Mapping[str, object], key: str) -> FileRef:
        ref = self.obj(parent.get(key), key)
        return FileRef(self.string(ref, "path", f"{key}."), self.string(ref, "digest", f"{key}."))

    def json_object(self, value: object, path: str) -> JsonObject:
        mapping = self.obj(value, path)
        return {str(k): _json(v, f"{path}.{k}", self) for k, v in mapping.items()}

    def artifact(self, value: object, path: str) -> SpecArtifact:
        art = self.obj(value, path)
        at = f"{path}."
        kind = art.get("kind") or ReleaseKind.BINARY.value  # specs from before kinds: binaries
        if kind not in KINDS:
            raise BuildError(
                f"{self.what}: artifact {art.get('name')} has kind {kind!r}, expected one of "
                f"{', '.join(KINDS)}",
                hint="this nvkr cannot put such an artifact into a release set",
            )
        return SpecArtifact(
            name=self.string(art, "name", at),
            action_key=self.string(art, "actionKey", at),
            builder=self.string(art, "builder", at),
            builder_version=self.string(art, "builderVersion", at),
            kind=ReleaseKind(kind),
            sbom_action_key=self.optional_string(art, "sbomActionKey", at),
            variant=self.optional_axes(art.get("variant"), f"{at}variant"),
            platform=self.optional_axes(art.get("platform"), f"{at}platform"),
            artifact_type=self.optional_string(art, "artifactType", at),
            dependencies=tuple(
                self.json_object(d, f"{at}dependencies[{i}]")
                for i, d in enumerate(self.items(art, "dependencies", at))
            ),
            extra={
                str(k): _json(v, f"{at}{k}", self)
                for k, v in art.items()
                if k not in _ARTIFACT_KEYS
            },
        )

    def cluster_release(self, value: object, path: str) -> ClusterReleaseSpec:
        cluster = self.obj(value, path)
        at = f"{path}."
        return ClusterReleaseSpec(
            kubernetes=self.string(cluster, "kubernetes", at),
            charts=self.names(cluster, "charts", at),
            images=self.names(cluster, "images", at),
        )

    def node_pool(self, value: object, path: str) -> NodePoolReleaseSpec:
        pool = self.obj(value, path)
        at = f"{path}."
        return NodePoolReleaseSpec(
            name=self.string(pool, "name", at),
            machine_image=self.optional_string(pool, "machineImage", at),
            artifacts=self.names(pool, "artifacts", at),
            variant=self.optional_axes(pool.get("variant"), f"{at}variant"),
        )


def _json(value: object, path: str, reader: _Reader) -> JsonValue:
    """``value`` as a JSON value (what a params document can hold), or the reader's error."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json(v, f"{path}.{k}", reader) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_json(v, f"{path}[{i}]", reader) for i, v in enumerate(value)]
    raise reader.fail(path, value, "a JSON value")
