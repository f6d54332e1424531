"""A client for OCI registries: blobs and manifests moved, verified.

``nvkr publish`` pushes a release set through it (:mod:`nvkr.delivery.publish`) and the ``oci`` source kind
pulls base images through it (:mod:`nvkr.fetch.oci`). It speaks the OCI distribution-spec v1.1 over
HTTP(S) with ``requests``: "Checking if content exists" (HEAD), "Pushing blobs" (POST then PUT,
``PATCH`` chunks for large blobs, "Mounting a blob from another repository"), "Pushing manifests",
"Pulling manifests"/"Pulling blobs" (GET), "Listing referrers" and "Listing tags". Every digest
is checked: the registry checks a blob's on the closing PUT and nvkr compares the
``Docker-Content-Digest`` it answers; manifests and blobs pulled are hashed before anyone sees them.

References are parsed and checked in :mod:`nvkr.oci.reference`; where credentials come from
and how a ``WWW-Authenticate`` challenge reads is in :mod:`nvkr.oci.auth`. Both modules' names are
importable from here as well. Authentication follows the registry's challenge: ``Basic`` with the
user's credentials, or ``Bearer`` with a token from the realm it names (anonymous, or bought with
the credentials) for the scopes an operation needs.

Credentials stay with the registry's origin (:mod:`nvkr.origin`): the Basic credentials and every
Bearer token go only to the scheme, host and port of the registry's API; a request anywhere else
(an upload ``Location`` or a blob read that the registry hands to a storage host; containerd's
pusher strips its authorizer the same way) carries no ``Authorization``, and a 401 from another
origin is an error, never answered with credentials. The one other place the user's credentials
go is the token service a Bearer challenge *of the registry* names as its ``realm`` (the Docker
token flow, distribution ``docs/spec/auth/token.md`` "Requesting a Token": the client
authenticates to the token server with Basic), and only over https when the registry itself is
https; the token it answers goes to the registry alone. ``~/.netrc`` is never read: requests
would apply its ``default`` entry to any host. Redirects (GET and HEAD) are followed here, one
hop at a time, each hop checked first: a redirect from https to http is refused.

Transport: https, or plain http for a registry the user marks ``insecure`` and for loopback hosts
(never a silent downgrade). Connection errors, resets, 429 and 5xx are retried with exponential
backoff (:data:`RETRIES`, :data:`BACKOFF`; a ``Retry-After`` is honoured up to
:data:`MAX_RETRY_AFTER` seconds). A blob upload that breaks off asks the registry where it got to
(``GET`` on the upload URL, its ``Range`` header) and goes on from there, or starts over when the
registry lost the upload (CNCF distribution 2.8 cancels an upload whose size moved under a stale
upload URL, so after a partly received chunk it always starts over). Relative ``Location`` headers
are resolved against the request URL.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from nvkr import __version__
from nvkr.errors import DowngradeError, IntegrityError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.auth import CREDENTIALS_HINT as CREDENTIALS_HINT
from nvkr.oci.auth import credentials_hint, docker_config_label
from nvkr.oci.auth import docker_credentials as docker_credentials
from nvkr.oci.auth import parse_challenge as parse_challenge
from nvkr.oci.reference import _DIGEST
from nvkr.oci.reference import Reference as Reference
from nvkr.oci.reference import fallback_tag as fallback_tag
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
_READ_BLOCK = 1 << 20
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
_TRANSIENT = frozenset({429, 500, 502, 503, 504})


def _reason(exc: BaseException) -> str:
    """The useful part of a requests/urllib3 error (they nest several layers deep)."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    for needle in ("Connection refused", "Connection reset", "Connection aborted", "timed out"):
        if needle.lower() in text.lower():
            return needle
    return text or type(exc).__name__


def _error_detail(resp: requests.Response) -> str:
    """``CODE: message`` of a distribution-spec error body ("Error Codes"), or ''."""
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError, IndexError):
        err = resp.json()["errors"][0]
        detail = err.get("detail")
        extra = f" ({detail})" if isinstance(detail, str) and detail else ""
        return f": {err['code']}: {err.get('message', '')}{extra}"
    return ""


def _file_digest(f: IO[bytes], like: str) -> str:
    """The digest of the whole of ``f`` with the algorithm of ``like`` (``sha256:...``)."""
    alg = like.split(":", 1)[0]
    h = hashlib.new(alg)
    f.seek(0)
    while block := f.read(_READ_BLOCK):
        h.update(block)
    return f"{alg}:{h.hexdigest()}"


class Writer(Protocol):
    """Where :meth:`RegistryClient.get_blob` puts bytes: a file, a store writer, a hasher."""

    def write(self, data: bytes, /) -> Any: ...


class _Window:
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
        while data := self.read(_READ_BLOCK):
            yield data


class _NoNetrc:
    """The session's default auth: adds nothing. Its presence keeps requests from applying
    ``~/.netrc`` (whose ``default`` entry matches every host) to registry and storage requests;
    registry credentials come from the caller, the environment or the Docker config only."""

    def __call__(self, r: requests.PreparedRequest) -> requests.PreparedRequest:
        return r


# -- the client ----------------------------------------------------------------------------------
class RegistryClient:
    """One registry, over the OCI distribution API; thread-safe for concurrent blob transfers.

    Args:
        registry: ``host[:port]`` as in a :class:`Reference`.
        insecure: plain http (the user named this registry as insecure); loopback hosts
            (127.0.0.1, localhost, ::1) always use http.
        username, password: credentials; default ``NVKR_REGISTRY_USERNAME``/``_PASSWORD`` (when
            ``credentials_from_env``), else ``~/.docker/config.json``'s entry for the host of
            ``base_url``.
        base_url: the URL the API lives under (a mirror), default ``http(s)://registry/``.
        chunk_size: bytes per ``PATCH``; blobs up to this size go in one ``PUT``.
        retries, backoff: per request (default :data:`RETRIES`, :data:`BACKOFF` seconds).
    """

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

    def __enter__(self) -> RegistryClient:
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
        data: bytes | _Window | None = None,
        params: dict[str, str] | None = None,
        stream: bool = False,
        retry: bool = True,
    ) -> requests.Response:
        """Send one request with auth and retries; any HTTP answer is returned to the caller.

        ``scopes`` are the token scopes it needs (``repository:<repo>:pull[,push]``). 429 and 5xx
        answers and connection failures are retried (when ``retry``; a ``_Window`` body never is).
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
            if isinstance(data, _Window):
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
                if retry and not isinstance(data, _Window) and attempt < self.retries:
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
                    f"{what}: cannot reach {self._shown(url)}: {_reason(e)}", hint=hint
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
            if resp.status_code in _TRANSIENT and retry and attempt < self.retries:
                resp.close()
                self._sleep(attempt, resp)
                attempt += 1
                continue
            return resp

    def _refused(self, what: str, resp: requests.Response) -> RegistryError:
        who = f"user {self._creds[0]!r} (from {self._creds_from})" if self._creds else "anonymous"
        return RegistryError(
            f"{what}: {self.registry} refused access for {who}: HTTP {resp.status_code}"
            f"{_error_detail(resp)}",
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
                    f"{what}: cannot reach the token service {realm}: {_reason(e)}",
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
        detail = _error_detail(resp)  # before close: a streamed body is gone after it
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
    def blob_exists(self, repo: str, digest: str) -> bool:
        """Whether ``repo`` holds blob ``sha256:<hex>`` (``HEAD``; 200 yes, 404 no).

        Raises:
            RegistryError: any other answer, or the registry is unreachable.
        """
        what = f"blob {digest} in {repo}"
        resp = self.request(
            "HEAD", self.url(repo, "blobs", digest), scopes=self._pull(repo), what=what
        )
        resp.close()
        if resp.status_code in (200, 404):
            return resp.status_code == 200
        raise self._fail(what, resp)

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Mount blob ``digest`` from ``from_repo`` of the same registry into ``repo`` (201 →
        True); False when the registry would not (it then opened an upload, which is cancelled).

        Raises:
            RegistryError: an error answer, or the registry is unreachable.
        """
        what = f"mount of blob {digest} from {from_repo} into {repo}"
        resp = self.request(
            "POST",
            f"{self.base}v2/{repo}/blobs/uploads/",
            scopes=(*self._push(repo), *self._pull(from_repo)),
            params={"mount": digest, "from": from_repo},
            what=what,
        )
        resp.close()
        if resp.status_code == 201:
            return True
        if resp.status_code != 202:
            raise self._fail(what, resp)
        with contextlib.suppress(RegistryError):
            location = self._location(resp, what)
            self.request("DELETE", location, scopes=self._push(repo), what=what).close()
        return False

    def check_push(self, repo: str) -> None:
        """Ask whether ``repo`` takes pushes with these credentials, without storing anything:
        open a blob upload ("Pushing blobs", ``POST``; 202 yes), then cancel it (``DELETE`` on
        its ``Location``; a registry that keeps it drops it on its own upload purge).

        Raises:
            RegistryError: the registry refused (``status`` 401 or 403: credentials; the hint
                says where they come from) or is unreachable (``status`` None).
        """
        what = f"push access to {self.registry}/{repo}"
        resp = self.request(
            "POST", f"{self.base}v2/{repo}/blobs/uploads/", scopes=self._push(repo), what=what
        )
        resp.close()
        if resp.status_code in (401, 403):
            raise self._refused(what, resp)
        if resp.status_code != 202:
            raise self._fail(what, resp)
        with contextlib.suppress(RegistryError):
            location = self._location(resp, what)
            self.request("DELETE", location, scopes=self._push(repo), what=what).close()

    def _start_upload(self, repo: str, what: str) -> str:
        url = f"{self.base}v2/{repo}/blobs/uploads/"
        resp = self.request("POST", url, scopes=self._push(repo), what=what)
        resp.close()
        if resp.status_code != 202:
            raise self._fail(what, resp)
        return self._location(resp, what)

    def _upload_offset(self, repo: str, location: str, what: str) -> tuple[str, int] | None:
        """Where an upload got to: (its next URL, bytes received), or None when the registry
        lost it or cannot say (distribution-spec "Upload progress": ``Range: 0-<last byte>``)."""
        try:
            resp = self.request("GET", location, scopes=self._push(repo), what=what)
        except RegistryError:
            return None
        resp.close()
        m = re.fullmatch(r"(?:bytes=)?0-(\d+)", resp.headers.get("Range", ""))
        # "0-0" is both an empty and a 1-byte upload (distribution): start over then
        if resp.status_code != 204 or not m or int(m.group(1)) == 0:
            return None
        return urljoin(resp.url, resp.headers.get("Location", location)), int(m.group(1)) + 1

    def push_blob(
        self, repo: str, digest: str, size: int, open_stream: Callable[[], IO[bytes]]
    ) -> int:
        """Upload ``size`` bytes from ``open_stream()`` (seekable) as blob ``digest`` into ``repo``.

        Up to :attr:`chunk_size` bytes go in one ``PUT`` ("monolithic"); larger blobs in
        ``PATCH`` chunks of :attr:`chunk_size` bytes, the last one with the closing ``PUT
        ?digest=``. Memory stays at one read block whatever the size. After a failure the
        registry is asked for the upload's offset and the upload goes on from there, or starts
        over; a blob that arrived meanwhile ends it. The registry checks the digest on the
        closing ``PUT``; its ``Docker-Content-Digest`` answer is compared too.

        Returns:
            bytes put on the wire, resent ones included (a broken request counts whole).
        Raises:
            IntegrityError: the registry computed another digest (``DIGEST_INVALID``, or a
                different ``Docker-Content-Digest``): the local bytes are not ``digest``.
            RegistryError: refused, or no progress after :attr:`retries` failures in a row.
        """
        what = f"upload of blob {digest} ({size} bytes) to {self.registry}/{repo}"
        sent, stalled, offset = 0, 0, 0
        location = self._start_upload(repo, what)
        with open_stream() as f:
            while True:
                last = size - offset <= self.chunk_size
                length = size - offset if last else self.chunk_size
                headers = {"Content-Type": mt.OCTET_STREAM}
                if length:
                    headers["Content-Range"] = f"{offset}-{offset + length - 1}"
                if last:
                    split = urlsplit(location)
                    query = urlencode([*parse_qsl(split.query), ("digest", digest)])
                    url = urlunsplit(split._replace(query=query))
                else:
                    url = location
                resp: requests.Response | None = None
                sent += length  # attempted: a broken request may have sent any part of it
                with contextlib.suppress(RegistryError):
                    resp = self.request(
                        "PUT" if last else "PATCH",
                        url,
                        scopes=self._push(repo),
                        headers=headers,
                        data=_Window(f, offset, length) if length else b"",
                        what=what,
                        retry=False,
                    )
                    resp.close()
                if resp is not None and last and resp.status_code in (200, 201, 204):
                    answered = resp.headers.get("Docker-Content-Digest")
                    if answered and answered != digest:
                        raise IntegrityError(
                            f"{what}: the registry stored it as {answered}",
                            hint="the registry (or a proxy) altered the bytes; nothing was tagged",
                        )
                    return sent
                if resp is not None and not last and resp.status_code == 202:
                    location = self._location(resp, what)
                    offset += length
                    stalled = 0
                    continue
                detail = _error_detail(resp) if resp is not None else ""
                digest_race = "DIGEST_INVALID" in detail
                if digest_race:
                    # distribution 2.8 also says so when another client stores the same blob at
                    # that moment; only bytes that really hash elsewhere are an integrity failure
                    if _file_digest(f, digest) != digest:
                        raise IntegrityError(
                            f"{what}: the local bytes hash to {_file_digest(f, digest)}",
                            hint="the local blob is corrupt: rebuild the release set; nothing "
                            "was tagged",
                        )
                    if stalled >= self.retries:
                        raise IntegrityError(
                            f"{what}: the registry computed another digest for the bytes sent",
                            hint="a proxy or the registry altered the upload; nothing was tagged",
                        )
                lost = resp is None or resp.status_code in (*_TRANSIENT, 404, 416)
                if resp is not None and not lost and not digest_race:
                    raise self._fail(what, resp)
                # broken connection, 429/5xx or a lost upload: find out where it stands
                stalled += 1
                if stalled > self.retries:
                    if resp is not None:
                        raise self._fail(what, resp, hint=self._unreachable_hint)
                    raise RegistryError(
                        f"{what}: no progress after {stalled} failures at byte {offset}",
                        hint=self._unreachable_hint,
                    )
                self._sleep(stalled - 1, resp)
                if self.blob_exists(repo, digest):
                    return sent
                resumed = self._upload_offset(repo, location, what)
                if resumed is not None and resumed[1] <= size:
                    location, offset = resumed
                else:
                    location, offset = self._start_upload(repo, what), 0

    def get_blob(self, repo: str, digest: str, writer: Writer, *, size: int | None = None) -> int:
        """Stream blob ``digest`` of ``repo`` into ``writer.write``, verifying it; returns bytes.

        A body that breaks off is resumed with ``Range: bytes=<got>-`` (up to :attr:`retries`
        times); ``writer`` only ever receives the blob's bytes in order.

        Raises:
            IntegrityError: the bytes hash to another digest or exceed ``size``.
            RegistryError: an error answer (404: the repository lacks it), or unreachable.
        """
        from urllib3.exceptions import HTTPError as Urllib3Error

        what = f"blob {digest} of {self.registry}/{repo}"
        url = self.url(repo, "blobs", digest)
        alg = digest.split(":", 1)[0]
        h, got, failures = hashlib.new(alg), 0, 0
        while True:
            headers = {"Range": f"bytes={got}-"} if got else {}
            resp = self.request(
                "GET", url, scopes=self._pull(repo), what=what, headers=headers, stream=True
            )
            if resp.status_code not in (200, 206):
                raise self._fail(what, resp)
            skip = got if resp.status_code == 200 else 0  # the registry ignored the Range
            try:
                with resp:
                    for chunk in resp.raw.stream(_READ_BLOCK, decode_content=False):
                        if skip:
                            chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                        writer.write(chunk)
                        h.update(chunk)
                        got += len(chunk)
                        if size is not None and got > size:
                            raise IntegrityError(f"{what} from {url}: more than {size} bytes")
                if size is None or got >= size:
                    break
                broken: BaseException = EOFError(f"body ended at {got} of {size} bytes")
            except (Urllib3Error, OSError) as e:
                broken = e
            failures += 1
            if failures > self.retries:
                raise RegistryError(
                    f"{what}: the download from {url} broke off after {got} bytes: {_reason(broken)}",
                    hint=self._unreachable_hint,
                )
            self._sleep(failures - 1)
        actual = f"{alg}:{h.hexdigest()}"
        if actual != digest:
            raise IntegrityError(
                f"{what} from {url}: expected {digest}, got {actual}",
                hint="the registry serves other bytes than the digest names",
            )
        return got

    # -- manifests ---------------------------------------------------------------------------
    def push_manifest(
        self,
        repo: str,
        ref: str,
        data: bytes,
        media_type: str,
        *,
        if_match: str | None = None,
        if_none_match: bool = False,
    ) -> str:
        """``PUT`` manifest ``data`` (of ``media_type``) as ``ref`` (a tag or its digest).

        ``if_match`` (a digest) / ``if_none_match`` send ``If-Match: "<digest>"`` /
        ``If-None-Match: *`` for registries that honour them (RFC 9110; distribution 2.8 ignores
        both); a 412 answer raises with ``status`` 412.

        Returns:
            ``sha256:<hex>`` of ``data``.
        Raises:
            IntegrityError: the registry answers another ``Docker-Content-Digest``.
            RegistryError: an error answer (the message carries the registry's error code,
                e.g. ``MANIFEST_BLOB_UNKNOWN``), or unreachable.
        """
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if _DIGEST.fullmatch(ref) and ref != digest:
            raise ValueError(f"manifest bytes hash to {digest}, not {ref}")
        what = f"push of manifest {digest} to {self.registry}/{repo}:{ref}"
        headers = {"Content-Type": media_type}
        if if_match:
            headers["If-Match"] = f'"{if_match}"'
        if if_none_match:
            headers["If-None-Match"] = "*"
        for attempt in range(self.retries + 1):
            resp = self.request(
                "PUT",
                self.url(repo, "manifests", ref),
                scopes=self._push(repo),
                what=what,
                headers=headers,
                data=data,
            )
            resp.close()
            # distribution 2.8 answers DIGEST_INVALID when another client stores the same
            # manifest at that moment: the bytes are ours and hash to digest, so try again
            if "DIGEST_INVALID" not in _error_detail(resp) or attempt == self.retries:
                break
            self._sleep(attempt)
        if resp.status_code not in (200, 201, 204):
            raise self._fail(what, resp)
        answered = resp.headers.get("Docker-Content-Digest")
        if answered and answered != digest:
            raise IntegrityError(
                f"{what}: the registry answered digest {answered}",
                hint="the registry (or a proxy) changed the manifest; do not trust this registry",
            )
        return digest

    def get_manifest(self, repo: str, ref: str) -> tuple[bytes, str, str]:
        """``GET`` manifest ``ref`` (tag or digest) of ``repo``.

        Returns:
            ``(bytes, media type, "sha256:<hex>" of the bytes)``; the media type is the
            ``Content-Type``, else the document's ``mediaType``.
        Raises:
            IntegrityError: ``ref`` is a digest the bytes do not hash to, or the registry's
                ``Docker-Content-Digest`` differs from the bytes' digest.
            RegistryError: an error answer (404 ``status``: no such manifest), unreachable, or
                larger than :data:`MAX_MANIFEST`.
        """
        from urllib3.exceptions import HTTPError as Urllib3Error

        what = f"manifest {ref} of {self.registry}/{repo}"
        url = self.url(repo, "manifests", ref)
        for attempt in range(self.retries + 1):
            resp = self.request(
                "GET",
                url,
                scopes=self._pull(repo),
                what=what,
                headers={"Accept": MANIFEST_ACCEPT},
                stream=True,
            )
            if resp.status_code != 200:
                raise self._fail(what, resp)
            expected = resp.headers.get("Content-Length", "")
            try:
                with resp:
                    data = resp.raw.read(MAX_MANIFEST + 1, decode_content=False)
                if expected.isdigit() and len(data) < int(expected):
                    raise OSError(f"body ended at {len(data)} of {expected} bytes")
                break
            except (Urllib3Error, OSError) as e:
                if attempt == self.retries:
                    raise RegistryError(
                        f"{what}: the body from {url} broke off: {_reason(e)}"
                    ) from e
                self._sleep(attempt)
        if len(data) > MAX_MANIFEST:
            raise RegistryError(f"{what}: larger than {MAX_MANIFEST} bytes, not a manifest")
        by_digest = _DIGEST.fullmatch(ref) is not None
        alg = ref.split(":", 1)[0] if by_digest else "sha256"
        actual = f"{alg}:{hashlib.new(alg, data).hexdigest()}"
        answered = resp.headers.get("Docker-Content-Digest", "")
        if by_digest and actual != ref:
            raise IntegrityError(
                f"{what} from {url}: expected {ref}, got {actual}",
                hint="the registry serves other bytes than the digest names",
            )
        if answered.startswith(f"{alg}:") and answered != actual:
            raise IntegrityError(
                f"{what} from {url}: the registry says {answered}, the bytes hash to {actual}",
                hint="the registry (or a proxy) altered the manifest; do not trust this registry",
            )
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if media_type not in mt.MANIFEST_TYPES:
            with contextlib.suppress(ValueError, AttributeError):
                media_type = str(json.loads(data).get("mediaType") or media_type)
        return data, media_type, actual

    def manifest_digest(self, repo: str, ref: str) -> str | None:
        """The digest ``ref`` names in ``repo`` (``HEAD``, ``Docker-Content-Digest``), or None
        when there is no such manifest.

        Raises:
            RegistryError: an error answer other than 404, or unreachable.
        """
        what = f"manifest {ref} of {self.registry}/{repo}"
        resp = self.request(
            "HEAD",
            self.url(repo, "manifests", ref),
            scopes=self._pull(repo),
            what=what,
            headers={"Accept": MANIFEST_ACCEPT},
        )
        resp.close()
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise self._fail(what, resp)
        answered = resp.headers.get("Docker-Content-Digest")
        if answered is None:  # the header is a SHOULD; the bytes always tell
            return self.get_manifest(repo, ref)[2]
        return answered

    def delete_manifest(self, repo: str, ref: str) -> bool:
        """``DELETE`` manifest ``ref`` (a digest, or a tag where the registry deletes tags) of
        ``repo`` ("Deleting manifests"; 202 deleted). CNCF distribution 2.8 deletes by digest
        only, and removes the tags naming that digest with it; it must run with
        ``storage.delete.enabled``.

        Returns:
            True when deleted, False when there was no such manifest (404).
        Raises:
            RegistryError: refused (``status`` 405 when the registry deletes nothing, or
                deletes no tags; 401/403 credentials), or unreachable.
        """
        what = f"delete of manifest {ref} in {self.registry}/{repo}"
        resp = self.request(
            "DELETE", self.url(repo, "manifests", ref), scopes=self._push(repo), what=what
        )
        resp.close()
        if resp.status_code == 404:
            return False
        if resp.status_code in (200, 202, 204):
            return True
        raise self._fail(what, resp)

    # -- referrers and tags ------------------------------------------------------------------
    def referrers(self, repo: str, digest: str) -> dict[str, Any] | None:
        """The referrers index of ``digest`` (distribution-spec v1.1 "Listing Referrers"), or
        None when the registry has no referrers API (404; CNCF distribution 2.8).

        Raises:
            RegistryError: another error answer, or unreachable.
        """
        what = f"referrers of {digest} in {self.registry}/{repo}"
        resp = self.request(
            "GET",
            self.url(repo, "referrers", digest),
            scopes=self._pull(repo),
            what=what,
            headers={"Accept": mt.OCI_INDEX},
        )
        with resp:
            if resp.status_code == 404:
                self._referrers_api[repo] = False
                return None
            if resp.status_code != 200:
                raise self._fail(what, resp)
            try:
                index = resp.json()
            except ValueError as e:
                raise RegistryError(f"{what}: the answer is not JSON") from e
        if not isinstance(index, dict) or not isinstance(index.get("manifests"), list):
            raise RegistryError(f"{what}: the answer is not an image index")
        self._referrers_api[repo] = True
        return index

    def has_referrers_api(self, repo: str, digest: str) -> bool:
        """Whether the registry serves the referrers API for ``repo`` (asked once, remembered)."""
        if repo not in self._referrers_api:
            self.referrers(repo, digest)
        return self._referrers_api[repo]

    def tags(self, repo: str) -> list[str]:
        """Every tag of ``repo`` ("Listing Tags", following ``Link`` pages); [] when unknown.

        Raises:
            RegistryError: an error answer other than 404, or unreachable.
        """
        what = f"tags of {self.registry}/{repo}"
        url: str | None = f"{self.base}v2/{repo}/tags/list"
        out: list[str] = []
        while url:
            resp = self.request("GET", url, scopes=self._pull(repo), what=what)
            with resp:
                if resp.status_code == 404:
                    return out
                if resp.status_code != 200:
                    raise self._fail(what, resp)
                try:
                    out += [str(t) for t in resp.json().get("tags") or []]
                except (ValueError, AttributeError) as e:
                    raise RegistryError(f"{what}: the answer is not a tag list") from e
                nxt = resp.links.get("next", {}).get("url")
                url = urljoin(resp.url, nxt) if nxt else None
        return out
