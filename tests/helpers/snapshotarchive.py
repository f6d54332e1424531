"""A snapshot archive on loopback, laid out and answering as snapshot.debian.org does (the
shape nvkr's fallback relies on, :mod:`nvkr.fetch.snapshots`):

- ``/archive/<name>/<stamp>/<path>``: the file as the import ``<stamp>`` holds it (404 when it
  does not); a ``<stamp>`` between imports redirects (302) to the canonical import before it,
  and one before every import is a 404;
- ``/archive/<name>/?year=YYYY&month=MM``: an HTML page linking each import of that month as
  ``<a href="YYYYMMDDTHHMMSSZ/">``.

An import is a directory (``root/<name>/<stamp>/``) filled with :meth:`SnapshotArchive.add_import`
from a repository's files. ``requests`` lists every path asked for.
"""

from __future__ import annotations

import calendar
import http.server
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import pytest

STAMP = "%Y%m%dT%H%M%SZ"


def stamp_of(seconds: float) -> str:
    return time.strftime(STAMP, time.gmtime(seconds))


def seconds_of(stamp: str) -> int:
    return calendar.timegm(time.strptime(stamp, STAMP))


class SnapshotArchive:
    """Archives (``name``) of imports (``stamp`` -> directory) served on 127.0.0.1."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        archive = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                archive.requests.append(self.path)
                archive.answer(self)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def archive_url(self, name: str) -> str:
        return f"{self.url}/archive/{name}"

    def imports(self, name: str) -> list[str]:
        d = self.root / name
        return sorted(p.name for p in d.iterdir()) if d.is_dir() else []

    def add_import(self, name: str, stamp: str, files: dict[str, bytes | Path]) -> Path:
        """An import ``stamp`` of archive ``name`` holding ``files`` (path in the repository ->
        bytes, or a file to copy)."""
        top = self.root / name / stamp
        top.mkdir(parents=True, exist_ok=True)
        for rel, data in files.items():
            dest = top / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(data, Path):
                shutil.copyfile(data, dest)
            else:
                dest.write_bytes(data)
        return top

    def answer(self, h: http.server.BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        segs = [unquote(s) for s in parts.path.split("/") if s]
        if len(segs) < 2 or segs[0] != "archive":
            return self._send(h, 404, b"not found")
        name = segs[1]
        if len(segs) == 2:  # a month's listing
            query = parse_qs(parts.query)
            year, month = query.get("year", [""])[0], query.get("month", [""])[0]
            prefix = f"{int(year):04d}{int(month):02d}" if year and month else ""
            links = "".join(
                f'<a href="{s}/">{s}</a><br />\n'
                for s in self.imports(name)
                if s.startswith(prefix)
            )
            body = f"<html><body><p>{name}</p>\n{links}</body></html>\n".encode()
            return self._send(h, 200, body, "text/html; charset=utf-8")
        stamp, rel = segs[2], "/".join(segs[3:])
        known = self.imports(name)
        if stamp not in known:
            before = [s for s in known if s <= stamp]
            if not before:
                return self._send(h, 404, b"no import before that time")
            target = f"/archive/{name}/{max(before)}/{rel}"
            h.send_response(302)
            h.send_header("Location", target)
            h.send_header("Content-Length", "0")
            h.end_headers()
            return None
        path = self.root / name / stamp / rel
        if not path.is_file():
            return self._send(h, 404, b"not found")
        return self._send(h, 200, path.read_bytes(), "application/vnd.debian.binary-package")

    @staticmethod
    def _send(
        h: http.server.BaseHTTPRequestHandler,
        status: int,
        body: bytes,
        content_type: str = "text/plain",
    ) -> None:
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def snapshot_archive(tmp_path: Path) -> Iterator[SnapshotArchive]:
    """A served, empty :class:`SnapshotArchive` (add imports with ``add_import``)."""
    archive = SnapshotArchive(tmp_path / "snapshot-archive")
    try:
        yield archive
    finally:
        archive.close()
