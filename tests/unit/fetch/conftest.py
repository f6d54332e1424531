"""Fixtures for the fetch tests: a store, loopback HTTP(S) servers with misbehaving and redirecting
routes (one on 127.0.0.2, another host), git repositories made with the git CLI, and wheels for
a PEP 503 index served over loopback.

Nothing here touches the outside network. Helpers are handed out as fixtures (not imported by
the test modules), so the tests work under any pytest import mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import subprocess
import threading
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nvkr.fetch.context import FetchContext
from nvkr.store import Store
from tests.helpers.tls import self_signed, serve_tls


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "store")


@pytest.fixture
def ctx(store: Store) -> FetchContext:
    return FetchContext(store=store)


def _snapshot(store: Store) -> tuple[list[str], list[str]]:
    return sorted(p.name for p in store.blobs_dir.iterdir()), sorted(
        p.name for p in store.tmp_dir.iterdir()
    )


@pytest.fixture
def snapshot() -> Callable[[Store], tuple[list[str], list[str]]]:
    """What ``blobs/`` and ``tmp/`` hold (names), to show a failure left nothing behind."""
    return _snapshot


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def free_port() -> int:
    """A port nothing listens on (bound, then released): connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# -- HTTP server -------------------------------------------------------------------------------
@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    content_type: str = "application/octet-stream"
    fail_first: int = 0  # answer fail_status this many times before the real answer
    fail_status: int = 500
    fail_headers: dict[str, str] = field(default_factory=dict)
    claim_length: int | None = None  # a Content-Length larger than the body: a truncated download
    redirect: str | None = None  # answer ``status`` (default 302) with this Location instead
    hits: int = 0
    auth: list[str | None] = field(default_factory=list)  # each hit's Authorization header
    require_auth: str | None = None  # answer 401 unless the Authorization header is this


@dataclass
class Server:
    port: int
    routes: dict[str, Route] = field(default_factory=dict)
    host: str = "127.0.0.1"
    scheme: str = "http"

    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    def add(self, path: str, body: bytes = b"", **kw: Any) -> str:
        self.routes[path] = Route(body=body, **kw)
        return self.url(path)

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        """A route answering ``status`` with ``Location: location``; its URL."""
        return self.add(path, redirect=location, status=status)

    @property
    def total_hits(self) -> int:
        return sum(r.hits for r in self.routes.values())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def do_GET(self) -> None:
        route = self.server.spec.routes.get(self.path.split("?", 1)[0])
        if route is None:
            self._answer(404, b"not found\n", "text/plain")
            return
        route.hits += 1
        route.auth.append(self.headers.get("Authorization"))
        if (
            route.require_auth is not None
            and self.headers.get("Authorization") != route.require_auth
        ):
            self._answer(
                401, b"who are you?\n", "text/plain", headers={"WWW-Authenticate": "Basic"}
            )
            return
        if route.redirect is not None:
            status = route.status if 300 <= route.status < 400 else 302
            self._answer(status, b"", "text/plain", headers={"Location": route.redirect})
            return
        if route.hits <= route.fail_first:
            self._answer(
                route.fail_status, b"try again\n", "text/plain", headers=route.fail_headers
            )
            return
        self._answer(route.status, route.body, route.content_type, route.claim_length)

    def _answer(
        self,
        status: int,
        body: bytes,
        content_type: str,
        claim: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(claim if claim is not None else len(body)))
        if claim is not None:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    spec: Server


@contextlib.contextmanager
def _serve(host: str = "127.0.0.1", tls: tuple[Path, Path] | None = None) -> Iterator[Server]:
    httpd = _HTTPServer((host, 0), _Handler)
    httpd.spec = Server(port=httpd.server_address[1], host=host)
    if tls is not None:
        serve_tls(httpd, *tls)
        httpd.spec.scheme = "https"
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    try:
        yield httpd.spec
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def http_server() -> Iterator[Server]:
    with _serve() as server:
        yield server


@pytest.fixture
def other_port() -> Iterator[Server]:
    """A second HTTP server on 127.0.0.1: the same host as :func:`http_server`, another port."""
    with _serve() as server:
        yield server


@pytest.fixture
def other_host() -> Iterator[Server]:
    """An HTTP server on 127.0.0.2: another host than :func:`http_server`'s 127.0.0.1."""
    with _serve("127.0.0.2") as server:
        yield server


@pytest.fixture
def tls_cert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and 127.0.0.2 that requests trusts (REQUESTS_CA_BUNDLE)."""
    cert, key = self_signed(tmp_path / "tls")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))
    return cert, key


@pytest.fixture
def https_server(tls_cert: tuple[Path, Path]) -> Iterator[Server]:
    """An HTTPS server on 127.0.0.1 whose certificate requests trusts."""
    with _serve(tls=tls_cert) as server:
        yield server


@pytest.fixture
def https_other_host(tls_cert: tuple[Path, Path]) -> Iterator[Server]:
    """An HTTPS server on 127.0.0.2."""
    with _serve("127.0.0.2", tls=tls_cert) as server:
        yield server


# -- git ---------------------------------------------------------------------------------------
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def _git(repo: Path, *args: str, date: int = 1_700_000_000) -> str:
    env = {
        **os.environ,
        **GIT_ENV,
        "GIT_AUTHOR_DATE": f"@{date} +0000",
        "GIT_COMMITTER_DATE": f"@{date} +0000",
    }
    out = subprocess.run(
        ["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


@pytest.fixture
def git() -> Callable[..., str]:
    """``git(repo, *args, date=EPOCH)``: run git with a fixed identity and dates; its stdout."""
    return _git


@dataclass
class Repo:
    path: Path
    commits: list[str]
    times: list[int]

    @property
    def url(self) -> str:
        return self.path.as_uri()


@pytest.fixture
def git_repo(tmp_path: Path) -> Repo:
    """A repository with two commits on main:

    1. ``README``, ``tool/run.sh`` (executable), ``tool/data.txt``, a symlink ``link -> README``
    2. adds ``tool/new.txt`` and changes ``README``
    """
    git = _git
    path = tmp_path / "upstream"
    path.mkdir()
    git(path, "-c", "init.defaultBranch=main", "init", "-q")
    (path / "README").write_text("hello\n")
    (path / "tool").mkdir()
    (path / "tool" / "run.sh").write_text("#!/bin/sh\necho run\n")
    (path / "tool" / "run.sh").chmod(0o755)
    (path / "tool" / "data.txt").write_text("data\n")
    (path / "link").symlink_to("README")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "one", date=1_700_000_000)
    first = git(path, "rev-parse", "HEAD")
    (path / "README").write_text("hello again\n")
    (path / "tool" / "new.txt").write_text("new\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "two", date=1_700_000_100)
    second = git(path, "rev-parse", "HEAD")
    return Repo(path=path, commits=[first, second], times=[1_700_000_000, 1_700_000_100])


# -- wheels ------------------------------------------------------------------------------------
def _make_wheel(
    name: str, version: str, tag: str = "py3-none-any", files: dict[str, bytes] | None = None
) -> tuple[str, bytes]:
    """A minimal valid wheel: (file name, bytes). Fixed zip timestamps, so the bytes are stable."""
    dist = f"{name.replace('-', '_')}-{version}"
    members = dict(files or {})
    members[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    members[f"{dist}.dist-info/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: nvkr-tests\nRoot-Is-Purelib: true\nTag: {tag}\n".encode()
    )
    record = "".join(f"{n},,\n" for n in members) + f"{dist}.dist-info/RECORD,,\n"
    members[f"{dist}.dist-info/RECORD"] = record.encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            info = zipfile.ZipInfo(member, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return f"{dist}-{tag}.whl", buf.getvalue()


@pytest.fixture
def make_wheel() -> Callable[..., tuple[str, bytes]]:
    """``make_wheel(name, version, tag="py3-none-any", files=None)`` -> (file name, bytes)."""
    return _make_wheel


def _serve_index(server: Server, project: str, wheels: list[tuple[str, bytes]]) -> str:
    """Serve ``wheels`` under a PEP 503 simple index on ``server``; return the index URL."""
    links = []
    for filename, data in wheels:
        server.add(f"/files/{filename}", data)
        links.append(f'<a href="/files/{filename}#sha256={sha256(data)}">{filename}</a><br>')
    page = "<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n"
    server.add(f"/simple/{project}/", page.encode(), content_type="text/html")
    return server.url("/simple/")


@pytest.fixture
def serve_index() -> Callable[[Server, str, list[tuple[str, bytes]]], str]:
    """``serve_index(server, project, wheels)`` -> the simple index URL."""
    return _serve_index


@pytest.fixture
def isolated_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the machine's pip configuration (extra indexes, find-links) out of a test's pip runs.

    nvkr passes ``PIP_*`` through to pip, so these reach it; only this test's environment changes.
    """
    for key in list(os.environ):
        if key.startswith("PIP_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if anything opens a socket, builds an HTTP session or runs a tool."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"network or tool used on the fast path: {args!r}")

    import requests

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(requests, "Session", refuse)
    monkeypatch.setattr("nvkr.fetch.git.run", refuse)
    monkeypatch.setattr("nvkr.fetch.pypi.run", refuse)
