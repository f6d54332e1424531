"""Blobs in an OCI registry: :class:`BlobTransfer` checks, mounts, pushes and pulls them.

Distribution-spec v1.1 "Checking if content exists" (HEAD), "Mounting a blob from another
repository", "Pushing blobs" (POST then PUT, ``PATCH`` chunks of
:data:`~nvkr.oci.session.CHUNK_SIZE` for large blobs, resumed from the registry's ``Range`` after a
break) and "Pulling blobs" (GET, hashed before anyone sees the bytes).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from nvkr.errors import IntegrityError, RegistryError
from nvkr.oci import mediatypes as mt
from nvkr.oci.session import (
    DIGEST_RACE_SENDS,
    READ_BLOCK,
    TRANSIENT,
    BodyWindow,
    RegistrySession,
    error_detail,
    error_reason,
)

if TYPE_CHECKING:
    import requests


class Writer(Protocol):
    """Where :meth:`RegistryClient.get_blob` puts bytes: a file, a store writer, a hasher."""

    def write(self, data: bytes, /) -> Any: ...


def _file_digest(f: IO[bytes], like: str) -> str:
    """The digest of the whole of ``f`` with the algorithm of ``like`` (``sha256:...``)."""
    alg = like.split(":", 1)[0]
    h = hashlib.new(alg)
    f.seek(0)
    while block := f.read(READ_BLOCK):
        h.update(block)
    return f"{alg}:{h.hexdigest()}"


class BlobTransfer(RegistrySession):
    """The blob operations of :class:`~nvkr.oci.registry.RegistryClient`."""

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
        sent, stalled, offset, races = 0, 0, 0, 0
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
                        data=BodyWindow(f, offset, length) if length else b"",
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
                detail = error_detail(resp) if resp is not None else ""
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
                    races += 1  # sent again, a bounded number of times (DIGEST_RACE_SENDS)
                    if races >= DIGEST_RACE_SENDS:
                        raise IntegrityError(
                            f"{what}: the registry computed another digest for the bytes sent",
                            hint="a proxy or the registry altered the upload; nothing was tagged",
                        )
                lost = resp is None or resp.status_code in (*TRANSIENT, 404, 416)
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
                self._wait_or_fail(stalled - 1, resp, what, race=races - 1 if digest_race else None)
                if self.blob_exists(repo, digest):
                    return sent
                resumed = self._upload_offset(repo, location, what)
                if resumed is not None and resumed[1] <= size:
                    location, offset = resumed
                else:
                    location, offset = self._start_upload(repo, what), 0

    def _wait_or_fail(
        self, attempt: int, resp: requests.Response | None, what: str, *, race: int | None = None
    ) -> None:
        """Wait before retry ``attempt``; a 429 once the session's rate-limit wait is spent
        raises (the rate-limit error). After DIGEST_INVALID race ``race``: its jittered wait."""
        if race is not None:
            self._race_wait(race)
            return
        if not self._sleep(attempt, resp) and resp is not None:
            raise self._fail(what, resp)

    def read_blob_start(self, repo: str, digest: str, length: int) -> bytes:
        """The first ``length`` bytes of blob ``digest`` of ``repo`` (``Range: bytes=0-<n>``;
        from a registry that ignores the range, the start of the whole body, the rest unread).
        Not verified: the digest covers the whole blob. For a peek at a file header.

        Raises:
            RegistryError: an error answer (404: the repository lacks it), or unreachable.
        """
        what = f"blob {digest} of {self.registry}/{repo}"
        resp = self.request(
            "GET", self.url(repo, "blobs", digest), scopes=self._pull(repo), what=what,
            headers={"Range": f"bytes=0-{length - 1}"}, stream=True,
        )  # fmt: skip
        if resp.status_code not in (200, 206):
            raise self._fail(what, resp)
        got = b""
        with resp:
            for chunk in resp.raw.stream(READ_BLOCK, decode_content=False):
                got += chunk
                if len(got) >= length:
                    break
        return got[:length]

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
                    for chunk in resp.raw.stream(READ_BLOCK, decode_content=False):
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
                    f"{what}: the download from {url} broke off after {got} bytes: {error_reason(broken)}",
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
