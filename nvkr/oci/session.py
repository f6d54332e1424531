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
import email.utils
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, Final, Self
from urllib.parse import urljoin, urlsplit

from nvkr import __version__
from nvkr.errors import DowngradeError, RegistryError, RegistryLimitError
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
#: Sends of bytes that hash to their digest while the registry answers DIGEST_INVALID: CNCF
#: distribution 2.8 says so when another client stores the same manifest or blob at that moment.
#: Two publishers of the same artifacts push in lockstep and raced twice in a row on a loaded CI
#: machine, so the waits between sends are jittered (:meth:`RegistrySession._race_wait`) to part
#: them; a registry that says so every time means it.
DIGEST_RACE_SENDS: Final = 3
MAX_RETRY_AFTER: Final = 30  # seconds; a longer Retry-After (seconds or HTTP-date) is cut to this
RATE_LIMIT_WAIT: Final = 60  # seconds one session waits on 429 answers in all, then gives up
CONNECT_TIMEOUT: Final = 15  # seconds
READ_TIMEOUT: Final = 120  # seconds without a byte (a registry may hash a large blob on PUT)
CHUNK_SIZE: Final = 32 << 20  # bytes per PATCH; blobs up to this size go in one PUT
MAX_MANIFEST: Final = 4 << 20  # distribution-spec: registries SHOULD accept 4 MiB manifests
# the most of any answer nvkr reads whole (manifests, indexes, referrers, a tag-list page, tokens,
# any non-streamed answer): containerd and distribution cap manifests at this size too
MAX_RESPONSE: Final = MAX_MANIFEST
MAX_TAG_LIST: Final = 16 * MAX_RESPONSE  # bytes of all the pages of one tag list
MAX_ERROR_BODY: Final = 64 << 10  # bytes of an error answer read for its error code
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
_RATE_LIMIT_HINT = (
    "the registry limits requests per client; authenticated clients get a higher limit: log in "
    "({creds}); or pull through a mirror of the registry (--mirror PREFIX=REPLACEMENT, a "
    "pull-through cache); or try again later"
)


def retry_after(resp: requests.Response | None, cap: float = MAX_RETRY_AFTER) -> float | None:
    """The wait a ``Retry-After`` header asks for (RFC 9110: delay-seconds, or an HTTP-date;
    a date in the past is no wait), at most ``cap`` seconds; None without a readable one."""
    value = resp.headers.get("Retry-After", "").strip() if resp is not None else ""
    if value.isdigit():
        return min(float(value), cap)
    with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, min(when.timestamp() - time.time(), cap))
    return None


def read_limited(resp: requests.Response, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``resp``'s body (more than ``limit``: there is more), read
    in blocks, never the whole of a larger body. A body read to its end becomes the response's
    ``content`` (so ``json()`` and ``links`` work); one cut short is closed."""
    if getattr(resp, "_content_consumed", False) or getattr(resp, "_content", False) is not False:
        return bytes(resp.content or b"")[: limit + 1]  # already read
    data = bytearray()
    while len(data) <= limit:
        block = resp.raw.read(min(READ_BLOCK, limit + 1 - len(data)), decode_content=True)
        if not block:
            resp._content = bytes(data)
            setattr(resp, "_content_consumed", True)  # noqa: B010 (private to requests)
            return bytes(data)
        data += block
    resp.close()
    return bytes(data)


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
    # best effort: an unreadable or broken body is no reason to lose the status
    with contextlib.suppress(Exception):
        err = json.loads(read_limited(resp, MAX_ERROR_BODY))["errors"][0]
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
        rate_limit_wait: float = RATE_LIMIT_WAIT,
        sleep: Callable[[float], object] | None = None,
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
        self.sleep = sleep or time.sleep
        self.rate_limit_wait = rate_limit_wait
        self.rate_limited = 0.0  # seconds waited on 429 answers so far
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
    def _sleep(self, attempt: int, resp: requests.Response | None = None) -> bool:
        """Wait before retry ``attempt`` (0, 1, ...): exponential backoff, or the answer's
        ``Retry-After`` (up to :data:`MAX_RETRY_AFTER`). Waits on 429 answers count against
        ``rate_limit_wait`` for the whole session; False (and no wait) once that is spent."""
        delay = self._backoff(attempt)
        if (after := retry_after(resp)) is not None:
            delay = after
        if resp is not None and resp.status_code == 429:
            with self._lock:
                left = self.rate_limit_wait - self.rate_limited
                if left <= 0:
                    return False
                delay = min(delay, left)
                self.rate_limited += delay
        if delay > 0:
            self.sleep(delay)
        return True

    def _race_wait(self, attempt: int) -> None:
        """Wait before sending bytes again after DIGEST_INVALID race ``attempt`` (0, 1, ...):
        the backoff of ``attempt`` times a random factor in [0.5, 1.5), so two writers that
        raced in lockstep send again at different moments (:data:`DIGEST_RACE_SENDS`)."""
        self.sleep(self._backoff(attempt) * random.uniform(0.5, 1.5))

    def _backoff(self, attempt: int) -> float:
        """The exponential backoff before retry ``attempt`` (0, 1, ...), in seconds."""
        backoff = BACKOFF if self.backoff is None else self.backoff
        return float(backoff * (2**attempt))

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
        from urllib3.exceptions import HTTPError as Urllib3Error

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
                    stream=True,  # read here, bounded, unless the caller streams it
                    allow_redirects=False,  # followed below, each hop checked first
                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
                )
                if not stream and len(read_limited(resp, MAX_RESPONSE)) > MAX_RESPONSE:
                    raise self._too_large(what, resp.url, MAX_RESPONSE)
            except (requests.exceptions.RequestException, Urllib3Error) as e:
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
                try:
                    self._authorize(resp, scopes, sent, what)
                finally:
                    resp.close()
                fresh_auth = True
                continue
            if resp.status_code == 401:
                raise self._refused(what, resp)
            again = resp.status_code in TRANSIENT and retry and attempt < self.retries
            if again and self._sleep(attempt, resp):  # False: the rate-limit wait is spent
                resp.close()
                attempt += 1
                continue
            return resp

    def _too_large(self, what: str, url: str, limit: int) -> RegistryLimitError:
        return RegistryLimitError(
            f"{what}: the answer from {self._shown(url)} is larger than {limit} bytes "
            f"({limit >> 20} MiB), the limit for a registry's manifests, indexes, tag lists and "
            "tokens; nothing of it was used",
            hint="the registry (or a proxy in front of it) does not answer as an OCI registry; "
            "check the registry name",
        )

    def _refused(self, what: str, resp: requests.Response) -> RegistryError:
        who = f"user {self._creds[0]!r} (from {self._creds_from})" if self._creds else "anonymous"
        detail = error_detail(resp)
        resp.close()
        return RegistryError(
            f"{what}: {self.registry} refused access for {who}: HTTP {resp.status_code}{detail}",
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
            if answer.status_code == 429:
                raise self._rate_limited(what, answer, f"the token service {realm}")
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
        from urllib3.exceptions import HTTPError as Urllib3Error

        url, params, hops = realm, query, 0
        while True:
            auth = self._creds if origin_of(url) == origin_of(realm) else None
            try:
                answer = self.session.get(
                    url,
                    params=params,
                    auth=auth,
                    stream=True,
                    allow_redirects=False,
                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
                )
                if len(read_limited(answer, MAX_RESPONSE)) > MAX_RESPONSE:
                    raise self._too_large(what, answer.url, MAX_RESPONSE)
            except (requests.exceptions.RequestException, Urllib3Error) as e:
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
        """The error for an answer the caller cannot use: its status, URL and the registry's
        error code, message and detail; a 429 says rate limit and what to do about it."""
        if resp.status_code == 429:
            return self._rate_limited(what, resp, self.registry)
        detail = error_detail(resp)  # before close: a streamed body is gone after it
        resp.close()
        if hint is None and resp.status_code in (401, 403):
            hint = "check that these credentials may do this; " + credentials_hint()
        return RegistryError(
            f"{what}: HTTP {resp.status_code} {resp.reason} from {self._shown(resp.url)}{detail}",
            hint=hint,
            status=resp.status_code,
        )

    def _rate_limited(self, what: str, resp: requests.Response, who: str) -> RegistryError:
        detail = error_detail(resp)
        resp.close()
        return RegistryError(
            f"{what}: {who} answers HTTP 429 (rate limit) from {self._shown(resp.url)}{detail}; "
            f"gave up after waiting {self.rate_limited:g} s (at most {self.rate_limit_wait:g} s "
            "per run)",
            hint=_RATE_LIMIT_HINT.format(creds=credentials_hint()),
            status=429,
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
