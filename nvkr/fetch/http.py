"""The ``url`` source kind: files over http(s) and ``file://``, streamed and verified into the store.

At lock time (:func:`resolve`) the pin comes from the recipe (``sha256``/``sha512``) or from a
checksum file (``checksumUrl``, parsed by :mod:`nvkr.fetch.checksums`); at build time
(:func:`ensure`) it comes from the lock entry. Either way the body streams in 1 MiB chunks
straight into a :class:`~nvkr.store.BlobWriter`, which hashes while writing and only renames the
temp file into ``blobs/sha256/`` once size and digests match, so a bad download leaves nothing.

Redirects are followed here, one hop at a time (:mod:`nvkr.origin`): a hop from https to http is
refused before the plain-HTTP request is made (:class:`~nvkr.errors.DowngradeError`, exit 3), for
sources and checksum files alike, at lock and at build. nvkr sends no credentials of its own;
requests derives each hop's ``Authorization`` from that hop's URL alone (user info in it, or the
``~/.netrc`` entry of its host), so none follows a redirect to another host. Messages name the
URL a redirect led to beside the one asked for.

Transport rules: a few retries with exponential backoff on connection errors, resets, 429 and
5xx (urllib3 ``Retry``; a ``Retry-After``, seconds or HTTP-date, is honoured up to
:data:`MAX_RETRY_AFTER` seconds, so at most :data:`RETRIES` times that in all; 400, 401, 403
and 404 are not retried; a 429 to the end says rate limit), a
whole-download retry when the body breaks off, bounded connect/read timeouts, ``Accept-Encoding:
identity`` so the stored bytes are the served bytes. An empty body or an HTML page where a file
was expected is an error, whatever the status code said. ``requests`` is imported lazily: a
no-op build never pays for it, let alone opens a session.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

from nvkr import __version__
from nvkr.errors import ChecksumError, FetchError, NotServedError
from nvkr.fetch.checksums import algorithm_for, is_html, parse_checksum_file
from nvkr.fetch.context import NET_HINT, FetchContext, check_entry
from nvkr.fetch.mirrors import mirror_label
from nvkr.monitor import transfer
from nvkr.origin import MAX_REDIRECTS, redirect_target, refuse_downgrade
from nvkr.recipe.sources import UrlSource
from nvkr.redact import redact_url
from nvkr.store import BlobInfo, BlobWriter, Store

if TYPE_CHECKING:
    import requests

log = logging.getLogger("nvkr.fetch")

CHUNK = 1 << 20
CONNECT_TIMEOUT = 15  # seconds to establish a connection
READ_TIMEOUT = 60  # seconds without a byte before giving up on a response
RETRIES = 3  # per request, for connection errors, resets, 429 and 5xx
BACKOFF = 0.5  # seconds; urllib3 2 sleeps 0, 2*BACKOFF, 4*BACKOFF between retries
MAX_RETRY_AFTER = 30  # seconds; a longer Retry-After would stall a build for no gain
ATTEMPTS = 3  # whole downloads, when the body breaks off after the headers
MAX_TEXT = 16 << 20  # bytes; checksum files larger than this are not checksum files
_DOWNGRADE_HINT = (
    "the server sends an https request to plain HTTP: ask its owner to fix the redirect; if plain "
    "HTTP is acceptable, name the http:// URL in the recipe or with --mirror (a choice nvkr "
    "never makes for you)"
)


class _BrokenBody(Exception):
    """The connection failed after the headers; the download may be retried from the start."""

    def __init__(self, got: int, length: int | None, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.got = got
        self.length = length
        self.cause = cause


def new_session() -> requests.Session:
    """A ``requests`` session with nvkr's retry policy mounted for http and https.

    ``trust_env`` stays on: proxies and ``~/.netrc`` credentials choose a route or an identity,
    never the bytes accepted.
    """
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    class _BoundedRetry(Retry):
        def get_retry_after(self, response: Any) -> float | None:
            after = super().get_retry_after(response)
            return None if after is None else min(after, MAX_RETRY_AFTER)

    retry = _BoundedRetry(
        total=RETRIES,
        connect=RETRIES,
        read=RETRIES,
        status=RETRIES,
        other=0,
        backoff_factor=BACKOFF,
        status_forcelist=(429, 500, 502, 503, 504),
        allowed_methods=frozenset({"GET", "HEAD"}),
        raise_on_status=False,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = f"nvkr/{__version__}"
    session.headers["Accept-Encoding"] = "identity"
    return session


def _reason(exc: BaseException) -> str:
    """The useful part of a requests/urllib3 connection error (they nest several layers deep)."""
    text = str(exc)
    m = re.search(r"\[Errno -?\d+\] ([^'\")]+)", text)
    if m:
        return m.group(1).strip()
    for needle in (
        "Connection refused",
        "Connection reset",
        "Name or service not known",
        "timed out",
    ):
        if needle.lower() in text.lower():
            return needle
    return text


def _is_html_url(url: str) -> bool:
    return urlsplit(url).path.lower().endswith((".html", ".htm"))


def _html_error(what: str, url: str) -> FetchError:
    return FetchError(
        f"{what}: got an HTML page instead of the file from {url}",
        hint="the server answered with a web page (a login, an error or a directory listing); "
        "check the URL",
    )


def _pour(chunks: Iterable[bytes], writer: BlobWriter, *, url: str, what: str) -> None:
    """Write ``chunks`` into ``writer``, rejecting an HTML page or an empty body."""
    first = True
    for chunk in chunks:
        if not chunk:
            continue
        if first:
            first = False
            if is_html(chunk[:512]) and not _is_html_url(url):
                raise _html_error(what, url)
        writer.write(chunk)
        transfer.report(writer.size)  # the live display's byte bar (nvkr.monitor.transfer)
    if writer.size == 0:
        raise FetchError(
            f"{what}: {url} returned an empty body", hint="check the URL; nothing was stored"
        )


def _file_path(url: str, what: str) -> Path:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise FetchError(f"{what}: {url}: file:// URLs must name a local path (file:///abs/path)")
    return Path(url2pathname(parts.path))


def _open_file(url: str, what: str) -> BinaryIO:
    path = _file_path(url, what)
    try:
        return open(path, "rb")
    except FileNotFoundError as e:
        raise NotServedError(f"{what}: {url}: no such file", hint=NET_HINT, status=None) from e
    except OSError as e:
        raise FetchError(f"{what}: cannot read {path}: {e.strerror}") from e


def _send(session: requests.Session, url: str, what: str, label: str) -> requests.Response:
    """One GET of ``url`` (streaming, redirects not followed); transport failures become
    FetchError naming ``label``."""
    import requests

    try:
        return session.get(
            url, stream=True, allow_redirects=False, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
        )
    except requests.exceptions.SSLError as e:
        raise FetchError(
            f"{what}: TLS failure talking to {label}: {_reason(e)}", hint=NET_HINT
        ) from e
    except requests.exceptions.Timeout as e:
        raise FetchError(f"{what}: cannot reach {label}: timed out", hint=NET_HINT) from e
    except requests.exceptions.ConnectionError as e:
        raise FetchError(f"{what}: cannot reach {label}: {_reason(e)}", hint=NET_HINT) from e
    except requests.exceptions.RequestException as e:
        raise FetchError(f"{what}: cannot fetch {label}: {e}") from e


def _get(
    session: requests.Session,
    url: str,
    what: str,
    label: str | None = None,
    *,
    html: bool = False,
) -> tuple[requests.Response, str]:
    """GET ``url`` (streaming), following redirects hop by hop, and check the status.

    Returns:
        ``(response, where)``: ``where`` names ``label`` (the URL, or "mirror (mirror of
        original)") and, when redirects led elsewhere, the URL that answered.
    Raises:
        DowngradeError: a redirect from https to http (nothing is sent to the http URL).
        FetchError: transport failure, an error status, too many redirects, an HTML page
            (unless ``html``: a page is what was asked for); NotServedError: 404 or 410.
    """
    label = label or url
    current, hops = url, 0
    while True:
        resp = _send(session, current, what, label if current == url else f"{label} -> {current}")
        target = redirect_target(resp)
        if target is None:
            break
        resp.close()
        refuse_downgrade(url, current, target, what, hint=_DOWNGRADE_HINT)
        hops += 1
        if hops > MAX_REDIRECTS:
            raise FetchError(
                f"{what}: {label} redirects more than {MAX_REDIRECTS} times (last to {target})",
                hint="check the URL; the server sends it round in circles",
            )
        current = target
    where = label if current == url else f"{label} (redirected to {current})"
    if resp.status_code == 429:  # still, after RETRIES waits of up to MAX_RETRY_AFTER each
        resp.close()
        raise FetchError(
            f"{what}: HTTP 429 Too Many Requests (rate limit) from {where}, after {RETRIES} "
            f"retries that honoured its Retry-After (up to {MAX_RETRY_AFTER} s each)",
            hint="the server limits requests per client: fetch from a mirror (--mirror "
            "PREFIX=REPLACEMENT), log in where the server offers a higher limit (~/.netrc), or "
            "try again later",
        )
    if resp.status_code >= 400:
        resp.close()
        hint = (
            "the server wants credentials, or others: give them as the URL's user info "
            "(https://USER:PASSWORD@host/...) or a ~/.netrc entry for the host; "
            "check the URL too (a version or architecture in it?)"
            if resp.status_code in (401, 403)
            else "check the URL (a version or architecture in it?)"
            if resp.status_code in (404, 410)
            else NET_HINT
        )
        message = f"{what}: HTTP {resp.status_code} {resp.reason} from {where}"
        if resp.status_code in (404, 410):
            raise NotServedError(message, hint=hint, status=resp.status_code)
        raise FetchError(message, hint=hint)
    content_type = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if (
        content_type in ("text/html", "application/xhtml+xml")
        and not html
        and not _is_html_url(current)
    ):
        resp.close()
        raise _html_error(what, where)
    return resp, where


def _content_length(resp: requests.Response) -> int | None:
    value = resp.headers.get("Content-Length", "")
    return int(value) if value.isdigit() else None


def _download_http_once(
    session: requests.Session,
    url: str,
    store: Store,
    *,
    what: str,
    label: str,
    expected: dict[str, str],
    expected_size: int | None,
) -> BlobInfo:
    from urllib3.exceptions import HTTPError as Urllib3Error

    resp, where = _get(session, url, what, label)
    with resp:
        length = _content_length(resp)
        size = expected_size if expected_size is not None else length
        with store.writer(expected=expected, expected_size=size, what=what, url=where) as writer:
            try:
                # raw + decode_content=False: a server that gzips a .tar.gz on the fly must not
                # change the bytes we hash
                _pour(resp.raw.stream(CHUNK, decode_content=False), writer, url=url, what=what)
            except (Urllib3Error, OSError) as e:
                raise _BrokenBody(writer.size, length, e) from e
            return writer.commit()


def download(
    url: str,
    store: Store,
    *,
    what: str,
    expected: dict[str, str],
    expected_size: int | None = None,
    origin: str | None = None,
) -> BlobInfo:
    """Stream ``url`` (http, https or file) into ``store``, verified.

    Args:
        url: where to fetch from (already rewritten by mirrors).
        what: names the source in messages, e.g. ``"source 'kubelet'"``.
        expected: ``{"sha256": "sha256:<hex>", "sha512": "sha512:<hex>"}`` (either or both;
            empty only when the caller verifies otherwise).
        expected_size: bytes, when known (from the lock); else the Content-Length is enforced.
        origin: the recipe's URL when ``url`` is a mirror of it (for messages).
    Returns:
        the stored blob (its ``digests`` holds every algorithm of ``expected`` plus sha256).
    Raises:
        ChecksumError: size or digest differ from ``expected`` (the message names the URL a
            redirect led to as well); nothing is stored.
        DowngradeError: a redirect from https to http.
        FetchError: unreachable host, HTTP error status (after retries), body broken off,
            empty body, HTML page, missing file, too many redirects.
    """
    label = mirror_label(url, origin)
    scheme = urlsplit(url).scheme.lower()
    log.info("fetching %s", label)
    if scheme == "file":
        with (
            _open_file(url, what) as f,
            store.writer(
                expected=expected, expected_size=expected_size, what=what, url=label
            ) as writer,
        ):
            _pour(iter(lambda: f.read(CHUNK), b""), writer, url=url, what=what)
            return writer.commit()
    if scheme not in ("http", "https"):
        raise FetchError(f"{what}: unsupported URL {url!r}: expected http://, https:// or file://")
    session = new_session()
    try:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return _download_http_once(
                    session,
                    url,
                    store,
                    what=what,
                    label=label,
                    expected=expected,
                    expected_size=expected_size,
                )
            except _BrokenBody as e:
                of = f" of {e.length}" if e.length is not None else ""
                if attempt == ATTEMPTS:
                    raise FetchError(
                        f"{what}: the download of {label} broke off after {e.got}{of} bytes "
                        f"({ATTEMPTS} attempts): {_reason(e.cause)}",
                        hint=NET_HINT + "; nothing was stored",
                    ) from e.cause
                log.warning("%s: %s broke off after %d%s bytes; retrying", what, url, e.got, of)
        raise AssertionError("unreachable")
    finally:
        session.close()


def fetch_text(
    url: str, *, what: str, limit: int = MAX_TEXT, origin: str | None = None, html: bool = False
) -> str:
    """The body of a small text file (a checksum file) at ``url`` (http, https or file).

    ``origin``: the recipe's URL when ``url`` is a mirror of it (for messages); ``html``: an
    HTML page is what is asked for (a snapshot archive's listing), not an error page.

    Raises:
        DowngradeError: a redirect from https to http.
        FetchError: as :func:`download`, or the body exceeds ``limit`` bytes.
    """
    return _fetch_text(url, what=what, limit=limit, origin=origin, html=html)[0]


def _fetch_text(
    url: str, *, what: str, limit: int = MAX_TEXT, origin: str | None = None, html: bool = False
) -> tuple[str, str]:
    """:func:`fetch_text`, and where the text came from (the label, with the URL a redirect
    led to)."""
    label = mirror_label(url, origin)
    log.info("fetching %s", label)
    scheme = urlsplit(url).scheme.lower()
    where = label
    if scheme == "file":
        with _open_file(url, what) as f:
            data = f.read(limit + 1)
    elif scheme in ("http", "https"):
        session = new_session()
        try:
            resp, where = _get(session, url, what, label, html=html)
            with resp:
                try:
                    data = resp.raw.read(limit + 1, decode_content=False)
                except Exception as e:  # urllib3 and socket errors alike: nothing to salvage
                    raise FetchError(
                        f"{what}: the download of {where} broke off: {_reason(e)}", hint=NET_HINT
                    ) from e
        finally:
            session.close()
    else:
        raise FetchError(f"{what}: unsupported URL {url!r}: expected http://, https:// or file://")
    if len(data) > limit:
        raise FetchError(
            f"{what}: {where} is larger than {limit} bytes; expected a small text file"
        )
    return data.decode("utf-8", errors="replace"), where


def url_filename(url: str) -> str:
    """The last path segment of ``url``, percent-decoded (``""`` when the path ends in ``/``)."""
    return posixpath.basename(unquote(urlsplit(url).path))


def _pins(source: UrlSource) -> dict[str, str]:
    """The digests the recipe pins (``sha256:<hex>``, ``sha512:<hex>``), by algorithm."""
    return {k: v for k, v in source.lock_identity().items() if k != "url"}


def _from_store(store: Store, expected: dict[str, str], what: str) -> BlobInfo | None:
    """The stored blob matching a sha256 pin (checking a sha512 pin too), or None."""
    digest = expected.get("sha256")
    if digest is None or not store.has_blob(digest):
        return None
    path = store.blob_path(digest)
    digests = {"sha256": digest}
    if "sha512" in expected:
        h = hashlib.sha512()
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
        digests["sha512"] = "sha512:" + h.hexdigest()
        if digests["sha512"] != expected["sha512"]:
            raise ChecksumError(
                f"{what}: the stored blob {digest} matches the sha256 pin but its sha512 is "
                f"{digests['sha512']}, expected {expected['sha512']}",
                hint="the recipe's sha256 and sha512 pins describe different files; fix one of them",
            )
    return BlobInfo(digest=digest, size=os.stat(path).st_size, digests=digests)


def resolve(name: str, source: UrlSource, ctx: FetchContext, *, base_dir: Path) -> dict[str, Any]:
    """Lock a url source: read its pin (from the recipe or its checksum file), fetch and verify it.

    Returns:
        ``{"kind": "url", "url": <recipe URL>, "size": <bytes>, "digest": "sha256:<hex>",
        "sha256": "sha256:<hex>"}`` plus ``"sha512": "sha512:<hex>"`` when a sha512 was pinned
        or given by the checksum file. A blob already in the store under the sha256 pin is used
        without any network access.
    Raises:
        ChecksumError, FetchError: see :func:`download` and
            :func:`~nvkr.fetch.checksums.parse_checksum_file`.
        OfflineError: ``ctx.offline`` and the checksum file or the blob is needed.
    """
    what = f"source {name!r}"
    expected = _pins(source)
    pinned_by = ""  # where the pin came from, when not from the recipe
    if not expected:
        assert source.checksumUrl is not None  # the model requires a pin or a checksum URL
        ctx.require_online(name, f"the checksum file {source.checksumUrl}")
        checksum_url = ctx.mirrors.rewrite(source.checksumUrl)
        text, pinned_by = _fetch_text(
            checksum_url, what=f"{what}: checksum file", origin=source.checksumUrl
        )
        algo, hexdigest = parse_checksum_file(
            text,
            source.filename or url_filename(source.url),
            algorithm_for(source.checksumUrl, source.checksumAlgorithm),
            url=pinned_by,
        )
        expected[algo] = f"{algo}:{hexdigest}"
    info = _from_store(ctx.store, expected, what)
    if info is None:
        ctx.require_online(name, f"{source.url} ({', '.join(sorted(expected.values()))})")
        try:
            info = download(
                ctx.mirrors.rewrite(source.url),
                ctx.store,
                what=what,
                expected=expected,
                origin=source.url,
            )
        except ChecksumError as e:
            if not pinned_by:
                raise
            raise ChecksumError(
                f"{e.message} (the pin is from the checksum file {pinned_by})", hint=e.hint
            ) from e
    entry: dict[str, Any] = {
        "kind": "url",
        "url": redact_url(source.url),
        "size": info.size,
        "digest": info.digest,
        "sha256": info.digests["sha256"],
    }
    if "sha512" in info.digests:
        entry["sha512"] = info.digests["sha512"]
    return entry


def ensure(
    name: str, source: UrlSource, resolved: dict[str, Any], ctx: FetchContext, *, base_dir: Path
) -> str:
    """Make the store hold the blob of a locked url source; return its ``sha256:<hex>``.

    No network (no session, not even ``import requests``) when the blob is there.

    Raises:
        LockError: ``resolved`` is not a url entry for this recipe URL and pins.
        OfflineError: the blob is missing and ``ctx.offline``.
        ChecksumError, FetchError: see :func:`download`.
    """
    check_entry(name, resolved, "url", **source.lock_identity())
    digest: str = resolved["digest"]
    if ctx.store.has_blob(digest):
        return digest
    ctx.require_online(name, f"{source.url} ({digest})")
    expected = {"sha256": resolved.get("sha256", digest)}
    if resolved.get("sha512"):
        expected["sha512"] = resolved["sha512"]
    size = resolved.get("size")
    info = download(
        ctx.mirrors.rewrite(source.url),
        ctx.store,
        what=f"source {name!r}",
        expected=expected,
        expected_size=size if isinstance(size, int) else None,
        origin=source.url,
    )
    return info.digest
