"""``nvkr mirror serve DIR``: ``GET``/``HEAD /<host>/<path>`` answered with the blob whose
upstream was ``http(s)://<host>/<path>`` (OCI documents and blobs, each url source's checksum
file built from the lock; 404 otherwise), and the ``--mirror`` flags and config snippet that
point the ordinary fetch path at it.
"""

from __future__ import annotations

import contextlib
import http.server
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from nvkr.airgap.index import READ_CHUNK, read_index
from nvkr.canonical import hex_of
from nvkr.errors import UsageError
from nvkr.fetch.api import known_kind
from nvkr.yamlemit import double_quoted


# -- serve -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Served:
    """One path the mirror answers: the blob file (or inline bytes) and its headers."""

    path: Path | None
    data: bytes | None
    size: int
    content_type: str
    digest: str | None


def serve_table(directory: Path, index: dict[str, Any]) -> tuple[dict[str, Served], list[str]]:
    """``/<host>/<path>`` → what to answer, and the upstream prefixes (``https://host/``) served.

    Every blob with upstream URLs, each url source's checksum file, and what a source's kind
    answers beside its blobs (:meth:`~nvkr.fetch.kind.SourceKind.mirror_roots`: ``/<registry>/v2/``
    for each registry an oci source came from, the API version check).
    """
    table: dict[str, Served] = {}
    prefixes: set[str] = set()
    blobs = directory / "blobs" / "sha256"

    def add(url: str, served: Served) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return
        table[f"/{parts.netloc}{unquote(parts.path)}"] = served
        prefixes.add(f"{parts.scheme}://{parts.netloc}/")

    for source in index["sources"]:
        kind = known_kind(source.get("kind"))
        for blob in source["blobs"]:
            media = blob.get("mediaType") or "application/octet-stream"
            for url in blob.get("urls") or []:
                served = Served(
                    blobs / hex_of(blob["digest"]), None, blob["size"], media, blob["digest"]
                )
                add(url, served)
                for root in kind.mirror_roots(url) if kind is not None else []:
                    add(root, Served(None, b"{}", 2, "application/json", None))
        checksum = source.get("checksum")
        if isinstance(checksum, dict):
            text = str(checksum["text"]).encode()
            add(str(checksum["url"]), Served(None, text, len(text), "text/plain", None))
    return table, sorted(prefixes)


def mirror_flags(prefixes: list[str], base_url: str) -> list[str]:
    """``--mirror https://host/=http://127.0.0.1:PORT/host/`` for each upstream prefix."""
    return [f"--mirror {p}={base_url}/{urlsplit(p).netloc}/" for p in prefixes]


def config_snippet(prefixes: list[str], base_url: str) -> str:
    """The same mirrors as an nvkr config file ``mirrors:`` list (YAML)."""
    lines = ["mirrors:"]
    for p in prefixes:
        rep = f"{base_url}/{urlsplit(p).netloc}/"
        lines.append(f"  - {{prefix: {double_quoted(p)}, replacement: {double_quoted(rep)}}}")
    return "\n".join(lines) + "\n"


def make_server(
    directory: Path, host: str = "127.0.0.1", port: int = 0
) -> tuple[http.server.ThreadingHTTPServer, list[str]]:
    """A (not yet started) HTTP server answering the export's upstream URL layout, and the
    upstream prefixes it stands in for. ``GET`` and ``HEAD`` only; unknown paths (directories
    included) are 404.

    Raises:
        UsageError, IntegrityError: as :func:`read_index`; UsageError when the address is taken.
    """
    table, prefixes = serve_table(directory, read_index(directory))

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "nvkr-mirror"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _answer(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            served = table.get(path)
            if served is None:
                self.send_response(404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", "10")
                self.end_headers()
                if body:
                    self.wfile.write(b"not found\n")
                return
            self.send_response(200)
            self.send_header("Content-Type", served.content_type)
            self.send_header("Content-Length", str(served.size))
            if served.digest:
                self.send_header("Docker-Content-Digest", served.digest)
            self.end_headers()
            if not body:
                return
            if served.data is not None:
                self.wfile.write(served.data)
                return
            assert served.path is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError), open(served.path, "rb") as f:  # fmt: skip
                shutil.copyfileobj(f, self.wfile, READ_CHUNK)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

    try:
        server = http.server.ThreadingHTTPServer((host, port), Handler)
    except OSError as e:
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    server.daemon_threads = True
    return server, prefixes


@contextlib.contextmanager
def serving(directory: Path, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Serve ``directory`` in a background thread; yields its base URL ``http://HOST:PORT``."""
    import threading

    server, _ = make_server(directory, host, port)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
