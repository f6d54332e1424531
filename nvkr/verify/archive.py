"""Where two blobs first differ: the member of a tar/tgz, the gzip header field, or the byte.

``nvkr verify --rebuild`` (:mod:`nvkr.verify.rebuild`) calls :func:`first_difference` on the
first pair of blobs that differ between the release set and its rebuild, so a reproducibility
failure names the file inside a layer or chart that changed rather than only two digests; and
:func:`diffoscope` adds diffoscope's full report where diffoscope is installed.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import shutil
import tarfile
import zlib
from pathlib import Path
from typing import Any, Protocol

from nvkr.errors import ToolError
from nvkr.run import pinned_env, run

_CHUNK = 1 << 20


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


_GZIP_MAGIC = b"\x1f\x8b"
#: TarInfo fields compared, in order, before the content.
_TAR_FIELDS = ("type", "mode", "uid", "gid", "uname", "gname", "mtime", "size", "linkname")


def first_difference(a: Path, b: Path) -> str:
    """A sentence naming where the blob ``a`` (the release set's) and ``b`` (the rebuild's)
    first differ: for a tar or gzip'd tar, the first member whose name, metadata
    (:data:`_TAR_FIELDS`, PAX headers) or content differs; for other gzip data, the header field
    (mtime, OS, name) or the offset in the uncompressed bytes; else the first differing byte.
    """
    with open(a, "rb") as fa, open(b, "rb") as fb:
        ha, hb = fa.read(512), fb.read(512)
    if ha[:2] == _GZIP_MAGIC and hb[:2] == _GZIP_MAGIC:
        header = _gzip_header_difference(ha, hb)
        if _is_tar_gz(a) and _is_tar_gz(b):
            member = _tar_difference(a, b)
            if member:
                return member
        if header:
            return header
        with gzip.open(a, "rb") as ga, gzip.open(b, "rb") as gb:
            where = _byte_difference(ga, gb)
        return (
            f"the uncompressed data first differs {where}"
            if where
            else (
                "the uncompressed data is the same; the compressed stream differs (compression level "
                "or zlib version)"
            )
        )
    if _is_tar(ha) and _is_tar(hb):
        member = _tar_difference(a, b)
        if member:
            return member
    with open(a, "rb") as fa, open(b, "rb") as fb:
        where = _byte_difference(fa, fb)
    return f"the bytes first differ {where}" if where else "the bytes are the same"


def _is_tar(head: bytes) -> bool:
    return len(head) >= 262 and head[257:262] == b"ustar"


def _is_tar_gz(path: Path) -> bool:
    try:
        with gzip.open(path, "rb") as g:
            return _is_tar(g.read(512))
    except (OSError, EOFError, zlib.error):
        return False


def _gzip_header_difference(ha: bytes, hb: bytes) -> str | None:
    """RFC 1952 section 2.3: FLG (byte 3), MTIME (4-7, little endian), XFL (8), OS (9)."""
    fields = (("flags", 3, 4), ("mtime", 4, 8), ("extra flags", 8, 9), ("OS", 9, 10))
    for name, start, end in fields:
        va = int.from_bytes(ha[start:end], "little")
        vb = int.from_bytes(hb[start:end], "little")
        if va != vb:
            return f"the gzip header's {name} differs: {va} (release set) vs {vb} (rebuild)"
    return None


def _byte_difference(fa: _Readable, fb: _Readable) -> str | None:
    offset = 0
    while True:
        ca, cb = fa.read(_CHUNK), fb.read(_CHUNK)
        if ca != cb:
            n = next(
                (i for i, (x, y) in enumerate(zip(ca, cb, strict=False)) if x != y),
                min(len(ca), len(cb)),
            )
            if n == min(len(ca), len(cb)) and len(ca) != len(cb):
                longer = "the release set's" if len(ca) > len(cb) else "the rebuild's"
                return f"at byte {offset + n}: {longer} is longer"
            return f"at byte {offset + n}"
        if not ca:
            return None
        offset += len(ca)


def _tar_difference(a: Path, b: Path) -> str | None:
    """The first member that differs between two tar (or tar.gz) files, or None."""
    try:
        with tarfile.open(a, "r:*") as ta, tarfile.open(b, "r:*") as tb:
            for ma, mb in itertools.zip_longest(_members(ta), _members(tb)):
                if ma is None or mb is None:
                    only = mb if ma is None else ma
                    assert only is not None
                    side = "the rebuild" if ma is None else "the release set"
                    return f"member {only.name}: only in {side}"
                if ma.name != mb.name:
                    return f"member {ma.name} (release set) vs {mb.name} (rebuild): names differ"
                for field in _TAR_FIELDS:
                    va, vb = getattr(ma, field), getattr(mb, field)
                    if va != vb:
                        shown = (oct(va), oct(vb)) if field == "mode" else (repr(va), repr(vb))
                        return (
                            f"member {ma.name}: {field} {shown[0]} (release set) vs {shown[1]} "
                            "(rebuild)"
                        )
                if ma.pax_headers != mb.pax_headers:
                    return f"member {ma.name}: PAX headers differ"
                if ma.isfile() and _member_digest(ta, ma) != _member_digest(tb, mb):
                    return f"member {ma.name}: content differs"
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        return f"cannot read as tar ({e})"
    return None


def _members(tar: tarfile.TarFile) -> Any:
    while (member := tar.next()) is not None:
        yield member


def _member_digest(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    h = hashlib.sha256()
    f = tar.extractfile(member)
    if f is not None:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def diffoscope(a: Path, b: Path, *, max_lines: int = 200, timeout: float = 300) -> str | None:
    """diffoscope's text report on ``a`` and ``b`` (its first ``max_lines`` lines), or None when
    diffoscope is not installed. A diffoscope that fails or times out gives its error text."""
    exe = shutil.which("diffoscope")  # the caller's PATH: run() would look on its fixed one
    if exe is None:
        return None
    try:
        proc = run(
            [exe, "--no-progress", "--text", "-", str(a), str(b)],
            env=pinned_env(),
            check=False,
            timeout=timeout,
        )
    except ToolError as e:
        return f"diffoscope failed: {e.message}"
    out = (proc.stdout or b"").decode(errors="replace")
    if proc.returncode not in (0, 1):
        out += (proc.stderr or b"").decode(errors="replace")
    lines = out.splitlines()
    if len(lines) > max_lines:
        return "\n".join(lines[:max_lines]) + f"\n[... {len(lines) - max_lines} more lines]"
    return out
