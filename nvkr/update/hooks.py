"""The ``nvkr lock --update`` hook of a source kind, and the steps that ask it: which sources a
request selects (:func:`selection`), the pins each source's hook finds (:func:`collect_pins`)
and the value a use reads after the edit (:func:`pin_value`).

A kind names its hook on its :class:`~nvkr.fetch.kind.SourceKind`: ``update``, an
:class:`UpdateHook` as ``module:Class``, imported only when ``lock --update`` runs (the built-in
ones are :mod:`nvkr.update.kinds`); None when the kind has no upstream nvkr can ask, and then its
sources are left alone with a note. :func:`hook_of` finds a source's hook.
"""

from __future__ import annotations

import abc
import importlib
from pathlib import Path
from typing import Any

from nvkr.errors import UsageError
from nvkr.fetch.api import fetcher_of
from nvkr.fetch.context import FetchContext
from nvkr.recipe.loader import LoadedRecipe
from nvkr.recipe.matrix import Variant
from nvkr.update.edit import Edit
from nvkr.update.pins import Collector, Pin, PinUse, UpdateRequest
from nvkr.update.targets import Listings


class UpdateHook(abc.ABC):
    """What ``lock --update`` asks of a source kind with an upstream listing. A subclass
    implements :meth:`collect`; the rest default to a kind pinned by one version."""

    @abc.abstractmethod
    def collect(
        self,
        pins: Collector,
        name: str,
        source: Any,
        variant: Variant,
        packages: set[str] | None,
        base_dir: Path,
    ) -> None:
        """Add each place ``variant``'s source ``name`` writes a version to ``pins``
        (:meth:`Collector.add`), or leave it alone with a note (:meth:`Collector.skip`).
        ``packages``: those the request names (``--update NAME:PACKAGE``), None for all."""

    def packages(self, source: Any) -> list[str] | None:
        """The packages ``source`` pins one by one, which ``--update NAME:PACKAGE`` names;
        None (default): a kind pinned as a whole."""
        return None

    def pin_value(self, source: Any, use: PinUse) -> str | None:
        """The value ``use`` reads from ``source`` itself (default: its ``version``)."""
        return getattr(source, "version", None)

    def version_edits(self, pin: Pin, new: str, listings: Listings) -> list[Edit]:
        """The edits that follow ``pin`` moving to ``new`` in the sources of this kind that
        use it (default: none)."""
        return []

    def moved_edits(
        self, ctx: FetchContext, variants: list[Variant], moved: set[tuple[str, str]]
    ) -> list[Edit]:
        """The edits that follow once the versions moved, read from the edited recipe's
        ``variants``; ``moved``: ``(variant id, source name)`` of each moved source of this kind
        (default: none)."""
        return []


_HOOKS: dict[str, UpdateHook] = {}


def hook_of(source: Any) -> UpdateHook | None:
    """The ``lock --update`` hook of ``source``'s kind; None when the kind has none."""
    ref = fetcher_of(source).update
    if ref is None:
        return None
    hook = _HOOKS.get(ref)
    if hook is None:
        module, _, cls = ref.partition(":")
        hook = _HOOKS[ref] = getattr(importlib.import_module(module), cls)()
    return hook


def _pinned_packages(source: Any) -> list[str] | None:
    hook = hook_of(source)
    return hook.packages(source) if hook is not None else None


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
            if _pinned_packages(known[name]) is None:
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
            if _pinned_packages(known[name]) is not None and (
                chosen_packages is None or len(chosen_packages) != 1
            ):
                raise UsageError(
                    f"--to with apt source {name!r} needs one package: --update {name}:PACKAGE"
                )
    return wanted


def _packages(variant: Variant, name: str) -> list[str]:
    source = variant.recipe.sources.get(name)
    return (_pinned_packages(source) if source is not None else None) or []


# -- the pins ------------------------------------------------------------------------------------
def collect_pins(
    loaded: LoadedRecipe, variants: list[Variant], wanted: dict[str, set[str] | None]
) -> Collector:
    """Every pin of the ``wanted`` sources (all when empty), each source's found by its kind's
    hook; a source whose kind has none is left alone with a note."""
    c = Collector(explicit=bool(wanted))
    for variant in variants:
        for name, source in sorted(variant.recipe.sources.items()):
            if wanted and name not in wanted:
                continue
            hook = hook_of(source)
            if hook is None:
                c.skip(name, f"a {fetcher_of(source).kind} source has no upstream listing")
                continue
            dirs = variant.source_dirs or loaded.source_dirs
            base = Path(dirs.get(name, Path(loaded.path).parent))
            hook.collect(c, name, source, variant, wanted.get(name), base)
    return c


def pin_value(variant: Variant, pin: Pin, use: PinUse) -> str | None:
    """The value ``use`` of ``variant`` reads for ``pin``: the var, else its source's own."""
    if pin.what.startswith("vars."):
        return variant.recipe.vars.get(pin.what[len("vars.") :])
    source = variant.recipe.sources.get(use.source)
    hook = hook_of(source) if source is not None else None
    return hook.pin_value(source, use) if hook is not None else getattr(source, "version", None)
