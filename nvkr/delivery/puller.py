"""The transfer half of ``nvkr pull`` (:class:`Puller`): a release set's closure fetched into a
temp layout, manifests first, blobs on a pool of workers sharing one
:class:`~nvkr.oci.registry.RegistryClient`, each blob hashed as it arrives, and blobs already in
the target directory or the store reused (hard-linked, else copied) once they hash right. What
to fetch and what to do with it is :mod:`nvkr.delivery.pull`'s.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

from nvkr.errors import IntegrityError
from nvkr.jsondoc import load_json_object
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import blob_name
from nvkr.oci.layoutdir import BLOB_MODE, DIR_MODE
from nvkr.oci.referrers import list_referrers
from nvkr.oci.registry import RegistryClient

EventSink = Callable[[str, dict[str, Any]], None]
log = logging.getLogger("nvkr.pull")
_BLOCK: Final = 1 << 20  # bytes read at a time when hashing a local copy


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


class Puller:
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

    def __enter__(self) -> Puller:
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
        doc = load_json_object(data, f"{what}: {digest}", error=IntegrityError)
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
