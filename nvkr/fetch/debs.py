"""Locked .debs into the store, several at once: what a build (:func:`nvkr.fetch.apt.ensure`) and
a lock (:func:`nvkr.fetch.apt.resolve`) download after the indexes are read."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nvkr.errors import FetchError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.http import download
from nvkr.monitor import transfer
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
) -> None:
    """Download every package of ``packages`` (lock entries: ``name``, ``version``, ``arch``,
    ``url``, ``size``, ``sha256``) the store lacks from ``url_of(package)`` (the recipe's URL
    with its credentials, before the mirrors' rewrite), :data:`DEB_DOWNLOADS` at once,
    each checked against its sha256. A failure raises the error of the first failed package in
    ``packages``' order, after the downloads under way have ended (each stores its blob whole
    or not at all). The bytes of all of them go to the current transfer report as one count."""
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
            pool.submit(_fetch_deb, name, p, ctx, url_of(p), counted.reporter(i))
            for i, p in enumerate(missing)
        ]
        try:
            for future in futures:
                future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise


def _fetch_deb(
    name: str,
    p: dict[str, Any],
    ctx: FetchContext,
    url: str,
    report: transfer.BytesReport,
) -> None:
    what = f"source {name!r}: package {p['name']} {p['version']} ({p['arch']})"
    try:
        with transfer.reporting(report):
            download(
                ctx.mirrors.rewrite(url),
                ctx.store,
                what=what,
                expected={"sha256": p["sha256"]},
                expected_size=p["size"],
                origin=p["url"],
            )
    except FetchError as e:
        raise FetchError(
            f"{what} is not in the store and the mirror does not serve it: {e.message}",
            hint="no snapshot archive is reachable: build on a machine whose store holds it "
            "(nvkr mirror import), or update the pin with `nvkr lock`",
        ) from e


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
