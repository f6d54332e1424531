"""The host tools a foreign tree runs natively while it is built (nvkr.builders.rootfs.native):
the copies run from the tree's loader path, and a tarball or initramfs holding one is refused."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import zstandard

from nvkr.builders.rootfs import native
from nvkr.elf import read_elf
from nvkr.errors import IntegrityError

pytestmark = pytest.mark.skipif(not native.supported(), reason="an x86-64 host only")


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return native.prepare(tmp_path_factory.mktemp("native") / "native")


def test_every_tool_is_copied_with_the_trees_loader_path_and_the_libraries_it_loads(
    tools: Path,
) -> None:
    assert sorted(p.name for p in (tools / "bin").iterdir()) == sorted(native.TOOLS)
    for name in native.TOOLS:
        assert read_elf(tools / "bin" / name).interpreter == native.LOADER, name
    libs = {p.name for p in (tools / "lib").iterdir()}
    assert {"ld.so", "libc.so.6", "libselinux.so.1", "libacl.so.1"} <= libs
    assert not {"uname", "arch", "kmod"} & set(native.TOOLS), "they name the host or are copied"


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


def test_an_initramfs_compressed_otherwise_is_an_error_not_a_pass(
    tools: Path, tmp_path: Path
) -> None:
    tar = _tarball(tmp_path, {"boot/initrd.img-6.1.0-57-arm64": b"\x04\x22\x4d\x18lz4 data"})
    with pytest.raises(IntegrityError, match="cannot be checked"):
        native.check_none_left(tar, tools)


def _listing(root: Path) -> list[tuple[str, int, bytes]]:
    return sorted(
        (str(p.relative_to(root)), p.lstat().st_mode, b"" if p.is_dir() else p.read_bytes())
        for p in root.rglob("*")
        if not p.is_symlink()
    )


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
    for name in ("cp", "sed", "uname"):
        (root / "usr" / "bin" / name).write_bytes(f"the tree's own {name}".encode())
    native_dir = tmp_path / "native"
    shutil.copytree(tools, native_dir)
    before = _listing(root)
    script = (
        f"{ASSETS / 'native-tools.essential-hook'} {root} {native_dir} && "
        f"cmp -s {native_dir / 'bin' / 'cp'} {root / 'usr/bin/cp'} && echo cp-bound && "
        f"test -f {root / 'usr/lib/x86_64-linux-gnu/ld.so'} && echo libs-bound && "
        f"grep -q 'own uname' {root / 'usr/bin/uname'} && echo uname-own && "
        f"{ASSETS / 'native-tools-off.customize-hook'} {root} {native_dir}"
    )
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("mount namespaces need root here")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["cp-bound", "libs-bound", "uname-own"]
    bound = (native_dir / "bound").read_text().split()
    assert bound[0] == f"{root}/lib/x86_64-linux-gnu" and f"{root}/usr/bin/sed" in bound
    assert _listing(root) == before


def test_a_foreign_tree_names_the_host_packages_of_its_native_tools_in_the_key() -> None:
    """The arm64 tree's key names the coreutils, sed, grep, findutils and libc6 the build host
    binds into it (their versions from dpkg's status); the native amd64 tree's does not."""
    from types import SimpleNamespace
    from typing import cast

    from nvkr.builders import ResolvedSource
    from nvkr.builders.rootfs import builder as rootfs
    from nvkr.builders.rootfs.artifact import RootfsArtifact
    from nvkr.hosttools import package_version
    from nvkr.recipe import Variant
    from nvkr.recipe.models import AptSource

    def tools(arch: str) -> dict[str, str]:
        spec = AptSource.model_validate(
            {
                "apt": {"debian": {"url": "http://deb.debian.org/debian", "suite": "bookworm"}},
                "arch": arch,
                "packages": {"systemd": "252.39-1~deb12u2"},
            }
        )
        entry = {"digest": "sha256:" + "3" * 64, "packages": [{"name": "systemd"}]}
        src = ResolvedSource(name="pkgs", spec=spec, entry=entry, base_dir=Path("."))
        refs = SimpleNamespace(source=lambda name: src)
        art = RootfsArtifact.model_validate({"builder": "rootfs", "packages": "pkgs"})
        variant = cast(Variant, SimpleNamespace(arch=arch))
        planned = rootfs.RootfsBuilder().plan("rootfs", art, variant, refs)  # type: ignore[arg-type]
        return dict(planned.tools)

    assert set(tools("amd64")) == {"mmdebstrap"}
    foreign = tools("arm64")
    assert foreign == {
        "mmdebstrap": package_version("mmdebstrap", purpose="t"),
        **{f"native-{p}": package_version(p, purpose="t") for p in native.PACKAGES},
    }
