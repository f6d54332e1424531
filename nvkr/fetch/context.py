"""What every fetcher gets: the store, the mirrors, the offline switch; and the checks they share.

:class:`FetchContext` is built once per command (``nvkr lock``, ``nvkr build``) from the store,
``--mirror`` plus the config file's mirrors, and ``--offline``, then handed to
:func:`nvkr.fetch.api.resolve` / :func:`nvkr.fetch.api.ensure` for every source.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from nvkr.errors import LockError, OfflineError
from nvkr.fetch.mirrors import Mirrors
from nvkr.fetch.snapshots import SnapshotArchives
from nvkr.redact import redact_urls
from nvkr.store import Store

NET_HINT = (
    "check the network and the URL; --mirror PREFIX=REPLACEMENT fetches from a reachable mirror, "
    "--offline builds from what the store already holds"
)


def _log_note(message: str) -> None:
    logging.getLogger("nvkr.fetch").warning("note: %s", message)


@dataclass(frozen=True)
class FetchContext:
    """Where fetched sources go (``store``), how URLs are rewritten (``mirrors``), the config's
    snapshot archives of apt repositories (``snapshots``, :mod:`nvkr.fetch.snapshots`), whether
    the network may be used at all (``offline``: only what the store already holds) and where a
    fetcher's note for a person goes (``note``: a build's event stream, else the log)."""

    store: Store
    mirrors: Mirrors = field(default_factory=Mirrors)
    offline: bool = False
    snapshots: SnapshotArchives = field(default_factory=SnapshotArchives)
    note: Callable[[str], None] = field(default=_log_note, compare=False)

    def require_online(self, name: str, missing: str) -> None:
        """Raise :class:`OfflineError` when offline; ``missing`` says what the store lacks."""
        if self.offline:
            raise OfflineError(
                f"source {name!r}: {missing} is not in the store and --offline forbids fetching it",
                hint="run once without --offline (or with --mirror) to fill the store, "
                "or point $NVKR_CACHE at a store that holds it",
            )


def check_entry(
    name: str, resolved: dict[str, Any], kind: str, /, *, needs_digest: bool = True, **identity: Any
) -> None:
    """Check that a lock entry is of ``kind`` and agrees with the recipe on ``identity``
    (e.g. ``url=...``, compared without user info: the lockfile holds none, :mod:`nvkr.redact`),
    and (with ``needs_digest``) that it carries a ``sha256:`` digest.

    Raises:
        LockError: the entry is of another kind, lacks a field or disagrees with the recipe.
    """
    hint = "run `nvkr lock` to update the lockfile"
    if resolved.get("kind") != kind:
        raise LockError(
            f"lock entry for source {name!r} is of kind {resolved.get('kind')!r}, the recipe says {kind!r}",
            hint=hint,
        )
    if needs_digest and not str(resolved.get("digest", "")).startswith("sha256:"):
        raise LockError(f"lock entry for source {name!r} has no sha256 'digest'", hint=hint)
    for key, want in identity.items():
        want, have = redact_urls(want), redact_urls(resolved.get(key))
        if have != want:
            has = f"no {key}" if have is None else f"{key}={have!r}"
            says = f"{want!r}" if want is not None else f"no {key}"
            raise LockError(
                f"lock entry for source {name!r} has {has}, the recipe says {says}", hint=hint
            )


def check_versions(name: str, locked: Mapping[str, object], wanted: Mapping[str, str]) -> None:
    """Check that a lock entry's package versions (``locked``, by name) hold every package the
    recipe pins at its version (``wanted``).

    Raises:
        LockError: a package is missing or at another version, naming both.
    """
    for pkg, version in sorted(wanted.items()):
        if locked.get(pkg) != version:
            has = f"{pkg} {locked[pkg]}" if locked.get(pkg) is not None else f"no {pkg}"
            raise LockError(
                f"lock entry for source {name!r} has {has}, the recipe says {pkg} {version}",
                hint="run `nvkr lock` to update the lockfile",
            )


def check_manifest(name: str, manifest: bytes, digest: str) -> None:
    """Check that an apt entry's package list (``manifest``, its bytes) hashes to the entry's
    ``digest``, which action keys see.

    Raises:
        LockError: it hashes to another digest (the list edited by hand), naming both.
    """
    from nvkr.canonical import sha256_bytes

    listed = sha256_bytes(manifest)
    if listed != digest:
        raise LockError(
            f"lock entry for source {name!r}: its package list hashes to {listed}, the entry "
            f"says {digest}",
            hint="the lockfile was edited by hand; run `nvkr lock`",
        )
