"""A client for OCI registries: blobs and manifests moved, verified.

``nvkr publish`` pushes a release set through it (:mod:`nvkr.delivery.publish`) and the ``oci`` source kind
pulls base images through it (:mod:`nvkr.fetch.oci`). It speaks the OCI distribution-spec v1.1 over
HTTP(S) with ``requests``: "Checking if content exists" (HEAD), "Pushing blobs" (POST then PUT,
``PATCH`` chunks for large blobs, "Mounting a blob from another repository"), "Pushing manifests",
"Pulling manifests"/"Pulling blobs" (GET), "Listing referrers" and "Listing tags". Every digest
is checked: the registry checks a blob's on the closing PUT and nvkr compares the
``Docker-Content-Digest`` it answers; manifests and blobs pulled are hashed before anyone sees them.

:class:`RegistryClient` (manifests, referrers, tags; this module) is built on
:class:`~nvkr.oci.blobs.BlobTransfer` (blobs), built on :class:`~nvkr.oci.session.RegistrySession`
(transport, retries, redirects, authentication).

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
backoff (:data:`~nvkr.oci.session.RETRIES`, :data:`~nvkr.oci.session.BACKOFF`; a ``Retry-After``,
seconds or HTTP-date, is honoured up to :data:`~nvkr.oci.session.MAX_RETRY_AFTER` seconds, and
the 429 waits of a session end at :data:`~nvkr.oci.session.RATE_LIMIT_WAIT` seconds in all);
other 4xx are not (``DIGEST_INVALID`` for good bytes is sent again, up to
:data:`~nvkr.oci.session.DIGEST_RACE_SENDS` times in all after jittered waits: the distribution
2.8 race). Answers read whole stop at :data:`~nvkr.oci.session.MAX_RESPONSE` bytes
(:class:`~nvkr.errors.RegistryLimitError`, exit 2). A blob upload that breaks off asks the registry where it got to
(``GET`` on the upload URL, its ``Range`` header) and goes on from there, or starts over when the
registry lost the upload (CNCF distribution 2.8 cancels an upload whose size moved under a stale
upload URL, so after a partly received chunk it always starts over). Relative ``Location`` headers
are resolved against the request URL.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any
from urllib.parse import urljoin

from nvkr.errors import IntegrityError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.auth import CREDENTIALS_HINT as CREDENTIALS_HINT
from nvkr.oci.auth import docker_credentials as docker_credentials
from nvkr.oci.auth import parse_challenge as parse_challenge
from nvkr.oci.blobs import BlobTransfer
from nvkr.oci.reference import _DIGEST
from nvkr.oci.reference import Reference as Reference
from nvkr.oci.reference import fallback_tag as fallback_tag
from nvkr.oci.session import (
    DIGEST_RACE_SENDS,
    MANIFEST_ACCEPT,
    MAX_MANIFEST,
    MAX_TAG_LIST,
    error_detail,
    error_reason,
)


class RegistryClient(BlobTransfer):
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
        retries, backoff: per request (default :data:`~nvkr.oci.session.RETRIES`, :data:`~nvkr.oci.session.BACKOFF` seconds).
    """

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
        for attempt in range(DIGEST_RACE_SENDS):
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
            # manifest at that moment: the bytes are ours and hash to digest, so send them
            # again after a jittered wait (a writer in lockstep may race again); a registry that
            # says so every time means it (no other 400 is retried, nor 401/403)
            if "DIGEST_INVALID" not in error_detail(resp) or attempt == DIGEST_RACE_SENDS - 1:
                break
            self._race_wait(attempt)
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
            RegistryLimitError: larger than :data:`MAX_MANIFEST` (exit 2; at most that much is
                read).
            RegistryError: an error answer (404 ``status``: no such manifest), unreachable.
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
            if expected.isdigit() and int(expected) > MAX_MANIFEST:
                resp.close()
                raise self._too_large(what, url, MAX_MANIFEST)
            try:
                with resp:
                    data = resp.raw.read(MAX_MANIFEST + 1, decode_content=False)
                if len(data) > MAX_MANIFEST:
                    raise self._too_large(what, url, MAX_MANIFEST)
                if expected.isdigit() and len(data) < int(expected):
                    raise OSError(f"body ended at {len(data)} of {expected} bytes")
                break
            except (Urllib3Error, OSError) as e:
                if attempt == self.retries:
                    raise RegistryError(
                        f"{what}: the body from {url} broke off: {error_reason(e)}"
                    ) from e
                self._sleep(attempt)
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
            RegistryLimitError: an index larger than :data:`~nvkr.oci.session.MAX_RESPONSE`.
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
            RegistryLimitError: a page larger than :data:`~nvkr.oci.session.MAX_RESPONSE`, or
                all pages together larger than :data:`~nvkr.oci.session.MAX_TAG_LIST`.
            RegistryError: an error answer other than 404, or unreachable.
        """
        what = f"tags of {self.registry}/{repo}"
        url: str | None = f"{self.base}v2/{repo}/tags/list"
        out: list[str] = []
        read = 0
        while url:
            resp = self.request("GET", url, scopes=self._pull(repo), what=what)
            read += len(resp.content or b"")
            if read > MAX_TAG_LIST:
                resp.close()
                raise self._too_large(what, url, MAX_TAG_LIST)
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
