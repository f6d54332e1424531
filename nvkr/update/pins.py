"""What ``nvkr lock --update`` is asked and what it finds: the request, the sources it
selects, and each pin with every place its version is written (a ``vars`` string a URL is
templated from, a pypi ``version``, an apt ``packages`` entry; in the recipe, a layer it extends
or an overlay), through the recipe's location map; the plan's shapes (:class:`Change`,
:class:`UpdatePlan`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nvkr.errors import RecipeError, UsageError
from nvkr.recipe.loader import LoadedRecipe
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import AptSource, PypiSource, UrlSource
from nvkr.recipe.yamlsource import Location
from nvkr.update.edit import Edit
from nvkr.update.upstreams import (
    Upstream,
    pypi_upstream,
    url_upstream,
)

_VAR_REF = re.compile(r"\{\{\s*vars\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
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


# -- which sources ------------------------------------------------------------------------------
def selection(request: UpdateRequest, variants: list[Variant]) -> dict[str, set[str] | None]:
    """``{source: packages or None (all)}``; empty for "every source"."""
    known: dict[str, Any] = {}
    for v in variants:
        for name, source in v.recipe.sources.items():
            known.setdefault(name, source)
    wanted: dict[str, set[str] | None] = {}
    for item in request.sources:
        name, sep, package = item.partition(":")
        if name not in known:
            raise UsageError(
                f"--update: the recipe has no source {name!r}",
                hint=f"sources: {', '.join(sorted(known))}",
            )
        if sep:
            if not isinstance(known[name], AptSource):
                raise UsageError(
                    f"--update {item}: {name!r} is not an apt source; NAME:PACKAGE names one "
                    "package of an apt source"
                )
            packages = {p for v in variants for p in _packages(v, name)}
            if package not in packages:
                raise UsageError(
                    f"--update {item}: apt source {name!r} pins no package {package!r}",
                    hint=f"it pins: {', '.join(sorted(packages)) or '(nothing)'}",
                )
            if name not in wanted:
                wanted[name] = {package}
            elif (chosen := wanted[name]) is not None:
                chosen.add(package)
        else:
            wanted[name] = None
    if request.to is not None:
        if not wanted:
            raise UsageError(
                "--to needs the sources it applies to",
                hint="e.g. nvkr lock --update kubelet --to 1.36.3",
            )
        for name, chosen_packages in wanted.items():
            if isinstance(known[name], AptSource) and (
                chosen_packages is None or len(chosen_packages) != 1
            ):
                raise UsageError(
                    f"--to with apt source {name!r} needs one package: --update {name}:PACKAGE"
                )
    return wanted


def _packages(variant: Variant, name: str) -> list[str]:
    source = variant.recipe.sources.get(name)
    return sorted(source.packages) if isinstance(source, AptSource) else []


# -- where each pin is written --------------------------------------------------------------------
def _value_location(variant: Variant, path: tuple[str | int, ...]) -> tuple[Location, str] | None:
    """The location a value is written at, following ``"{{ vars.X }}"`` to the var."""
    loc = variant.locations.get(path)
    if loc is None:
        return None
    m = _VAR_REF.fullmatch(loc.text.strip())
    if m:
        var = variant.locations.get(("vars", m[1]))
        return (var, f"vars.{m[1]}") if var is not None else None
    return loc, ".".join(str(p) for p in path)


class Collector:
    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit
        self.pins: dict[tuple[Path, int, int], Pin] = {}
        self.notes: dict[str, str] = {}
        self.apt: dict[AptQuery, tuple[AptSource, set[str]]] = {}

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

    def url(self, name: str, source: UrlSource, variant: Variant) -> None:
        loc = variant.locations.get(("sources", name, "url"))
        template = loc.text if loc is not None else source.url
        for var in _VAR_REF.findall(template):
            value = variant.recipe.vars.get(var)
            if not value:
                continue
            upstream = url_upstream(source.url, value)
            var_loc = variant.locations.get(("vars", var))
            if upstream is not None and var_loc is not None:
                self.add(var_loc, f"vars.{var}", "upstream", PinUse(name, variant, upstream))
                return
        self.skip(
            name,
            f"its URL {source.url} is not a dl.k8s.io release or GitHub release asset whose "
            "version comes from a var",
        )

    def pypi(self, name: str, source: PypiSource, variant: Variant) -> None:
        upstream = pypi_upstream(source.pypi, source.index)
        if upstream is None:
            self.skip(
                name, f"its index {source.index} publishes no release listing (PyPI JSON API)"
            )
            return
        found = _value_location(variant, ("sources", name, "version"))
        if found is None:
            self.skip(name, "cannot tell where its version is written")
            return
        self.add(found[0], found[1], "upstream", PinUse(name, variant, upstream))

    def apt_source(
        self, name: str, source: AptSource, variant: Variant, packages: set[str] | None, base: Path
    ) -> None:
        spec = source.model_dump(exclude_none=True)
        spec.pop("packages", None)
        query = AptQuery(name, json.dumps(spec, sort_keys=True), base)
        for pkg in sorted(source.packages):
            if packages is not None and pkg not in packages:
                continue
            found = _value_location(variant, ("sources", name, "packages", pkg))
            if found is None:
                continue
            entry = self.apt.setdefault(query, (source, set()))
            entry[1].add(pkg)
            # a package the request names is an error to leave alone; one of a whole source not
            use = PinUse(name, variant, query, pkg)
            self.add(found[0], found[1], "debian", use, named=packages is not None)


def collect_pins(
    loaded: LoadedRecipe, variants: list[Variant], wanted: dict[str, set[str] | None]
) -> Collector:
    c = Collector(explicit=bool(wanted))
    for variant in variants:
        for name, source in sorted(variant.recipe.sources.items()):
            if wanted and name not in wanted:
                continue
            if isinstance(source, UrlSource):
                c.url(name, source, variant)
            elif isinstance(source, PypiSource):
                c.pypi(name, source, variant)
            elif isinstance(source, AptSource):
                dirs = variant.source_dirs or loaded.source_dirs
                base = Path(dirs.get(name, Path(loaded.path).parent))
                c.apt_source(name, source, variant, wanted.get(name), base)
            else:
                kind = type(source).__name__.removesuffix("Source").lower()
                c.skip(name, f"a {kind} source has no upstream listing")
    return c
