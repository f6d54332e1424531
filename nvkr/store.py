"""The content-addressed store and the action cache.

Everything a build fetches or produces lands here before anything else sees it::

    $NVKR_CACHE (default ~/.cache/nvkr)
      blobs/sha256/<hex>    content-addressed bytes, read-only once written
      actions/<hex>.json    one action's outputs, keyed by its action key
      tools/<hex>/          toolchains unpacked from a blob (the Go wheel, a tools tree's tar),
                            keyed by its digest
      cache/                tool caches that never affect outputs (Go's build cache; a cgo
                            build's is per tools tree: Go does not hash C headers)
      tmp/                  work dirs and in-flight downloads, same filesystem as blobs/
      lock                  flock(2) guard for concurrent builds

Every write goes to a temp file in ``tmp/``, is checked (length, digest), then renamed into place,
so a crash, a Ctrl-C or a checksum mismatch never leaves a partial blob or action entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from nvkr.canonical import canonical_json, hex_of
from nvkr.errors import ChecksumError, IntegrityError

_CHUNK = 1 << 20
_unpack_locks: dict[str, threading.Lock] = {}
_unpack_guard = threading.Lock()


def write_file_atomic(target: Path, data: bytes, *, tmp_dir: Path | None = None) -> None:
    """Write ``data`` to ``target`` all or nothing: a temp file in ``tmp_dir`` (default: the
    target's directory; same file system), fsync'd, then renamed over ``target``."""
    fd, name = tempfile.mkstemp(prefix=".tmp-", dir=tmp_dir or target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        raise


def default_root() -> Path:
    """``$NVKR_CACHE`` if set, else ``~/.cache/nvkr``."""
    env = os.environ.get("NVKR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "nvkr"


@dataclass(frozen=True)
class BlobInfo:
    """A blob in the store: ``digest`` is ``sha256:<hex>``, ``size`` in bytes.

    ``digests`` holds every digest computed while writing (always sha256, plus sha512 when it was
    pinned), as ``{"sha256": "sha256:<hex>", ...}``.
    """

    digest: str
    size: int
    digests: dict[str, str]


class BlobWriter:
    """A streaming write into the store, verified on :meth:`commit`.

    Use as a context manager: on an exception (or when :meth:`commit` was never called) the temp
    file is deleted. ``expected`` maps algorithm to ``algo:hex`` (sha256 and/or sha512);
    ``expected_size`` is in bytes. ``what`` names the source for error messages, ``url`` where it
    came from.
    """

    def __init__(
        self,
        store: Store,
        *,
        expected: dict[str, str] | None = None,
        expected_size: int | None = None,
        what: str = "blob",
        url: str | None = None,
    ) -> None:
        self._store = store
        self._expected = dict(expected or {})
        self._expected_size = expected_size
        self._what = what
        self._url = url
        algos = {"sha256", *self._expected}
        self._hashers = {a: hashlib.new(a) for a in sorted(algos)}
        self.size = 0
        fd, name = tempfile.mkstemp(prefix="blob-", dir=store.tmp_dir)
        self._path = Path(name)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._done = False

    def write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self.size += len(chunk)
        for h in self._hashers.values():
            h.update(chunk)

    def copy_from(self, stream: BinaryIO) -> None:
        while chunk := stream.read(_CHUNK):
            self.write(chunk)

    def commit(self) -> BlobInfo:
        """Verify size and digests, then rename into ``blobs/sha256/``.

        Raises:
            ChecksumError: a digest or the size differs from what was expected; the temp file is gone.
        """
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        actual = {a: f"{a}:{h.hexdigest()}" for a, h in self._hashers.items()}
        where = f" from {self._url}" if self._url else ""
        if self._expected_size is not None and self.size != self._expected_size:
            self.abort()
            raise ChecksumError(
                f"{self._what}{where}: expected {self._expected_size} bytes, got {self.size}",
                hint="the download was truncated or the upstream file changed; nothing was stored",
            )
        for algo, want in sorted(self._expected.items()):
            if actual[algo] != want.lower():
                self.abort()
                raise ChecksumError(
                    f"{self._what}{where}: expected {want}, got {actual[algo]}",
                    hint="the upstream file differs from the pin; check the URL or update the pin "
                    "with `nvkr lock`; nothing was stored",
                )
        info = BlobInfo(digest=actual["sha256"], size=self.size, digests=actual)
        target = self._store.blob_path(info.digest)
        os.chmod(self._path, 0o444)
        if target.exists():
            self._path.unlink()
        else:
            os.replace(self._path, target)
        self._done = True
        return info

    def abort(self) -> None:
        if not self._file.closed:
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        self._done = True

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._done:
            self.abort()


class Store:
    """A content-addressed store rooted at ``root`` (created on first use)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.blobs_dir = self.root / "blobs" / "sha256"
        self.actions_dir = self.root / "actions"
        self.tools_dir = self.root / "tools"
        self.cache_dir = self.root / "cache"
        self.tmp_dir = self.root / "tmp"
        for d in (self.blobs_dir, self.actions_dir, self.tools_dir, self.cache_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)

    # -- blobs -------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        """Path of the blob ``sha256:<hex>`` (which may not exist)."""
        if not digest.startswith("sha256:"):
            raise ValueError(f"store blobs are keyed by sha256, got {digest!r}")
        return self.blobs_dir / hex_of(digest)

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def writer(self, **kwargs: Any) -> BlobWriter:
        """A :class:`BlobWriter` into this store (see its arguments)."""
        return BlobWriter(self, **kwargs)

    def add_bytes(self, data: bytes) -> BlobInfo:
        with self.writer() as w:
            w.write(data)
            return w.commit()

    def add_file(
        self, path: Path, *, expected: dict[str, str] | None = None, what: str = "file"
    ) -> BlobInfo:
        """Copy ``path`` into the store (verifying ``expected`` digests) and return its blob."""
        with self.writer(expected=expected, what=what) as w, open(path, "rb") as f:
            w.copy_from(f)
            return w.commit()

    def read_blob(self, digest: str) -> bytes:
        return self.blob_path(digest).read_bytes()

    def verify_blob(self, digest: str) -> None:
        """Re-hash a stored blob.

        Raises:
            IntegrityError: the blob is missing or its bytes no longer match its name.
        """
        path = self.blob_path(digest)
        if not path.is_file():
            raise IntegrityError(f"store blob {digest} is missing from {self.blobs_dir}")
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        if "sha256:" + h.hexdigest() != digest:
            raise IntegrityError(
                f"store blob {path} is corrupt: its sha256 is sha256:{h.hexdigest()}",
                hint="delete it (or the whole store) and build again",
            )

    # -- action cache ------------------------------------------------------------------------
    def action_path(self, key: str) -> Path:
        return self.actions_dir / f"{hex_of(key)}.json"

    def get_action(self, key: str) -> dict[str, Any] | None:
        """The cached result of action ``key``, or None when absent or when a blob it names is gone."""
        path = self.action_path(key)
        try:
            result: dict[str, Any] = json.loads(path.read_bytes())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        for out in result.get("outputs", []):
            if not self.has_blob(out["digest"]):
                return None
        return result

    def put_action(self, key: str, result: dict[str, Any]) -> None:
        """Record ``result`` (JSON-able, no floats) for ``key`` atomically."""
        self.write_atomic(self.action_path(key), canonical_json(result))

    # -- unpacked tools ----------------------------------------------------------------------
    def unpacked(self, digest: str, unpack: Callable[[Path], None], *, check: str) -> Path:
        """``tools/<hex>/`` for the blob ``digest`` (a toolchain wheel, a tools tree tar), made
        once: ``unpack(tmp)`` fills a fresh directory in ``tmp/``, which must then hold the
        relative path ``check``, and is renamed into place, so a crash never leaves half a
        tree. Threads asking for the same digest at once unpack it once.

        Raises:
            IntegrityError: the unpacked blob holds no ``check``.
        """
        target = self.tools_dir / hex_of(digest)
        with _unpack_guard:
            lock = _unpack_locks.setdefault(str(target), threading.Lock())
        with lock:
            if not os.path.lexists(target / check):
                tmp = Path(tempfile.mkdtemp(prefix="tool-", dir=self.tmp_dir))
                try:
                    unpack(tmp)
                    if not os.path.lexists(tmp / check):
                        raise IntegrityError(f"blob {digest} unpacked holds no {check}")
                    shutil.rmtree(target, ignore_errors=True)
                    os.replace(tmp, target)
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
        return target

    # -- helpers -----------------------------------------------------------------------------
    def write_atomic(self, target: Path, data: bytes) -> None:
        write_file_atomic(target, data, tmp_dir=self.tmp_dir)

    @contextlib.contextmanager
    def workdir(self, prefix: str = "work-") -> Iterator[Path]:
        """A fresh directory under ``tmp/``, removed afterwards whatever happens."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=self.tmp_dir))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the store's exclusive lock (blocks while another build holds it)."""
        with open(self.root / "lock", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
