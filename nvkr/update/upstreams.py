"""Upstream listings: which versions a pinned source could move to.

``nvkr lock --update`` asks each pin's upstream what it publishes, through the same fetch code
and mirrors as the lock itself (``--mirror`` and the config's mirrors apply; nothing here
downloads a payload):

- Kubernetes binaries on dl.k8s.io: ``/release/stable-MAJOR.MINOR.txt`` holds the newest release
  of a line (``v1.36.4``), ``/release/latest-MAJOR.MINOR.txt`` the newest build including
  pre-releases (read only with ``--pre``);
- GitHub release assets: the repository's ``/repos/OWNER/REPO/releases`` JSON on
  ``https://api.github.com/`` (``tag_name``, ``prerelease``, ``draft``; drafts never count, a
  release GitHub flags as pre-release counts as one even when its tag looks final);
- PyPI wheels: ``https://pypi.org/pypi/NAME/json`` (every file's ``yanked`` flag and sha256;
  a release whose files are all yanked is not offered);
- Debian packages: ``apt-cache madison`` in a throw-away apt directory made with the lock's own
  machinery (:mod:`nvkr.fetch.apt`): each repository's Release is checked against its keyring.

Each listing yields :class:`Candidate` versions as the upstream writes them; choosing among them
is :func:`nvkr.update.choose`'s job, through :mod:`nvkr.catalog.versions` only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.catalog.versions import VersionError, parse_upstream
from nvkr.errors import FetchError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import fetch_text
from nvkr.recipe.sources import AptSource
from nvkr.run import run

K8S_RELEASE = "https://dl.k8s.io/release/"
GITHUB = "https://github.com/"
GITHUB_API = "https://api.github.com/"
PYPI_JSON = "https://pypi.org/pypi/"

_K8S_URL = re.compile(r"^https://dl\.k8s\.io/release/(?P<tag>v[^/]+)/")
_GITHUB_URL = re.compile(
    r"^https://github\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+)/releases/download/(?P<tag>[^/]+)/"
)
# PEP 440 pre-releases as SemVer ones (1.37.0rc1 -> 1.37.0-rc.1), so versions.py can order them.
_PEP440_PRE = re.compile(r"^(\d+\.\d+\.\d+)(a|b|rc)(\d+)$")
_PEP440_WORD = {"a": "alpha", "b": "beta", "rc": "rc"}


@dataclass(frozen=True)
class Candidate:
    """A version an upstream offers.

    Attributes:
        text: as it goes into the recipe (``1.36.4``; for PyPI the release's own spelling).
        prerelease: the upstream calls it a pre-release (or its version says so).
    """

    text: str
    prerelease: bool


@dataclass(frozen=True)
class K8sLine:
    """A Kubernetes release line on dl.k8s.io (``line`` is ``1.36``)."""

    line: str

    @property
    def label(self) -> str:
        return f"dl.k8s.io release line {self.line}"


@dataclass(frozen=True)
class GithubRepo:
    """The releases of ``OWNER/REPO`` on GitHub; ``prefix`` is what the tag adds before the
    pinned version (``v`` for ``v1.36.0`` when the var holds ``1.36.0``)."""

    owner: str
    repo: str
    prefix: str

    @property
    def label(self) -> str:
        return f"GitHub releases of {self.owner}/{self.repo}"


@dataclass(frozen=True)
class PypiProject:
    """A project on PyPI (its JSON API at ``json_url``)."""

    project: str
    json_url: str

    @property
    def label(self) -> str:
        return f"PyPI project {self.project}"


Upstream = K8sLine | GithubRepo | PypiProject


def url_upstream(url: str, version: str) -> Upstream | None:
    """The upstream of a rendered url source whose version is ``version`` (the var's value), or
    None when the URL is not a dl.k8s.io release or GitHub release asset of that version.

    ``https://dl.k8s.io/release/v1.36.3/bin/linux/amd64/kubelet`` with ``1.36.3`` gives the line
    ``1.36``; ``https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.36.0/...`` with
    ``1.36.0`` gives that repository with tag prefix ``v``.

    Raises:
        VersionError: the version is in the URL but is not SemVer (``1.36``).
    """
    m = _K8S_URL.match(url)
    if m and m["tag"] in (f"v{version}", version):
        v = parse_upstream(version, where=url)
        return K8sLine(f"{v.major}.{v.minor}")
    m = _GITHUB_URL.match(url)
    if m and m["tag"].endswith(version):
        return GithubRepo(m["owner"], m["repo"], m["tag"][: -len(version)])
    return None


def pypi_upstream(project: str, index: str | None) -> PypiProject | None:
    """PyPI's JSON API for ``project``: ``https://pypi.org/pypi/NAME/json`` when the source names
    no index, else the same layout beside an index ending in ``/simple`` (PyPI, Warehouse); None
    for other indexes (they publish no release listing nvkr can read)."""
    if index is None:
        return PypiProject(project, f"{PYPI_JSON}{project}/json")
    base = index.rstrip("/")
    if base.endswith("/simple"):
        return PypiProject(project, f"{base[: -len('/simple')]}/pypi/{project}/json")
    return None


# -- reading the listings ---------------------------------------------------------------------
def _text(url: str, ctx: FetchContext, what: str) -> str:
    return fetch_text(ctx.mirrors.rewrite(url), what=what, origin=url)


def k8s_candidates(up: K8sLine, ctx: FetchContext, *, pre: bool) -> list[Candidate]:
    """The newest release of the line (``stable-X.Y.txt``), and with ``pre`` also the newest
    build of it (``latest-X.Y.txt``, which may be a pre-release).

    Raises:
        FetchError: a listing is unreachable or does not hold one ``vX.Y.Z`` line.
    """
    names = ["stable"] + (["latest"] if pre else [])
    out: list[Candidate] = []
    for name in names:
        url = f"{K8S_RELEASE}{name}-{up.line}.txt"
        text = _text(url, ctx, f"{up.label}: {name}-{up.line}.txt").strip()
        try:
            v = parse_upstream(text, where=url)
        except VersionError as e:
            raise FetchError(
                f"{up.label}: {url} holds {text[:60]!r}, expected one version such as v{up.line}.0"
            ) from e
        out.append(Candidate(text.removeprefix("v"), v.is_prerelease))
    return out


def github_candidates(up: GithubRepo, ctx: FetchContext) -> list[Candidate]:
    """Every non-draft release whose tag is ``prefix`` + a SemVer version (the newest 100).

    Raises:
        FetchError: the API is unreachable or answers something other than a release list.
    """
    url = f"{GITHUB_API}repos/{up.owner}/{up.repo}/releases?per_page=100"
    text = _text(url, ctx, up.label)
    try:
        releases: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise FetchError(f"{up.label}: {url} is not JSON: {e.msg} (line {e.lineno})") from e
    if not isinstance(releases, list):
        message = releases.get("message") if isinstance(releases, dict) else None
        raise FetchError(
            f"{up.label}: {url} answered {message or 'something other than a release list'}",
            hint="the GitHub API allows 60 requests an hour without a token; retry later or "
            "use --to VERSION",
        )
    out: list[Candidate] = []
    for release in releases:
        if not isinstance(release, dict) or release.get("draft"):
            continue
        tag = release.get("tag_name")
        if not isinstance(tag, str) or not tag.startswith(up.prefix):
            continue
        text_v = tag[len(up.prefix) :]
        try:
            v = parse_upstream(text_v)
        except VersionError:
            continue  # not a version tag (a "nightly" or a tool of the same repository)
        out.append(Candidate(text_v, bool(release.get("prerelease")) or v.is_prerelease))
    return out


def pypi_releases(up: PypiProject, ctx: FetchContext) -> dict[str, list[dict[str, Any]]]:
    """``{version: [file, ...]}`` from the project's JSON (files as PyPI gives them:
    ``filename``, ``digests.sha256``, ``yanked``, ``packagetype``).

    Raises:
        FetchError: unreachable, not JSON, or no ``releases`` map.
    """
    text = _text(up.json_url, ctx, up.label)
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as e:
        raise FetchError(f"{up.label}: {up.json_url} is not JSON: {e.msg} (line {e.lineno})") from e
    releases = doc.get("releases") if isinstance(doc, dict) else None
    if not isinstance(releases, dict):
        raise FetchError(f"{up.label}: {up.json_url} has no 'releases' map")
    return {
        str(k): [f for f in v if isinstance(f, dict)]
        for k, v in releases.items()
        if isinstance(v, list)
    }


def pypi_semver(text: str) -> str:
    """A PyPI version as SemVer text for ordering (``1.37.0rc1`` -> ``1.37.0-rc.1``)."""
    m = _PEP440_PRE.match(text)
    return f"{m[1]}-{_PEP440_WORD[m[2]]}.{m[3]}" if m else text


def pypi_candidates(releases: dict[str, list[dict[str, Any]]]) -> list[Candidate]:
    """Releases with at least one file not yanked, whose version reads as SemVer (PEP 440
    ``aN``/``bN``/``rcN`` as pre-releases; ``.devN``, ``.postN`` and 4-part versions are left
    out: they cannot be ordered with the pin)."""
    out: list[Candidate] = []
    for version, files in releases.items():
        if not any(not f.get("yanked") for f in files):
            continue
        try:
            v = parse_upstream(pypi_semver(version))
        except VersionError:
            continue
        out.append(Candidate(version, v.is_prerelease))
    return out


def pypi_wheel(
    releases: dict[str, list[dict[str, Any]]], old: str, new: str, sha256: str
) -> tuple[str, str] | None:
    """``(file name, sha256 hex)`` of the wheel of release ``new`` that matches the pinned wheel of
    ``old`` (the file of ``old`` whose sha256 is ``sha256``: same name, tags and platform, with
    the version changed); None when ``old`` has no such file or ``new`` lacks the counterpart."""
    pinned = next(
        (
            f
            for f in releases.get(old, [])
            if str((f.get("digests") or {}).get("sha256", "")).lower() == sha256.lower()
        ),
        None,
    )
    if pinned is None:
        return None
    want = str(pinned.get("filename", "")).replace(f"-{old}-", f"-{new}-", 1)
    for f in releases.get(new, []):
        if f.get("filename") == want and not f.get("yanked"):
            digest = str((f.get("digests") or {}).get("sha256", "")).lower()
            if re.fullmatch(r"[0-9a-f]{64}", digest):
                return want, digest
    return None


# -- apt -----------------------------------------------------------------------------------------
def parse_madison(text: str, package: str) -> list[str]:
    """The versions ``apt-cache madison`` lists for ``package`` (binary ``Packages`` lines), in
    the order printed, without repeats (a version in two suites is listed twice)."""
    out: list[str] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 3 or parts[0] != package or parts[2].endswith(" Sources"):
            continue
        if parts[1] not in out:
            out.append(parts[1])
    return out


def apt_versions(
    name: str, source: AptSource, packages: list[str], ctx: FetchContext, base_dir: Path
) -> dict[str, list[str]]:
    """``{package: [version, ...]}`` the source's repositories serve for its arch.

    Runs ``apt-get update`` in a throw-away apt directory (as :mod:`nvkr.fetch.apt` does at lock
    time, every Release checked against its keyring), then ``apt-cache madison``.

    Raises:
        IntegrityError: a Release signature does not verify (exit 3).
        FetchError: a repository is unreachable.
        AptError: a keyring is missing.
    """
    from nvkr.fetch import apt

    ctx.require_online(name, "the apt repositories' metadata")
    with apt.apt_session(name, source, ctx, base_dir) as session:
        opts, env = session.opts, session.env
        proc = run(["apt-cache", *opts, "madison", *sorted(packages)], env=env, check=False)
        text = proc.stdout.decode(errors="replace")
    return {pkg: parse_madison(text, pkg) for pkg in packages}
