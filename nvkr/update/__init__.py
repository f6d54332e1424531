"""``nvkr lock --update``: move pins to what their upstreams publish now, then lock again.

Issue 7, item 4. Before the lock in the data flow: for each pinned source the recipe's location
map (:mod:`nvkr.recipe.yamlsource`) says where its version is written — a ``vars`` string the
source's URL is templated from (possibly in a layer the recipe extends, or in an overlay), a
pypi ``version``, an apt ``packages`` entry — and its upstream (:mod:`nvkr.update.upstreams`)
says which versions exist. :func:`plan_update` picks the target of every pin (newest release in
the pin's own ``MAJOR.MINOR`` line for SemVer upstreams, newest package for apt; never a
pre-release without ``pre``; exactly ``to`` when given), computes every edit (the version; a
pypi wheel's ``sha256`` and ``member``; a url source's inline ``sha256``/``sha512`` from the
checksum file published next to the new URL) and loads the edited recipe from memory. The caller
locks that recipe and only then writes the files (:func:`write_atomically`): a failure anywhere
leaves every file as it was.

Versions are ordered only by :mod:`nvkr.catalog.versions`.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from nvkr.catalog.constraints import max_version, sort_versions
from nvkr.catalog.versions import (
    DebianVersion,
    Kind,
    UpstreamVersion,
    VersionError,
    parse_debian,
    parse_upstream,
)
from nvkr.errors import FetchError, NvkrError, RecipeError, UsageError
from nvkr.fetch.checksums import parse_checksum_file
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import fetch_text, url_filename
from nvkr.recipe import LoadedRecipe, Variant, expand, load_recipe
from nvkr.recipe.models import AptSource, PypiSource, UrlSource
from nvkr.recipe.yamlsource import Location
from nvkr.update.edit import Edit, apply_edits
from nvkr.update.upstreams import (
    Candidate,
    GithubRepo,
    K8sLine,
    Upstream,
    apt_versions,
    github_candidates,
    k8s_candidates,
    pypi_candidates,
    pypi_releases,
    pypi_semver,
    pypi_upstream,
    pypi_wheel,
    url_upstream,
)

__all__ = ["Change", "UpdatePlan", "UpdateRequest", "plan_update", "write_atomically"]

_VAR_REF = re.compile(r"\{\{\s*vars\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_DIGESTS = ("sha256", "sha512")
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
class _AptQuery:
    """One apt directory's worth of questions: a source's repositories for one arch."""

    name: str
    spec: str  # canonical JSON of the source without its packages
    base_dir: Path


@dataclass
class _Use:
    """One source of one variant reading a pin."""

    source: str
    variant: Variant
    upstream: Upstream | _AptQuery
    package: str | None = None


@dataclass
class _Pin:
    location: Location
    what: str  # the value's path: vars.kubeletVersion, sources.kubectl.version, ...
    kind: Literal["upstream", "debian"]
    uses: list[_Use] = field(default_factory=list)

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
def _selection(request: UpdateRequest, variants: list[Variant]) -> dict[str, set[str] | None]:
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


class _Collector:
    def __init__(self, explicit: bool) -> None:
        self.explicit = explicit
        self.pins: dict[tuple[Path, int, int], _Pin] = {}
        self.notes: dict[str, str] = {}
        self.apt: dict[_AptQuery, tuple[AptSource, set[str]]] = {}

    def skip(self, name: str, why: str) -> None:
        if self.explicit:
            raise UsageError(f"--update {name}: {why}", hint=f"--update knows {UPDATABLE}")
        self.notes.setdefault(name, f"{name}: left alone ({why})")

    def add(
        self, loc: Location, field_: str, kind: Literal["upstream", "debian"], use: _Use
    ) -> None:
        if "{{" in loc.text or "{%" in loc.text:
            self.skip(use.source, f"{loc.file}:{loc.line}: {field_} is a template ({loc.text!r})")
            return
        key = (loc.file.resolve(), loc.line, loc.column)
        pin = self.pins.setdefault(key, _Pin(loc, field_, kind))
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
                self.add(var_loc, f"vars.{var}", "upstream", _Use(name, variant, upstream))
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
        self.add(found[0], found[1], "upstream", _Use(name, variant, upstream))

    def apt_source(
        self, name: str, source: AptSource, variant: Variant, packages: set[str] | None, base: Path
    ) -> None:
        spec = source.model_dump(exclude_none=True)
        spec.pop("packages", None)
        query = _AptQuery(name, json.dumps(spec, sort_keys=True), base)
        for pkg in sorted(source.packages):
            if packages is not None and pkg not in packages:
                continue
            found = _value_location(variant, ("sources", name, "packages", pkg))
            if found is None:
                continue
            entry = self.apt.setdefault(query, (source, set()))
            entry[1].add(pkg)
            self.add(found[0], found[1], "debian", _Use(name, variant, query, pkg))


def _collect(
    loaded: LoadedRecipe, variants: list[Variant], wanted: dict[str, set[str] | None]
) -> _Collector:
    c = _Collector(explicit=bool(wanted))
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


# -- what each pin moves to -------------------------------------------------------------------------
class _Listings:
    """Every upstream's candidates, each asked once."""

    def __init__(self, ctx: FetchContext, collector: _Collector, pre: bool) -> None:
        self.ctx = ctx
        self.pre = pre
        self.collector = collector
        self._up: dict[Any, list[Candidate]] = {}
        self._apt: dict[_AptQuery, dict[str, list[str]]] = {}
        self.pypi: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def candidates(self, use: _Use) -> list[Candidate]:
        up = use.upstream
        if isinstance(up, _AptQuery):
            if up not in self._apt:
                source, packages = self.collector.apt[up]
                self._apt[up] = apt_versions(
                    up.name, source, sorted(packages), self.ctx, up.base_dir
                )
            return [Candidate(v, False) for v in self._apt[up].get(use.package or "", [])]
        if up not in self._up:
            if isinstance(up, K8sLine):
                self._up[up] = k8s_candidates(up, self.ctx, pre=self.pre)
            elif isinstance(up, GithubRepo):
                self._up[up] = github_candidates(up, self.ctx)
            else:
                releases = pypi_releases(up, self.ctx)
                self.pypi[up.json_url] = releases
                self._up[up] = pypi_candidates(releases)
        return self._up[up]


def _parse(kind: Kind, text: str, where: str) -> UpstreamVersion | DebianVersion:
    if kind == "debian":
        return parse_debian(text, where=where)
    return parse_upstream(pypi_semver(text), where=where)


def _normalise_to(to: str, current: str, kind: Kind) -> str:
    if kind == "upstream":
        if to.startswith("v") and not current.startswith("v"):
            return to[1:]
        if current.startswith("v") and not to.startswith("v"):
            return "v" + to
    return to


def _choose(pin: _Pin, listings: _Listings, request: UpdateRequest) -> str | None:
    where = f"{pin.where}: {pin.what}"
    current = _parse(pin.kind, pin.current, where)
    # dl.k8s.io lists only the newest release of a line: there --to is checked by the lock
    complete = not any(isinstance(u.upstream, K8sLine) for u in pin.uses)
    if request.to is not None:
        target = _normalise_to(request.to, pin.current, pin.kind)
        _parse(pin.kind, target, "--to")
        if complete:
            for use in pin.uses:
                cands = listings.candidates(use)
                if target not in {c.text for c in cands}:
                    up = use.upstream
                    label = f"apt source {up.name!r}" if isinstance(up, _AptQuery) else up.label
                    what = f"{use.package} " if use.package else ""
                    raise UsageError(
                        f"--to {request.to}: {label} has no {what}version {target} "
                        f"(for {use.variant.id})",
                        hint="newest there: " + ", ".join(_newest(pin.kind, cands)),
                    )
        return None if target == pin.current else target
    lists = [listings.candidates(u) for u in pin.uses]
    common = set.intersection(*({c.text for c in cands} for cands in lists)) if lists else set()
    pre_flag = {c.text for cands in lists for c in cands if c.prerelease}
    eligible: list[tuple[UpstreamVersion | DebianVersion, str]] = []
    for text in sorted(common):
        if text in pre_flag and not request.pre:
            continue
        try:
            parsed = _parse(pin.kind, text, "")
        except VersionError:
            continue
        if (
            isinstance(parsed, UpstreamVersion)
            and isinstance(current, UpstreamVersion)
            and parsed.release_line != current.release_line
        ):
            continue
        eligible.append((parsed, text))
    if not eligible:
        return None
    best = max_version([v for v, _ in eligible], pin.kind)
    if not best > current:
        return None
    return next(t for v, t in eligible if v == best)


def _newest(kind: Kind, cands: list[Candidate]) -> list[str]:
    parsed = []
    for c in cands:
        try:
            parsed.append((_parse(kind, c.text, ""), c.text))
        except VersionError:
            continue
    ordered = sort_versions([v for v, _ in parsed], kind, reverse=True)
    texts = [next(t for v, t in parsed if v is o) for o in ordered[:5]]
    return texts or ["(none)"]


def _digest_location(variant: Variant, name: str, algo: str, value: str) -> tuple[Location, str]:
    """Where a source's digest is written: the field itself, or the var its template reads
    (``sha256: "{{ vars['kubelet-' ~ arch ~ '-sha256'] }}"``: the one var holding that digest).

    Raises:
        RecipeError: the template reads no single var holding the digest.
    """
    loc = variant.locations.get(("sources", name, algo))
    if loc is not None and "{{" not in loc.text and "{%" not in loc.text:
        return loc, f"sources.{name}.{algo}"
    holders = [k for k, v in variant.recipe.vars.items() if v.lower() == value.lower()]
    var_loc = variant.locations.get(("vars", holders[0])) if len(holders) == 1 else None
    if var_loc is None or "{{" in var_loc.text:
        where = f"{loc.file}:{loc.line}: " if loc is not None else ""
        raise RecipeError(
            f"{where}source {name!r} ({variant.id}): its {algo} is a template that reads no "
            "single var holding the digest; cannot update it in place",
            hint="write the digest as a plain value (or a var), or update it by hand",
        )
    return var_loc, f"vars.{holders[0]}"


# -- the edits that follow a version ---------------------------------------------------------------
def _pypi_edits(pin: _Pin, new: str, listings: _Listings) -> list[Edit]:
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
        loc, what = _digest_location(use.variant, use.source, "sha256", source.sha256)
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


def _digest_edits(
    ctx: FetchContext, variants: list[Variant], moved: set[tuple[str, str]]
) -> list[Edit]:
    """The inline sha256/sha512 of each moved url source (``moved``: (variant id, source)),
    from the checksum file published next to its new URL (``<url>.sha256``)."""
    edits: list[Edit] = []
    for variant in variants:
        for vid, name in sorted(moved):
            if vid != variant.id:
                continue
            source = variant.recipe.sources.get(name)
            if not isinstance(source, UrlSource):
                continue
            for algo in _DIGESTS:
                pinned = getattr(source, algo)
                if pinned is None:
                    continue
                loc, what = _digest_location(variant, name, algo, pinned)
                url = f"{source.url}.{algo}"
                try:
                    text = fetch_text(
                        ctx.mirrors.rewrite(url), what=f"source {name!r}: checksum file", origin=url
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


def _apply(
    files: dict[Path, bytes], originals: dict[Path, bytes], edits: list[Edit]
) -> dict[Path, bytes]:
    by_file: dict[Path, list[Edit]] = {}
    for edit in edits:
        by_file.setdefault(edit.location.file, []).append(edit)
    out = dict(files)
    for path, its in by_file.items():
        if path not in out:
            try:
                originals[path] = out[path] = path.read_bytes()
            except OSError as e:
                raise RecipeError(f"{path}: cannot read: {e.strerror or e}") from None
        out[path] = apply_edits(out[path], its, path)
    return out


def _value(variant: Variant, pin: _Pin, use: _Use) -> str | None:
    if pin.what.startswith("vars."):
        return variant.recipe.vars.get(pin.what[len("vars.") :])
    source = variant.recipe.sources.get(use.source)
    if isinstance(source, AptSource):
        return source.packages.get(use.package or "")
    return getattr(source, "version", None)


# -- the whole plan ----------------------------------------------------------------------------
def plan_update(
    loaded: LoadedRecipe, variants: list[Variant], ctx: FetchContext, request: UpdateRequest
) -> UpdatePlan:
    """Decide every pin's new version and load the edited recipe from memory (nothing written).

    Args:
        loaded, variants: the recipe as it is and all its variants.
        ctx: fetch context (mirrors) for the upstream listings and checksum files.
    Returns:
        The plan; ``plan.loaded`` is the edited recipe (None when nothing moves).
    Raises:
        UsageError: an unknown SOURCE, ``NAME:PACKAGE`` of a non-apt source, ``--to`` without
            SOURCE or naming a version the upstream does not list, a named source without an
            upstream nvkr can ask; ``--offline``.
        VersionError: a pin that is not a version of its kind (naming FILE:LINE).
        FetchError: an upstream listing or checksum file is unreachable or unreadable; PyPI has
            no wheel matching the pinned one for the new version; no checksum file is published
            for a url source with an inline digest.
        IntegrityError: an apt Release signature fails (exit 3).
        RecipeError: a pin cannot be rewritten in place, or the edited recipe is invalid.
    """
    if ctx.offline:
        raise UsageError("--update asks the upstreams for their versions; it cannot run --offline")
    wanted = _selection(request, variants)
    collector = _collect(loaded, variants, wanted)
    listings = _Listings(ctx, collector, request.pre)
    plan = UpdatePlan(notes=sorted(collector.notes.values()))
    version_edits: list[Edit] = []
    moved: list[tuple[_Pin, str]] = []
    pins = sorted(collector.pins.values(), key=lambda p: (str(p.location.file), p.location.line))
    for pin in pins:
        new = _choose(pin, listings, request)
        if new is None:
            continue
        moved.append((pin, new))
        version_edits.append(Edit(pin.location, pin.what, pin.current, new))
        if any(isinstance(u.variant.recipe.sources[u.source], PypiSource) for u in pin.uses):
            version_edits += _pypi_edits(pin, new, listings)
        plan.changes.append(
            Change(
                sources=tuple(dict.fromkeys(u.source for u in pin.uses)),
                package=pin.uses[0].package,
                old=pin.current,
                new=new,
                where=pin.where,
            )
        )
    if not moved:
        return plan
    files = _apply({}, plan.originals, version_edits)
    first = _load(loaded.path, files)
    url_sources = {
        (u.variant.id, u.source)
        for pin, _ in moved
        for u in pin.uses
        if isinstance(u.variant.recipe.sources[u.source], UrlSource)
    }
    digest_edits = _digest_edits(ctx, expand(first, None), url_sources)
    files = _apply(files, plan.originals, digest_edits)
    plan.edits = version_edits + digest_edits
    plan.files = files
    plan.loaded = _load(loaded.path, files) if digest_edits else first
    _check(plan.loaded, moved)
    return plan


def _load(path: Path, files: dict[Path, bytes]) -> LoadedRecipe:
    try:
        return load_recipe(path, overrides=files)
    except NvkrError as e:
        raise RecipeError(
            f"the updated recipe is invalid: {e.message}",
            hint="nothing was written; " + (e.hint or "fix the recipe and run `nvkr lock`"),
        ) from e


def _check(loaded: LoadedRecipe, moved: list[tuple[_Pin, str]]) -> None:
    """Every use of a moved pin now reads the new value (no other layer overrides it)."""
    by_id = {v.id: v for v in expand(loaded, None)}
    for pin, new in moved:
        for use in pin.uses:
            variant = by_id.get(use.variant.id)
            got = _value(variant, pin, use) if variant is not None else None
            if got != new:
                raise RecipeError(
                    f"{pin.where}: {pin.what} was set to {new!r} but source {use.source!r} of "
                    f"{use.variant.id} reads {got!r} after the edit",
                    hint="another layer or overlay sets it too; update that one by hand",
                )


def write_atomically(files: dict[Path, bytes], originals: dict[Path, bytes]) -> None:
    """Write each file through a temp file in its directory and a rename (mode kept), all temp
    files first, so an error while writing leaves every file as it was.

    Raises:
        RecipeError: a file changed on disk since it was planned (nothing is written).
    """
    for path, before in originals.items():
        if path.read_bytes() != before:
            raise RecipeError(
                f"{path} changed while updating; nothing was written", hint="run the update again"
            )
    staged: list[tuple[Path, Path]] = []
    try:
        for path, data in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            tmp.write_bytes(data)
            if path.exists():
                os.chmod(tmp, path.stat().st_mode & 0o7777)
            staged.append((tmp, path))
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in staged:
        os.replace(tmp, path)
