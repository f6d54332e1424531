"""The host tools a foreign tree runs natively while it is built (nvkr.builders.rootfs.native):
the copies run from the tree's loader path, and a tarball or initramfs holding one is refused."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from nvkr.builders.rootfs import native
from nvkr.elf import read_elf
from nvkr.errors import IntegrityError
from nvkr.nativedebs import wanted_debs
from tests.helpers import lock_entry

pytestmark = pytest.mark.skipif(not native.supported(), reason="an x86-64 host only")


def deb(name: str, version: str) -> dict[str, object]:
    """A locked .deb of ``name`` at ``version``, as an apt lock entry lists it."""
    return {
        "name": name,
        "version": version,
        "arch": "amd64",
        "repository": "debian",
        "url": f"http://deb.debian.org/debian/{name}.deb",
        "filename": f"{name}.deb",
        "size": 1,
        "sha256": "sha256:" + "5" * 64,
    }


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native.prepare(tmp_path_factory.mktemp("native") / "native", ("perl",))


def test_every_tool_is_copied_with_the_trees_loader_path_and_the_libraries_it_loads(
    tools: Path,
) -> None:
    assert sorted(p.name for p in (tools / "bin").iterdir()) == sorted([*native.TOOLS, "perl"])
    assert sorted(p.name for p in (tools / "late").iterdir()) == sorted(native.LATE_TOOLS)
    assert sorted(p.name for p in (tools / "applets").iterdir()) == sorted(native.APPLETS)
    for path in [*(tools / "bin").iterdir(), *(tools / "late").iterdir()]:
        assert read_elf(path).interpreter == native.LOADER, path.name
    assert read_elf(tools / "applets" / "modinfo").interpreter == native.LOADER
    libs = {p.name for p in (tools / "lib").iterdir()}
    assert {"ld.so", "libc.so.6", "libselinux.so.1", "libacl.so.1", "libzstd.so.1"} <= libs
    # perl's XS and base modules where the host's perl looks for them (its @INC)
    assert (tools / "lib" / "perl-base" / "strict.pm").is_file()
    assert any((tools / "lib" / "perl-base" / "auto").rglob("*.so"))
    every = {*native.TOOLS, *native.LATE_TOOLS}
    assert not {"uname", "arch", "nproc", "kmod", "python3"} & every, (
        "they name the host or are copied"
    )
    assert "modprobe" not in native.APPLETS, "the kmod hook copies /sbin/modprobe as it is"


def test_a_host_perl_runs_where_the_tree_puts_it(tools: Path, tmp_path: Path) -> None:
    """The host's perl at /usr/bin/perl of a root holding the libraries at the loader's
    directory finds its XS modules there (POSIX, List::Util)."""
    script = "use POSIX (); use List::Util qw(sum); print sum(1, 2), POSIX::floor(2.5), qq(\\n);"
    proc = _perl_in_root(tools, tmp_path / "root", script)
    assert (proc.returncode, proc.stdout) == (0, "32\n"), proc.stderr


def _perl_in_root(tools: Path, root: Path, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by the prepared perl at /usr/bin/perl of ``root``, a root holding the
    libraries at the loader's directory, chrooted (the test skips where chroot needs root)."""
    shutil.copytree(tools / "lib", root / "usr" / "lib" / "x86_64-linux-gnu", symlinks=True)
    (root / "lib").symlink_to("usr/lib")
    (root / "usr" / "bin").mkdir()
    shutil.copyfile(tools / "bin" / "perl", root / "usr" / "bin" / "perl")
    (root / "usr" / "bin" / "perl").chmod(0o755)
    (root / "t.pl").write_text(script)  # not -e: perl opens /dev/null for it
    proc = subprocess.run(
        ["chroot", str(root), "/usr/bin/perl", "/t.pl"],
        capture_output=True, text=True, env={"LC_ALL": "C", "PATH": os.environ["PATH"]},
    )  # fmt: skip
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("chroot needs root")
    return proc


def test_perl_runs_natively_only_for_the_hosts_upstream_version() -> None:
    """The host's perl reads the tree's pure-Perl modules: only those of its own version."""
    from nvkr.hosttools import package_version

    host = package_version("perl-base", purpose="t")
    upstream = host.split(":", 1)[-1].rsplit("-", 1)[0]
    assert native.interpreters([{"name": "perl-base", "version": f"{upstream}-99+nvkr1"}]) == (
        "perl",
    )
    assert native.interpreters([{"name": "perl-base", "version": "9.99.0-1"}]) == ()
    assert native.interpreters([{"name": "systemd", "version": "257.13-1~deb13u1"}]) == ()


def test_a_copy_runs_where_the_tree_puts_its_loader(tools: Path, tmp_path: Path) -> None:
    """The loader at LOADER's path in a root of its own (what the essential hook binds), and a
    copied tool started by it from its path in that root: it finds its libraries there."""
    root = tmp_path / "root"
    shutil.copytree(tools / "lib", root / "lib" / "x86_64-linux-gnu")
    shutil.copytree(tools / "bin", root / "bin")
    proc = subprocess.run(
        ["chroot", str(root), "/bin/realpath", "-ms", "/a/../b//c"],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("chroot needs root")
    assert (proc.returncode, proc.stdout) == (0, "/b/c\n"), proc.stderr


def _tarball(tmp_path: Path, files: dict[str, bytes]) -> Path:
    out = tmp_path / "rootfs.tar"
    with tarfile.open(out, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo("./" + name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def _newc(files: dict[str, bytes]) -> bytes:
    out = b""
    for i, (name, data) in enumerate([*files.items(), ("TRAILER!!!", b"")]):
        raw = name.encode() + b"\0"
        fields = [i + 1, 0o100644, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0]
        head = b"070701" + b"".join(b"%08X" % f for f in fields) + raw
        out += head.ljust((len(head) + 3) & ~3, b"\0") + data.ljust((len(data) + 3) & ~3, b"\0")
    return out


def test_a_tree_without_host_files_passes(tools: Path, tmp_path: Path) -> None:
    initrd = _newc({"early/x": b"microcode"}) + zstandard.ZstdCompressor().compress(
        _newc({"usr/bin/kmod": b"the tree's own kmod", "init": b"#!/bin/sh\n"})
    )
    tar = _tarball(tmp_path, {"usr/bin/cp": b"arm64 cp", "boot/initrd.img-6.1.0-57-arm64": initrd})
    native.check_none_left(tar, tools)


@pytest.mark.parametrize("compress", ["zstd", "gzip"])
def test_a_host_tool_inside_an_initramfs_is_named(
    tools: Path, tmp_path: Path, compress: str
) -> None:
    host_cp = (tools / "bin" / "cp").read_bytes()
    inner = _newc({"usr/bin/cp": host_cp})
    packed = (
        zstandard.ZstdCompressor().compress(inner) if compress == "zstd" else gzip.compress(inner)
    )
    tar = _tarball(tmp_path, {"boot/initrd.img-6.1.0-57-arm64": _newc({"a": b"b"}) + packed})
    with pytest.raises(IntegrityError, match=r"/usr/bin/cp in /boot/initrd.img-6.1.0-57-arm64 "
                       r"is the build host's cp"):  # fmt: skip
        native.check_none_left(tar, tools)


def test_a_host_library_anywhere_in_the_tree_is_named(tools: Path, tmp_path: Path) -> None:
    libc = (tools / "lib" / "libc.so.6").read_bytes()
    tar = _tarball(tmp_path, {"opt/vendor/libc.so.6": libc})
    with pytest.raises(IntegrityError, match=r"/opt/vendor/libc.so.6 is the build host's libc"):
        native.check_none_left(tar, tools)


def test_a_host_perl_xs_module_is_named_and_its_pure_perl_modules_are_not(
    tools: Path, tmp_path: Path
) -> None:
    """perl's XS modules are host binaries like the programs; a pure-Perl module may have the
    same bytes as the tree's own copy of that version, and is not one."""
    xs = sorted((tools / "lib" / "perl-base" / "auto").rglob("*.so"))[0]
    pm = (tools / "lib" / "perl-base" / "strict.pm").read_bytes()
    native.check_none_left(_tarball(tmp_path, {"usr/share/perl/5/strict.pm": pm}), tools)
    tar = _tarball(tmp_path, {"usr/lib/aarch64-linux-gnu/perl-base/x.so": xs.read_bytes()})
    with pytest.raises(IntegrityError, match=rf"x.so is the build host's {xs.name}"):
        native.check_none_left(tar, tools)


def test_an_applet_copied_into_an_initramfs_is_named(tools: Path, tmp_path: Path) -> None:
    """What the first try of kmod's applets showed: the kmod hook copies /sbin/modprobe into
    the initramfs as it is, so a bound applet would ship the host's kmod."""
    host_kmod = (tools / "applets" / "modinfo").read_bytes()
    packed = zstandard.ZstdCompressor().compress(_newc({"usr/sbin/modinfo": host_kmod}))
    tar = _tarball(tmp_path, {"boot/initrd.img-6.1.0-57-arm64": packed})
    with pytest.raises(IntegrityError, match=r"/usr/sbin/modinfo in /boot/initrd.img"):
        native.check_none_left(tar, tools)


def test_an_initramfs_compressed_otherwise_is_an_error_not_a_pass(
    tools: Path, tmp_path: Path
) -> None:
    tar = _tarball(tmp_path, {"boot/initrd.img-6.1.0-57-arm64": b"\x04\x22\x4d\x18lz4 data"})
    with pytest.raises(IntegrityError, match="cannot be checked"):
        native.check_none_left(tar, tools)


def _listing(root: Path) -> list[tuple[str, int, bytes, int]]:
    """Each entry's path, mode, content (a symlink's target) and, for files and symlinks, its
    mtime (a directory's is clamped to SOURCE_DATE_EPOCH in the tarball)."""
    out = []
    for p in root.rglob("*"):
        st = p.lstat()
        if p.is_symlink():
            out.append(
                (str(p.relative_to(root)), st.st_mode, str(p.readlink()).encode(), st.st_mtime_ns)
            )
        elif p.is_dir():
            out.append((str(p.relative_to(root)), st.st_mode, b"", 0))
        else:
            out.append((str(p.relative_to(root)), st.st_mode, p.read_bytes(), st.st_mtime_ns))
    return sorted(out)


def test_the_hooks_bind_the_tools_in_and_leave_the_tree_as_it_was(
    tools: Path, tmp_path: Path
) -> None:
    """The essential hook binds each tool the tree has over the tree's own and the libraries at
    the loader's directory; the customize hook unbinds them all and removes that directory: the
    tree is byte for byte what it was (run in a mount namespace of its own, as mmdebstrap's)."""
    from nvkr.builders.rootfs.builder import ASSETS

    root = tmp_path / "tree"
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "lib").mkdir()
    (root / "lib").symlink_to("usr/lib")
    (root / "bin").symlink_to("usr/bin")
    (root / "usr" / "sbin").mkdir()
    (root / "sbin").symlink_to("usr/sbin")
    for name in ("cp", "sed", "uname", "kmod", "zstd"):
        (root / "usr" / "bin" / name).write_bytes(f"the tree's own {name}".encode())
    for name in ("modinfo", "modprobe"):
        (root / "usr" / "sbin" / name).symlink_to("/bin/kmod")
        os.utime(root / "usr" / "sbin" / name, (1670630520, 1670630520), follow_symlinks=False)
    native_dir = tmp_path / "native"
    shutil.copytree(tools, native_dir, symlinks=True)
    before = _listing(root)
    late = (
        f"{ASSETS / 'native-tools-late.customize-hook'} {root} {native_dir} && "
        f"cmp -s {native_dir / 'late' / 'zstd'} {root / 'usr/bin/zstd'} && echo zstd-bound && "
        f"cmp -s {native_dir / 'applets' / 'modinfo'} {root / 'sbin/modinfo'} && echo modinfo && "
        f"test -L {root / 'sbin/modprobe'} && grep -q 'own kmod' {root / 'usr/bin/kmod'} && "
        "echo kmod-own && "
    )
    script = (
        f"{ASSETS / 'native-tools.essential-hook'} {root} {native_dir} && "
        f"cmp -s {native_dir / 'bin' / 'cp'} {root / 'usr/bin/cp'} && echo cp-bound && "
        f"test -f {root / 'usr/lib/x86_64-linux-gnu/ld.so'} && echo libs-bound && "
        f"grep -q 'own uname' {root / 'usr/bin/uname'} && echo uname-own && "
        f"{late}"
        f"{ASSETS / 'native-tools-off.customize-hook'} {root} {native_dir}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("mount namespaces need root here")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "cp-bound", "libs-bound", "uname-own", "zstd-bound", "modinfo", "kmod-own"
    ]  # fmt: skip
    bound = (native_dir / "bound").read_text().split()
    assert bound[0] == f"{root}/lib/x86_64-linux-gnu" and f"{root}/usr/bin/sed" in bound
    assert _listing(root) == before


def test_a_foreign_tree_names_the_host_packages_of_its_native_tools_in_the_key() -> None:
    """The arm64 tree's key names the packages of the tools the build host binds into it
    (coreutils, sed, ..., libc6; perl-base when its perl runs: their versions from dpkg's
    status) and the CPU qemu-user emulates; the native amd64 tree's does neither."""
    from types import SimpleNamespace
    from typing import cast
    from unittest.mock import ANY

    from nvkr.builders.api import ResolvedSource
    from nvkr.builders.rootfs import builder as rootfs
    from nvkr.builders.rootfs.artifact import RootfsArtifact
    from nvkr.hosttools import package_version
    from nvkr.recipe.matrix import Variant
    from nvkr.recipe.sources import AptSource

    def tools(arch: str, *locked: dict[str, str]) -> dict[str, str]:
        spec = AptSource.model_validate(
            {
                "apt": {"debian": {"url": "http://deb.debian.org/debian", "suite": "bookworm"}},
                "arch": arch,
                "packages": {"systemd": "252.39-1~deb12u2"},
            }
        )
        packages = [{"name": "systemd", "version": "252.39-1~deb12u2"}, *locked]
        entry = lock_entry(
            {
                "kind": "apt",
                "arch": arch,
                "digest": "sha256:" + "3" * 64,
                "packages": [{**deb(p["name"], p["version"]), "arch": arch} for p in packages],
            }
        )
        src = ResolvedSource(name="pkgs", spec=spec, entry=entry, base_dir=Path("."))
        refs = SimpleNamespace(source=lambda name: src, locked_debs=lambda *args: None)
        art = RootfsArtifact.model_validate({"builder": "rootfs", "packages": "pkgs"})
        variant = cast(Variant, SimpleNamespace(arch=arch))
        planned = rootfs.RootfsBuilder().plan("rootfs", art, variant, refs)  # type: ignore[arg-type]
        return dict(planned.tools)

    assert set(tools("amd64")) == {"mmdebstrap"}
    foreign = tools("arm64")
    assert foreign == {
        "mmdebstrap": package_version("mmdebstrap", purpose="t"),
        **{f"native-{p}": package_version(p, purpose="t") for p in native.PACKAGES},
        "qemu-cpu": rootfs.QEMU_CPU["arm64"],
    }
    # a tree whose perl is the host's version runs the host's perl: its package is named too
    host_perl = package_version("perl-base", purpose="t")
    perl = tools("arm64", {"name": "perl-base", "version": host_perl})
    assert perl == {**foreign, "native-perl-base": host_perl}
    assert tools("amd64", {"name": "perl-base", "version": host_perl}) == {"mmdebstrap": ANY}


# -- interpreters from the lockfile's amd64 .debs ----------------------------------------------
#: A tree's locked packages: its perl and python, the libraries they load, and others.
TREE = [
    {"name": "perl-base", "version": "5.40.1-6+deb13u1"},
    {"name": "libcrypt1", "version": "1:4.4.38-1"},
    {"name": "libc6", "version": "2.41-12+deb13u5"},
    {"name": "python3.13-minimal", "version": "3.13.5-2+deb13u5"},
    {"name": "libexpat1", "version": "2.9.0-1~deb13u1"},
    {"name": "zlib1g", "version": "1:1.3.dfsg+really1.3.1-1+deb13u1"},
    {"name": "systemd", "version": "257.13-1~deb13u1"},
]


def test_the_trees_perl_and_python_are_wanted_from_the_lock_at_its_versions() -> None:
    """Each program's package and the libraries it loads, at the tree's own versions; only
    what the tree holds (its libperl when it has one); nothing without perl-base."""
    versions = {p["name"]: p["version"] for p in TREE}
    assert wanted_debs(TREE) == {n: v for n, v in versions.items() if n != "systemd"}
    no_python = [p for p in TREE if not p["name"].startswith("python")]
    assert set(wanted_debs(no_python)) == {"perl-base", "libcrypt1", "libc6"}
    libperl = {"name": "libperl5.40", "version": "5.40.1-6+deb13u1"}
    assert wanted_debs([*TREE, libperl])["libperl5.40"] == libperl["version"]
    assert wanted_debs([p for p in TREE if p["name"] != "perl-base"]) == {}


def test_interpreters_run_from_the_debs_only_at_the_trees_versions() -> None:
    """perl and python3.13 from .debs of the tree's versions; a libc6 of another version
    takes both away, and with .debs given the host's perl is never the fallback (the tools
    then run on the .debs' C library)."""
    debs = [deb(p["name"], p["version"]) for p in TREE if p["name"] != "systemd"]
    assert native.interpreters(TREE, debs) == ("perl", "python3.13")
    other_libc = [d if d["name"] != "libc6" else {**d, "version": "2.41-99"} for d in debs]
    assert native.interpreters(TREE, other_libc) == ()
    no_python = [d for d in debs if d["name"] != "python3.13-minimal"]
    assert native.interpreters(TREE, no_python) == ("perl",)
    libperl = {"name": "libperl5.40", "version": "5.40.1-6+deb13u1"}
    assert native.interpreters([*TREE, libperl], debs) == ("python3.13",), "its XS modules"


def _deb(tmp: Path, name: str, files: dict[str, bytes]) -> Path:
    """A .deb of ``files`` (path in the package → bytes), built by dpkg-deb (gzip at its
    fastest level: Debian's .debs are xz, which dpkg-deb unpacks the same way, and xz's default
    level cost the tests seconds of CPU per .deb)."""
    root = tmp / f"{name}-root"
    for path, data in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        (root / path).chmod(0o755)
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@t>\nDescription: t\n"
    )
    out = tmp / f"{name}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "-z1", "--build", str(root),
                    str(out)], check=True, capture_output=True)  # fmt: skip
    return out


def test_the_lockfiles_perl_python_loader_and_libraries_replace_the_hosts(tmp_path: Path) -> None:
    """Given the .debs (made here of the host's files, libcrypt's marked and perl-base
    holding a module of its own): perl goes to bin/ and python3.13 to late/ (bound before
    py3compile), each loading from LOADER; the libraries and the loader are the .debs'; perl's
    module directory is the .deb's, and the perl runs from the tree's paths and reads it."""
    lib = Path("/usr/lib/x86_64-linux-gnu")
    multiarch = "usr/lib/x86_64-linux-gnu"
    marked = (lib / "libcrypt.so.1").resolve().read_bytes() + b"\0nvkr-test-deb"
    modules = {
        f"{multiarch}/perl-base/{p.relative_to(lib / 'perl-base')}": p.read_bytes()
        for p in (lib / "perl-base").rglob("*")
        if p.is_file()
    }
    modules[f"{multiarch}/perl-base/NvkrFromDeb.pm"] = b"package NvkrFromDeb; 1;\n"
    loader = Path("/lib64/ld-linux-x86-64.so.2").resolve().read_bytes()
    debs = [
        _deb(tmp_path, "libc6", {
            f"{multiarch}/ld-linux-x86-64.so.2": loader,
            **{f"{multiarch}/{n}": (lib / n).resolve().read_bytes() for n in ("libc.so.6", "libm.so.6")},
        }),
        _deb(tmp_path, "libcrypt1", {f"{multiarch}/libcrypt.so.1": marked}),
        _deb(tmp_path, "perl-base", {"usr/bin/perl": Path("/usr/bin/perl").read_bytes(), **modules}),
        _deb(tmp_path, "python3.13-minimal", {
            "usr/bin/python3.13": Path("/usr/bin/dash").read_bytes(),  # any program: placed, not run
        }),
    ]  # fmt: skip
    tools = native.prepare(tmp_path / "native", ("perl", "python3.13"), debs)
    assert read_elf(tools / "bin" / "perl").interpreter == native.LOADER
    assert read_elf(tools / "late" / "python3.13").interpreter == native.LOADER
    assert "python3.13" not in {p.name for p in (tools / "bin").iterdir()}
    assert (tools / "lib" / "libcrypt.so.1").read_bytes() == marked
    assert (tools / "lib" / "ld.so").read_bytes() == loader
    assert (tools / "lib" / "perl-base" / "NvkrFromDeb.pm").is_file()

    script = "use NvkrFromDeb; use List::Util qw(sum); print sum(2, 3), qq(\\n);"
    proc = _perl_in_root(tools, tmp_path / "root", script)
    assert (proc.returncode, proc.stdout) == (0, "5\n"), proc.stderr
    # every ELF file of the .debs is checked for in the tarball, as the host's are
    with pytest.raises(IntegrityError, match=r"libcrypt\.so\.1"):
        native.check_none_left(_tarball(tmp_path, {"usr/lib/x.so": marked}), tools)


def test_missing_program_or_loader_in_the_debs_is_named(tmp_path: Path) -> None:
    """.debs that do not hold what the plan said they would: a clear error naming it."""
    empty = _deb(tmp_path, "libc6", {"usr/lib/x86_64-linux-gnu/libc.so.6": b"\x7fELF"})
    with pytest.raises(IntegrityError, match="no /usr/bin/perl"):
        native.prepare(tmp_path / "a" / "native", ("perl",), [empty])
    with pytest.raises(IntegrityError, match=r"ld-linux-x86-64\.so\.2"):
        native.prepare(tmp_path / "b" / "native", (), [empty])


def test_a_foreign_tree_whose_lock_pins_its_interpreters_has_them_as_an_input() -> None:
    """The plan asks the lockfile for the amd64 .debs of the arm64 tree's versions: when it
    pins them, their manifest's digest is an input (and they a source, fetched like any) and
    neither the host's libc6 nor its perl-base is named; when it does not, the key is as
    before."""
    from types import SimpleNamespace
    from typing import cast

    from nvkr.builders.api import ResolvedSource
    from nvkr.builders.rootfs import builder as rootfs
    from nvkr.builders.rootfs.artifact import RootfsArtifact
    from nvkr.recipe.matrix import Variant
    from nvkr.recipe.sources import AptSource

    def source(arch: str, packages: list[dict[str, str]], digest: str) -> ResolvedSource:
        spec = AptSource.model_validate({
            "apt": {"debian": {"url": "http://deb.debian.org/debian", "suite": "trixie"}},
            "arch": arch, "packages": {"systemd": "257.13-1~deb13u1"},
        })  # fmt: skip
        entry = lock_entry({
            "kind": "apt", "arch": arch, "digest": digest,
            "packages": [{**deb(p["name"], p["version"]), "arch": arch} for p in packages],
        })  # fmt: skip
        return ResolvedSource(name="pkgs", spec=spec, entry=entry, base_dir=Path("."))

    tree = source("arm64", TREE, "sha256:" + "3" * 64)
    wanted = [p for p in TREE if p["name"] != "systemd"]
    debs = source("amd64", wanted, "sha256:" + "4" * 64)
    asked: list[tuple[str, str, dict[str, str]]] = []

    def plan(found: ResolvedSource | None) -> object:
        def locked_debs(name: str, arch: str, versions: dict[str, str]) -> ResolvedSource | None:
            asked.append((name, arch, dict(versions)))
            return found

        refs = SimpleNamespace(source=lambda name: tree, locked_debs=locked_debs)
        art = RootfsArtifact.model_validate({"builder": "rootfs", "packages": "pkgs"})
        variant = cast(Variant, SimpleNamespace(arch="arm64"))
        return rootfs.RootfsBuilder().plan("rootfs", art, variant, refs)  # type: ignore[arg-type]

    with_debs, without = plan(debs), plan(None)
    assert asked[0] == ("pkgs", "amd64", {p["name"]: p["version"] for p in wanted})
    assert with_debs.inputs["native-packages"] == debs.digest  # type: ignore[attr-defined]
    assert with_debs.sources["native-packages"] is debs  # type: ignore[attr-defined]
    assert "native-packages" not in without.inputs  # type: ignore[attr-defined]
    assert set(without.tools) - set(with_debs.tools) == {"native-libc6"}  # type: ignore[attr-defined]
    assert "native-perl-base" not in with_debs.tools  # type: ignore[attr-defined]


@pytest.mark.parametrize("damage", ["missing", "changed"])
def test_a_locked_deb_missing_or_changed_in_the_store_is_named(tmp_path: Path, damage: str) -> None:
    """Before mmdebstrap runs, each .deb the action reads (the tree's and the native tools')
    is hashed again: a blob gone or not the lockfile's bytes fails, naming the package."""
    import hashlib
    from types import SimpleNamespace

    from nvkr.builders.rootfs.builder import _locked_deb
    from nvkr.store import Store

    store = Store(tmp_path / "store")
    data = b"!<arch>\nnot really a deb\n"
    digest = store.add_bytes(data).digest
    pkg = {**deb("perl-base", "5.40.1-6+deb13u1"), "sha256": digest}
    ctx = SimpleNamespace(store=store)
    assert _locked_deb(ctx, pkg) == store.blob_path(digest)  # type: ignore[arg-type]
    blob = store.blob_path(digest)
    blob.chmod(0o644)
    if damage == "missing":
        blob.unlink()
        match = r"perl-base 5\.40\.1-6\+deb13u1 \(sha256:\w+\) is not in the store"
    else:
        blob.write_bytes(data + b"x")
        actual = "sha256:" + hashlib.sha256(data + b"x").hexdigest()
        match = rf"perl-base 5\.40\.1-6\+deb13u1 \(amd64\): the store's copy .* hashes to {actual}"
    with pytest.raises(IntegrityError, match=match):
        _locked_deb(ctx, pkg)  # type: ignore[arg-type]
