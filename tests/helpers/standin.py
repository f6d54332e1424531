"""A misbehaving registry on loopback: :func:`standin` answers each request from a script.

For answers CNCF distribution never gives (or gives only under load): 429 with a ``Retry-After``,
400 ``DIGEST_INVALID`` on every push, 403, a manifest, index, tag list or token of a gigabyte.
A rule is ``(method, path regex) -> Answer``; the first rule whose method and regex match the
request's path answers it, anything else is a 404. Every request is logged (method, path), so a
test counts them. Bounded: a huge body is written in blocks only while the client reads (the
client hanging up ends it) and never beyond :data:`MAX_SENT` bytes; the server thread stops with
the context.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_SENT = 64 << 20  # bytes a huge answer writes at most (the client should stop at 4 MiB)
BLOCK = 1 << 16


@dataclass
class Answer:
    """``status`` with ``headers`` and ``body``; ``size`` > len(body) repeats body to that many
    bytes (announced in Content-Length, sent while the client reads)."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    size: int | None = None
    times: int | None = None  # answer this many requests, then let later rules answer


def error(status: int, code: str, message: str = "", detail: str | None = None) -> Answer:
    """A distribution-spec error answer (``{"errors": [{"code", "message", "detail"}]}``)."""
    err: dict[str, str] = {"code": code, "message": message or code.lower().replace("_", " ")}
    if detail is not None:
        err["detail"] = detail
    body = json.dumps({"errors": [err]}).encode()
    return Answer(status, body, {"Content-Type": "application/json"})


@dataclass
class StandIn:
    """A running stand-in: ``host`` is ``127.0.0.1:PORT``; ``log`` the requests seen."""

    host: str
    rules: list[tuple[str, str, Answer]]
    log: list[tuple[str, str]] = field(default_factory=list)
    sent: int = 0  # bytes of bodies written

    def count(self, method: str, path: str = "") -> int:
        return sum(1 for m, p in self.log if m == method and re.search(path, p))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self) -> None:
        standin = self.server.standin
        standin.log.append((self.command, self.path))
        if length := int(self.headers.get("Content-Length") or 0):
            self.rfile.read(length)
        answer = next(
            (
                a
                for m, p, a in standin.rules
                if m == self.command and re.search(p, self.path) and a.times != 0
            ),
            Answer(404, b'{"errors":[{"code":"NAME_UNKNOWN","message":"unknown"}]}'),
        )
        if answer.times is not None:
            answer.times -= 1
        size = len(answer.body) if answer.size is None else answer.size
        self.send_response(answer.status)
        for k, v in answer.headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        if self.command == "HEAD" or not answer.body:
            return
        if answer.size is None:
            self.wfile.write(answer.body)
            standin.sent += len(answer.body)
            return
        left = min(size, MAX_SENT)
        block = (answer.body * (BLOCK // len(answer.body) + 1))[:BLOCK]
        try:
            while left > 0:
                n = min(left, BLOCK)
                self.wfile.write(block[:n])
                standin.sent += n
                left -= n
        except OSError:
            pass
        self.close_connection = True  # a body cut short leaves the connection unusable

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    standin: StandIn


@contextmanager
def standin(rules: list[tuple[str, str, Answer]]) -> Iterator[StandIn]:
    """Serve ``rules`` on 127.0.0.1 (a free port) for the duration of the context."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.standin = StandIn(f"127.0.0.1:{server.server_address[1]}", rules)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.standin
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
