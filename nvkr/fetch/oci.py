"""The ``oci`` source kind: an image or image index by digest, with its whole closure, in the store.

A recipe pins a base image as ``oci: REGISTRY/REPOSITORY`` (pulled over the OCI distribution
API) or ``oci: "oci-layout:DIR"`` (an image layout directory next to the recipe), plus the
``digest`` of a manifest or index. :func:`resolve` and :func:`ensure` walk the closure from that
digest (index → manifests → config and layers; OCI and Docker schema 2 alike), verify every blob
against its descriptor's digest and size, and only then commit them to the store, config and
layers first and the pinned document last, so a tampered blob anywhere leaves none of the
closure behind and a half-finished pull never looks complete. Blobs the store already holds are
not fetched again; when all of them are there nothing touches the network.

Registry transport (distribution-spec "Pulling manifests", "Pulling blobs"): ``GET
/v2/<repo>/manifests/<digest>`` with an ``Accept`` listing the OCI and Docker manifest and index
types, ``GET /v2/<repo>/blobs/<digest>`` streamed into the store, both through
:class:`nvkr.oci.registry.RegistryClient` (auth challenges, retries, digest checks; credentials
from ``~/.docker/config.json`` only). https unless the source says ``insecure: true`` or the
registry is 127.0.0.1/localhost. Mirrors rewrite the ``https://REGISTRY/`` prefix of every URL,
never the digests.
"""

from __future__ import annotations

import abc
import contextlib
import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from nvkr.errors import (
    ChecksumError,
    DowngradeError,
    FetchError,
    IntegrityError,
    RegistryError,
    RegistryLimitError,
)
from nvkr.fetch import http as fetch_http
from nvkr.fetch.context import NET_HINT, FetchContext, check_entry
from nvkr.fetch.http import CHUNK
from nvkr.fetch.mirrors import mirror_label
from nvkr.jsondoc import load_json_object
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import media_type_of
from nvkr.oci.registry import RegistryClient, docker_credentials
from nvkr.oci.session import LOOPBACK, MAX_MANIFEST
from nvkr.recipe.sources import OciSource
from nvkr.store import BlobWriter, Store

__all__ = ["LAYOUT_PREFIX", "docker_credentials", "ensure", "resolve"]

log = logging.getLogger("nvkr.fetch")

LAYOUT_PREFIX = "oci-layout:"


# -- where the bytes come from -----------------------------------------------------------------
class _Origin(abc.ABC):
    """One place to pull from: a registry repository or a layout directory."""

    label: str

    @abc.abstractmethod
    def manifest(self, digest: str) -> tuple[bytes, str | None, str]:
        """The bytes of document ``digest`` (unverified), its Content-Type if any, its URL."""

    @abc.abstractmethod
    def blob(self, digest: str, sink: _Verifier) -> str:
        """Stream blob ``digest`` into ``sink``; return where it came from."""

    def close(self) -> None:  # noqa: B027 - most origins hold nothing to release
        """Release what the origin holds (a registry client's connections)."""


class _Layout(_Origin):
    def __init__(self, name: str, ref: str, root: Path) -> None:
        if not (root / "oci-layout").is_file():
            state = "has no oci-layout file" if root.is_dir() else "does not exist"
            raise FetchError(
                f"source {name!r}: {root} {state}",
                hint="oci-layout:DIR names an image layout directory relative to the recipe file",
            )
        self.root = root
        self.label = f"source {name!r} ({ref})"
        self._index: list[dict[str, Any]] | None = None

    def _path(self, digest: str) -> Path:
        alg, hexpart = digest.split(":", 1)
        return self.root / "blobs" / alg / hexpart

    def manifest(self, digest: str) -> tuple[bytes, str | None, str]:
        path = self._path(digest)
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_MANIFEST + 1)
        except FileNotFoundError as e:
            raise FetchError(f"{self.label}: blob {digest} is missing from {self.root}") from e
        # a layout's index.json may say what the document is when the document itself does not
        media_type = next(
            (str(m.get("mediaType")) for m in self.index() if m.get("digest") == digest), None
        )
        return data, media_type, str(path)

    def index(self) -> list[dict[str, Any]]:
        if self._index is None:
            try:
                doc = json.loads((self.root / "index.json").read_bytes())
                self._index = [m for m in doc.get("manifests", []) if isinstance(m, dict)]
            except (OSError, ValueError, AttributeError):
                self._index = []
        return self._index

    def blob(self, digest: str, sink: _Verifier) -> str:
        path = self._path(digest)
        try:
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    sink.write(chunk)
        except FileNotFoundError as e:
            raise FetchError(f"{self.label}: blob {digest} is missing from {self.root}") from e
        return str(path)


class _Registry(_Origin):
    """A repository in a registry, through :class:`~nvkr.oci.registry.RegistryClient`."""

    def __init__(self, name: str, ref: str, insecure: bool, ctx: FetchContext) -> None:
        registry, _, repository = ref.partition("/")
        if not registry or not repository or "@" in ref or ":" in repository:
            raise FetchError(
                f"source {name!r}: {ref!r} is not REGISTRY/REPOSITORY",
                hint="e.g. oci: registry.example.org/team/base (the digest is the pin, no tag)",
            )
        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if insecure or host in LOOPBACK else "https"
        self.name = name
        self.label = ref
        self.repository = repository
        self.origin_base = f"{scheme}://{registry}/"
        self.base = ctx.mirrors.rewrite(self.origin_base)
        if self.base == self.origin_base and registry == "docker.io":
            self.base = f"{scheme}://registry-1.docker.io/"  # Docker Hub's API host
        self._registry = registry
        self._insecure = insecure
        self._client: RegistryClient | None = None

    @property
    def client(self) -> RegistryClient:
        if self._client is None:
            # credentials only from ~/.docker/config.json, keyed by host: the publish variables
            # (NVKR_REGISTRY_*) name the user's own registry, not every base image's
            self._client = RegistryClient(
                self._registry,
                insecure=self._insecure,
                base_url=self.base,
                credentials_from_env=False,
                retries=fetch_http.RETRIES,
                backoff=fetch_http.BACKOFF,
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def _error(
        self, e: RegistryError | IntegrityError
    ) -> FetchError | ChecksumError | DowngradeError | RegistryLimitError:
        what = f"source {self.name!r} ({self.label})"
        mirror = f" (mirror of {self.origin_base})" if self.base != self.origin_base else ""
        if isinstance(e, DowngradeError):
            return DowngradeError(f"{what}: {e.message}{mirror}", hint=e.hint)
        if isinstance(e, RegistryLimitError):  # keeps its exit code (2)
            return RegistryLimitError(f"{what}: {e.message}{mirror}", hint=e.hint)
        if isinstance(e, IntegrityError):
            return ChecksumError(
                f"{what}: {e.message}{mirror}",
                hint="the registry serves other bytes than the pin; nothing was stored",
            )
        hint = e.hint or NET_HINT
        if e.status == 404:
            hint = "check the repository and the digest in the recipe"
        elif e.status in (401, 403):
            hint = "log in with credentials in ~/.docker/config.json (docker login)"
        if "asks for a user name" in e.message:
            hint = f"add credentials for {self._registry} to ~/.docker/config.json (docker login)"
        return FetchError(f"{what}: {e.message}{mirror}", hint=hint)

    def manifest(self, digest: str) -> tuple[bytes, str | None, str]:
        try:
            data, media_type, _ = self.client.get_manifest(self.repository, digest)
        except (RegistryError, IntegrityError) as e:
            raise self._error(e) from e
        url = mirror_label(
            self.client.url(self.repository, "manifests", digest),
            f"{self.origin_base}v2/{self.repository}/manifests/{digest}",
        )
        return data, media_type or None, url

    def blob(self, digest: str, sink: _Verifier) -> str:
        try:
            self.client.get_blob(self.repository, digest, sink)
        except (RegistryError, IntegrityError) as e:
            raise self._error(e) from e
        return mirror_label(
            self.client.url(self.repository, "blobs", digest),
            f"{self.origin_base}v2/{self.repository}/blobs/{digest}",
        )


# -- verified pulls ----------------------------------------------------------------------------
class _Verifier:
    """Writes into a :class:`BlobWriter` while hashing, so a blob is checked before any commit."""

    def __init__(self, writer: BlobWriter) -> None:
        self.writer = writer
        self.hash = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self.writer.write(chunk)
        self.hash.update(chunk)
        self.size += len(chunk)


def _check(what: str, digest: str, size: int | None, actual: str, got: int) -> None:
    hint = "the registry or layout serves other bytes than the pin; nothing was stored"
    if size is not None and got != size:
        raise ChecksumError(f"{what}: expected {size} bytes, got {got}", hint=hint)
    if actual != digest:
        raise ChecksumError(f"{what}: expected {digest}, got {actual}", hint=hint)


def _children(doc: dict[str, Any], media_type: str, where: str) -> list[dict[str, Any]]:
    if media_type in mt.DOCKER_SCHEMA1_TYPES or doc.get("schemaVersion") == 1:
        raise FetchError(
            f"{where} is a Docker schema 1 manifest, which nvkr does not take",
            hint="pin the digest of an OCI or Docker schema 2 copy (skopeo copy --format oci)",
        )
    if media_type in mt.INDEX_TYPES:
        found = doc.get("manifests")
    elif media_type in mt.IMAGE_MANIFEST_TYPES:
        found = [doc.get("config"), *(doc.get("layers") or [])]
    else:
        raise FetchError(f"{where} has media type {media_type!r}, not an image or image index")
    out = []
    for desc in found or []:
        if (
            not isinstance(desc, dict)
            or not re.fullmatch(r"sha256:[0-9a-f]{64}", str(desc.get("digest", "")))
            or not isinstance(desc.get("size"), int)
        ):
            raise FetchError(f"{where} holds a malformed descriptor {desc!r}")
        out.append(desc)
    return out


class _Pull:
    """One walk over the closure of a pinned digest (see :func:`_pull`)."""

    def __init__(
        self, name: str, ref: str, store: Store, origin: _Origin | None, stack: contextlib.ExitStack
    ) -> None:
        self.prefix = f"source {name!r} ({ref})"
        self.ref = ref
        self.store = store
        self.origin = origin
        self.stack = stack
        self.pending: list[BlobWriter] = []

    def _writer(self, digest: str, size: int | None) -> BlobWriter:
        writer = self.store.writer(
            expected={"sha256": digest}, expected_size=size, what=f"{self.ref} {digest}"
        )
        return self.stack.enter_context(writer)

    def leaf(self, digest: str, size: int | None, where: str) -> None:
        """Stream a config or layer into a pending (verified, not yet committed) blob."""
        if self.store.has_blob(digest):
            return
        if self.origin is None:
            raise LookupError(digest)
        writer = self._writer(digest, size)
        sink = _Verifier(writer)
        url = self.origin.blob(digest, sink)
        actual = "sha256:" + sink.hash.hexdigest()
        what = f"{self.prefix}: blob {digest} (in {where}) from {url}"
        _check(what, digest, size, actual, sink.size)
        self.pending.append(writer)

    def document(self, digest: str, size: int | None, where: str) -> tuple[bytes, str | None]:
        """The checked bytes of a manifest or index, and the media type its origin gave."""
        if self.store.has_blob(digest):
            data = self.store.read_blob(digest)
            what = f"{self.prefix}: {digest} (in {where}) in the store"
            _check(what, digest, size, digest, len(data))
            return data, None
        if self.origin is None:
            raise LookupError(digest)
        data, content_type, url = self.origin.manifest(digest)
        what = f"{self.prefix}: blob {digest} (in {where}) from {url}"
        if len(data) > MAX_MANIFEST:
            raise FetchError(f"{what}: larger than {MAX_MANIFEST} bytes, not a manifest")
        _check(what, digest, size, "sha256:" + hashlib.sha256(data).hexdigest(), len(data))
        writer = self._writer(digest, len(data))
        writer.write(data)
        self.pending.append(writer)
        return data, content_type


def _pull(name: str, ref: str, digest: str, store: Store, origin: _Origin | None) -> dict[str, Any]:
    """Walk the closure of ``digest``, fetch what ``store`` lacks, commit it all at the end.

    ``origin`` None means the store must hold everything (a missing blob raises
    :class:`LookupError`, and nothing is fetched). Returns the lock entry's ``mediaType``,
    ``size`` and ``blobs``.
    """
    prefix = f"source {name!r} ({ref})"
    seen: set[str] = set()
    top: tuple[str, int] | None = None
    with contextlib.ExitStack() as stack:
        pull = _Pull(name, ref, store, origin, stack)
        todo: list[tuple[str, int | None, str | None, str]] = [(digest, None, None, "the recipe")]
        while todo:
            d, size, desc_type, where = todo.pop()
            if d in seen:
                continue
            seen.add(d)
            if desc_type is not None and desc_type not in mt.MANIFEST_TYPES:
                pull.leaf(d, size, where)
                continue
            data, origin_type = pull.document(d, size, where)
            doc = load_json_object(data, f"{prefix}: {d}", error=FetchError)
            media_type = media_type_of(doc, desc_type or origin_type)
            if top is None:
                top = (media_type, len(data))
            kind = "index" if media_type in mt.INDEX_TYPES else "manifest"
            here = f"{kind} {d}"
            for child in reversed(_children(doc, media_type, f"{prefix}: {here}")):
                todo.append((child["digest"], child["size"], str(child.get("mediaType", "")), here))
        # documents are fetched before what they reference: committing in reverse puts the pinned
        # document last, so "the pinned digest is in the store" means the closure is there too
        for writer in reversed(pull.pending):
            writer.commit()
    assert top is not None
    return {"mediaType": top[0], "size": top[1], "blobs": sorted(seen)}


def _origin(name: str, source: OciSource, ctx: FetchContext, base_dir: Path) -> _Origin:
    if source.oci.startswith(LAYOUT_PREFIX):
        return _Layout(name, source.oci, base_dir / source.oci[len(LAYOUT_PREFIX) :])
    ctx.require_online(name, f"{source.oci}@{source.digest}")
    return _Registry(name, source.oci, source.insecure, ctx)


def _closure(name: str, source: OciSource, ctx: FetchContext, base_dir: Path) -> dict[str, Any]:
    try:
        return _pull(name, source.oci, source.digest, ctx.store, None)
    except LookupError:
        pass
    origin = _origin(name, source, ctx, base_dir)
    try:
        log.info("pulling %s@%s", source.oci, source.digest)
        return _pull(name, source.oci, source.digest, ctx.store, origin)
    finally:
        origin.close()


def resolve(name: str, source: OciSource, ctx: FetchContext, *, base_dir: Path) -> dict[str, Any]:
    """Lock an oci source: pull the closure of its pinned digest into the store, verified.

    Returns:
        ``{"kind": "oci", "ref": <as in the recipe>, "digest": "sha256:<hex>" (the pinned
        manifest or index), "mediaType": <its media type>, "size": <its bytes>, "blobs":
        [every "sha256:<hex>" of the closure, the pinned one included, sorted]}``. Nothing is
        fetched when the store already holds the closure.
    Raises:
        ChecksumError: a blob's bytes or size differ from its descriptor (names the ref and the
            blob); nothing of the closure is stored.
        FetchError: unreachable registry, HTTP error, refused credentials, a missing layout or
            blob, a malformed or Docker schema 1 manifest.
        OfflineError: ``ctx.offline`` and a registry would be needed.
    """
    identity = _closure(name, source, ctx, base_dir)
    return {"kind": "oci", "ref": source.oci, "digest": source.digest, **identity}


def ensure(
    name: str, source: OciSource, resolved: dict[str, Any], ctx: FetchContext, *, base_dir: Path
) -> str:
    """Make the store hold the closure ``resolved`` lists; return the pinned ``sha256:<hex>``.

    With every blob of ``resolved["blobs"]`` in the store this reads nothing and opens no
    connection.

    Raises:
        LockError: ``resolved`` is not an oci entry for this ref and digest.
        OfflineError: a blob is missing and ``ctx.offline`` (a registry source).
        ChecksumError, FetchError: as :func:`resolve`.
        IntegrityError: the pulled closure differs from the lock entry's list.
    """
    check_entry(name, resolved, "oci", **source.lock_identity())
    listed = resolved.get("blobs")
    if isinstance(listed, list) and listed and all(ctx.store.has_blob(d) for d in listed):
        return source.digest
    identity = _closure(name, source, ctx, base_dir)
    if isinstance(listed, list) and sorted(listed) != identity["blobs"]:
        raise IntegrityError(
            f"source {name!r} ({source.oci}): the closure of {source.digest} has other blobs "
            "than the lock entry lists",
            hint="the lockfile was edited by hand; run `nvkr lock` again",
        )
    return source.digest
