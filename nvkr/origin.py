"""Origins and redirects: the two transport rules every HTTP client of nvkr keeps.

Every download and every registry request goes through :mod:`nvkr.fetch.http` (sources,
checksum files, .debs, upstream version files) or :class:`nvkr.oci.registry.RegistryClient`
(publish, pull, oci sources). Both follow redirects themselves, one hop at a time, so that each
hop is checked before anything is sent to it:

1. Credentials stay with their origin. An origin is (scheme, host, port), the default port
   filled in (RFC 6454 section 4): ``https://r.example`` and ``https://r.example:443`` are one,
   ``http://127.0.0.1:5000`` and ``http://127.0.0.1:5001`` are two. A credential goes only to the
   origin it was issued for; a request to any other origin (a storage host a registry redirects
   to, an upload ``Location`` on another host) carries no ``Authorization``.
2. No downgrade. A redirect from ``https`` to ``http`` is refused before the plain-HTTP request
   is made: what a server sends over plain HTTP can be altered on the way, and a digest read
   there (a checksum file) would be locked as if TLS had protected it. The refusal is an
   :class:`~nvkr.errors.DowngradeError` (an IntegrityError, exit 3), not a fetch failure (exit 1): retrying cannot
   help, and CI must not mistake it for a flaky network.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final
from urllib.parse import urljoin, urlsplit

from nvkr.errors import DowngradeError

if TYPE_CHECKING:
    import requests

#: Hops followed from one URL; storage backends and CDNs redirect once or twice.
MAX_REDIRECTS: Final = 10
REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def origin_of(url: str) -> Origin:
    """``(scheme, host, port)`` of ``url``, lower-cased, the scheme's default port filled in
    (port -1 when the URL's port is not a number: it matches no real origin)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme, 0)


def redirect_target(resp: requests.Response) -> str | None:
    """The absolute URL a redirect answer (301, 302, 303, 307, 308 with ``Location``) points
    to, resolved against the request URL (RFC 9110 section 10.2.2); None for any other answer."""
    location = resp.headers.get("Location")
    if resp.status_code not in REDIRECT_STATUSES or not location:
        return None
    return urljoin(resp.url, location)


def refuse_downgrade(first: str, current: str, target: str, what: str, *, hint: str) -> None:
    """Raise when the hop ``current`` → ``target`` goes from https to http.

    Args:
        first: the URL the request started at (named in the message, with ``target``).
        current: the URL that answered the redirect.
        target: where it redirects to.
        what: names the thing fetched, e.g. ``"source 'kubelet'"``.
        hint: what the user can do about it.
    Raises:
        DowngradeError: a downgrade (exit 3).
    """
    if urlsplit(current).scheme.lower() == "https" and urlsplit(target).scheme.lower() == "http":
        via = f" (through {current})" if current != first else ""
        raise DowngradeError(
            f"{what}: {first}{via} redirects to plain HTTP {target}; nvkr does not follow "
            "https down to http (the bytes, and any digest read from them, could be altered "
            "on the way)",
            hint=hint,
        )
