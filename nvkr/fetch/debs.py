"""Locked .debs into the store, several at once: what a build (:func:`nvkr.fetch.apt.ensure`) and
a lock (:func:`nvkr.fetch.apt.resolve`) download after the indexes are read.

A build whose mirror answers 404 or 410 for a locked .deb fetches it from the repository's
snapshot archive (:mod:`nvkr.fetch.snapshots`, :class:`SnapshotFallback`): first the first
import at or after the lock's time (a file published shortly before the lock may be in no
earlier import), then the import the lock's time resolves to (the one before it). The sha256
the lock pins is checked as always; a snapshot answering other bytes is an IntegrityError
(exit 3) naming both URLs and both digests. Only on a miss: snapshot archives are slow and
rate-limited.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from nvkr.errors import ChecksumError, FetchError, IntegrityError, NotServedError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import download, fetch_text
from nvkr.fetch.mirrors import mirror_label
from nvkr.fetch.snapshots import (
    first_at_or_after,
    listed_imports,
    month_listings,
    parse_stamp,
)
from nvkr.monitor import transfer
from nvkr.redact import redact_url
from nvkr.store import Store

#: .debs downloaded at once. A mirror serves each over its own connection; one at a time, the
#: line idles through every request's round trips (a node image's lock holds about 420 .debs).
DEB_DOWNLOADS = 4


def missing_debs(packages: list[dict[str, Any]], store: Store) -> list[dict[str, Any]]:
    """The lock entries of ``packages`` whose .deb the store lacks, in their order."""
    return [p for p in packages if not store.has_blob(p["sha256"])]


def fetch_debs(
    name: str,
    packages: list[dict[str, Any]],
    ctx: FetchContext,
    url_of: Callable[[dict[str, Any]], str],
    fallback: SnapshotFallback | None = None,
) -> None:
    """Download every package of ``packages`` (lock entries: ``name``, ``version``, ``arch``,
    ``url``, ``size``, ``sha256``) the store lacks from ``url_of(package)`` (the recipe's URL
    with its credentials, before the mirrors' rewrite), :data:`DEB_DOWNLOADS` at once,
    each checked against its sha256. A failure raises the error of the first failed package in
    ``packages``' order, after the downloads under way have ended (each stores its blob whole
    or not at all). The bytes of all of them go to the current transfer report as one count.

    ``fallback``: where a .deb the mirror answers 404 or 410 for is fetched from instead (a
    build's); None (a lock's): the mirror's answer is the error. Once the downloads end, a note
    (``ctx.note``) says how many came from a snapshot archive."""
    missing = missing_debs(packages, ctx.store)
    if not missing:
        return
    first = missing[0]
    ctx.require_online(name, f"package {first['name']} {first['version']} ({first['url']})")
    counted = _ByteCount(transfer.current())
    with ThreadPoolExecutor(
        max_workers=min(DEB_DOWNLOADS, len(missing)), thread_name_prefix="nvkr-deb"
    ) as pool:
        futures = [
            pool.submit(_fetch_deb, name, p, ctx, url_of(p), counted.reporter(i), fallback)
            for i, p in enumerate(missing)
        ]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            if fallback is not None:
                fallback.say(name, ctx)


def _fetch_deb(
    name: str,
    p: dict[str, Any],
    ctx: FetchContext,
    url: str,
    report: transfer.BytesReport,
    fallback: SnapshotFallback | None,
) -> None:
    what = f"source {name!r}: package {p['name']} {p['version']} ({p['arch']})"
    try:
        with transfer.reporting(report):
            _download_deb(p, url, p["url"], ctx, what)
    except NotServedError as e:
        if fallback is None:
            raise _not_served(what, e, None) from e
        with transfer.reporting(report):
            fallback.fetch(what, p, ctx, mirror_label(ctx.mirrors.rewrite(url), p["url"]), e)
    except FetchError as e:
        raise _not_served(what, e, None) from e


def _download_deb(p: dict[str, Any], url: str, origin: str, ctx: FetchContext, what: str) -> None:
    """Download the locked .deb ``p`` from ``url`` (through the mirrors; ``origin`` the URL the
    transport rules and messages name) into the store, checked against its size and sha256."""
    download(
        ctx.mirrors.rewrite(url),
        ctx.store,
        what=what,
        expected={"sha256": p["sha256"]},
        expected_size=p["size"],
        origin=origin,
    )


def _not_served(what: str, e: FetchError, hint: str | None) -> FetchError:
    return FetchError(
        f"{what} is not in the store and the mirror does not serve it: "
        + e.message.removeprefix(f"{what}: "),
        hint=hint
        or "build on a machine whose store holds it (nvkr mirror import), or update the pin "
        "with `nvkr lock`",
    )


@dataclass
class SnapshotFallback:
    """An apt source's snapshot archives, for the .debs its mirror no longer serves.

    ``time``: the lock's (``YYYYMMDDTHHMMSSZ``; None: the entry was locked before nvkr recorded
    it); ``archives``: each repository's archive URL (credentials and all, as the recipe or the
    config file gives them); ``repos``: each repository's URL as the lock entry's .deb URLs
    start (no user info, a trailing slash); ``where``: the lock entry's field, for messages.
    """

    time: str | None
    archives: dict[str, str]
    repos: dict[str, str]
    where: str
    _imports: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)
    _used: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def fetch(
        self, what: str, p: dict[str, Any], ctx: FetchContext, mirror: str, miss: FetchError
    ) -> None:
        """Fetch ``p`` (a lock entry's .deb, which the mirror ``mirror`` answered ``miss`` for)
        from its repository's snapshot archive.

        Raises:
            FetchError: no snapshot archive or lock time is known, or no import tried holds it
                (each URL tried named).
            IntegrityError: an import answers other bytes than the lock pins (exit 3).
        """
        repository = p.get("repository")
        archive = self.archives.get(repository) if isinstance(repository, str) else None
        if self.time is None:
            raise _not_served(
                what,
                miss,
                "the lock entry records no lock time to find a snapshot archive's import by (it "
                "was locked before nvkr recorded one): run `nvkr lock` while the mirror still "
                "serves the pins, or build on a machine whose store holds it (nvkr mirror import)",
            )
        base = self.repos.get(repository) if isinstance(repository, str) else None
        if archive is None or base is None or not p["url"].startswith(base):
            raise _not_served(
                what,
                miss,
                f"apt repository {repository!r} has no snapshot archive to fall back on: name "
                "one with `snapshot: URL` on the repository in the recipe or a `snapshots:` "
                "entry of the nvkr config; or build on a machine whose store holds the .deb "
                "(nvkr mirror import)",
            )
        rel = p["url"][len(base) :]
        imports, tried = self._candidates(archive, ctx, what)
        for stamp in imports:
            url = f"{archive}/{stamp}/{rel}"
            try:
                _download_deb(p, url, url, ctx, what)
            except ChecksumError as e:
                raise IntegrityError(
                    f"{what}: the snapshot archive answers other bytes than the lock pins: "
                    f"{mirror_label(ctx.mirrors.rewrite(url), url)} gave {e.actual or 'a file'} "
                    f"({e.message}), the lock pins {p['sha256']} for {mirror} (which no longer "
                    "serves it)",
                    hint="the snapshot archive is not a copy of this repository, or was "
                    "tampered with: check the repository's `snapshot` (or the config's "
                    "`snapshots:` entry); nothing was stored",
                ) from e
            except FetchError as e:
                tried.append(f"{redact_url(url)} ({_reason(e)})")
                continue
            with self._lock:
                self._used[archive] = self._used.get(archive, 0) + 1
            return
        raise FetchError(
            f"{what} is not in the store, the mirror does not serve it "
            f"({miss.message.removeprefix(f'{what}: ')}) and "
            f"neither does the snapshot archive {redact_url(archive)} at the lock's time "
            f"{self.time}: tried " + "; ".join(tried),
            hint="the .deb was never in the archive's imports around the lock's time; build on "
            "a machine whose store holds it (nvkr mirror import), or update the pin with "
            "`nvkr lock`",
        )

    def _candidates(
        self, archive: str, ctx: FetchContext, what: str
    ) -> tuple[list[str], list[str]]:
        """The imports to try, in order (the first at or after the lock's time, then the lock's
        time itself, which the archive resolves to the import before it), and what failed on
        the way (a listing that could not be read); read once per archive."""
        assert self.time is not None
        with self._lock:  # one listing per archive, whichever download misses first
            found = self._imports.get(archive)
            if found is None:
                parse_stamp(self.time, f"{self.where}.time")
                imports: list[str] = []
                notes: list[str] = []
                for listing in month_listings(archive, self.time):
                    try:
                        text = fetch_text(
                            ctx.mirrors.rewrite(listing),
                            what=f"{what}: snapshot archive listing",
                            origin=listing,
                            html=True,
                        )
                    except FetchError as e:
                        notes.append(f"the listing {redact_url(listing)} ({_reason(e)})")
                        break
                    first = first_at_or_after(listed_imports(text), self.time)
                    if first is not None:
                        imports.append(first)
                        break
                if self.time not in imports:
                    imports.append(self.time)
                found = self._imports[archive] = (imports, notes)
        imports, notes = found
        return list(imports), list(notes)

    def say(self, name: str, ctx: FetchContext) -> None:
        """The note, once per source: how many .debs came from which snapshot archive."""
        with self._lock:
            used, self._used = dict(self._used), {}
        if not used:
            return
        count = sum(used.values())
        archives = " and ".join(redact_url(a) for a in sorted(used))
        ctx.note(
            f"fetched {count} .deb{'s' if count != 1 else ''} of source {name!r} from the "
            f"snapshot archive {archives} (lock time {self.time}) because the mirror no longer "
            "serves them"
        )


def snapshot_fallback(
    name: str, source: Any, resolved: dict[str, Any], ctx: FetchContext
) -> SnapshotFallback:
    """Where a build fetches the .debs of an apt source (an
    :class:`~nvkr.recipe.sources.AptSource`, locked as ``resolved``) its mirror no longer
    serves: each repository's snapshot archive as the recipe or the config names it now (with
    its credentials), else the one the lock recorded; at the lock's time (None for an entry
    locked before nvkr recorded it)."""
    recorded = resolved.get("snapshot")
    if not isinstance(recorded, dict):
        recorded = {}
    locked = recorded.get("archives") or {}
    archives: dict[str, str] = {}
    for repo_name, repo in source.apt.items():
        archive = repo.snapshot or ctx.snapshots.lookup(repo.url) or locked.get(repo_name)
        if archive:
            archives[repo_name] = archive.rstrip("/")
    return SnapshotFallback(
        time=recorded.get("time"),
        archives=archives,
        repos={n: redact_url(r.url.rstrip("/") + "/") for n, r in source.apt.items()},
        where=f"lock entry for source {name!r}: snapshot",
    )


_HTTP_STATUS = re.compile(
    r"HTTP (\d{3}[^\n]*?) from \S+(?: \(mirror of [^)]*\))?(?: \(redirected to ([^)\s]+)\))?"
)


def _reason(e: FetchError) -> str:
    """What went wrong, without the URL the caller names: ``HTTP 404 Not Found`` (and where a
    redirect led), else the message's last part."""
    m = _HTTP_STATUS.search(e.message)
    if m:
        return f"HTTP {m.group(1)}" + (f", redirected to {m.group(2)}" if m.group(2) else "")
    return e.message.rsplit(": ", 1)[-1]


class _ByteCount:
    """The bytes of concurrent downloads summed for one listener (called under a lock, so the
    count it sees only grows while downloads go on)."""

    def __init__(self, listener: transfer.BytesReport | None) -> None:
        self._listener = listener
        self._lock = threading.Lock()
        self._each: dict[int, int] = {}
        self._total = 0

    def reporter(self, index: int) -> transfer.BytesReport:
        def report(done: int) -> None:
            if self._listener is None:
                return
            with self._lock:
                self._total += done - self._each.get(index, 0)
                self._each[index] = done
                self._listener(self._total)

        return report
