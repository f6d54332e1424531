"""Snapshot archives of apt repositories: where a locked .deb is once its mirror drops it.

A Debian mirror serves only the current packages of each suite: a point release or a security
update removes the versions a lockfile pins. A *snapshot archive* keeps every import of an
archive under its time, laid out as snapshot.debian.org's::

    <archive>/<YYYYMMDDTHHMMSSZ>/pool/...     the repository as it was at that import
    <archive>/?year=YYYY&month=MM             an HTML page linking each import of the month
                                              (``<a href="20251201T091512Z/">``)

``<archive>/<stamp>/`` for a stamp between imports answers with the import before it.

``nvkr lock`` records in an apt source's entry the time of the lock and, per repository, the
snapshot archive of it (:func:`archive_for`): the repository's own ``snapshot:`` in the recipe,
else an entry of the config file's ``snapshots:``, else snapshot.debian.org's for Debian's
archives (:func:`debian_archive`), else none. The build falls back to it only when the mirror
answers 404 or 410 for a locked .deb (:mod:`nvkr.fetch.debs`). Where and when, never what: the
sha256 the lock pins stays the check, and neither member enters the package manifest (whose
digest is what action keys see).

This module reads configuration and times only; it fetches nothing.
"""

from __future__ import annotations

import calendar
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from nvkr.errors import LockError, UsageError
from nvkr.fetch.mirrors import read_config
from nvkr.redact import redact_url

#: snapshot.debian.org's archives of Debian's own repositories
DEBIAN_SNAPSHOT: Final = "https://snapshot.debian.org/archive"
#: an import's name: its time in UTC
STAMP_FORMAT: Final = "%Y%m%dT%H%M%SZ"
_STAMP_RE: Final = re.compile(r"^\d{8}T\d{6}Z$")
#: a month listing's links to its imports
_LISTED_RE: Final = re.compile(r"""href=["']?(?:\./)?(\d{8}T\d{6}Z)/""")
_DEBIAN_HOSTS: Final = re.compile(r"^(deb|ftp|httpredir|ftp\.[a-z]{2})\.debian\.org$")


def lock_stamp(now: float | None = None) -> str:
    """The time ``now`` (default: the clock) as an import is named: ``YYYYMMDDTHHMMSSZ``."""
    return time.strftime(STAMP_FORMAT, time.gmtime(time.time() if now is None else now))


def parse_stamp(stamp: str, where: str) -> int:
    """Seconds since 1970 of a ``YYYYMMDDTHHMMSSZ`` stamp.

    Raises:
        LockError: ``stamp`` is not one (``where`` names the lock entry's field).
    """
    try:
        if not _STAMP_RE.match(stamp):
            raise ValueError(stamp)
        return calendar.timegm(time.strptime(stamp, STAMP_FORMAT))
    except ValueError:
        raise LockError(
            f"{where} is {stamp!r}, expected a UTC time YYYYMMDDTHHMMSSZ (20251201T091512Z)",
            hint="regenerate it with `nvkr lock`",
        ) from None


def month_listings(archive: str, stamp: str) -> list[str]:
    """The listings that may hold the first import at or after ``stamp``: its month's, then the
    next month's (the lock may have been taken after the month's last import)."""
    year, month = int(stamp[:4]), int(stamp[4:6])
    nxt = (year + 1, 1) if month == 12 else (year, month + 1)
    base = archive.rstrip("/")
    return [f"{base}/?year={y}&month={m:02d}" for y, m in ((year, month), nxt)]


def listed_imports(html: str) -> list[str]:
    """The import stamps a month listing links to, sorted."""
    return sorted(set(_LISTED_RE.findall(html)))


def first_at_or_after(imports: list[str], stamp: str) -> str | None:
    """The earliest of ``imports`` (stamps, which sort as times) not before ``stamp``."""
    later = [s for s in imports if s >= stamp]
    return min(later) if later else None


def debian_archive(url: str) -> str | None:
    """snapshot.debian.org's archive of a Debian repository URL (``deb.debian.org/debian``,
    ``ftp.<cc>.debian.org/debian``: ``.../archive/debian``; ``security.debian.org/debian-security``,
    ``deb.debian.org/debian-security``: ``.../archive/debian-security``), None for any other."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    path = parts.path.rstrip("/")
    if parts.scheme.lower() not in ("http", "https"):
        return None
    if path == "/debian" and _DEBIAN_HOSTS.match(host):
        return f"{DEBIAN_SNAPSHOT}/debian"
    if path == "/debian-security" and (host == "security.debian.org" or _DEBIAN_HOSTS.match(host)):
        return f"{DEBIAN_SNAPSHOT}/debian-security"
    return None


def _check_archive(value: str, where: str) -> str:
    if urlsplit(value).scheme.lower() not in ("http", "https", "file"):
        raise UsageError(
            f"{where}: {value!r} is not an http://, https:// or file:// URL of a snapshot archive",
            hint="name the archive's base, e.g. https://snapshot.debian.org/archive/debian",
        )
    return value.rstrip("/")


@dataclass(frozen=True)
class SnapshotArchives:
    """The config file's ``snapshots:``: ``(repository URL, archive URL)`` pairs, the URLs as
    written (credentials and all); a repository is matched without user info or trailing
    slash."""

    entries: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_config(cls, path: Path | None = None) -> SnapshotArchives:
        """The ``snapshots:`` list of an nvkr config file::

            snapshots:
              - {repository: "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
                 archive: "https://snapshot.internal/archive/cuda-debian12"}

        A missing file, or one without ``snapshots``, gives none.

        Raises:
            UsageError: the file is not valid YAML, or ``snapshots`` is not a list of
                ``{repository, archive}`` maps of non-empty strings, ``archive`` an http(s) or
                file URL.
        """
        data, where = read_config(path)
        raw = data.get("snapshots")
        if raw is None:
            return cls()
        if not isinstance(raw, list):
            raise UsageError(f"{where}: 'snapshots' must be a list of {{repository, archive}}")
        entries: list[tuple[str, str]] = []
        for i, item in enumerate(raw):
            if (
                not isinstance(item, dict)
                or set(item) != {"repository", "archive"}
                or not all(isinstance(v, str) and v for v in item.values())
            ):
                raise UsageError(
                    f"{where}: snapshots[{i}] must be a map with exactly the non-empty strings "
                    f"'repository' and 'archive', got {redact_url(repr(item))}"
                )
            archive = _check_archive(item["archive"], f"{where}: snapshots[{i}].archive")
            entries.append((item["repository"], archive))
        return cls(tuple(entries))

    def lookup(self, repository: str) -> str | None:
        """The archive a config entry names for ``repository`` (the last entry that does)."""
        want = _repo_key(repository)
        found = None
        for repo, archive in self.entries:
            if _repo_key(repo) == want:
                found = archive
        return found


def _repo_key(url: str) -> str:
    return redact_url(url).rstrip("/")


def archive_for(repository: Any, snapshots: SnapshotArchives) -> str | None:
    """The snapshot archive of a recipe's apt repository (an
    :class:`~nvkr.recipe.sources.AptRepository`), credentials and all: its ``snapshot``, else
    the config's entry for its URL, else snapshot.debian.org's for a Debian archive, else None."""
    named: str | None = repository.snapshot
    if named:
        return named.rstrip("/")
    return snapshots.lookup(repository.url) or debian_archive(repository.url)


def entry_snapshot(source: Any, snapshots: SnapshotArchives, stamp: str) -> dict[str, Any]:
    """The ``snapshot`` member of an apt source's lock entry: ``{"time": stamp, "archives":
    {repository: archive URL without user info}}`` (a repository without one is left out)."""
    archives = {}
    for name, repo in sorted(source.apt.items()):
        archive = archive_for(repo, snapshots)
        if archive:
            archives[name] = redact_url(archive)
    return {"time": stamp, "archives": archives}


def keep_lock_times(sources: list[dict[str, Any]], old: list[dict[str, Any]]) -> None:
    """Give each apt entry of ``sources`` (a new lock document's) the lock time of the entry
    of ``old`` (the lockfile it replaces) with the same name, spec, package manifest and
    archives: the mirror served that very set then too, so the time is as good, and a lock
    that changed nothing leaves the lockfile as it was (no time moving on every run)."""
    before: dict[str, dict[str, Any]] = {}
    for entry in old:
        resolved = entry.get("resolved")
        if isinstance(resolved, dict) and isinstance(resolved.get("snapshot"), dict):
            before[_same_set(entry, resolved)] = resolved["snapshot"]
    for entry in sources:
        resolved = entry.get("resolved")
        if not isinstance(resolved, dict) or not isinstance(resolved.get("snapshot"), dict):
            continue
        was = before.get(_same_set(entry, resolved))
        if (
            was is not None
            and was.get("archives") == resolved["snapshot"].get("archives")
            and isinstance(was.get("time"), str)
        ):
            resolved["snapshot"] = {**resolved["snapshot"], "time": was["time"]}


def _same_set(entry: dict[str, Any], resolved: dict[str, Any]) -> str:
    """What two lock documents' entries of one set share: name, spec and manifest digest."""
    return json.dumps(
        [entry.get("name"), entry.get("spec"), resolved.get("digest")], sort_keys=True
    )
