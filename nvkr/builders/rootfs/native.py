"""Host tools run natively inside a foreign-architecture tree while mmdebstrap builds it.

Under qemu-user every program a maintainer script or ``mkinitramfs`` starts costs a new
emulator (20-60 ms before it does anything), and those scripts start thousands of small ones:
``mkinitramfs`` alone runs ``realpath``, ``readlink``, ``cp`` and ``mkdir`` about 3,800 times
(two minutes of the arm64 tree's five on an amd64 host), ``update-ca-certificates`` ``sed``,
``basename``, ``readlink`` and ``ln`` for each of 145 certificates (twice: 55 s). Those tools
compute nothing that depends on the architecture they run as, so the host's build of them gives
the same files.

:func:`prepare` copies the host's programs of :data:`TOOLS` (coreutils, sed, grep, findutils)
(and three of dpkg's helpers) and the shared libraries they load into the action's work dir, each program's ``PT_INTERP``
rewritten to :data:`LOADER` (``/lib64`` must not appear in the tree: ``mkinitramfs`` links every
``/lib*`` it finds into the initramfs). The essential hook ``native-tools.essential-hook`` binds
each copy over the tree's own program and the library directory at ``/lib/x86_64-linux-gnu``
(absent from an arm64 tree), after the Essential packages are installed (dpkg never replaces
those programs afterwards); ``native-tools-off.customize-hook`` unbinds them after the
initramfs is built, before the tarball, and removes the directory. Nothing is bound where a
program is copied into the image: ``kmod``, which ``mkinitramfs`` copies into every initramfs,
stays emulated, as do ``uname`` and ``arch`` (they would name the host's architecture), the
interpreters (perl, python, the shells) and everything that is not in :data:`TOOLS`.
:func:`check_none_left` proves it for each build: no file of the tarball, and none inside an
initramfs in it, is one of the copies.

Only on an x86-64 host (the CI runners, most build machines); elsewhere a foreign tree stays
wholly emulated, as before. The versions of the host packages the tools come from are in the
action key (:func:`tool_versions`).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import platform
import re
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import zstandard

from nvkr.elf import set_interpreter
from nvkr.errors import IntegrityError
from nvkr.hosttools import package_version
from nvkr.run import run

#: Programs that run natively: they only move, name and filter files and text (no ``uname``,
#: ``arch``, ``nproc``, ``kmod``, interpreters). Each must exist on the host.
TOOLS = (
    "basename", "cat", "chmod", "chown", "cp", "cut", "dirname", "head", "ln", "ls", "md5sum",
    "mkdir", "mktemp", "mv", "readlink", "realpath", "rm", "rmdir", "sort", "stat", "tail",
    "touch", "tr", "tsort", "uniq", "wc", "sed", "grep", "find", "xargs",
    # dpkg's helpers that read archives or manage symlinks, and know no architecture: dpkg
    # (emulated) pipes every package's data through dpkg-deb and checks it with dpkg-split.
    # Not dpkg-query, dpkg-divert, dpkg-trigger: they resolve package names against their own
    # (the host's) architecture.
    "dpkg-deb", "dpkg-split", "update-alternatives",
)  # fmt: skip
#: The Debian packages those programs and their libc come from: named in the action key.
PACKAGES = ("coreutils", "sed", "grep", "findutils", "dpkg", "libc6")
#: Where a copied program finds its loader inside the tree (fits ``/lib64/ld-linux-x86-64.so.2``'s
#: PT_INTERP segment), and the directory the loader searches for libraries by default.
LOADER = "/lib/x86_64-linux-gnu/ld.so"
_HOST_LOADER = Path("/lib64/ld-linux-x86-64.so.2")
_LDD_LINE = re.compile(r"=>\s+(/\S+)\s+\(")


def supported() -> bool:
    """Whether this host can run its tools in a foreign tree (an x86-64 Linux host)."""
    return platform.machine() == "x86_64" and _HOST_LOADER.exists()


def tool_versions() -> dict[str, str]:
    """The host packages of :data:`PACKAGES` by name, for the action key."""
    return {
        f"native-{p}": package_version(p, purpose="a foreign-architecture rootfs") for p in PACKAGES
    }


def prepare(dest: Path) -> Path:
    """The native tools in ``dest/bin`` (their interpreter rewritten to :data:`LOADER`) and the
    libraries they load, with the loader as ``ld.so``, in ``dest/lib``. Returns ``dest``."""
    bindir, libdir = dest / "bin", dest / "lib"
    bindir.mkdir(parents=True)
    libdir.mkdir()
    libs: dict[str, Path] = {}
    for name in TOOLS:
        found = shutil.which(name, path="/usr/bin:/bin")
        if found is None:
            raise IntegrityError(f"host tool {name} not found in /usr/bin or /bin")
        copy = bindir / name
        shutil.copyfile(found, copy)
        copy.chmod(0o755)
        set_interpreter(copy, LOADER)
        out = run(["ldd", found]).stdout.decode()
        for match in _LDD_LINE.finditer(out):
            libs[Path(match.group(1)).name] = Path(match.group(1)).resolve()
    for soname, path in sorted(libs.items()):
        shutil.copyfile(path, libdir / soname)
    shutil.copyfile(_HOST_LOADER.resolve(), libdir / "ld.so")
    (libdir / "ld.so").chmod(0o755)
    return dest


def check_none_left(tarball: Path, native: Path) -> None:
    """Fails when a file of ``tarball`` (mmdebstrap's output), or of an initramfs in its
    ``boot/``, has the bytes of a program or library in ``native``: a host binary copied into
    the image while it was bound over the tree's own.

    Raises:
        IntegrityError: names the file (and the initramfs holding it).
    """
    digests: dict[int, dict[str, str]] = {}
    for path in sorted(native.glob("*/*")):
        data = path.read_bytes()
        digests.setdefault(len(data), {})[hashlib.sha256(data).hexdigest()] = path.name
    with tarfile.open(tarball) as tar:
        for member in tar:
            if not member.isreg():
                continue
            name = member.name.removeprefix("./")
            initramfs = re.fullmatch(r"boot/initrd\.img-.*", name) is not None
            if member.size not in digests and not initramfs:
                continue
            f = tar.extractfile(member)
            assert f is not None
            data = f.read()
            _check_bytes(data, digests, f"/{name}")
            if initramfs:
                for inner, content in _cpio_files(_decompressed_cpios(data, name)):
                    _check_bytes(content, digests, f"/{inner} in /{name}")


def _check_bytes(data: bytes, digests: dict[int, dict[str, str]], where: str) -> None:
    by_size = digests.get(len(data))
    if not by_size:
        return
    host = by_size.get(hashlib.sha256(data).hexdigest())
    if host is not None:
        raise IntegrityError(
            f"{where} is the build host's {host}, bound into the foreign tree while it was "
            "built, not the tree's own",
            hint=f"a package copies {host} into the image: take it out of "
            "nvkr.builders.rootfs.native.TOOLS",
        )


def _decompressed_cpios(data: bytes, name: str) -> bytes:
    """An initramfs's cpio archives, uncompressed: an uncompressed early archive (CPU
    microcode) may come first, then one compressed with zstd, gzip or xz."""
    out = io.BytesIO()
    pos = 0
    while pos < len(data):
        if data[pos : pos + 6] in (b"070701", b"070702"):
            end = _cpio_end(data, pos)
            out.write(data[pos:end])
            pos = end
            while pos < len(data) and data[pos] == 0:
                pos += 1
            continue
        rest = data[pos:]
        if rest[:4] == b"\x28\xb5\x2f\xfd":
            out.write(zstandard.ZstdDecompressor().decompressobj().decompress(rest))
        elif rest[:2] == b"\x1f\x8b":
            out.write(gzip.decompress(rest))
        elif rest[:6] == b"\xfd7zXZ\x00":
            out.write(lzma.decompress(rest))
        else:
            raise IntegrityError(
                f"/{name}: an initramfs part at byte {pos} is neither cpio nor zstd, gzip or "
                "xz, so it cannot be checked for the build host's tools"
            )
        break
    return out.getvalue()


def _cpio_end(data: bytes, pos: int) -> int:
    """The offset after the cpio archive starting at ``pos`` (its ``TRAILER!!!``)."""
    for name, _, end in _cpio_entries(data, pos):
        if name == "TRAILER!!!":
            return end
    return len(data)


def _cpio_entries(data: bytes, pos: int) -> Iterator[tuple[str, bytes, int]]:
    """(name, content, offset after it) of each newc entry from ``pos`` up to a trailer."""
    while pos + 110 <= len(data) and data[pos : pos + 6] in (b"070701", b"070702"):
        fields = [int(data[pos + 6 + 8 * i : pos + 14 + 8 * i], 16) for i in range(13)]
        size, namesize = fields[6], fields[11]
        start = pos + 110
        name = data[start : start + namesize - 1].decode(errors="replace")
        body = (start + namesize + 3) & ~3
        end = (body + size + 3) & ~3
        yield name, data[body : body + size], end
        if name == "TRAILER!!!":
            return
        pos = end


def _cpio_files(data: bytes) -> Iterator[tuple[str, bytes]]:
    """(name, content) of every file in the concatenated newc archives ``data``."""
    pos = 0
    while pos < len(data):
        if data[pos : pos + 6] not in (b"070701", b"070702"):
            pos += 1  # padding between archives
            continue
        after = len(data)
        for name, content, after in _cpio_entries(data, pos):  # noqa: B007 (read after)
            if name != "TRAILER!!!" and content:
                yield name, content
        pos = max(after, pos + 1)
