"""The content-addressed store and the action cache.

Everything a build fetches or produces lands here before anything else sees it::

    $NVKR_CACHE (default ~/.cache/nvkr)
      blobs/sha256/<hex>    content-addressed bytes, read-only once written
      seals/sha256/<hex>    the blob's seal: its size, mtime, ctime, inode and link count
      actions/<hex>.json    one action's outputs, keyed by its action key
      roots/<id>.json       what one finished build used, for gc (nvkr.store_gc)
      state/plan-memo/      the memos of no-op builds (nvkr.planmemo); never a build's input
      tools/<hex>/          toolchains unpacked from a blob (the Go wheel, a tools tree's tar),
                            keyed by its digest, with the tree's seal (nvkr.treeseal)
      cache/                tool caches that never affect outputs (Go's build cache; a cgo
                            build's is per tools tree: Go does not hash C headers)
      logs/boot-test/       boot-test consoles, one file per boot (nvkr.machine.boot.CONSOLE_LOGS); never read
      logs/durations/       each action's last run time, for the progress estimates (nvkr.monitor.estimates)
      tmp/                  work dirs and in-flight downloads, same filesystem as blobs/
      tmp.lock              flock(2) taken while a tmp/ entry is made and claimed (nvkr.scratch)
      lock                  flock(2) guard for concurrent builds
      gc.lock               flock(2): shared by readers without the store lock, exclusive for gc

Every write goes to a temp file in ``tmp/``, is checked (length, digest), then renamed into place,
so a crash, a Ctrl-C or a checksum mismatch never leaves a partial blob or action entry.

Bytes are checked again where they are used. Hashing every blob on every use would make a no-op
build of a release set holding gigabytes of QCOW2 take seconds, so each blob gets a **seal** when
it is committed: the ``stat`` fields a write changes (size, mtime, ctime, inode; plus the link
count). Every accessor that hands out a blob (:meth:`Store.has_blob`, :meth:`Store.checked_path`,
:meth:`Store.read_blob`, the action cache) compares the blob with its seal: one ``stat`` and a
read of a few bytes. A blob whose stat no longer matches, or that has no seal (a store written by
an older nvkr), is hashed in full: intact, it is sealed again; corrupt, it is deleted and reported
(:attr:`Store.notice`), so a source is fetched again and an action whose output it was builds
again. Any difference is hashed, a ctime moved with the link count too (a hard link and a write
with its mtime set back look alike: only the bytes tell). nvkr seals the links it makes and
removes itself (:meth:`Store.linking`: ``dist/``, mirrors), so a no-op build hashes nothing; a
link made by anything else costs one hash at the blob's next use. A seal catches any change of
the inode through the file system after commit (its ctime, which no one can set back). It cannot
see bytes changed without one (bit rot, a raw write to the disk), a write racing nvkr's own link
of that blob, or a seal rewritten with its blob (seals are store files: they guard against
accidents and stray tools, not against whoever may write the store). ``nvkr store verify``
hashes every blob for that, as does every full hash on the way (``read_blob``, ``nvkr verify``).

Each entry of ``tmp/`` is claimed by the process using it (:mod:`nvkr.scratch`): what a killed
process left there is removed by the next holder of the store lock (:meth:`Store.lock`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from nvkr import treeseal
from nvkr.action import ActionResult
from nvkr.canonical import canonical_json, hex_of
from nvkr.errors import ChecksumError, IntegrityError, Interrupted, UsageError
from nvkr.run import stop_requested
from nvkr.scratch import Cleanup, claimed_dir, claimed_file, remove_leftovers, remove_tree
from nvkr.storelock import HOLDER_OF_LOCK, OnWait, flock_said, reader_lock

_CHUNK = 1 << 20
_unpack_locks: dict[str, threading.Lock] = {}
_unpack_guard = threading.Lock()

log = logging.getLogger("nvkr.store")

#: A seal file's first word; the fields after it are size, mtime_ns, ctime_ns, inode, links.
SEAL_VERSION = "v1"

#: ``notice(digest, reason)``: called once per corrupt blob found (and deleted) on the way.
Notice = Callable[[str, str], None]


def _log_notice(digest: str, reason: str) -> None:
    log.warning("%s", corrupt_line(digest, reason))


def _log_tree_notice(digest: str, reason: str) -> None:
    log.warning("%s", tree_changed_line(digest, reason))


def tree_changed_line(digest: str, reason: str) -> str:
    """The one line that says tools unpacked from blob ``digest`` were changed after unpacking."""
    return (
        f"store tools/{hex_of(digest)[:12]}… (unpacked from {digest[:19]}…) changed after "
        f"unpacking ({reason}): unpacked again from the blob"
    )


def corrupt_line(digest: str, reason: str) -> str:
    """The one line that says a corrupt store blob was found and what happens to it."""
    return f"store blob {digest[:19]}… is corrupt ({reason}): deleted; it is fetched or built again"


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


def _sealed(st: os.stat_result) -> tuple[int, int, int, int, int]:
    """What a seal records of a blob's stat: size, mtime, ctime, inode, link count."""
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_nlink)


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
        # The descriptor holds the temp file's claim: it stays open until the file is renamed
        # away or deleted (nvkr.scratch).
        fd, self._path = store.claimed_file("blob-")
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._done = False

    def write(self, chunk: bytes) -> None:
        """Append ``chunk``.

        Raises:
            Interrupted: nvkr is stopping (Ctrl-C, SIGTERM): a download in a worker thread ends
                at its next chunk instead of running to its end.
        """
        if stop_requested() is not None:
            raise Interrupted(f"stopping: {self._what} not stored")
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
        actual = {a: f"{a}:{h.hexdigest()}" for a, h in self._hashers.items()}
        where = f" from {self._url}" if self._url else ""
        if self._expected_size is not None and self.size != self._expected_size:
            self.abort()
            err = ChecksumError(
                f"{self._what}{where}: expected {self._expected_size} bytes, got {self.size}",
                hint="the download was truncated or the upstream file changed; nothing was stored",
            )
            err.actual = actual["sha256"]
            raise err
        for algo, want in sorted(self._expected.items()):
            if actual[algo] != want.lower():
                self.abort()
                err = ChecksumError(
                    f"{self._what}{where}: expected {want}, got {actual[algo]}",
                    hint="the upstream file differs from the pin; check the URL or update the pin "
                    "with `nvkr lock`; nothing was stored",
                )
                err.actual = actual["sha256"]
                raise err
        info = BlobInfo(digest=actual["sha256"], size=self.size, digests=actual)
        target = self._store.blob_path(info.digest)
        os.fchmod(self._file.fileno(), 0o444)
        if self._store.has_blob(info.digest):  # an intact copy is kept (hard links to it stay)
            self._path.unlink()
        else:  # none, or a corrupt one that has_blob just deleted
            os.replace(self._path, target)
            self._store.seal(info.digest)
        self._file.close()
        self._done = True
        return info

    def abort(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        if not self._file.closed:
            self._file.close()
        self._done = True

    def __enter__(self) -> BlobWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._done:
            self.abort()


class Store:
    """A content-addressed store rooted at ``root`` (created on first use).

    ``root`` is made absolute here, once: tools run with their working directory inside the
    store (pip, git, mmdebstrap), where a path relative to nvkr's own would point elsewhere.
    ``notice(digest, reason)`` is called for each corrupt blob found and deleted (default: a
    warning on the ``nvkr.store`` logger); ``nvkr build`` makes it an event, and so
    ``tree_notice(digest, reason)``, called for each unpacked tree found changed (and unpacked
    again).
    """

    def __init__(self, root: Path | None = None, *, notice: Notice | None = None) -> None:
        self.root = Path(os.path.abspath(root if root is not None else default_root()))
        self.blobs_dir = self.root / "blobs" / "sha256"
        self.seals_dir = self.root / "seals" / "sha256"
        self.actions_dir = self.root / "actions"
        self.roots_dir = self.root / "roots"
        self.tools_dir = self.root / "tools"
        self.cache_dir = self.root / "cache"
        self.tmp_dir = self.root / "tmp"
        self.notice: Notice = notice or _log_notice
        self.tree_notice: Notice = _log_tree_notice
        for d in (
            self.blobs_dir,
            self.seals_dir,
            self.actions_dir,
            self.roots_dir,
            self.tools_dir,
            self.cache_dir,
            self.tmp_dir,
        ):
            try:
                d.mkdir(parents=True, exist_ok=True)
            except (FileExistsError, NotADirectoryError):
                raise UsageError(
                    f"store {self.root}: {d} or a directory above it is not a directory",
                    hint="point --store (or $NVKR_CACHE) at a directory nvkr may use as its store",
                ) from None
            except PermissionError:
                raise UsageError(
                    f"store {self.root}: cannot create {d}: permission denied",
                    hint="point --store (or $NVKR_CACHE) at a directory you can write",
                ) from None
        self._tmp_guard = self.root / "tmp.lock"
        self._tmp_guard.touch()

    # -- blobs -------------------------------------------------------------------------------
    def blob_path(self, digest: str) -> Path:
        """Path of the blob ``sha256:<hex>`` (which may not exist)."""
        if not digest.startswith("sha256:"):
            raise ValueError(f"store blobs are keyed by sha256, got {digest!r}")
        return self.blobs_dir / hex_of(digest)

    def has_blob(self, digest: str) -> bool:
        """True when blob ``digest`` is in the store and intact (see the module docstring: its
        seal, else a full hash). A corrupt blob is deleted, reported through :attr:`notice`,
        and False is returned, so the caller fetches or builds it again."""
        return self._intact(digest) is None

    def checked_path(self, digest: str) -> Path:
        """The path of blob ``digest``, checked against its seal (or hashed) first: the way a
        builder or the release set assembly reads a blob.

        Raises:
            IntegrityError: the blob is missing, or corrupt (it is deleted and reported; the
                next build fetches or rebuilds it).
        """
        problem = self._intact(digest)
        if problem is not None:
            raise IntegrityError(
                f"store blob {digest} is {problem}",
                hint="run the build again: it fetches or rebuilds the blob",
            )
        return self.blob_path(digest)

    def seal(self, digest: str) -> None:
        """Record the seal of blob ``digest`` as it is now (the caller knows its bytes are right).

        Written atomically but not fsync'd: a seal lost in a crash costs one full hash later.
        """
        st = os.stat(self.blob_path(digest))
        self._write_seal(digest, st)

    @contextlib.contextmanager
    def linking(self, digests: Iterable[str]) -> Iterator[None]:
        """nvkr links or unlinks blobs ``digests`` itself in the block (``dist/``, a mirror): a
        blob whose seal held just before takes the block's new ctime and link count into it, if
        its size, mtime and inode did not change. Any other blob is hashed at its next use: a
        write before the block is never sealed; one racing the block itself could be."""
        before: dict[str, os.stat_result] = {}
        for digest in dict.fromkeys(digests):
            try:
                st = os.stat(self.blob_path(digest))
            except FileNotFoundError:
                continue
            if self._read_seal(digest) == _sealed(st):
                before[digest] = st
        yield
        for digest, st in before.items():
            try:
                now = os.stat(self.blob_path(digest))
            except FileNotFoundError:
                continue
            was, new = _sealed(st), _sealed(now)
            if new != was and (new[:2], new[3]) == (was[:2], was[3]):  # size, mtime, inode kept
                self._write_seal(digest, now)

    def hash_blob(self, digest: str) -> str:
        """The sha256 of blob ``digest``'s bytes as they are now, ``sha256:<hex>``.

        Raises:
            FileNotFoundError: the blob is missing.
        """
        h = hashlib.sha256()
        with open(self.blob_path(digest), "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        return "sha256:" + h.hexdigest()

    def discard_blob(self, digest: str, reason: str) -> None:
        """Delete blob ``digest`` (and its seal) because it is corrupt, and report it once."""
        for path in (self.blob_path(digest), self.seals_dir / hex_of(digest)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self.notice(digest, reason)

    def _intact(self, digest: str) -> str | None:
        """None when blob ``digest`` is present and intact; else ``"missing"`` or a description
        of the corruption (the blob has then been discarded)."""
        path = self.blob_path(digest)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return "missing"
        if not path.is_file():
            return "missing"
        seal = self._read_seal(digest)
        if seal is not None and seal == _sealed(st):
            return None
        # Else hashed: a ctime says that the inode changed, not how (a link, or a write with
        # its mtime set back); only the bytes tell.
        try:
            actual = self.hash_blob(digest)
        except FileNotFoundError:
            return "missing"
        if actual == digest:
            self._write_seal(digest, st)
            return None
        reason = f"its bytes hash to {actual}"
        if seal is not None and seal[0] != st.st_size:
            reason += f", {st.st_size} bytes instead of {seal[0]}"
        elif seal is not None:
            reason += ": written after it was stored"
        self.discard_blob(digest, reason)
        return f"corrupt ({reason}); it was deleted"

    def _read_seal(self, digest: str) -> tuple[int, int, int, int, int] | None:
        try:
            words = (self.seals_dir / hex_of(digest)).read_text().split()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        if len(words) != 6 or words[0] != SEAL_VERSION or not all(w.isdigit() for w in words[1:]):
            return None
        size, mtime, ctime, ino, links = (int(w) for w in words[1:])
        return size, mtime, ctime, ino, links

    def _write_seal(self, digest: str, st: os.stat_result) -> None:
        text = (
            f"{SEAL_VERSION} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns} {st.st_ino} "
            f"{st.st_nlink}\n"
        )
        fd, name = tempfile.mkstemp(prefix=".seal-", dir=self.seals_dir)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(name, self.seals_dir / hex_of(digest))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise

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
        """The bytes of blob ``digest``, hashed as they are read (whatever the seal says).

        Raises:
            FileNotFoundError: the blob is missing.
            IntegrityError: its bytes do not match ``digest``; the blob is deleted and reported.
        """
        data = self.blob_path(digest).read_bytes()
        actual = "sha256:" + hashlib.sha256(data).hexdigest()
        if actual != digest:
            reason = f"its bytes hash to {actual}"
            self.discard_blob(digest, reason)
            raise IntegrityError(
                f"store blob {digest} is corrupt ({reason}); it was deleted",
                hint="run the build again: it fetches or rebuilds the blob",
            )
        return data

    def verify_blob(self, digest: str) -> None:
        """Re-hash a stored blob in full (the seal is not trusted) and seal it again.

        Raises:
            IntegrityError: the blob is missing or its bytes no longer match its name (it is
                left in place: :func:`nvkr.store_verify.verify_store` decides what to delete).
        """
        path = self.blob_path(digest)
        if not path.is_file():
            raise IntegrityError(f"store blob {digest} is missing from {self.blobs_dir}")
        st = os.stat(path)
        actual = self.hash_blob(digest)
        if actual != digest:
            raise IntegrityError(
                f"store blob {path} is corrupt: its sha256 is {actual}",
                hint="`nvkr store verify --repair` deletes it; the next build fetches or "
                "rebuilds it",
            )
        if os.stat(path).st_mtime_ns == st.st_mtime_ns:  # not written while it was hashed
            self._write_seal(digest, st)

    # -- action cache ------------------------------------------------------------------------
    def action_path(self, key: str) -> Path:
        return self.actions_dir / f"{hex_of(key)}.json"

    def get_action(self, key: str) -> ActionResult | None:
        """The cached result of action ``key``, or None when absent, when its record is not
        one (not JSON, or not of an action result's shape: :meth:`ActionResult.from_json`;
        ``nvkr store verify`` lists it) or when a blob it names is gone."""
        path = self.action_path(key)
        try:
            result = ActionResult.from_json(json.loads(path.read_bytes()), f"action record {key}")
        except (FileNotFoundError, json.JSONDecodeError, IntegrityError):
            return None
        for out in result.outputs:
            if not self.has_blob(out.digest):
                return None
        return result

    def put_action(self, key: str, result: ActionResult) -> None:
        """Record ``result`` (its metadata JSON-able, no floats) for ``key`` atomically: the
        canonical JSON of :meth:`ActionResult.to_json`."""
        self.write_atomic(self.action_path(key), canonical_json(result.to_json()))

    # -- tmp/ --------------------------------------------------------------------------------
    def claimed_file(self, prefix: str) -> tuple[int, Path]:
        """A new file in ``tmp/`` and its open descriptor, claimed until the descriptor is
        closed (:func:`nvkr.scratch.claimed_file`)."""
        return claimed_file(self.tmp_dir, self._tmp_guard, prefix)

    # -- unpacked tools ----------------------------------------------------------------------
    def unpacked(self, digest: str, unpack: Callable[[Path], None], *, check: str) -> Path:
        """``tools/<hex>/`` for the blob ``digest`` (a toolchain wheel, a tools tree tar), made
        once: ``unpack(tmp)`` fills a fresh claimed directory in ``tmp/``, which must then hold
        the relative path ``check``, and is renamed into place, so a crash never leaves half a
        tree. Threads asking for the same digest at once unpack it once. Each use checks the
        tree against the seal written beside it (:mod:`nvkr.treeseal`): a tree changed since it
        was unpacked is reported (:attr:`tree_notice`) and unpacked again from the blob.

        Raises:
            IntegrityError: the unpacked blob holds no ``check``.
        """
        target = self.tools_dir / hex_of(digest)
        with _unpack_guard:
            lock = _unpack_locks.setdefault(str(target), threading.Lock())
        with lock:
            if os.path.lexists(target / check):
                seal = treeseal.read_seal(target)
                changed = treeseal.check_tree(target, seal) if seal else "no seal"
                if changed is None:
                    return target
                if seal:  # a tree of an older nvkr has no seal: unpacked again, quietly
                    self.tree_notice(digest, changed)
            self.checked_path(digest)  # the blob itself, before its bytes become a tree
            with self.workdir(prefix="tool-") as tmp:
                unpack(tmp)
                if not os.path.lexists(tmp / check):
                    raise IntegrityError(f"blob {digest} unpacked holds no {check}")
                seal = treeseal.seal_tree(tmp)
                remove_tree(target)
                os.replace(tmp, target)
                treeseal.write_seal(target, seal)
        return target

    def write_atomic(self, target: Path, data: bytes) -> None:
        """Write ``data`` to ``target`` all or nothing, through a claimed temp file in ``tmp/``."""
        fd, tmp = self.claimed_file(".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
                os.replace(tmp, target)  # before the close: the claim covers the whole write
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    @contextlib.contextmanager
    def workdir(self, prefix: str = "work-") -> Iterator[Path]:
        """A fresh directory under ``tmp/``, claimed while in use and removed afterwards
        whatever happens (nothing mounted below it is crossed: :func:`nvkr.scratch.remove_tree`).
        It may be renamed away meanwhile (an unpacked toolchain moved into ``tools/``)."""
        fd, path = claimed_dir(self.tmp_dir, self._tmp_guard, prefix)
        try:
            yield path
        finally:
            try:
                remove_tree(path)
            finally:
                os.close(fd)

    def reading(
        self, *, exclusive: bool = False, on_wait: OnWait | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Hold the reader lock (``gc.lock``): shared by every verb that reads the store, for as
        long as it runs (readers never wait for each other, nor for a build); exclusive for
        ``gc`` (:mod:`nvkr.store_gc`), which so waits for them all and deletes nothing one is
        reading. Taken before :meth:`lock` by whoever takes both; a wait is said
        (:mod:`nvkr.storelock`)."""
        return reader_lock(self.root, exclusive=exclusive, on_wait=on_wait)

    @contextlib.contextmanager
    def lock(self, on_wait: OnWait | None = None) -> Iterator[Cleanup]:
        """Hold the store's exclusive lock (blocks while another build holds it, saying so:
        :mod:`nvkr.storelock`).

        Once it is held, what dead processes left in ``tmp/`` is removed (mounts below it
        unmounted first; :func:`nvkr.scratch.remove_leftovers`); the context yields that report.
        """
        with open(self.root / "lock", "a+b") as f:
            flock_said(f, fcntl.LOCK_EX, HOLDER_OF_LOCK, self.root, on_wait)
            try:
                yield remove_leftovers(self.tmp_dir, self._tmp_guard)
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
