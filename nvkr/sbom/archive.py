"""The regular files of a tar blob in the store (an image layer, a chart .tgz), with checksums.

The describers of :mod:`nvkr.sbom.describe` list every file an artifact ships: the layers of a
container image and the members of a Helm chart archive. :func:`tar_files` streams one blob
once — decompressing gzip, zstd, bzip2 or xz by its magic, hashing each member with SHA1 and
SHA256 and the blob itself with SHA256, which must match the digest it is stored under.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import posixpath
import tarfile
from typing import IO, Any, BinaryIO

import zstandard

from nvkr.errors import BuildError, IntegrityError
from nvkr.sbom.spdx import FileDigest
from nvkr.store import Store

_CHUNK = 1 << 20
#: OCI whiteouts (image-spec layer.md "Whiteouts") mark deletions; they ship no content.
WHITEOUT_PREFIX = ".wh."


class _HashingReader:
    """A read-only stream that hashes (sha256) every byte read through it."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self.sha256.update(data)
        return data

    def readable(self) -> bool:
        return True

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def _decompressed(raw: Any, magic: bytes) -> Any:
    """``raw`` as a stream of tar bytes, decompressed by its magic (gzip, zstd, bzip2, xz)."""
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if magic.startswith(b"\x28\xb5\x2f\xfd"):
        return zstandard.ZstdDecompressor().stream_reader(raw)
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw, mode="rb")
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw, mode="rb")
    return raw


def member_path(name: str) -> str:
    """A tar member name as a path relative to the archive root (no ``./``, no leading ``/``);
    bytes that are not UTF-8 are shown as ``\\xNN`` so the SBOM stays valid JSON."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    path = posixpath.normpath("/" + text).lstrip("/")
    return "" if path == "." else path


def _digest(stream: IO[bytes]) -> FileDigest:
    sha1 = hashlib.sha1(usedforsecurity=False)
    sha256 = hashlib.sha256()
    size = 0
    head = b""
    while chunk := stream.read(_CHUNK):
        if size == 0:
            head = chunk[:4]
        size += len(chunk)
        sha1.update(chunk)
        sha256.update(chunk)
    return FileDigest(sha1.hexdigest(), sha256.hexdigest(), size, elf=head == b"\x7fELF")


def _read_members(stream: Any, files: dict[str, FileDigest], what: str) -> None:
    with tarfile.open(fileobj=stream, mode="r|", encoding="utf-8") as tar:
        for member in tar:
            name = member_path(member.name)
            if not name or posixpath.basename(name).startswith(WHITEOUT_PREFIX):
                continue
            # a later entry of the same path replaces an earlier one, whatever its type
            files.pop(name, None)
            if member.isreg():
                f = tar.extractfile(member)
                if f is None:  # pragma: no cover - a regular member always has data
                    raise BuildError(f"{what}: cannot read member {member.name!r}")
                files[name] = _digest(f)
            elif member.islnk():
                target = files.get(member_path(member.linkname))
                if target is not None:
                    files[name] = target


def tar_files(store: Store, digest: str, what: str) -> dict[str, FileDigest]:
    """Every regular file in the tar blob ``digest`` (``sha256:<hex>``), plain or compressed.

    Hard links count as files with their target's content; a path given twice keeps its last
    entry (as an extractor would); whiteouts, directories, symlinks and devices are left out.

    Returns:
        path relative to the archive root → :class:`FileDigest`, sorted by path.
    Raises:
        IntegrityError: the blob is missing from the store or its bytes do not match ``digest``.
        BuildError: the blob is not a (compressed) tar archive.
    """
    path = store.blob_path(digest)
    files: dict[str, FileDigest] = {}
    try:
        raw_file = open(path, "rb")  # noqa: SIM115 - closed below, after draining it
    except OSError as e:
        raise IntegrityError(
            f"{what}: blob {digest} is not in the store {store.root}",
            hint="the cache entry is stale; run the build again to re-create it",
        ) from e
    error: Exception | None = None
    with raw_file:
        magic = raw_file.read(6)
        raw_file.seek(0)
        raw = _HashingReader(raw_file)
        try:
            _read_members(_decompressed(raw, magic), files, what)
        except (tarfile.TarError, OSError, EOFError, lzma.LZMAError, zstandard.ZstdError) as e:
            error = e
        raw.drain()
    actual = "sha256:" + raw.sha256.hexdigest()
    # The digest first: a corrupt blob usually fails to decompress too, and corruption is the
    # finding that matters.
    if actual != digest:
        raise IntegrityError(
            f"{what}: store blob {digest} is corrupt (its bytes hash to {actual})",
            hint="delete it from the store and build again",
        )
    if error is not None:
        raise BuildError(f"{what}: blob {digest} is not a readable tar archive: {error}")
    return dict(sorted(files.items()))
