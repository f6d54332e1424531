"""The ``nvkr lock --update`` hooks of the built-in source kinds (each named by its kind's
``update``, :mod:`nvkr.fetch.kinds`): url (the var a dl.k8s.io or GitHub release URL is
templated from; an inline digest read again from the checksum file beside the new URL), pypi
(its ``version``; the wheel's ``sha256`` and ``member`` follow) and apt (each pinned package).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nvkr.errors import FetchError
from nvkr.fetch.checksums import parse_checksum_file
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import fetch_text, url_filename
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import PypiSource, UrlSource
from nvkr.update.edit import Edit
from nvkr.update.hooks import UpdateHook
from nvkr.update.pins import DIGESTS, VAR_REF, AptQuery, Collector, Pin, PinUse, value_location
from nvkr.update.targets import Listings, digest_location
from nvkr.update.upstreams import pypi_upstream, pypi_wheel, url_upstream


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
        """The inline sha256/sha512 of each moved url source, from the checksum file published
        next to its new URL (``<url>.sha256``)."""
        edits: list[Edit] = []
        for variant in variants:
            for vid, name in sorted(moved):
                if vid != variant.id:
                    continue
                source = variant.recipe.sources.get(name)
                if not isinstance(source, UrlSource):
                    continue
                for algo in DIGESTS:
                    pinned = getattr(source, algo)
                    if pinned is None:
                        continue
                    loc, what = digest_location(variant, name, algo, pinned)
                    url = f"{source.url}.{algo}"
                    try:
                        text = fetch_text(
                            ctx.mirrors.rewrite(url),
                            what=f"source {name!r}: checksum file",
                            origin=url,
                        )
                        _, hexdigest = parse_checksum_file(
                            text, source.filename or url_filename(source.url), algo, url=url
                        )
                    except FetchError as e:
                        raise FetchError(
                            f"source {name!r} pins its {algo} inline; the new version's is read "
                            f"from the checksum file beside it, which failed: {e.message}",
                            hint=f"replace the inline {algo} with a checksumUrl, or pin it by hand",
                        ) from e
                    edits.append(Edit(loc, what, loc.text, hexdigest))
        return edits


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
        """The wheel's ``sha256`` (PyPI's for the file matching the pinned one) and a ``member``
        naming the old version's ``.data`` directory."""
        edits: list[Edit] = []
        for use in pin.uses:
            source = use.variant.recipe.sources[use.source]
            assert isinstance(source, PypiSource)
            up = use.upstream
            releases = listings.pypi.get(getattr(up, "json_url", ""), {})
            wheel = pypi_wheel(releases, pin.current, new, source.sha256)
            if wheel is None:
                raise FetchError(
                    f"source {use.source!r} ({use.variant.id}): PyPI lists no wheel of "
                    f"{source.pypi} {new} matching the pinned one of {pin.current} "
                    f"(sha256 {source.sha256[:12]}…, platform {source.platform or 'any'})",
                    hint="pin it by hand (version and sha256), then run `nvkr lock`",
                )
            loc, what = digest_location(use.variant, use.source, "sha256", source.sha256)
            edits.append(Edit(loc, what, loc.text, wheel[1]))
            member = use.variant.locations.get(("sources", use.source, "member"))
            if member is not None and f"-{pin.current}.data/" in member.text:
                edits.append(
                    Edit(
                        member,
                        f"sources.{use.source}.member",
                        member.text,
                        member.text.replace(f"-{pin.current}.data/", f"-{new}.data/"),
                    )
                )
        return edits


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
