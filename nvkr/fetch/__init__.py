"""Fetching sources: from a recipe's pins to verified blobs in the store.

Two moments use this package. ``nvkr lock`` calls :func:`resolve` for each source: it fetches the
source (or finds it in the store), verifies it against its pin and returns its *resolved
identity*, the lockfile entry. ``nvkr build`` calls :func:`ensure` with that entry: when the
store already holds the blob nothing else happens (no network, no subprocess), otherwise the
source is fetched again, through the mirrors, and verified against the entry. One module per
source kind, registered in :data:`FETCHERS`; the entry shapes are documented on each module's
``resolve``:

- ``url``  (:mod:`nvkr.fetch.http`): http(s)/file downloads, pinned by sha256/sha512 or a
  checksum file (:mod:`nvkr.fetch.checksums`);
- ``git``  (:mod:`nvkr.fetch.git`): a commit's tree as a deterministic tar;
- ``pypi`` (:mod:`nvkr.fetch.pypi`): a wheel (or one file in it) fetched with pip;
- ``path`` (:mod:`nvkr.fetch.path`): a directory of this repository, hashed on every run;
- ``oci``  (:mod:`nvkr.fetch.oci`): an image or index by digest with its whole closure;
- ``apt``  (:mod:`nvkr.fetch.apt`): a closed set of Debian packages resolved from signed apt
  metadata at lock time, every .deb kept in the store.

Every entry has ``"kind"`` and ``"digest"`` (``sha256:<hex>`` of the blob in the store), is
JSON-able and holds no floats; URLs in entries are the recipe's, never a mirror's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from nvkr.fetch import apt, git, http, oci, path, pypi
from nvkr.fetch.checksums import parse_checksum_file
from nvkr.fetch.context import FetchContext
from nvkr.fetch.mirrors import Mirrors, default_config_path
from nvkr.recipe.sources import AptSource, GitSource, OciSource, PathSource, PypiSource, UrlSource
from nvkr.store import Store

AnySource = UrlSource | GitSource | PypiSource | PathSource | OciSource | AptSource

__all__ = [
    "FETCHERS",
    "AnySource",
    "FetchContext",
    "Fetcher",
    "Mirrors",
    "all_present",
    "default_config_path",
    "ensure",
    "entry_blobs",
    "parse_checksum_file",
    "resolve",
]


class Fetcher(NamedTuple):
    """One source kind: its lock-time and build-time halves (signatures as :func:`resolve` and
    :func:`ensure`)."""

    kind: str
    resolve: Callable[..., dict[str, Any]]
    ensure: Callable[..., str]


FETCHERS: dict[type[AnySource], Fetcher] = {
    UrlSource: Fetcher("url", http.resolve, http.ensure),
    GitSource: Fetcher("git", git.resolve, git.ensure),
    PypiSource: Fetcher("pypi", pypi.resolve, pypi.ensure),
    PathSource: Fetcher("path", path.resolve, path.ensure),
    OciSource: Fetcher("oci", oci.resolve, oci.ensure),
    AptSource: Fetcher("apt", apt.resolve, apt.ensure),
}


def _fetcher(source: AnySource) -> Fetcher:
    try:
        return FETCHERS[type(source)]
    except KeyError:
        raise TypeError(f"no fetcher for source type {type(source).__name__}") from None


def resolve(name: str, source: AnySource, ctx: FetchContext, *, base_dir: Path) -> dict[str, Any]:
    """Lock time: fetch ``source`` (or use the store), verify it against its pin and return its
    resolved identity, the lockfile entry (JSON-able, no floats).

    Args:
        name: the source's name in the recipe (for messages).
        base_dir: the directory of the recipe file that declares the source (path sources).
    Returns:
        the entry; ``entry["digest"]`` (``sha256:<hex>``) names the blob now in ``ctx.store``.
        Shapes: see the ``resolve`` of :mod:`~nvkr.fetch.http`, :mod:`~nvkr.fetch.git`,
        :mod:`~nvkr.fetch.pypi` and :mod:`~nvkr.fetch.path`.
    Raises:
        ChecksumError: the content does not match its pin (exit 3); nothing is stored.
        DowngradeError: an https URL (a file, a checksum file, a registry's blob) redirected
            to plain http (exit 3, :mod:`nvkr.origin`); nothing is fetched from the http URL.
        FetchError: the source cannot be fetched (unreachable, HTTP error, HTML page, empty body,
            unknown commit, no matching wheel, missing directory, bad checksum file).
        OfflineError: ``ctx.offline`` and the network would be needed.
    """
    return _fetcher(source).resolve(name, source, ctx, base_dir=base_dir)


def ensure(
    name: str, source: AnySource, resolved: dict[str, Any], ctx: FetchContext, *, base_dir: Path
) -> str:
    """Build time: make ``ctx.store`` hold the content ``resolved`` describes; return its blob
    digest ``sha256:<hex>``.

    When the blob is already in the store this touches no network and runs no tool (path
    sources are re-hashed from disk, which is the point of them). Otherwise the source is
    fetched through ``ctx.mirrors`` and verified against ``resolved`` (size and digests).

    Raises:
        LockError: ``resolved`` does not describe ``source`` (another kind, URL, commit or pin).
        OfflineError: the blob is missing and ``ctx.offline``; names the source and what is missing.
        ChecksumError, DowngradeError, FetchError: as :func:`resolve`.
    """
    return _fetcher(source).ensure(name, source, resolved, ctx, base_dir=base_dir)


def entry_blobs(resolved: dict[str, Any]) -> list[str]:
    """Every blob digest a lock entry's content is stored as: its own, and an apt source's
    .debs or an OCI source's image blobs (a store can lose those alone: ``store gc``,
    ``store verify --repair``)."""
    digests = [str(resolved["digest"])]
    if resolved.get("kind") == "apt":
        digests += [p["sha256"] for p in resolved.get("packages") or []]
    if resolved.get("kind") == "oci":
        digests += list(resolved.get("blobs") or [])
    return digests


def all_present(store: Store, resolved: dict[str, Any]) -> bool:
    """Whether ``store`` holds every blob of :func:`entry_blobs` (then :func:`ensure` fetches
    nothing)."""
    return all(store.has_blob(d) for d in entry_blobs(resolved))
