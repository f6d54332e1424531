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
types, ``GET /v2/<repo>/blobs/<digest>`` streamed into the store. A ``401`` with a ``Bearer``
challenge is answered with an anonymous token (or one bought with the credentials of
``~/.docker/config.json``); a ``Basic`` challenge with those credentials. https unless the
source says ``insecure: true`` or the registry is 127.0.0.1/localhost. Mirrors rewrite the
``https://REGISTRY/`` prefix of every URL, never the digests.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from nvkr.errors import ChecksumError, FetchError, IntegrityError, LockError
from nvkr.fetch.context import NET_HINT, FetchContext, check_entry
from nvkr.fetch.http import CHUNK, CONNECT_TIMEOUT, READ_TIMEOUT, _reason, new_session
from nvkr.fetch.mirrors import mirror_label
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import media_type_of
from nvkr.recipe.models import OciSource
from nvkr.store import BlobWriter, Store

if TYPE_CHECKING:
    import requests

log = logging.getLogger("nvkr.fetch")

LAYOUT_PREFIX = "oci-layout:"
#: What a manifest GET accepts: every type whose closure nvkr can follow.
MANIFEST_ACCEPT = ", ".join(
    [mt.OCI_MANIFEST, mt.OCI_INDEX, mt.DOCKER_MANIFEST, mt.DOCKER_MANIFEST_LIST]
)
#: distribution-spec: registries SHOULD accept manifests up to 4 MiB; larger is not a manifest.
MAX_MANIFEST = 4 << 20
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_CHALLENGE_PARAM = re.compile(r'(\w+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


# -- where the bytes come from -----------------------------------------------------------------
class _Origin:
    """One place to pull from: a registry repository or a layout directory."""

    label: str

    def manifest(self, digest: str) -> tuple[bytes, str | None, str]:
        """The bytes of document ``digest`` (unverified), its Content-Type if any, its URL."""
        raise NotImplementedError

    def blob(self, digest: str, sink: _Verifier) -> str:
        """Stream blob ``digest`` into ``sink``; return where it came from."""
        raise NotImplementedError

    def close(self) -> None:
        pass


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


def docker_credentials(host: str) -> tuple[str, str] | None:
    """``(username, password)`` for registry ``host`` (``name[:port]``) from the ``auths`` of
    ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``), or None.

    Keys may be bare hosts or URLs (``https://index.docker.io/v1/`` for Docker Hub); entries hold
    ``auth`` (base64 ``user:password``) or ``username``/``password``. Credential helpers
    (``credsStore``, ``credHelpers``) are not run.
    """
    config_dir = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    try:
        doc = json.loads(Path(config_dir, "config.json").read_bytes())
    except (OSError, ValueError):
        return None
    auths = doc.get("auths") if isinstance(doc, dict) else None
    if not isinstance(auths, dict):
        return None
    aliases = {host}
    if host in ("docker.io", "registry-1.docker.io", "index.docker.io"):
        aliases |= {"docker.io", "registry-1.docker.io", "index.docker.io"}
    for key, entry in auths.items():
        key_host = re.sub(r"^[a-z]+://", "", str(key)).split("/", 1)[0]
        if key_host not in aliases or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                continue
            return user, password
        if entry.get("username"):
            return str(entry["username"]), str(entry.get("password", ""))
    return None


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    """``WWW-Authenticate: Bearer realm="...",service="...",scope="..."`` → (scheme, params)."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): m.group(2) or m.group(3) for m in _CHALLENGE_PARAM.finditer(rest)}
    return scheme.lower(), params


class _Registry(_Origin):
    """A repository in a registry, over the OCI distribution API."""

    def __init__(self, name: str, ref: str, insecure: bool, ctx: FetchContext) -> None:
        registry, _, repository = ref.partition("/")
        if not registry or not repository or "@" in ref or ":" in repository:
            raise FetchError(
                f"source {name!r}: {ref!r} is not REGISTRY/REPOSITORY",
                hint="e.g. oci: registry.example.org/team/base (the digest is the pin, no tag)",
            )
        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if insecure or host in _LOOPBACK else "https"
        self.name = name
        self.label = ref
        self.repository = repository
        self.origin_base = f"{scheme}://{registry}/"
        self.base = ctx.mirrors.rewrite(self.origin_base)
        if self.base == self.origin_base and registry == "docker.io":
            self.base = f"{scheme}://registry-1.docker.io/"  # Docker Hub's API host
        self._session: requests.Session | None = None
        self._auth: str | None = None

    @property
    def session(self) -> requests.Session:
        if self._session is None:
            self._session = new_session()
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()

    def _url(self, kind: str, digest: str) -> tuple[str, str]:
        path = f"v2/{self.repository}/{kind}/{digest}"
        return self.base + path, mirror_label(self.base + path, self.origin_base + path)

    def _get(self, url: str, label: str, accept: str | None = None) -> requests.Response:
        import requests

        what = f"source {self.name!r} ({self.label})"
        for attempt in (1, 2):
            headers = {"Accept": accept} if accept else {}
            if self._auth:
                headers["Authorization"] = self._auth
            try:
                resp = self.session.get(
                    url, headers=headers, stream=True, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
                )
            except requests.exceptions.RequestException as e:
                raise FetchError(
                    f"{what}: cannot reach {label}: {_reason(e)}", hint=NET_HINT
                ) from e
            if resp.status_code == 401 and attempt == 1:
                header = resp.headers.get("WWW-Authenticate", "")
                resp.close()
                self._authenticate(header, url, what)
                continue
            if resp.status_code >= 400:
                resp.close()
                hint = NET_HINT
                if resp.status_code == 404:
                    hint = "check the repository and the digest in the recipe"
                elif resp.status_code in (401, 403):
                    hint = "log in with credentials in ~/.docker/config.json (docker login)"
                raise FetchError(
                    f"{what}: HTTP {resp.status_code} {resp.reason} from {label}", hint=hint
                )
            return resp
        raise AssertionError("unreachable")

    def _authenticate(self, header: str, url: str, what: str) -> None:
        import requests

        host = url.split("://", 1)[1].split("/", 1)[0]
        creds = docker_credentials(host)
        scheme, params = _challenge(header)
        if scheme == "basic":
            if creds is None:
                raise FetchError(
                    f"{what}: {host} asks for a user name and password",
                    hint=f"add credentials for {host} to ~/.docker/config.json (docker login)",
                )
            basic = base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
            self._auth = f"Basic {basic}"
            return
        if scheme != "bearer" or "realm" not in params:
            raise FetchError(f"{what}: {host} refused access (WWW-Authenticate: {header!r})")
        query = {k: params[k] for k in ("service", "scope") if k in params}
        query.setdefault("scope", f"repository:{self.repository}:pull")
        try:
            resp = self.session.get(
                params["realm"],
                params=query,
                auth=creds,
                timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
            )
        except requests.exceptions.RequestException as e:
            raise FetchError(
                f"{what}: cannot reach the token service {params['realm']}: {_reason(e)}",
                hint=NET_HINT,
            ) from e
        with resp:
            if resp.status_code >= 400:
                raise FetchError(
                    f"{what}: the token service {params['realm']} answered HTTP {resp.status_code}",
                    hint="anonymous pulls may be refused: add credentials to ~/.docker/config.json",
                )
            token: Any = None
            with contextlib.suppress(ValueError, AttributeError):
                body = resp.json()
                token = body.get("token") or body.get("access_token")
        if not isinstance(token, str) or not token:
            raise FetchError(f"{what}: the token service {params['realm']} gave no token")
        self._auth = f"Bearer {token}"

    def manifest(self, digest: str) -> tuple[bytes, str | None, str]:
        url, label = self._url("manifests", digest)
        with self._get(url, label, accept=MANIFEST_ACCEPT) as resp:
            data = resp.raw.read(MAX_MANIFEST + 1, decode_content=False)
            content_type = resp.headers.get("Content-Type", "").split(";")[0].strip() or None
        return data, content_type, label

    def blob(self, digest: str, sink: _Verifier) -> str:
        from urllib3.exceptions import HTTPError as Urllib3Error

        url, label = self._url("blobs", digest)
        with self._get(url, label) as resp:
            try:
                for chunk in resp.raw.stream(CHUNK, decode_content=False):
                    sink.write(chunk)
            except (Urllib3Error, OSError) as e:
                raise FetchError(
                    f"source {self.name!r} ({self.label}): the download of blob {digest} from "
                    f"{label} broke off after {sink.size} bytes: {_reason(e)}",
                    hint=NET_HINT + "; nothing was stored",
                ) from e
        return label


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
            try:
                doc = json.loads(data)
            except ValueError as e:
                raise FetchError(f"{prefix}: {d} is not JSON: {e}") from e
            if not isinstance(doc, dict):
                raise FetchError(f"{prefix}: {d} is not a JSON object")
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
    check_entry(name, resolved, "oci", ref=source.oci)
    if resolved["digest"] != source.digest:
        raise LockError(
            f"lock entry for source {name!r} has digest {resolved['digest']}, the recipe says "
            f"{source.digest}",
            hint="run `nvkr lock` to update the lockfile",
        )
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
