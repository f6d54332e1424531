"""Pulling a release set from a registry into an OCI image layout, verified before it lands.

The consumer's first step, the inverse of :mod:`nvkr.publish`: ``REGISTRY/REPO@sha256:<hex>`` →
``DIR`` (a layout ``nvkr verify`` and ``nvkr release-set show`` read). By digest only, so what is
pulled is what the digest names. The release set index, its whole closure (every manifest, index,
config and layer, children of nested indexes included) and the signature manifests attached to
the index and its members (the referrers API, else the fallback tag ``sha256-<hex>``,
distribution-spec "Listing Referrers") are downloaded into a temp directory beside ``DIR``, each
hashed on the way (:class:`~nvkr.oci.registry.RegistryClient`). Manifests and indexes are
fetched one after another, in walk order (they name what comes next); the leaf blobs they
reference (configs, layers, QCOW2 machine images) are handed to a pool of ``workers`` threads as
they are found, so a few large blobs download side by side while the walk goes on. Each worker
streams its blob into its own temp file (one read block in memory at a time); the first failure
stops the walk, cancels the downloads that have not started, aborts the running ones at their
next block, and is the one reported. With keys,
:func:`nvkr.verify.verify_release_set` checks the temp layout; only when everything passed is it
written to ``DIR`` atomically (:func:`nvkr.oci.layoutdir.write_layout`). Any failure leaves
``DIR`` as it was and no temp directory behind. What lands in ``DIR`` does not depend on the
order downloads finish in: blobs are files named by digest and ``index.json`` is built from the
walk, not from completions.

Blobs already at hand are not downloaded: before asking the registry for a manifest or a blob,
the pull looks for ``blobs/sha256/<hex>`` in ``DIR`` (an earlier pull's layout) and in the other
directories it is given (the store, for ``nvkr pull``). A copy of the right size is hard-linked
(read-only blobs, as a build's layout links the store's) or copied into the temp layout and
hashed there before it counts; one that hashes to anything else is left alone, logged, and the
blob is downloaded as if it were not there. The report says how many bytes came from the
registry and how many were reused.

The build record ``nvkr publish`` attached to the release set index (a referrer with annotation
``dev.nvkr.attachment: build-record``, :mod:`nvkr.releaseset.record`) is not part of the set: it
is fetched beside it, checked against the set's metadata (and with keys its envelope), and
written next to ``DIR`` as ``DIR.build-record.json`` (with ``DIR.build-record.dsse.json``) after
``DIR`` itself; where several builds of the same set published one, the latest finished wins. A
registry without one leaves no record beside ``DIR`` (one of an earlier pull is removed).

The workers share the one :class:`~nvkr.oci.registry.RegistryClient`, as :mod:`nvkr.publish`'s
do: its token and credential state sits behind its lock, and what its ``requests.Session`` does
per request is safe across threads here (the headers are only read, the cookie jar locks itself,
urllib3's pools hand each thread its own connection; a pool evicted under another thread's feet,
psf/requests#1871, surfaces as a connection error that the client retries). Each response is
read by the thread that asked for it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from nvkr.canonical import sha256_bytes
from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import blob_name, image_index, index_bytes, layout_file_bytes
from nvkr.oci.layoutdir import BLOB_MODE, DIR_MODE, FILE_MODE, write_layout
from nvkr.oci.referrers import list_referrers
from nvkr.oci.registry import Reference, RegistryClient
from nvkr.releaseset.record import (
    BuildRecordCheck,
    check_record_bytes,
    is_build_record,
    record_paths,
)
from nvkr.releaseset.remote import read_remote_metadata
from nvkr.releaseset.signing import ANN_ATTACHMENT, DSSE_ENVELOPE, SIGNATURE, _write_atomic
from nvkr.sign import PublicKey, envelope_parts

EventSink = Callable[[str, dict[str, Any]], None]
log = logging.getLogger("nvkr.pull")

#: Blob downloads running at once by default: a default release set holds four QCOW2 images.
WORKERS: Final = 4
#: Largest build record (or envelope) layer a pull accepts, in bytes.
_RECORD_LIMIT: Final = 64 << 20
_BLOCK: Final = 1 << 20  # bytes read at a time when hashing a local copy


@dataclass
class PullReport:
    """What :func:`pull_release_set` did: ``blobs``/``bytes`` in the layout (bytes), of which
    ``reused_blobs``/``reused_bytes`` came from local copies (checked) and ``downloaded_bytes``
    from the registry, ``signatures`` attached, ``verified`` (checked with keys),
    ``build_record`` the path of the build record written beside the target (None: the
    registry has none), ``seconds`` wall-clock."""

    reference: str
    digest: str
    name: str
    target: str
    blobs: int = 0
    bytes: int = 0
    reused_blobs: int = 0
    reused_bytes: int = 0
    downloaded_bytes: int = 0
    signatures: int = 0
    verified: bool = False
    build_record: str | None = None
    seconds: float = 0.0


class _Cancelled(Exception):
    """Raised inside a worker's download once another part of the pull failed (not OSError, so
    :meth:`RegistryClient.get_blob` does not take it for a broken connection and retry)."""


class _Sink:
    """A blob's temp file as :meth:`RegistryClient.get_blob`'s writer: stops the download at the
    next block once the pull is cancelled; ``progress(bytes so far)`` after each block."""

    def __init__(
        self, f: IO[bytes], cancel: threading.Event, progress: Callable[[int], None]
    ) -> None:
        self._f, self._cancel, self._progress = f, cancel, progress

    def write(self, data: bytes, /) -> int:
        if self._cancel.is_set():
            raise _Cancelled
        written = self._f.write(data)
        self._progress(self._f.tell())
        return written


_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES})


def _link(src: Path, dst: Path) -> bool:
    """Hard-link ``src`` to ``dst`` when ``src`` is read-only (:data:`BLOB_MODE`: the layout's
    mode, so no chmod ever touches the shared inode) and the file system allows; else False."""
    if src.stat().st_mode & 0o7777 != BLOB_MODE:
        return False
    try:
        os.link(src, dst)
    except OSError as e:
        if e.errno in _NO_LINK:
            return False
        raise
    return True


def _place(src: Path, dst: Path, alg: str) -> str:
    """Put ``src`` at ``dst`` (new; mode :data:`BLOB_MODE`): a hard link when :func:`_link`
    can, else a copy. Returns the ``alg:<hex>`` digest of what is at ``dst``, read there."""
    h = hashlib.new(alg)
    if _link(src, dst):
        with open(dst, "rb") as f:
            while block := f.read(_BLOCK):
                h.update(block)
    else:
        fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out, open(src, "rb") as f:
            while block := f.read(_BLOCK):
                h.update(block)
                out.write(block)
            os.fchmod(out.fileno(), BLOB_MODE)
    return f"{alg}:{h.hexdigest()}"


class _Pull:
    """One pull into the temp layout ``tmp``: what was fetched, by digest.

    Manifests are fetched by the caller's thread; leaf blobs go to a pool of ``workers`` threads
    (``workers`` 1: downloaded on the spot, in walk order). Use it as a context manager: leaving
    it cancels what is still downloading and waits for the workers, so no thread writes into
    ``tmp`` once the caller removes it.
    """

    def __init__(
        self,
        client: RegistryClient,
        repo: str,
        tmp: Path,
        on_event: EventSink | None,
        workers: int = 1,
        reuse: Sequence[Path] = (),
    ):
        self.client, self.repo, self.tmp = client, repo, tmp
        self.reuse = tuple(reuse)  # directories holding blobs/sha256/<hex> to take copies from
        self.have: dict[str, int] = {}  # digest -> size, fully fetched and checked
        self.reused: dict[str, int] = {}  # digest -> size, of those taken from a local copy
        self._claimed: set[str] = set()  # digests fetched or being fetched (one file each)
        self._on_event = on_event
        self._lock = threading.Lock()  # guards have, _claimed, _error
        self._event_lock = threading.Lock()
        self._cancel = threading.Event()
        self._error: BaseException | None = None  # the first failure of a worker
        self._futures: list[Future[None]] = []
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvkr-pull")
            if workers > 1
            else None
        )

    def __enter__(self) -> _Pull:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._cancel.set()  # after wait() nothing runs; on a failure, stop the rest
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def event(self, kind: str, **fields: Any) -> None:
        if self._on_event is not None:
            with self._event_lock:  # one event at a time, whichever thread reports it
                self._on_event(kind, fields)

    def _path(self, digest: str) -> Path:
        """Where blob ``digest`` goes in ``tmp`` (its directory made; by the walk's thread)."""
        path = self.tmp / blob_name(digest)
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, mode=DIR_MODE)
        return path

    def _claim(self, digest: str) -> bool:
        """Whether ``digest`` is new to this pull (it is then this caller's to fetch)."""
        with self._lock:
            if digest in self._claimed:
                return False
            self._claimed.add(digest)
            return True

    def _done(self, digest: str, size: int, reused: bool = False) -> None:
        with self._lock:
            self.have[digest] = size
            if reused:
                self.reused[digest] = size
        self.event("blob", digest=digest, size=size, reused=reused)

    def _copies(self, digest: str, size: int) -> Iterator[Path]:
        """Local files named ``digest`` of ``size`` bytes, in :attr:`reuse` order."""
        for root in self.reuse:
            candidate = root / blob_name(digest)
            with contextlib.suppress(OSError):
                if candidate.stat().st_size == size and candidate.is_file():
                    yield candidate

    def _reuse(self, digest: str, size: int, path: Path) -> bool:
        """Put a local copy of ``digest`` at ``path``, hashed there; False (and nothing at
        ``path``) when no copy hashes to ``digest``."""
        alg = digest.split(":", 1)[0]
        for candidate in self._copies(digest, size):
            try:
                actual = _place(candidate, path, alg)
            except OSError as e:
                log.debug("%s: cannot reuse %s: %s", digest, candidate, e)
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            if actual == digest:
                return True
            path.unlink()
            log.warning(
                "%s: the local copy %s hashes to %s; downloading the blob instead",
                digest,
                candidate,
                actual,
            )
        return False

    def _reuse_manifest(self, digest: str, size: int) -> bytes | None:
        """The bytes of a local copy of manifest ``digest`` that hash right, or None."""
        alg = digest.split(":", 1)[0]
        for candidate in self._copies(digest, size):
            with contextlib.suppress(OSError):
                data = candidate.read_bytes()
                if f"{alg}:{hashlib.new(alg, data).hexdigest()}" == digest:
                    return data
                log.warning("%s: the local copy %s is corrupt; downloading it", digest, candidate)
        return None

    def check(self) -> None:
        """Raise the first failure of a worker, if one failed."""
        with self._lock:
            error = self._error
        if error is not None:
            raise error

    def wait(self) -> None:
        """Wait for every download; raise the first failure (the others are cancelled)."""
        if self._futures:
            wait(self._futures, return_when=FIRST_EXCEPTION)
        self.check()

    def _store(self, digest: str, data: bytes, reused: bool = False) -> None:
        path = self._path(digest)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), BLOB_MODE)
        self._done(digest, len(data), reused)

    def manifest(self, desc: Mapping[str, Any], what: str) -> dict[str, Any]:
        """Fetch the manifest or index ``desc`` names (checked: digest, size), store it, return
        it parsed; its children are fetched by :meth:`closure`. A local copy that hashes to
        the digest is used instead of the registry's."""
        digest = str(desc["digest"])
        size = desc.get("size")
        local = self._reuse_manifest(digest, size) if isinstance(size, int) else None
        if local is not None:
            data, actual = local, digest
        else:
            data, _, actual = self.client.get_manifest(self.repo, digest)
        if len(data) != desc.get("size"):
            raise IntegrityError(
                f"{what}: {digest} is {len(data)} bytes, its descriptor says {desc.get('size')}",
                hint="the registry serves other bytes than the descriptor names",
            )
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise IntegrityError(f"{what}: {digest} is not JSON") from e
        if not isinstance(doc, dict):
            raise IntegrityError(f"{what}: {digest} is not a JSON object")
        if self._claim(actual):
            self._store(actual, data, reused=local is not None)
        return doc

    def blob(self, desc: Mapping[str, Any], what: str) -> None:
        """Download the leaf blob ``desc`` names (checked: digest, size): now with one worker,
        else in the pool (:meth:`wait` for it)."""
        digest, size = str(desc["digest"]), desc.get("size")
        if not isinstance(size, int) or size < 0:
            raise IntegrityError(f"{what}: {digest} has no valid size")
        if not self._claim(digest):
            return
        path = self._path(digest)
        if self._pool is None:
            self._download(digest, size, path, what)
        else:
            self._futures.append(self._pool.submit(self._worker, digest, size, path, what))

    def _download(self, digest: str, size: int, path: Path, what: str) -> None:
        if self._reuse(digest, size, path):
            self._done(digest, size, reused=True)
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            sink = _Sink(
                f,
                self._cancel,
                lambda done: self.event("blob-progress", digest=digest, size=size, done=done),
            )
            got = self.client.get_blob(self.repo, digest, sink, size=size)
            os.fchmod(f.fileno(), BLOB_MODE)
        if got != size:
            raise IntegrityError(f"{what}: {digest} is {got} bytes, its descriptor says {size}")
        self._done(digest, size)

    def _worker(self, digest: str, size: int, path: Path, what: str) -> None:
        if self._cancel.is_set():
            return
        try:
            self._download(digest, size, path, what)
        except _Cancelled:
            return
        except BaseException as e:
            with self._lock:
                if self._error is None:
                    self._error = e
            self._cancel.set()
            raise

    def closure(self, desc: Mapping[str, Any], what: str) -> dict[str, Any]:
        """Fetch ``desc`` and everything it references, depth first; return its document."""
        doc = self.manifest(desc, what)
        children: list[tuple[Any, str]] = []
        if desc.get("mediaType") in mt.INDEX_TYPES:
            children = [
                (m, f"{what} manifests[{i}]") for i, m in enumerate(doc.get("manifests") or [])
            ]
        else:
            if isinstance(doc.get("config"), dict):
                children.append((doc["config"], f"{what} config"))
            children += [(m, f"{what} layers[{i}]") for i, m in enumerate(doc.get("layers") or [])]
        for child, where in children:
            if not isinstance(child, dict) or not isinstance(child.get("digest"), str):
                raise IntegrityError(f"{where}: not a descriptor")
            if child["digest"] in self._claimed:
                continue
            self.check()  # a failed download ends the walk
            if child.get("mediaType") in mt.MANIFEST_TYPES:
                self.closure(child, where)
            else:
                self.blob(child, where)
        return doc

    def referrers(self, subject: str) -> list[dict[str, Any]]:
        """The referrers of ``subject`` (API, else the fallback tag; none when neither lists)."""
        self.check()
        return list_referrers(self.client, self.repo, subject)


def _fetch_attachment(
    client: RegistryClient, repo: str, desc: Mapping[str, Any], subject: str
) -> tuple[str, bytes]:
    """A build record referrer's artifactType and its one layer's bytes (both checked)."""
    what = f"build record {desc['digest']} of {subject}"
    data, _, actual = client.get_manifest(repo, str(desc["digest"]))
    if actual != desc["digest"]:
        raise IntegrityError(f"{what}: the registry served {actual}")
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise IntegrityError(f"{what}: not JSON") from e
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if (doc.get("subject") or {}).get("digest") != subject or not isinstance(layers, list):
        raise IntegrityError(f"{what}: listed as a referrer of {subject} but names another subject")
    if len(layers) != 1 or not isinstance(layers[0], dict):
        raise IntegrityError(f"{what}: {len(layers)} layers, expected 1")
    size = layers[0].get("size")
    if not isinstance(size, int) or size > _RECORD_LIMIT:
        raise IntegrityError(f"{what}: its layer's size {size!r} is not that of a build record")
    buf = io.BytesIO()
    client.get_blob(repo, str(layers[0]["digest"]), buf, size=size)  # hashed on the way
    if buf.tell() != size:
        raise IntegrityError(f"{what}: its layer is {buf.tell()} bytes, expected {size}")
    return str(doc.get("artifactType")), buf.getvalue()


def _build_record(
    client: RegistryClient,
    repo: str,
    referrers: Sequence[Mapping[str, Any]],
    meta: Mapping[str, Any],
    subject: str,
    keys: Sequence[PublicKey],
) -> tuple[bytes, bytes | None] | None:
    """The build record (and its envelope) to write beside the pulled set: every one listed is
    checked against the set (:func:`nvkr.releaseset.record.check_record_bytes`, with ``keys``);
    the latest finished wins. None when the registry has none.

    Raises:
        IntegrityError: one fails its digests or its checks (naming it).
    """
    if not referrers:
        return None
    records: list[bytes] = []
    envelopes: dict[bytes, bytes] = {}  # payload -> envelope
    for desc in sorted(referrers, key=lambda d: str(d["digest"])):
        artifact_type, data = _fetch_attachment(client, repo, desc, subject)
        if artifact_type == mt.IN_TOTO_JSON:
            records.append(data)
        elif artifact_type == DSSE_ENVELOPE:
            try:
                payload, _, _ = envelope_parts(json.loads(data), f"build record {desc['digest']}")
            except ValueError as e:
                raise IntegrityError(f"build record envelope {desc['digest']}: not JSON") from e
            envelopes[payload] = data
    best: tuple[str, bytes] | None = None
    for data in records:
        check = check_record_bytes(
            data,
            envelopes.get(data),
            meta,
            subject,
            keys,
            check=BuildRecordCheck(path=f"{repo}@{sha256_bytes(data)}"),
            envelope_name=f"of {repo}@{sha256_bytes(data)}",
        )
        if check.problems:
            message, hint = check.problems[0]
            raise IntegrityError(message, hint=hint)
        finished = check.finished_on or ""
        if best is None or (finished, data) > best:
            best = (finished, data)
    return None if best is None else (best[1], envelopes.get(best[1]))


def _write_build_record(target: Path, record: tuple[bytes, bytes | None] | None) -> str | None:
    """Put the pulled build record (and envelope) beside ``target``; remove what an earlier pull
    left there that this one does not replace. Returns the record's path, or None."""
    paths = record_paths(target)
    for path, data in zip(paths, record or (None, None), strict=True):
        if data is None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        else:
            _write_atomic(path, data, FILE_MODE)
    return str(paths[0]) if record else None


def _signature_entry(desc: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, Any]:
    """The ``index.json`` entry of a signature manifest, as :func:`sign_release_set` writes it."""
    labels = {k: v for k, v in (doc.get("annotations") or {}).items() if k != mt.ANN_CREATED}
    return {
        "mediaType": desc["mediaType"],
        "digest": desc["digest"],
        "size": desc["size"],
        "annotations": {ANN_ATTACHMENT: SIGNATURE, **labels},
        "artifactType": DSSE_ENVELOPE,
    }


def _check_target(target: Path) -> None:
    """Refuse a target that is not a directory a pull may replace: a file, or a non-empty
    directory that is not an OCI image layout (a pull must never delete someone's files).

    Raises:
        UsageError: naming ``target`` and what is there.
    """
    if not target.exists() and not target.is_symlink():
        return
    if not target.is_dir():
        raise UsageError(
            f"{target} exists and is not a directory", hint="give a new directory, or remove it"
        )
    if any(target.iterdir()) and not (target / "oci-layout").is_file():
        raise UsageError(
            f"{target} is a non-empty directory that is not an OCI image layout: nvkr pull "
            "replaces its target and will not delete these files",
            hint="give a new or empty directory, or an earlier pull's directory",
        )


def pull_release_set(
    ref: Reference | str,
    target: Path,
    client: RegistryClient,
    *,
    keys: Sequence[PublicKey] = (),
    on_event: EventSink | None = None,
    workers: int = WORKERS,
    reuse: Sequence[Path] = (),
) -> PullReport:
    """Download the release set ``ref`` names into the OCI image layout ``target``.

    Args:
        ref: ``REGISTRY/REPOSITORY[:TAG]@sha256:<hex>`` on ``client``'s registry (by digest).
        target: the layout directory to write; an existing one is replaced only on success.
        client: the registry's client.
        keys: public keys; when given, the pulled layout must pass
            :func:`nvkr.verify.verify_release_set` with them (signatures required).
        on_event: ``on_event(kind, fields)``: ``blob`` (``digest``, ``size`` in bytes,
            ``reused``: from a local copy; in the order downloads finish), ``blob-progress``
            while one downloads (``digest``, ``size``, ``done``: bytes so far), ``signature``
            (``digest``, ``subject``), ``verified``.
            Called from worker threads too, one call at a time.
        workers: leaf blobs downloaded at once (threads sharing ``client``; keep it within the
            client's ``pool_size``, or the extra connections are not reused); 1 downloads each
            one where the walk finds it. The layout written is the same whatever the number.
        reuse: more directories holding ``blobs/sha256/<hex>`` (a store's root) whose copies
            are used, once hashed, instead of downloading; ``target`` (an earlier pull's
            layout) is always looked in first.
    Returns:
        a :class:`PullReport`.
    Raises:
        ValueError: ``workers`` below 1.
        UsageError: no digest in ``ref``, or another registry than the client's.
        IntegrityError: a digest or size mismatch, a missing blob, not a release set, or the
            verification failed (exit 3).
        RegistryError: refused credentials, no such manifest, unreachable.
        In every case ``target`` is as it was and no temp directory is left.
    """
    started = time.monotonic()
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    ref = Reference.parse(ref) if isinstance(ref, str) else ref
    if ref.digest is None:
        raise UsageError(
            f"reference {ref} names no digest: nvkr pull fetches by digest only",
            hint=f"pull by digest: {ref}@sha256:<hex> (nvkr publish prints it; "
            f"`nvkr release-set show {ref}` too)",
        )
    if ref.registry != client.registry:
        raise UsageError(f"reference {ref} is not on {client.registry}, the client's registry")
    target = Path(target)
    _check_target(target)
    meta, top = read_remote_metadata(client, ref)
    name = str(meta.get("name") or "")
    if not name:
        raise IntegrityError(f"{ref}: the release set metadata has no name")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.pull-", dir=target.parent))
    try:
        os.chmod(tmp, DIR_MODE)
        with _Pull(client, ref.repository, tmp, on_event, workers, (target, *reuse)) as run:
            index = run.closure(top, f"release set {top['digest']}")
            subjects = [top["digest"]] + [
                str(m["digest"]) for m in index.get("manifests") or [] if isinstance(m, dict)
            ]
            # the index first, as signing does
            position = {d: i - 1 for i, d in enumerate(subjects)}
            signatures: list[tuple[int, dict[str, Any]]] = []
            records: list[dict[str, Any]] = []
            seen: set[str] = set()
            for subject in dict.fromkeys(subjects):
                for desc in run.referrers(subject):
                    if is_build_record(desc):  # beside the set, not in it (module docstring)
                        if subject == top["digest"] and desc["digest"] not in seen:
                            seen.add(desc["digest"])
                            records.append(desc)
                        continue
                    if desc.get("artifactType") != DSSE_ENVELOPE or desc["digest"] in seen:
                        continue
                    if desc.get("mediaType") not in mt.IMAGE_MANIFEST_TYPES:
                        continue
                    seen.add(desc["digest"])
                    doc = run.closure(desc, f"signature {desc['digest']} of {subject}")
                    found = doc.get("subject")
                    if not isinstance(found, dict) or found.get("digest") != subject:
                        raise IntegrityError(
                            f"signature {desc['digest']} is listed as a referrer of {subject} "
                            "but names another subject"
                        )
                    signatures.append((position[subject], _signature_entry(desc, doc)))
                    run.event("signature", digest=desc["digest"], subject=subject)
            run.wait()  # every blob downloaded and checked, or the first failure
            record = _build_record(client, ref.repository, records, meta, top["digest"], keys)
        signatures.sort(key=lambda s: (s[0], s[1]["digest"]))
        root = {**top, "artifactType": mt.NVKR_RELEASE_SET, "annotations": {mt.ANN_REF_NAME: name}}
        data = index_bytes(image_index([root, *(s for _, s in signatures)]))
        (tmp / "index.json").write_bytes(data)
        (tmp / "oci-layout").write_bytes(layout_file_bytes())
        report = PullReport(
            reference=f"{ref.registry}/{ref.repository}@{top['digest']}",
            digest=top["digest"],
            name=name,
            target=str(target),
            blobs=len(run.have),
            bytes=sum(run.have.values()),
            reused_blobs=len(run.reused),
            reused_bytes=sum(run.reused.values()),
            downloaded_bytes=sum(run.have.values()) - sum(run.reused.values()),
            signatures=len(signatures),
        )
        if keys:
            from nvkr.verify import verify_release_set

            result = verify_release_set(tmp, keys=keys)
            if result.problems:
                first = result.problems[0]
                more = len(result.problems) - 1
                raise IntegrityError(
                    f"{report.reference}: {first.message}"
                    + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""),
                    hint=first.hint or f"nothing was written to {target}",
                )
            report.verified = True
            run.event("verified")
        # forced: an earlier pull's DIR may hold a damaged blob of the right size (the one
        # just downloaded again), which write_layout's size check would keep
        write_layout(
            target, data, sorted(run.have.items()), lambda d: tmp / blob_name(d), force=True
        )
        report.build_record = _write_build_record(target, record)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report.seconds = time.monotonic() - started
    return report
