"""The ``nvkr lock --update`` hooks of the built-in source kinds (each named by its kind's
``update``, :mod:`nvkr.fetch.kinds`): url (the var a dl.k8s.io or GitHub release URL is
templated from; an inline digest read again from the checksum file beside the new URL), pypi
(its ``version``; the wheel's ``sha256`` and ``member`` follow) and apt (each pinned package).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nvkr.fetch.context import FetchContext
from nvkr.recipe.matrix import Variant
from nvkr.update.edit import Edit
from nvkr.update.hooks import UpdateHook
from nvkr.update.pins import VAR_REF, AptQuery, Collector, Pin, PinUse, value_location
from nvkr.update.targets import Listings, pypi_edits, url_digest_edits
from nvkr.update.upstreams import pypi_upstream, url_upstream


class UrlUpdate(UpdateHook):
    """A url source moves with the var its URL is templated from (a dl.k8s.io or GitHub
    release); an inline digest follows from the checksum file published beside the new URL."""

    def collect(
        self,
        pins: Collector,
        name: str,
        source: Any,
        variant: Variant,
        packages: set[str] | None,
        base_dir: Path,
    ) -> None:
        loc = variant.locations.get(("sources", name, "url"))
        template = loc.text if loc is not None else source.url
        for var in VAR_REF.findall(template):
            value = variant.recipe.vars.get(var)
            if not value:
                continue
            upstream = url_upstream(source.url, value)
            var_loc = variant.locations.get(("vars", var))
            if upstream is not None and var_loc is not None:
                pins.add(var_loc, f"vars.{var}", "upstream", PinUse(name, variant, upstream))
                return
        pins.skip(
            name,
            f"its URL {source.url} is not a dl.k8s.io release or GitHub release asset whose "
            "version comes from a var",
        )

    def moved_edits(
        self, ctx: FetchContext, variants: list[Variant], moved: set[tuple[str, str]]
    ) -> list[Edit]:
        return url_digest_edits(ctx, variants, moved)


class PypiUpdate(UpdateHook):
    """A pypi source moves its ``version`` to a release of its index (PyPI's JSON API); the
    wheel's ``sha256`` and a ``member`` naming the version follow."""

    def collect(
        self,
        pins: Collector,
        name: str,
        source: Any,
        variant: Variant,
        packages: set[str] | None,
        base_dir: Path,
    ) -> None:
        upstream = pypi_upstream(source.pypi, source.index)
        if upstream is None:
            pins.skip(
                name, f"its index {source.index} publishes no release listing (PyPI JSON API)"
            )
            return
        found = value_location(variant, ("sources", name, "version"))
        if found is None:
            pins.skip(name, "cannot tell where its version is written")
            return
        pins.add(found[0], found[1], "upstream", PinUse(name, variant, upstream))

    def version_edits(self, pin: Pin, new: str, listings: Listings) -> list[Edit]:
        return pypi_edits(pin, new, listings)


class AptUpdate(UpdateHook):
    """An apt source moves each pinned package to the newest version its repositories serve
    (``apt-cache madison`` behind the source's own signed metadata)."""

    def collect(
        self,
        pins: Collector,
        name: str,
        source: Any,
        variant: Variant,
        packages: set[str] | None,
        base_dir: Path,
    ) -> None:
        spec = source.model_dump(exclude_none=True)
        spec.pop("packages", None)
        query = AptQuery(name, json.dumps(spec, sort_keys=True), base_dir)
        for pkg in sorted(source.packages):
            if packages is not None and pkg not in packages:
                continue
            found = value_location(variant, ("sources", name, "packages", pkg))
            if found is None:
                continue
            entry = pins.apt.setdefault(query, (source, set()))
            entry[1].add(pkg)
            # a package the request names is an error to leave alone; one of a whole source not
            use = PinUse(name, variant, query, pkg)
            pins.add(found[0], found[1], "debian", use, named=packages is not None)

    def packages(self, source: Any) -> list[str] | None:
        return sorted(source.packages)

    def pin_value(self, source: Any, use: PinUse) -> str | None:
        value: str | None = source.packages.get(use.package or "")
        return value
