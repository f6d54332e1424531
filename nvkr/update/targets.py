"""What each pin moves to and the edits that follow: the upstream listings fetched once
(:mod:`nvkr.update.upstreams`), the target chosen (newest release in the pin's own
``MAJOR.MINOR`` line for SemVer upstreams, newest package for apt, never a pre-release without
``pre``, exactly ``to`` when given), and applying the edits; the edits a version drags along (a
pypi wheel's ``sha256`` and ``member``, a url source's inline digest from the checksum file next
to the new URL) are the kinds' hooks' (:mod:`nvkr.update.kinds`), through :func:`digest_location`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvkr.catalog.constraints import max_version, sort_versions
from nvkr.catalog.versions import (
    DebianVersion,
    Kind,
    UpstreamVersion,
    VersionError,
    parse_debian,
    parse_upstream,
)
from nvkr.errors import RecipeError, UsageError
from nvkr.fetch.context import FetchContext
from nvkr.recipe.matrix import Variant
from nvkr.recipe.yamlsource import Location
from nvkr.update.edit import Edit, apply_edits
from nvkr.update.pins import AptQuery, Collector, Pin, PinUse, UpdateRequest
from nvkr.update.upstreams import (
    Candidate,
    GithubRepo,
    K8sLine,
    apt_versions,
    github_candidates,
    k8s_candidates,
    pypi_candidates,
    pypi_releases,
    pypi_semver,
)


# -- what each pin moves to -------------------------------------------------------------------------
class Listings:
    """Every upstream's candidates, each asked once."""

    def __init__(self, ctx: FetchContext, collector: Collector, pre: bool) -> None:
        self.ctx = ctx
        self.pre = pre
        self.collector = collector
        self._up: dict[Any, list[Candidate]] = {}
        self._apt: dict[AptQuery, dict[str, list[str]]] = {}
        self.pypi: dict[str, dict[str, list[dict[str, Any]]]] = {}

    def candidates(self, use: PinUse) -> list[Candidate]:
        up = use.upstream
        if isinstance(up, AptQuery):
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


def choose_target(pin: Pin, listings: Listings, request: UpdateRequest) -> str | None:
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
                    label = f"apt source {up.name!r}" if isinstance(up, AptQuery) else up.label
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
    if isinstance(current, UpstreamVersion):
        # among tags of equal precedence, the newest build metadata (build_precedence)
        ups = [(v, t) for v, t in eligible if isinstance(v, UpstreamVersion)]
        top, text = max(ups, key=lambda vt: vt[0].newest_key)
        return text if top.newest_key > current.newest_key else None
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


def digest_location(variant: Variant, name: str, algo: str, value: str) -> tuple[Location, str]:
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


def apply_to_files(
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
