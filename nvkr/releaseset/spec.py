"""The release-set action's params (the spec) as :func:`nvkr.releaseset.assemble` reads them.

First stop in :mod:`nvkr.releaseset`: :mod:`nvkr.plan` derives the spec from the recipe, and
before anything is packed its name is checked (:func:`check_name`, also used by
:func:`nvkr.releaseset.materialize` for ``dist/<name>``), its artifacts are grouped by action key
with each group's identity and ``kind`` (:data:`KINDS`) checked, and its ``variants`` give the
order every list of variants in the set follows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from nvkr.action import RELEASED_KINDS, ReleaseKind
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError

# A directory name and an OCI ref.name at once (image-spec annotations.md ref grammar, minus '/').
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_name(name: Any) -> str:
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


class _VariantOrder:
    """Sort key for variants: their place in ``spec["variants"]`` (the recipe's matrix order),
    then canonical JSON for any variant not listed there (and ``None``, variant-independent)."""

    def __init__(self, variants: list[Any]) -> None:
        self._rank = {canonical_json(v): i for i, v in enumerate(variants)}

    def __call__(self, variant: Any) -> tuple[int, bytes]:
        raw = canonical_json(variant)
        return self._rank.get(raw, len(self._rank)), raw


#: How a release set holds an artifact (the spec's ``kind``, from the builder's ``release_kind``).
KINDS: Final = tuple(k.value for k in RELEASED_KINDS)


def _group_by_action(spec: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for art in spec.get("artifacts", []):
        entry = dict(art)
        entry["kind"] = (
            entry.get("kind") or ReleaseKind.BINARY.value
        )  # specs from before kinds hold binaries
        groups.setdefault(entry["actionKey"], []).append(entry)
    for key, members in groups.items():
        first = members[0]
        for field in (
            "kind",
            "builder",
            "builderVersion",
            "artifactType",
            "platform",
            "dependencies",
            "cToolchain",
        ):
            values = {canonical_json(m.get(field)) for m in members}
            if len(values) > 1:
                raise BuildError(
                    f"release set {spec['name']}: artifacts sharing action key {key} disagree on "
                    f"{field!r} ({first['name']} and others)",
                    hint="the plan gave one action two identities; this is a bug in nvkr, please report it",
                )
        if first["kind"] not in KINDS:
            raise BuildError(
                f"release set {spec['name']}: artifact {first['name']} has kind "
                f"{first['kind']!r}, expected one of {', '.join(KINDS)}",
                hint="this nvkr cannot put such an artifact into a release set",
            )
    return groups
