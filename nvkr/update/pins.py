"""What ``nvkr lock --update`` is asked and what it finds: the request, each pin with every
place its version is written (a ``vars`` string a URL is templated from, a pypi ``version``, an
apt ``packages`` entry; in the recipe, a layer it extends or an overlay), found through the
recipe's location map by each source kind's hook (:mod:`nvkr.update.hooks`) into a
:class:`Collector`; the plan's shapes (:class:`Change`, :class:`UpdatePlan`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nvkr.errors import RecipeError, UsageError
from nvkr.recipe.loader import LoadedRecipe
from nvkr.recipe.matrix import Variant
from nvkr.recipe.yamlsource import Location
from nvkr.update.edit import Edit
from nvkr.update.upstreams import Upstream

VAR_REF = re.compile(r"\{\{\s*vars\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
DIGESTS = ("sha256", "sha512")
UPDATABLE = "url sources from dl.k8s.io or GitHub releases templated from a var, pypi and apt"


@dataclass(frozen=True)
class UpdateRequest:
    """What to update.

    Attributes:
        sources: source names (``kubelet``), an apt source (``node-packages``: all its packages)
            or one package of it (``node-packages:containerd``); empty: every source that has
            an upstream nvkr can ask.
        to: the exact version to pin (also older, also a pre-release); needs ``sources``.
        pre: allow pre-releases.
    """

    sources: tuple[str, ...] = ()
    to: str | None = None
    pre: bool = False


@dataclass(frozen=True)
class AptQuery:
    """One apt directory's worth of questions: a source's repositories for one arch."""

    name: str
    spec: str  # canonical JSON of the source without its packages
    base_dir: Path


@dataclass
class PinUse:
    """One source of one variant reading a pin."""

    source: str
    variant: Variant
    upstream: Upstream | AptQuery
    package: str | None = None


@dataclass
class Pin:
    location: Location
    what: str  # the value's path: vars.kubeletVersion, sources.kubectl.version, ...
    kind: Literal["upstream", "debian"]
    uses: list[PinUse] = field(default_factory=list)

    @property
    def current(self) -> str:
        return self.location.text

    @property
    def where(self) -> str:
        return f"{self.location.file}:{self.location.line}"


@dataclass(frozen=True)
class Change:
    """One pin moved: ``sources`` (sharing it) go from ``old`` to ``new`` at ``where``
    (``FILE:LINE``); ``package`` for an apt pin."""

    sources: tuple[str, ...]
    package: str | None
    old: str
    new: str
    where: str

    def __str__(self) -> str:
        names = ", ".join(self.sources)
        if self.package:
            return f"{names}: {self.package} {self.old} -> {self.new} ({self.where})"
        return f"{names}: {self.old} -> {self.new} ({self.where})"


@dataclass
class UpdatePlan:
    """The result of :func:`plan_update`.

    Attributes:
        changes: the pins that move, in file/line order.
        edits: every scalar edit (versions, wheel digests and members, inline url digests).
        files: the new bytes of each edited file (keyed by the path as the loader reached it).
        originals: the bytes each edited file had when planned.
        loaded: the edited recipe, loaded from ``files`` (None when nothing changes).
        notes: sources left alone and why.
    """

    changes: list[Change] = field(default_factory=list)
    edits: list[Edit] = field(default_factory=list)
    files: dict[Path, bytes] = field(default_factory=dict)
    originals: dict[Path, bytes] = field(default_factory=dict)
    loaded: LoadedRecipe | None = None
    notes: list[str] = field(default_factory=list)


# -- where each pin is written --------------------------------------------------------------------
def value_location(variant: Variant, path: tuple[str | int, ...]) -> tuple[Location, str] | None:
    """The location a value is written at, following ``"{{ vars.X }}"`` to the var."""
    loc = variant.locations.get(path)
    if loc is None:
        return None
    m = VAR_REF.fullmatch(loc.text.strip())
    if m:
        var = variant.locations.get(("vars", m[1]))
        return (var, f"vars.{m[1]}") if var is not None else None
    return loc, ".".join(str(p) for p in path)


class Collector:
    """The pins the sources' hooks found (by place), the notes on sources left alone, and the
    apt questions to ask (each with its source and packages)."""

    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit
        self.pins: dict[tuple[Path, int, int], Pin] = {}
        self.notes: dict[str, str] = {}
        self.apt: dict[AptQuery, tuple[Any, set[str]]] = {}

    def skip(self, name: str, why: str, *, named: bool | None = None) -> None:
        """Leave ``name`` alone with a note; an error when the request named it (``named``:
        whether it did, default: whether the request named any source)."""
        if self.explicit if named is None else named:
            raise UsageError(f"--update {name}: {why}", hint=f"--update knows {UPDATABLE}")
        self.notes.setdefault(name, f"{name}: left alone ({why})")

    def add(
        self,
        loc: Location,
        field_: str,
        kind: Literal["upstream", "debian"],
        use: PinUse,
        *,
        named: bool | None = None,
    ) -> None:
        if "{{" in loc.text or "{%" in loc.text:
            # one package of an apt source is left alone, the rest of its source still moves
            name = f"{use.source}:{use.package}" if use.package else use.source
            why = f"{loc.file}:{loc.line}: {field_} is a template ({loc.text!r})"
            self.skip(name, why, named=named)
            return
        key = (loc.file.resolve(), loc.line, loc.column)
        pin = self.pins.setdefault(key, Pin(loc, field_, kind))
        if pin.kind != kind:
            raise RecipeError(
                f"{pin.where}: {pin.what} pins both a package and an upstream release "
                f"({use.source}); give each its own value"
            )
        pin.uses.append(use)
