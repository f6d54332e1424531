"""Host tools run natively inside a foreign-architecture tree while mmdebstrap builds it.

Under qemu-user every program a maintainer script or ``mkinitramfs`` starts costs a new
emulator (20-60 ms before it does anything; an interpreter's start-up, seconds), and those
scripts start thousands: ``mkinitramfs`` alone runs ``realpath``, ``readlink``, ``cp``,
``mkdir`` and ``modinfo`` about 4,000 times, ``update-ca-certificates`` ``sed``, ``basename``,
``readlink``, ``test`` and ``ln`` for each of 145 certificates, debconf's frontend and
``deb-systemd-helper`` start perl 47 times. Those tools compute nothing that depends on the
architecture they run as, so the host's build of them gives the same files.

:func:`prepare` copies the host's programs and the shared libraries they load into the
action's work dir, each program's ``PT_INTERP`` rewritten to :data:`LOADER` (``/lib64`` must not
appear in the tree: ``mkinitramfs`` links every ``/lib*`` it finds into the initramfs):

- ``bin/``: :data:`TOOLS` (coreutils, sed, grep, findutils, tar, dash, three of dpkg's
  helpers), and perl (see "Interpreters from the lockfile" below; else the host's when it is
  the tree's version: perl then reads the tree's own pure-Perl modules, and its XS modules from
  copies of ``perl-base`` and ``perl/<version>`` put beside the libraries). The essential hook
  ``native-tools.essential-hook`` binds each over the tree's own program after the Essential
  packages are installed (dpkg never replaces those programs afterwards), and the library
  directory at ``/lib/x86_64-linux-gnu`` (absent from an arm64 tree).
- ``late/``: :data:`LATE_TOOLS`, installed after the Essential set (``zstd`` compresses the
  initramfs; python3.X from the lockfile's .debs), and ``applets/``: :data:`APPLETS`, the
  host's kmod as ``modinfo``, which ``mkinitramfs`` asks about every module. The customize hook
  ``native-tools-late.customize-hook`` binds them first among the customize hooks (before the
  batched ``py3compile`` and the initramfs): the applet's symlink to the tree's kmod is renamed
  aside (its mtime kept) and a file put in its place for the bind, because ``mkinitramfs``
  copies ``kmod`` itself, and ``modprobe`` as it is, into every initramfs: they stay the
  tree's own.

``native-tools-off.customize-hook`` unbinds everything in reverse after the initramfs is
built, before the tarball, puts the applets' symlinks back and removes the library directory.
Never bound: ``uname``, ``arch`` and ``nproc`` (they would name the host), ``kmod`` itself,
a python not from the lockfile and everything not named here. :func:`check_none_left`
proves it for each build: no file of the tarball, and none inside an initramfs in it, is one of
the host's programs or libraries.

Interpreters from the lockfile: where the lockfile also pins the tree's own versions of
``perl-base`` and of ``python3.X-minimal`` for amd64 (a recipe whose matrix has both arches:
the default one), with the libraries they load (:func:`nvkr.nativedebs.wanted_debs`), those
amd64 .debs are an input of the action (:meth:`nvkr.lock.Resolver.locked_debs`) and their perl
and python run natively: perl for debconf, ``deb-systemd-helper``, ``update-rc.d`` and
``adduser`` in every maintainer script, python for the batched ``py3compile`` (together about
a quarter of an emulated arm64 tree's CPU time). They read the tree's own modules (pure Perl,
the Python standard library: the same files on every arch), and their loader and C library
come from the same .debs (the host's may be older than the programs want), so every native
tool then runs on that C library. Byte-compiled ``.pyc`` files and Perl's outputs do not
depend on the architecture that wrote them (the default recipe's arm64 tree is the same bytes
either way). Without those .debs in the lock, perl runs natively only when the host's is the
tree's version (:func:`interpreters`) and python stays emulated.

Only on an x86-64 host (the CI runners, most build machines); elsewhere a foreign tree stays
wholly emulated, as before. The versions of the host packages the tools come from are in the
action key (:func:`tool_versions`), and the digest of the .debs' manifest in its inputs.
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
from typing import Any

import zstandard

from nvkr.elf import set_interpreter
from nvkr.errors import IntegrityError, ToolError
from nvkr.hosttools import package_version
from nvkr.nativedebs import LIBC, PERL_DEBS, PYTHON_LIBS
from nvkr.nativedebs import LIBPERL as _LIBPERL
from nvkr.nativedebs import PYTHON_MINIMAL as _PYTHON_MINIMAL
from nvkr.nativedebs import python_package as _python
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
    # dpkg-deb extracts each package's control member with tar; the shell of every script
    "tar", "test", "[", "dash",
)  # fmt: skip
#: Installed after the Essential set; bound by the late customize hook, before the initramfs.
LATE_TOOLS = ("zstd",)
#: Symlinks to a multi-call program that ``mkinitramfs`` starts (``modinfo``, for every module),
#: and that program: each symlink is set aside while the host's program is bound in its place.
#: Not ``modprobe``: the kmod hook copies ``/sbin/modprobe`` into the initramfs as it is.
APPLETS = {"modinfo": "kmod"}
#: The Debian packages those programs and their libc come from: named in the action key.
PACKAGES = ("coreutils", "sed", "grep", "findutils", "dpkg", "tar", "dash", "zstd", "kmod", "libc6")
#: perl runs natively when the tree's ``perl-base`` has the host's upstream version; the host
#: directories of its XS and base modules (under ``/usr/lib/x86_64-linux-gnu``) are copied
#: beside the libraries, where it looks for them.
PERL_PACKAGE = "perl-base"
PERL_DIRS = ("perl-base", "perl")
_HOST_LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
#: Where a copied program finds its loader inside the tree (fits ``/lib64/ld-linux-x86-64.so.2``'s
#: PT_INTERP segment), and the directory the loader searches for libraries by default.
LOADER = "/lib/x86_64-linux-gnu/ld.so"
_HOST_LOADER = Path("/lib64/ld-linux-x86-64.so.2")
_LDD_LINE = re.compile(r"=>\s+(/\S+)\s+\(")


def supported() -> bool:
    """Whether this host can run its tools in a foreign tree (an x86-64 Linux host)."""
    return platform.machine() == "x86_64" and _HOST_LOADER.exists()


def _upstream(version: str) -> str:
    """The upstream part of a Debian version: ``1:5.36.0-7+deb12u4`` gives ``5.36.0``."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def interpreters(
    packages: list[dict[str, Any]], debs: list[dict[str, Any]] | None = None
) -> tuple[str, ...]:
    """The interpreters that run natively in a tree of the locked ``packages``, given the
    lockfile's amd64 ``debs`` (:func:`nvkr.nativedebs.wanted_debs`, as the plan found them; none: the lock has
    no such entry): ``perl`` when the .debs hold perl-base, libcrypt1 and libc6 at the tree's
    versions, else when the tree's ``perl-base`` has the host's upstream version (the host's
    perl then reads the tree's pure-Perl modules, written for that version) and the host has
    perl's XS module directories (``perl``, as Debian's ``perl`` package installs it); and
    ``python3.X`` when the .debs hold the tree's python3.X-minimal, libexpat1, zlib1g and
    libc6."""
    locked = {str(p.get("name")): str(p.get("version")) for p in packages}
    native = {str(p.get("name")): str(p.get("version")) for p in debs or ()}

    def from_debs(names: list[str]) -> bool:
        return all(n in locked and native.get(n) == locked[n] for n in [*names, LIBC])

    found: list[str] = []
    libperl = [n for n in locked if _LIBPERL.fullmatch(n)]
    host_perl = not native and _host_perl(locked.get(PERL_PACKAGE))  # no .debs: the host's
    if from_debs([*PERL_DEBS, *libperl]) or host_perl:
        found.append("perl")
    python = _python(locked)
    if python is not None and from_debs([python, *PYTHON_LIBS]):
        found.append(_PYTHON_MINIMAL.sub(r"python\1", python))
    return tuple(found)


def _host_perl(tree: str | None) -> bool:
    """Whether the host's perl runs in a tree whose perl-base is at version ``tree``."""
    try:
        host = package_version(PERL_PACKAGE, purpose="a foreign-architecture rootfs")
    except ToolError:
        return False
    dirs = all((_HOST_LIBDIR / sub).is_dir() for sub in PERL_DIRS)
    return tree is not None and _upstream(tree) == _upstream(host) and dirs


def tool_versions(interpreters: tuple[str, ...] = (), *, from_debs: bool = False) -> dict[str, str]:
    """The host packages of :data:`PACKAGES`, and of the host's native perl, by name, for the
    action key; ``from_debs``: the interpreters, the loader and libc6 come from the lockfile's
    .debs (their digests are the action's input), so neither the host's perl-base nor its libc6
    is named."""
    names = [p for p in PACKAGES if not (from_debs and p == LIBC)]
    if "perl" in interpreters and not from_debs:
        names.append(PERL_PACKAGE)
    return {
        f"native-{p}": package_version(p, purpose="a foreign-architecture rootfs") for p in names
    }


def prepare(dest: Path, interpreters: tuple[str, ...] = (), debs: list[Path] | None = None) -> Path:
    """The native tools in ``dest/bin`` (with perl), ``dest/late`` (with python3.X) and
    ``dest/applets`` (each program's interpreter rewritten to :data:`LOADER`), and the libraries
    they load, with the loader as ``ld.so`` (and perl's module directories), in ``dest/lib``.
    ``debs``: the lockfile's amd64 .debs (:func:`nvkr.nativedebs.wanted_debs`): the interpreters, the loader
    and the libraries they hold come from them, over the host's. Returns ``dest``."""
    libdir = dest / "lib"
    libdir.mkdir(parents=True)
    libs: dict[str, Path] = {}
    host = [i for i in interpreters if i == "perl" and not debs]
    groups = {
        "bin": {name: name for name in [*TOOLS, *host]},
        "late": {name: name for name in LATE_TOOLS},
        "applets": APPLETS,
    }
    for group, names in groups.items():
        (dest / group).mkdir()
        for name, program in names.items():
            found = shutil.which(program, path="/usr/bin:/bin")
            if found is None:
                raise IntegrityError(f"host tool {program} not found in /usr/bin or /bin")
            _copy_program(Path(found), dest / group / name)
            out = run(["ldd", found]).stdout.decode()
            for match in _LDD_LINE.finditer(out):
                libs[Path(match.group(1)).name] = Path(match.group(1)).resolve()
    for soname, path in sorted(libs.items()):
        shutil.copyfile(path, libdir / soname)
    loader = _HOST_LOADER.resolve()
    if debs:
        loader = _from_debs(dest, libdir, interpreters, debs)
    elif "perl" in interpreters:
        for sub in PERL_DIRS:
            shutil.copytree(_HOST_LIBDIR / sub, libdir / sub, symlinks=True)
    shutil.copyfile(loader, libdir / "ld.so")
    (libdir / "ld.so").chmod(0o755)
    return dest


def _copy_program(found: Path, copy: Path) -> None:
    shutil.copyfile(found, copy)
    copy.chmod(0o755)
    set_interpreter(copy, LOADER)


def _from_debs(dest: Path, libdir: Path, interpreters: tuple[str, ...], debs: list[Path]) -> Path:
    """The .debs unpacked beside ``dest``; their libraries copied into ``libdir`` (over the
    host's), perl's module directories beside them, perl into ``dest/bin`` and python3.X into
    ``dest/late``. Returns their loader."""
    root = dest.parent / f"{dest.name}-debs"
    root.mkdir()
    for deb in debs:
        run(["dpkg-deb", "--extract", str(deb), str(root)])
    multiarch = root / "usr/lib/x86_64-linux-gnu"
    for path in sorted(multiarch.iterdir()):
        if ".so" in path.name and path.resolve().is_file():
            shutil.copyfile(path.resolve(), libdir / path.name)
    for sub in PERL_DIRS:
        if (multiarch / sub).is_dir():
            shutil.copytree(multiarch / sub, libdir / sub, symlinks=True)
    for name in interpreters:
        program = root / "usr/bin" / name
        if not program.is_file():
            raise IntegrityError(
                f"the lockfile's .debs for the native tools hold no /usr/bin/{name}"
            )
        _copy_program(program, dest / ("bin" if name == "perl" else "late") / name)
    loader = multiarch / _HOST_LOADER.name
    if not loader.is_file():
        raise IntegrityError(f"the lockfile's {LIBC} .deb holds no {loader.relative_to(root)}")
    return loader


def check_none_left(tarball: Path, native: Path) -> None:
    """Fails when a file of ``tarball`` (mmdebstrap's output), or of an initramfs in its
    ``boot/``, has the bytes of a program or library in ``native`` (every ELF file under it,
    perl's XS modules too; its pure-Perl modules may equal the tree's own): a host binary
    copied into the image while it was bound over the tree's own.

    Raises:
        IntegrityError: names the file (and the initramfs holding it).
    """
    digests: dict[int, dict[str, str]] = {}
    for path in sorted(native.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if data[:4] != b"\x7fELF":
            continue
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
            "nvkr.builders.rootfs.native's tools",
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
