"""A foreign tree's packages with their data member decompressed (nvkr.builders.rootfs.debs):
real .debs made by dpkg-deb, read back by dpkg-deb."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nvkr.builders.rootfs.debs import decompress_data_member
from nvkr.errors import IntegrityError

pytestmark = pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="dpkg-deb missing")


def _deb(tmp_path: Path, compression: str) -> Path:
    """A package with a setuid file, a symlink, a hard link, an empty dir and an odd-sized
    member, built by dpkg-deb with ``compression``."""
    root = tmp_path / f"pkg-{compression}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(
        "Package: nvkr-probe\nVersion: 1.0-1\nArchitecture: arm64\n"
        "Maintainer: nvkr tests <tests@nvkr.invalid>\nDescription: probe\n"
    )
    (root / "DEBIAN" / "postinst").write_text("#!/bin/sh\nexit 0\n")
    (root / "DEBIAN" / "postinst").chmod(0o755)
    bin_dir = root / "usr" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "probe").write_bytes(bytes(range(256)) * 4001)
    (bin_dir / "probe").chmod(0o4755)
    (bin_dir / "probe-link").symlink_to("probe")
    (bin_dir / "probe-hard").hardlink_to(bin_dir / "probe")
    (root / "var" / "lib" / "probe").mkdir(parents=True)
    out = tmp_path / f"probe-{compression}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", f"-Z{compression}", "-b", str(root), str(out)],
        check=True,
        capture_output=True,
    )
    return out


def _dpkg_deb(*args: str | Path) -> bytes:
    return subprocess.run(["dpkg-deb", *map(str, args)], check=True, capture_output=True).stdout


def _members(deb: Path) -> list[str]:
    ar = subprocess.run(["ar", "t", str(deb)], check=True, capture_output=True, text=True)
    return ar.stdout.split()


@pytest.mark.parametrize("compression", ["xz", "gzip"])
def test_the_data_member_is_the_same_tar_stream_uncompressed(tmp_path, compression):
    src = _deb(tmp_path, compression)
    dest = tmp_path / "out.deb"
    assert decompress_data_member(src, dest) is True
    control = "control.tar.xz" if compression == "xz" else "control.tar.gz"
    assert _members(src) == ["debian-binary", control, f"data.tar.{compression[:2]}"]
    assert _members(dest) == ["debian-binary", control, "data.tar"]
    assert _dpkg_deb("--fsys-tarfile", dest) == _dpkg_deb("--fsys-tarfile", src)
    assert _dpkg_deb("--field", dest) == _dpkg_deb("--field", src)
    assert _dpkg_deb("--contents", dest) == _dpkg_deb("--contents", src)
    assert dest.stat().st_size > src.stat().st_size  # uncompressed
    # dpkg-deb's own check of the archive's structure, and a full extraction
    _dpkg_deb("--info", dest)
    _dpkg_deb("--extract", dest, tmp_path / "tree")
    assert (tmp_path / "tree" / "usr" / "bin" / "probe").stat().st_mode & 0o4000


def test_an_uncompressed_or_zstd_data_member_is_copied_unchanged(tmp_path):
    for compression in ("none", "zstd"):
        src = _deb(tmp_path, compression)
        dest = tmp_path / f"out-{compression}.deb"
        assert decompress_data_member(src, dest) is False
        assert dest.read_bytes() == src.read_bytes()


def test_not_a_deb_or_a_truncated_one_is_an_integrity_error(tmp_path):
    junk = tmp_path / "junk.deb"
    junk.write_bytes(b"PK\x03\x04 not an ar archive")
    with pytest.raises(IntegrityError, match=r"junk\.deb: not a deb\(5\) ar archive"):
        decompress_data_member(junk, tmp_path / "out.deb")
    src = _deb(tmp_path, "xz")
    cut = tmp_path / "cut.deb"
    cut.write_bytes(src.read_bytes()[:-200])
    with pytest.raises(IntegrityError, match=r"cut\.deb"):
        decompress_data_member(cut, tmp_path / "out2.deb")
