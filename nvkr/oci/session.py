"""The transport and authentication of one OCI registry: :class:`RegistrySession`.

:class:`~nvkr.oci.registry.RegistryClient` (manifests, referrers, tags) is built on
:class:`~nvkr.oci.blobs.BlobTransfer` (blobs), built on this: one ``requests`` session per
registry, requests retried with backoff, redirects followed one checked hop at a time, and the
registry's ``WWW-Authenticate`` challenge answered (Basic, or a Bearer token per scope), with
credentials kept to the registry's origin (the whole contract is in :mod:`nvkr.oci.registry`).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any, Final, Self
from urllib.parse import urljoin, urlsplit

from nvkr import __version__
from nvkr.errors import DowngradeError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.auth import (
    credentials_hint,
    docker_config_label,
    docker_credentials,
    parse_challenge,
)
from nvkr.origin import MAX_REDIRECTS, origin_of, redirect_target, refuse_downgrade

if TYPE_CHECKING:
    import requests

RETRIES: Final = 3  # per request: connection errors, resets, 429 and 5xx
BACKOFF: Final = 0.5  # seconds; waits BACKOFF, 2*BACKOFF, 4*BACKOFF
MAX_RETRY_AFTER: Final = 30  # seconds; a longer Retry-After is cut to this
CONNECT_TIMEOUT: Final = 15  # seconds
READ_TIMEOUT: Final = 120  # seconds without a byte (a registry may hash a large blob on PUT)
CHUNK_SIZE: Final = 32 << 20  # bytes per PATCH; blobs up to this size go in one PUT
MAX_MANIFEST: Final = 4 << 20  # distribution-spec: registries SHOULD accept 4 MiB manifests
READ_BLOCK = 1 << 20
LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})
MANIFEST_ACCEPT: Final = ", ".join(
    [mt.OCI_MANIFEST, mt.OCI_INDEX, mt.DOCKER_MANIFEST, mt.DOCKER_MANIFEST_LIST]
)
_UNREACHABLE_HINT = "is the registry running and reachable?"
_PLAIN_HTTP_HINT = " a plain-HTTP registry needs --insecure"
_DOWNGRADE_HINT = (
    "the registry (or the storage it hands blobs to) sends an https request to plain HTTP: "
    "fix its configuration; --insecure is for registries that are plain HTTP throughout"
)
TRANSIENT = frozenset({429, 500, 502, 503, 504})


def error_reason(exc: BaseException) -> str:
    """The useful part of a requests/urllib3 error (they nest several layers deep)."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    for needle in ("Connection refused", "Connection reset", "Connection aborted", "timed out"):
        if needle.lower() in text.lower():
            return needle
    return text or type(exc).__name__


def error_detail(resp: requests.Response) -> str:
    """``CODE: message`` of a distribution-spec error body ("Error Codes"), or ''."""
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError, IndexError):
        err = resp.json()["errors"][0]
        detail = err.get("detail")
        extra = f" ({detail})" if isinstance(detail, str) and detail else ""
        return f": {err['code']}: {err.get('message', '')}{extra}"
    return ""


class _NoNetrc:
    """The session's default auth: adds nothing. Its presence keeps requests from applying
    ``~/.netrc`` (whose ``default`` entry matches every host) to registry and storage requests;
    registry credentials come from the caller, the environment or the Docker config only."""

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        return r


class BodyWindow:
    """``length`` bytes of an open file from ``offset``, read in blocks: a request body that
    never holds more than one block in memory (``len()`` gives requests its Content-Length)."""

    def __init__(self, f: IO[bytes], offset: int, length: int) -> None:
        self._f, self._offset, self._length = f, offset, length
        self.rewind()

    def rewind(self) -> None:
        """Back to the window's first byte (to send it again, e.g. after a 401)."""
        self._f.seek(self._offset)
        self._left = self._length

    def __len__(self) -> int:
        return self._length

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n) if n else b""
        self._left -= len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while data := self.read(READ_BLOCK):
            yield data


class RegistrySession:
    """The connection to one registry that :class:`~nvkr.oci.registry.RegistryClient`'s
    operations go through (its arguments are documented there)."""

    def __init__(
        self,
        registry: str,
        *,
        insecure: bool = False,
        username: str | None = None,
        password: str | None = None,
        base_url: str | None = None,
        credentials_from_env: bool = True,
        chunk_size: int = CHUNK_SIZE,
        retries: int | None = None,
        backoff: float | None = None,
        pool_size: int = 10,
    ) -> None:
        import requests
        from requests.adapters import HTTPAdapter

        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if insecure or host in LOOPBACK else "https"
        self.registry = registry
        self.origin = f"{scheme}://{registry}/"
        self._unreachable_hint = _UNREACHABLE_HINT + (_PLAIN_HTTP_HINT if scheme == "https" else "")
        self.base = base_url or (
            f"{scheme}://registry-1.docker.io/" if registry == "docker.io" else self.origin
        )
        if username is None and credentials_from_env:
            username = os.environ.get("NVKR_REGISTRY_USERNAME") or None
            password = os.environ.get("NVKR_REGISTRY_PASSWORD") if username else None
            self._creds_from = "NVKR_REGISTRY_USERNAME/NVKR_REGISTRY_PASSWORD"
        else:
            self._creds_from = "the command line"
        self._creds = (username, password or "") if username else None
        # the Docker config's entry for the host the API is on: a mirror has its own, and never
        # gets the upstream registry's
        api_host = urlsplit(self.base).netloc
        if self._creds is None and (found := docker_credentials(api_host)) is not None:
            self._creds, self._creds_from = found, docker_config_label()
        self.chunk_size = max(1, chunk_size)
        self.retries = RETRIES if retries is None else retries
        self.backoff = backoff
        self.session = requests.Session()
        self.session.auth = _NoNetrc()
        adapter = HTTPAdapter(max_retries=0, pool_connections=2, pool_maxsize=pool_size)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers["User-Agent"] = f"nvkr/{__version__}"
        self.session.headers["Accept-Encoding"] = "identity"
        self._api = origin_of(self.base)  # the one origin credentials and tokens go to
        self._basic: str | None = None
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()
        self._referrers_api: dict[str, bool] = {}

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def url(self, repo: str, kind: str, ref: str) -> str:
        """``<base>v2/<repo>/<kind>/<ref>`` (kind: ``blobs``, ``manifests``, ``referrers``, ...)."""
        return f"{self.base}v2/{repo}/{kind}/{ref}"

    # -- transport ----------------------------------------------------------------------------
    def _sleep(self, attempt: int, resp: requests.Response | None = None) -> None:
        backoff = BACKOFF if self.backoff is None else self.backoff
        delay = backoff * (2**attempt)
        after = resp.headers.get("Retry-After", "") if resp is not None else ""
        if after.isdigit():
            delay = min(float(after), MAX_RETRY_AFTER)
        if delay > 0:
            time.sleep(delay)

    def _auth(self, scopes: tuple[str, ...]) -> str | None:
        with self._lock:
            return self._basic or self._tokens.get(" ".join(scopes))

    def request(
        self,
        method: str,
        url: str,
        *,
        scopes: tuple[str, ...],
        what: str,
        headers: dict[str, str] | None = None,
        data: bytes | BodyWindow | None = None,
        params: dict[str, str] | None = None,
        stream: bool = False,
        retry: bool = True,
    ) -> requests.Response:
        """Send one request with auth and retries; any HTTP answer is returned to the caller.

        ``scopes`` are the token scopes it needs (``repository:<repo>:pull[,push]``). 429 and 5xx
        answers and connection failures are retried (when ``retry``; a ``BodyWindow`` body never is).
        Credentials go only with a ``url`` on the registry's origin; a 401 from elsewhere is
        returned as it is. GET and HEAD follow redirects (up to :data:`MAX_REDIRECTS` hops).

        Raises:
            RegistryError: unreachable after the retries (``status`` None), refused
                credentials (``status`` 401), or too many redirects.
            DowngradeError: a redirect from https to http, or an https registry's token
                service on plain http.
        """
        import requests

        attempt, fresh_auth, hops, first = 0, False, 0, url
        while True:
            own = origin_of(url) == self._api
            sent = self._auth(scopes) if own else None
            if isinstance(data, BodyWindow):
                data.rewind()
            h = dict(headers or {})
            if sent:
                h["Authorization"] = sent
            try:
                resp = self.session.request(
                    method,
                    url,
                    headers=h,
                    data=data,
                    params=params,
                    stream=stream,
                    allow_redirects=False,  # followed below, each hop checked first
                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
                )
            except requests.exceptions.RequestException as e:
                if retry and not isinstance(data, BodyWindow) and attempt < self.retries:
                    self._sleep(attempt)
                    attempt += 1
                    continue
                hint = self._unreachable_hint
                if isinstance(e, requests.exceptions.SSLError):
                    if "CERTIFICATE_VERIFY_FAILED" in str(e):
                        hint = (
                            "the registry's TLS certificate does not verify for this name: fix "
                            "the certificate or trust its CA (REQUESTS_CA_BUNDLE)"
                        )
                    else:
                        hint = "the registry does not speak TLS here: pass --insecure if it is "
                        hint += "plain HTTP"
                raise RegistryError(
                    f"{what}: cannot reach {self._shown(url)}: {error_reason(e)}", hint=hint
                ) from e
            target = redirect_target(resp) if method in ("GET", "HEAD") else None
            if target is not None:
                resp.close()
                shown = self._shown
                refuse_downgrade(
                    shown(first), shown(resp.url), shown(target), what, hint=_DOWNGRADE_HINT
                )
                hops += 1
                if hops > MAX_REDIRECTS:
                    raise RegistryError(
                        f"{what}: {first} redirects more than {MAX_REDIRECTS} times "
                        f"(last to {self._shown(target)})"
                    )
                url, params = target, None  # the target carries its own query
                continue
            if resp.status_code == 401 and not own:
                return resp  # another origin's challenge is never answered with credentials
            if resp.status_code == 401 and not fresh_auth:
                resp.close()
                self._authorize(resp, scopes, sent, what)
                fresh_auth = True
                continue
            if resp.status_code == 401:
                resp.close()
                raise self._refused(what, resp)
            if resp.status_code in TRANSIENT and retry and attempt < self.retries:
                resp.close()
                self._sleep(attempt, resp)
                attempt += 1
                continue
            return resp

    def _refused(self, what: str, resp: requests.Response) -> RegistryError:
        who = f"user {self._creds[0]!r} (from {self._creds_from})" if self._creds else "anonymous"
        return RegistryError(
            f"{what}: {self.registry} refused access for {who}: HTTP {resp.status_code}"
            f"{error_detail(resp)}",
            hint="check the user name and password; " + credentials_hint(),
            status=resp.status_code,
        )

    def _authorize(
        self, resp: requests.Response, scopes: tuple[str, ...], sent: str | None, what: str
    ) -> None:
        """Answer a 401 challenge: Basic credentials, or a Bearer token for ``scopes``."""
        scheme, params = parse_challenge(resp.headers.get("WWW-Authenticate", ""))
        if scheme == "basic":
            if self._creds is None:
                raise RegistryError(
                    f"{what}: {self.registry} asks for a user name and password",
                    hint=credentials_hint(),
                    status=401,
                )
            if sent and sent.startswith("Basic "):
                raise self._refused(what, resp)
            pair = base64.b64encode(f"{self._creds[0]}:{self._creds[1]}".encode()).decode()
            with self._lock:
                self._basic = f"Basic {pair}"
            return
        if scheme != "bearer" or "realm" not in params:
            raise self._refused(what, resp)
        wanted = [s for s in params.get("scope", "").split(" ") if s]
        wanted += [s for s in scopes if s not in wanted]
        query = [("service", params["service"])] if "service" in params else []
        query += [("scope", s) for s in wanted]
        realm = params["realm"]
        if self._api[0] == "https" and origin_of(realm)[0] != "https":
            raise DowngradeError(
                f"{what}: the registry {self.base} names the token service {realm}: the "
                "credentials would go over plain HTTP",
                hint="the registry's token realm must be https; nothing was sent",
            )
        answer = self._token_answer(realm, query, what)
        with answer:
            if answer.status_code >= 400:
                raise RegistryError(
                    f"{what}: the token service {params['realm']} answered HTTP "
                    f"{answer.status_code}" + (" to the credentials" if self._creds else ""),
                    hint=credentials_hint(),
                    status=answer.status_code,
                )
            token: Any = None
            with contextlib.suppress(ValueError, AttributeError):
                body = answer.json()
                token = body.get("token") or body.get("access_token")
        if not isinstance(token, str) or not token:
            raise RegistryError(f"{what}: the token service {params['realm']} gave no token")
        with self._lock:
            self._tokens[" ".join(scopes)] = f"Bearer {token}"

    def _token_answer(
        self, realm: str, query: list[tuple[str, str]], what: str
    ) -> requests.Response:
        """GET the token service ``realm``: the user's credentials (Basic) to the realm's origin
        only, redirects followed hop by hop (none from https to http, no credentials to
        another origin), never the registry's token."""
        import requests

        url, params, hops = realm, query, 0
        while True:
            auth = self._creds if origin_of(url) == origin_of(realm) else None
            try:
                answer = self.session.get(
                    url,
                    params=params,
                    auth=auth,
                    allow_redirects=False,
                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
                )
            except requests.exceptions.RequestException as e:
                raise RegistryError(
                    f"{what}: cannot reach the token service {realm}: {error_reason(e)}",
                    hint=self._unreachable_hint,
                ) from e
            target = redirect_target(answer)
            if target is None:
                return answer
            answer.close()
            refuse_downgrade(realm, answer.url, target, what, hint=_DOWNGRADE_HINT)
            hops += 1
            if hops > MAX_REDIRECTS:
                raise RegistryError(
                    f"{what}: the token service {realm} redirects more than {MAX_REDIRECTS} times"
                )
            url, params = target, []

    def _shown(self, url: str) -> str:
        """``url`` for messages: on another origin without its query, which for a storage host
        is often a signed, short-lived credential (S3 and GCS pre-signed URLs)."""
        if origin_of(url) == self._api or "?" not in url:
            return url
        return url.split("?", 1)[0] + "?..."

    def _fail(self, what: str, resp: requests.Response, hint: str | None = None) -> RegistryError:
        detail = error_detail(resp)  # before close: a streamed body is gone after it
        resp.close()
        return RegistryError(
            f"{what}: HTTP {resp.status_code} {resp.reason} from {self._shown(resp.url)}{detail}",
            hint=hint,
            status=resp.status_code,
        )

    def _location(self, resp: requests.Response, what: str) -> str:
        location = resp.headers.get("Location")
        if not location:
            raise RegistryError(
                f"{what}: the registry answered {resp.status_code} without Location"
            )
        return urljoin(resp.url, location)  # distribution-spec: it may be relative

    @staticmethod
    def _pull(repo: str) -> tuple[str, ...]:
        return (f"repository:{repo}:pull",)

    @staticmethod
    def _push(repo: str) -> tuple[str, ...]:
        return (f"repository:{repo}:pull,push",)

    # -- blobs -------------------------------------------------------------------------------
