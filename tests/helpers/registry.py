"""Test fixtures for registry work: a real CNCF distribution registry and a fault-injecting proxy.

``registry`` / ``auth_registry`` start ``/usr/bin/docker-registry serve CONFIG`` (Debian's
docker-registry, distribution 2.8; install.sh installs it) on 127.0.0.1 with a temp storage dir,
once per test module; a missing binary fails the test, it never skips. ``auth_registry`` wants
htpasswd basic auth as user :data:`USER` / :data:`PASSWORD`: the bcrypt entry is checked in
(cost 4, so each request's check is quick), so neither ``htpasswd`` (apache2-utils) nor a bcrypt
module is needed.

:class:`FaultProxy` sits between nvkr and a registry on loopback and forwards every request,
except that :class:`Fault` rules make it drop the connection before forwarding, drop it halfway
through the request body (the registry gets half a chunk), answer a status itself (500, 429,
412), forward but drop the response, truncate the response body, flip a byte of it (a
registry serving other bytes than a digest names), or rewrite the ``Docker-Content-Digest`` the
registry answered. It can also rewrite ``Location`` headers to
relative ones, play a bearer-token gate (its own ``/token``, or a ``realm`` elsewhere) or a basic
auth gate, and play a registry whose blobs live on a storage host: upload ``Location`` headers
name another proxy, blob reads answer 307 to it. It logs the ``Authorization`` each request
carried, and serves TLS when given a certificate (:mod:`tests.helpers.tls`). A plugin of
tests/conftest.py: a test names the fixtures it uses as parameters.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

REGISTRY_BIN = Path("/usr/bin/docker-registry")
USER = "nvkr"
PASSWORD = "s3cret"
# bcrypt of PASSWORD, cost 4 (distribution accepts only bcrypt entries in htpasswd files)
HTPASSWD = f"{USER}:$2b$04$ROg9LFnp9EwMX1VttsKsVeHA3HUpqsQJgufaNIa95Hhksn60vDVuW\n"


@dataclass
class Registry:
    """A running registry: ``host`` is ``127.0.0.1:PORT``; blobs live under ``storage``."""

    host: str
    storage: Path
    auth: bool = False

    def blob_data(self, digest: str) -> Path:
        hexpart = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexpart[:2] / hexpart / "data"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _answers(host: str) -> bool:
    conn = http.client.HTTPConnection(host, timeout=2)
    try:
        conn.request("GET", "/v2/")
        return conn.getresponse().status in (200, 401)
    except OSError:
        return False
    finally:
        conn.close()


@contextlib.contextmanager
def run_registry(root: Path, *, auth: bool = False) -> Iterator[Registry]:
    """Start distribution on a free loopback port with storage under ``root``; stop it after."""
    if not REGISTRY_BIN.is_file():
        pytest.fail(
            f"{REGISTRY_BIN} is missing: publishing is tested against CNCF distribution; "
            "install it with `apt-get install docker-registry` (install.sh does)"
        )
    root.mkdir(parents=True, exist_ok=True)
    host = f"127.0.0.1:{free_port()}"
    config = root / "config.yml"
    text = (
        "version: 0.1\n"
        "log: {level: error, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}\n"
        f"http: {{addr: {host}}}\n"
    )
    if auth:
        (root / "htpasswd").write_text(HTPASSWD)
        text += f"auth: {{htpasswd: {{realm: nvkr-test, path: {root / 'htpasswd'}}}}}\n"
    config.write_text(text)
    with open(root / "registry.log", "wb") as log:
        proc = subprocess.Popen([REGISTRY_BIN, "serve", config], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not _answers(host):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"docker-registry did not start: {(root / 'registry.log').read_text()}")
            time.sleep(0.05)
        yield Registry(host=host, storage=root / "data", auth=auth)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """distribution 2.8 without auth, for the test module."""
    with run_registry(tmp_path_factory.mktemp("registry")) as reg:
        yield reg


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """distribution 2.8 behind htpasswd basic auth (:data:`USER` / :data:`PASSWORD`)."""
    with run_registry(tmp_path_factory.mktemp("auth-registry"), auth=True) as reg:
        yield reg


# -- the fault-injecting proxy --------------------------------------------------------------------
ACTIONS = frozenset(
    {"drop", "drop-mid-body", "drop-response", "status", "truncate", "corrupt", "digest"}
)


@dataclass
class Fault:
    """Hit the ``nth`` request matching ``method`` and the ``path`` regex (searched in the path
    and query), and the ``times - 1`` matching ones after it (``times`` 0: every one after it).

    ``action``: ``drop`` (close before forwarding), ``drop-mid-body`` (forward half the request
    body, then close both sides), ``drop-response`` (forward it all, close without answering),
    ``status`` (answer ``status`` without forwarding; 429 carries ``Retry-After: 0``),
    ``truncate`` (forward; send half the response body under the full Content-Length),
    ``corrupt`` (forward; flip one bit of the middle byte of the response body),
    ``digest`` (forward; answer another ``Docker-Content-Digest``).
    """

    action: str
    method: str | None = None
    path: str | None = None
    nth: int = 1
    times: int = 1
    status: int = 500
    code: str = "UNKNOWN"  # the distribution-spec error code of a ``status`` answer
    body: bytes | None = None  # a ``status`` answer's body instead of that error
    seen: int = 0
    fired: int = 0

    def __post_init__(self) -> None:
        assert self.action in ACTIONS, self.action

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and method != self.method:
            return False
        if self.path is not None and not re.search(self.path, path):
            return False
        self.seen += 1
        if self.seen < self.nth or (self.times and self.fired >= self.times):
            return False
        self.fired += 1
        return True


@dataclass
class Logged:
    method: str
    path: str
    action: str  # "forward", "redirect" or the fault's action
    status: int | None = None
    authorization: str | None = None  # the request's Authorization header


_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te"})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def do_GET(self) -> None:
        self._handle()

    do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _abort(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, (1).to_bytes(4, sys.byteorder) * 2
            )
            self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self, length: int) -> None:
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 16))
            if not chunk:
                break
            length -= len(chunk)

    def _answer(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        proxy = self.server.proxy
        method, path = self.command, self.path
        length = int(self.headers.get("Content-Length") or 0)
        if (proxy.bearer or proxy.basic) and self._gate(path, length):
            return
        fault = proxy.match(method, path)
        action = fault.action if fault else "forward"
        entry = Logged(method, path, action, authorization=self.headers.get("Authorization"))
        blob_read = method in ("GET", "HEAD") and re.match(r"/v2/.+/blobs/sha256:\w{64}$", path)
        if proxy.storage and proxy.redirect_blobs and fault is None and blob_read:
            entry.action, entry.status = "redirect", 307
            proxy.log_request(entry)
            self._answer(307, b"", {"Location": proxy.storage + path})
            return
        proxy.log_request(entry)
        if proxy.hook is not None:
            proxy.hook(entry)
        if action == "drop":
            self._abort()
            return
        if action == "status" and fault is not None:
            self._read_body(length)
            entry.status = fault.status
            extra = {"Retry-After": "0"} if fault.status == 429 else {}
            error = {"code": fault.code, "message": "injected"}
            body = fault.body or json.dumps({"errors": [error]}).encode()
            self._answer(fault.status, body, {"Content-Type": "application/json", **extra})
            return
        upstream = http.client.HTTPConnection(proxy.upstream, timeout=60)
        try:
            resp, body = self._forward(upstream, method, path, length, action)
        except OSError:
            upstream.close()
            self._abort()
            return
        upstream.close()
        if resp is None:
            return
        entry.status = resp.status
        if action == "drop-response":
            self._abort()
            return
        self._reply(resp, body, action)

    def _forward(
        self, upstream: http.client.HTTPConnection, method: str, path: str, length: int, action: str
    ) -> tuple[http.client.HTTPResponse | None, bytes]:
        proxy = self.server.proxy
        upstream.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        gated = proxy.bearer or proxy.basic is not None
        for k, v in self.headers.items():
            if k.lower() not in _HOP and not (gated and k.lower() == "authorization"):
                upstream.putheader(k, v)
        upstream.endheaders()
        left = length
        cut = length // 2 if action == "drop-mid-body" else None
        while left > 0:
            chunk = self.rfile.read(min(left, 1 << 16))
            if not chunk:
                break
            if cut is not None and length - left + len(chunk) >= cut:
                upstream.send(chunk[: cut - (length - left)])
                upstream.close()  # the registry sees its request body end early
                self._abort()
                return None, b""
            upstream.send(chunk)
            left -= len(chunk)
        resp = upstream.getresponse()
        return resp, resp.read()

    def _reply(self, resp: http.client.HTTPResponse, body: bytes, action: str) -> None:
        proxy = self.server.proxy
        headers = {k: v for k, v in resp.getheaders() if k.lower() not in _HOP}
        headers.pop("Content-Length", None)
        if action == "digest" and "Docker-Content-Digest" in headers:
            real = headers["Docker-Content-Digest"]
            headers["Docker-Content-Digest"] = "sha256:" + ("0" if real[-1] != "0" else "1") * 64
        if proxy.relative_locations and "Location" in headers:
            parts = urlsplit(headers["Location"])
            headers["Location"] = parts.path + (f"?{parts.query}" if parts.query else "")
        if proxy.storage and self.command == "POST" and "Location" in headers:
            # an upload the registry opened goes on at the storage host (another origin)
            parts = urlsplit(headers["Location"])
            headers["Location"] = (
                proxy.storage + parts.path + (f"?{parts.query}" if parts.query else "")
            )
        if action == "corrupt" and body:
            middle = len(body) // 2
            body = body[:middle] + bytes([body[middle] ^ 1]) + body[middle + 1 :]
        if action == "truncate" and self.command != "HEAD":
            self.send_response(resp.status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            self._abort()
            return
        if self.command == "HEAD":
            self.send_response(resp.status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", resp.getheader("Content-Length", "0"))
            self.end_headers()
            return
        self._answer(resp.status, body, headers)

    def _gate(self, path: str, length: int) -> bool:
        """Bearer mode: serve ``/token`` and refuse requests without the token; basic mode:
        refuse requests without the credentials. True: answered."""
        proxy = self.server.proxy
        url = urlsplit(path)
        given = self.headers.get("Authorization")
        if proxy.bearer and url.path == "/token":
            with proxy.lock:
                proxy.token_requests.append(parse_qs(url.query))
                proxy.token_auth.append(given)
            self._answer(200, json.dumps({"token": "t0ken"}).encode(), {})
            return True
        if proxy.basic is not None:
            pair = base64.b64encode(":".join(proxy.basic).encode()).decode()
            if given == f"Basic {pair}":
                return False
            with proxy.lock:
                proxy.challenged.append(given)
            self._read_body(length)
            self._answer(401, b'{"errors":[]}', {"WWW-Authenticate": 'Basic realm="nvkr-test"'})
            return True
        if given == "Bearer t0ken":
            return False
        with proxy.lock:
            proxy.challenged.append(given)
        self._read_body(length)
        m = re.match(r"/v2/(.+)/(?:blobs|manifests|tags|referrers)/", url.path)
        scope = f"repository:{m.group(1)}:pull,push" if m else ""
        realm = proxy.realm or f"{proxy.scheme}://{proxy.host}/token"
        challenge = f'Bearer realm="{realm}",service="nvkr-test"'
        if scope:
            challenge += f',scope="{scope}"'
        self._answer(401, b'{"errors":[]}', {"WWW-Authenticate": challenge})
        return True


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy


@dataclass
class FaultProxy:
    """A loopback HTTP proxy in front of ``upstream`` (``host:port``); see :class:`Fault`."""

    upstream: str
    host: str = ""
    scheme: str = "http"  # "https" when run_proxy was given a certificate
    faults: list[Fault] = field(default_factory=list)
    log: list[Logged] = field(default_factory=list)
    relative_locations: bool = False
    #: a bearer-token gate: 401 with a challenge naming ``realm`` (default: this proxy's
    #: ``/token``, which hands out ``t0ken`` to anyone) until a request carries that token
    bearer: bool = False
    realm: str | None = None
    #: a basic auth gate: 401 until a request carries these (user, password)
    basic: tuple[str, str] | None = None
    token_requests: list[dict[str, list[str]]] = field(default_factory=list)
    token_auth: list[str | None] = field(default_factory=list)  # each /token request's
    challenged: list[str | None] = field(default_factory=list)  # what each refused one carried
    #: ``scheme://host:port`` of a storage host (another proxy in front of the same registry):
    #: upload Locations are rewritten to it, and with ``redirect_blobs`` blob reads answer 307
    storage: str | None = None
    redirect_blobs: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: called with each request's log entry before it is handled (e.g. to kill a client)
    hook: Callable[[Logged], None] | None = None

    def add(self, action: str, **kw: Any) -> Fault:
        fault = Fault(action, **kw)
        with self.lock:
            self.faults.append(fault)
        return fault

    def kill_from(self, n: int) -> Fault:
        """Drop the ``n``-th request (1-based, counting from now) and every one after it."""
        return self.add("drop", nth=n, times=0)

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.log.clear()

    def match(self, method: str, path: str) -> Fault | None:
        with self.lock:
            hit = None
            for fault in self.faults:
                if fault.matches(method, path) and hit is None:
                    hit = fault
            return hit

    def log_request(self, entry: Logged) -> None:
        with self.lock:
            self.log.append(entry)

    def requests(self, method: str | None = None, path: str = "") -> list[Logged]:
        with self.lock:
            return [
                e
                for e in self.log
                if (method is None or e.method == method) and re.search(path, e.path)
            ]


@contextlib.contextmanager
def run_proxy(upstream: str, *, tls: tuple[Path, Path] | None = None) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` on a free loopback port in front of ``upstream``; with ``tls``
    (cert, key from :func:`tests.helpers.tls.self_signed`) it speaks HTTPS."""
    server = _ProxyServer(("127.0.0.1", 0), _Handler)
    proxy = FaultProxy(upstream=upstream, host=f"127.0.0.1:{server.server_address[1]}")
    if tls is not None:
        from tests.helpers.tls import serve_tls

        serve_tls(server, *tls)
        proxy.scheme = "https"
    server.proxy = proxy
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the retry policies (counts, statuses), not their sleeps: the registry client's and
    the HTTP fetcher's (autouse: registered as a plugin). Loopback bypasses any proxy through
    :mod:`tests.helpers.isolation`."""
    monkeypatch.setattr("nvkr.oci.session.BACKOFF", 0.0)
    monkeypatch.setattr("nvkr.fetch.http.BACKOFF", 0.0)


@pytest.fixture
def proxy(registry: Registry) -> Iterator[FaultProxy]:
    """A fault proxy in front of ``registry``, fresh per test."""
    with run_proxy(registry.host) as p:
        yield p


# -- referees ---------------------------------------------------------------------------------------
def skopeo(*args: str) -> str:
    """Run skopeo (policy checks off); fail the test with its stderr when it fails."""
    if not shutil.which("skopeo"):
        pytest.fail("skopeo is not installed: run ./install.sh")
    proc = subprocess.run(
        ["skopeo", "--insecure-policy", *args], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def nvkr_cli(*args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> Any:
    """Run ``python -m nvkr ARGS`` in a subprocess, as a user would; the CompletedProcess (text)."""
    import os

    return subprocess.run(
        [sys.executable, "-m", "nvkr", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=600,
        check=False,
    )
