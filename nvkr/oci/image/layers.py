"""Reproducible layer blobs: a file tree, or a layer someone else made, as a tar in the store.

The first step of writing an image: the daemonless backend of the ``container-image`` builder
turns the files of a recipe into a layer with :func:`layer_from_tree`, the docker one re-tars what
a daemon built with :func:`normalise_layer`; the :class:`Layer` each returns (digest, size,
``diff_id``) then feeds :func:`nvkr.oci.image.image_config` and
:func:`nvkr.oci.image.image_manifest`. Layers are deterministic tars (members sorted by path
bytes, integer mtimes, no PAX atime/ctime, empty owner names: the tar primitives of
:mod:`nvkr.repro`) compressed with its fixed gzip header (mtime 0, no name, level 9,
:func:`nvkr.repro.gzip_writer`) or a fixed zstd level, streamed
into the store while the uncompressed bytes are hashed for the ``diff_id`` (image-spec v1.1.0
layer.md).
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import lzma
import shutil
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, Final, cast

from nvkr.errors import BuildError
from nvkr.oci import mediatypes as mt
from nvkr.repro import clamp_mtime, gzip_writer, path_key, tar_member, tar_writer, tree_members
from nvkr.store import BlobWriter, Store

#: image-spec media-types.md: a zstd-compressed layer (the gzip one is in :mod:`mediatypes`).
OCI_LAYER_TAR_ZSTD: Final = "application/vnd.oci.image.layer.v1.tar+zstd"
#: zstd level 10: a good ratio at a few tens of MB/s; fixed, since it changes the bytes.
ZSTD_LEVEL: Final = 10
LAYER_MEDIA_TYPES: Final = {"gzip": mt.OCI_LAYER_TAR_GZIP, "zstd": OCI_LAYER_TAR_ZSTD}


#: PAX records that describe the file itself and so survive :func:`normalise_layer`: extended
#: attributes (file capabilities live in ``security.capability``). Times, charsets and comments go.
KEPT_PAX_PREFIXES: Final = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")

_CHUNK = 1 << 20
_REGULAR = frozenset({tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.GNUTYPE_SPARSE})
_OTHER = frozenset(
    {
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.CHRTYPE,
        tarfile.BLKTYPE,
        tarfile.FIFOTYPE,
    }
)


@dataclass(frozen=True)
class Layer:
    """A layer blob in the store.

    ``digest``: ``sha256:<hex>`` of the compressed blob; ``size`` its length in bytes;
    ``diff_id``: ``sha256:<hex>`` of the uncompressed tar (config.md ``rootfs.diff_ids``);
    ``media_type``: ``application/vnd.oci.image.layer.v1.tar+gzip`` or ``...+zstd``.
    """

    digest: str
    size: int
    diff_id: str
    media_type: str

    def descriptor(self) -> dict[str, Any]:
        """``{"mediaType", "digest", "size"}`` for a manifest's ``layers``."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


# -- writing layers --------------------------------------------------------------------------
class _BlobSink:
    """What a compressor writes to: the store's :class:`BlobWriter`."""

    def __init__(self, writer: BlobWriter) -> None:
        self._writer = writer

    def write(self, data: bytes) -> int:
        self._writer.write(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass


class _LayerSink:
    """What tarfile writes to: the bytes are hashed (the diff_id) and compressed into the store."""

    def __init__(self, writer: BlobWriter, compression: str) -> None:
        self._diff = hashlib.sha256()
        self._pos = 0
        sink = _BlobSink(writer)
        self._compressor: Any
        if compression == "gzip":
            # no file name and mtime 0 in the header: the same tar gives the same bytes anywhere
            self._compressor = gzip_writer(cast(BinaryIO, sink))
        elif compression == "zstd":
            import zstandard

            # single-threaded, fixed level, checksum on, no content size (it is a stream)
            cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True, threads=0)
            self._compressor = cctx.stream_writer(cast(IO[bytes], sink), closefd=False)
        else:
            raise ValueError(f"compression {compression!r}: expected 'gzip' or 'zstd'")

    def write(self, data: bytes) -> int:
        self._diff.update(data)
        self._pos += len(data)
        self._compressor.write(data)
        return len(data)

    def tell(self) -> int:
        return self._pos

    def close(self) -> str:
        """Finish the compressed stream; return the diff_id ``sha256:<hex>``."""
        self._compressor.close()
        return "sha256:" + self._diff.hexdigest()


def _write_layer(
    store: Store,
    compression: str,
    members: Iterator[tuple[tarfile.TarInfo, Callable[[], IO[bytes]] | None]],
    what: str,
) -> Layer:
    """Write ``members`` (in order; each with a function opening its data) as a compressed tar."""
    media_type = LAYER_MEDIA_TYPES.get(compression)
    if media_type is None:
        raise ValueError(f"compression {compression!r}: expected 'gzip' or 'zstd'")
    with store.writer(what=what) as writer:
        sink = _LayerSink(writer, compression)
        with tar_writer(cast(BinaryIO, sink)) as tar:
            for info, opener in members:
                if opener is None:
                    tar.addfile(info)
                else:
                    with opener() as f:
                        tar.addfile(info, f)
        diff_id = sink.close()
        blob = writer.commit()
    return Layer(digest=blob.digest, size=blob.size, diff_id=diff_id, media_type=media_type)


def _file_opener(path: Path) -> Callable[[], IO[bytes]]:
    return lambda: open(path, "rb")


def _tree_members(
    root: Path, epoch: int, modes: Mapping[str, int]
) -> Iterator[tuple[tarfile.TarInfo, Callable[[], IO[bytes]] | None]]:
    def unsupported(path: Path) -> BuildError:
        return BuildError(
            f"{path}: only files, directories and symlinks can go into an image layer"
        )

    for info, path in tree_members(root, epoch=epoch, unsupported=unsupported, modes=modes):
        yield info, None if path is None else _file_opener(path)


def layer_from_tree(
    root: Path,
    store: Store,
    *,
    epoch: int,
    compression: str = "gzip",
    modes: Mapping[str, int] | None = None,
) -> Layer:
    """The tree under ``root`` as a reproducible layer blob in ``store`` (image-spec layer.md).

    Every path below ``root`` (not ``root`` itself) becomes a member named relative to it
    (``usr/``, ``usr/bin/``, ``usr/bin/agent``), sorted by path bytes; uid/gid 0, empty owner
    names, mtime ``epoch``; symlinks kept as links (mode 0777); modes 0755 for directories and
    files with any execute bit, else 0644, unless ``modes`` names the path (POSIX, relative to
    ``root``, e.g. ``{"etc/app/key": 0o600}``), whose mode is used as given.

    Args:
        epoch: seconds since 1970-01-01 UTC, every member's mtime.
        compression: ``"gzip"`` (level 9, header mtime 0, no name) or ``"zstd"`` (level
            :data:`ZSTD_LEVEL`, the ``zstandard`` package).
    Returns:
        the stored :class:`Layer` (``digest``/``diff_id`` ``sha256:<hex>``, size in bytes).
    Raises:
        BuildError: the tree holds a socket, device or fifo.
        ValueError: an unknown compression.
    """
    members = _tree_members(Path(root), epoch, dict(modes or {}))
    return _write_layer(store, compression, members, what=f"layer of {root}")


# -- normalising foreign layers ----------------------------------------------------------------
def _plain_tar(stream: BinaryIO, tmp: Path, what: str) -> Path:
    """Copy ``stream`` to ``tmp/layer.tar``, decompressing gzip, zstd, bzip2 or xz on the way.

    The copy is seekable, so members can be read back in sorted order without re-decompressing.
    """
    raw = tmp / "in"
    with open(raw, "wb") as out:
        shutil.copyfileobj(stream, out, _CHUNK)
    with open(raw, "rb") as f:
        magic = f.read(6)
    opener: Callable[[Path], IO[bytes]] | None = None
    if magic.startswith(b"\x1f\x8b"):
        opener = cast(Callable[[Path], IO[bytes]], gzip.open)
    elif magic.startswith(b"BZh"):
        opener = cast(Callable[[Path], IO[bytes]], bz2.open)
    elif magic.startswith(b"\xfd7zXZ\x00"):
        opener = cast(Callable[[Path], IO[bytes]], lzma.open)
    elif magic.startswith(b"\x28\xb5\x2f\xfd"):
        import zstandard

        def opener(path: Path) -> IO[bytes]:
            return cast(IO[bytes], zstandard.open(path, "rb"))

    if opener is None:
        return raw
    plain = tmp / "layer.tar"
    try:
        with opener(raw) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
    except Exception as e:  # gzip, bz2, lzma and zstandard each have their own error types
        raise BuildError(f"{what}: cannot decompress the layer: {e}") from e
    raw.unlink()
    return plain


def _normalised_members(
    tar: tarfile.TarFile, epoch: int, what: str
) -> Iterator[tuple[tarfile.TarInfo, Callable[[], IO[bytes]] | None]]:
    latest: dict[str, tarfile.TarInfo] = {}
    for m in tar.getmembers():
        if m.type not in _REGULAR and m.type not in _OTHER:
            raise BuildError(f"{what}: member {m.name!r} has an unsupported tar type {m.type!r}")
        latest.pop(m.name, None)  # a later entry of the same path replaces the earlier one
        latest[m.name] = m
    names = sorted(latest, key=path_key)

    # Hard links: after sorting, a link may come before the file it names, which no extractor
    # accepts. Each set of linked names is rewritten so the first name in sorted order holds the
    # data and the others link to it.
    def final_target(name: str) -> str:
        seen = set()
        while name in latest and latest[name].type == tarfile.LNKTYPE and name not in seen:
            seen.add(name)
            name = latest[name].linkname
        return name

    groups: dict[str, list[str]] = {}
    for name in names:
        if latest[name].type == tarfile.LNKTYPE:
            target = final_target(name)
            if target in latest and latest[target].type in _REGULAR:
                groups.setdefault(target, [target]).append(name)
    holder: dict[str, tuple[str, str]] = {}  # name -> (first name of its group, data member)
    for target, group in groups.items():
        group.sort(key=path_key)
        for name in group:
            holder[name] = (group[0], target)

    for name in names:
        m = latest[name]
        info = tar_member(name, mtime=clamp_mtime(m.mtime, epoch), mode=m.mode & 0o7777)
        info.uid, info.gid = m.uid, m.gid  # kept: a layer's owners are part of its files
        info.pax_headers = {
            k: v for k, v in sorted(m.pax_headers.items()) if k.startswith(KEPT_PAX_PREFIXES)
        }
        opener: Callable[[], IO[bytes]] | None = None
        if name in holder:
            first, target = holder[name]
            if name == first:
                data = latest[target]
                info.type = tarfile.REGTYPE
                info.size = data.size
                opener = _member_opener(tar, data, what)
            else:
                info.type = tarfile.LNKTYPE
                info.linkname = first
        elif m.type in _REGULAR:
            info.type = tarfile.REGTYPE
            info.size = m.size
            opener = _member_opener(tar, m, what)
        else:
            info.type = m.type
            info.linkname = m.linkname
            if m.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                info.devmajor, info.devminor = m.devmajor, m.devminor
        yield info, opener


def _member_opener(
    tar: tarfile.TarFile, member: tarfile.TarInfo, what: str
) -> Callable[[], IO[bytes]]:
    def opener() -> IO[bytes]:
        f = tar.extractfile(member)
        if f is None:
            raise BuildError(f"{what}: cannot read member {member.name!r}")
        return f

    return opener


def normalise_layer(
    tar_stream: BinaryIO, store: Store, *, epoch: int, compression: str = "gzip"
) -> Layer:
    """Re-tar an existing layer (``docker save``, a base image) reproducibly into ``store``.

    Kept: member names, types, modes (setuid bits included), uid/gid, link targets, device
    numbers, whiteouts (``.wh.*`` and ``.wh..wh..opq`` are ordinary files) and extended
    attributes (PAX ``SCHILY.xattr.*``). Changed: members sorted by path bytes (a repeated path
    keeps its last entry), mtimes clamped to ``min(mtime, epoch)`` (integers, at least 0), owner
    names emptied, every other PAX record (atime, ctime, comments, charsets) dropped, hard links
    re-pointed so the first name of each linked set in sorted order holds the data. The input may
    be plain, gzip, zstd, bzip2 or xz.

    Args:
        tar_stream: the layer, read to its end (need not be seekable).
        epoch: seconds since 1970-01-01 UTC.
        compression: as :func:`layer_from_tree`.
    Returns:
        the stored :class:`Layer` (``diff_id`` of the new uncompressed tar).
    Raises:
        BuildError: the stream is not a tar or holds an unsupported member type.
        ValueError: an unknown compression.
    """
    what = "layer being normalised"
    with store.workdir(prefix="layer-") as tmp:
        plain = _plain_tar(tar_stream, tmp, what)
        try:
            with tarfile.open(plain, mode="r:", encoding="utf-8") as tar:
                return _write_layer(
                    store, compression, _normalised_members(tar, epoch, what), what=what
                )
        except tarfile.TarError as e:
            raise BuildError(f"{what}: not a readable tar archive: {e}") from e
