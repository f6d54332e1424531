"""Deterministic archives and SOURCE_DATE_EPOCH: each primitive of nvkr/repro.py, the one home
of the gzip header, a tar member's header, the sorted walk and mtime clamping, shown whole."""

from __future__ import annotations

import gzip
import io
import os
import tarfile

import pytest

from nvkr.errors import RecipeError, UsageError
from nvkr.repro import (
    EPOCH_MAX,
    clamp_mtime,
    clamp_tree_mtimes,
    extract_tar,
    gzip_bytes,
    gzip_writer,
    normal_mode,
    path_key,
    sorted_tree,
    source_date_epoch,
    tar_bytes,
    tar_member,
    tar_writer,
)


def _tree(root, umask):
    old = os.umask(umask)
    try:
        (root / "b").mkdir(parents=True)
        (root / "b" / "x.sh").write_text("#!/bin/sh\n")
        os.chmod(root / "b" / "x.sh", 0o777 & ~umask)
        (root / "a.txt").write_text("a")
        (root / ".git").mkdir()
        (root / ".git" / "HEAD").write_text("ref")
        os.symlink("a.txt", root / "link")
    finally:
        os.umask(old)


def test_tar_is_identical_across_umask_and_mtimes(tmp_path):
    _tree(tmp_path / "one", 0o022)
    _tree(tmp_path / "two", 0o002)
    os.utime(tmp_path / "two" / "a.txt", (1, 1))
    a = tar_bytes(tmp_path / "one", epoch=1700000000)
    b = tar_bytes(tmp_path / "two", epoch=1700000000)
    assert a == b
    with tarfile.open(fileobj=io.BytesIO(a)) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == ["a.txt", "b", "b/x.sh", "link"]
    assert {m.uid for m in members} == {0} and {m.uname for m in members} == {""}
    assert {m.mtime for m in members} == {1700000000}
    assert [oct(m.mode) for m in members] == ["0o644", "0o755", "0o755", "0o777"]


def test_gzip_header_is_clean():
    data = gzip_bytes(b"x" * 100)
    assert data[4:8] == b"\0\0\0\0", "mtime must be 0"
    assert data[3] & 0x08 == 0, "no file name"
    assert gzip.decompress(data) == b"x" * 100
    assert gzip_bytes(b"x" * 100) == data


def test_the_gzip_writer_header_is_fixed_bytes():
    """RFC 1952: magic, deflate, no flags (no FNAME), MTIME 0, XFL 2 (level 9), OS 255; the
    same 10 bytes for any data, and a stream is byte-identical to :func:`gzip_bytes`."""
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    for data in (b"", b"x" * 100, bytes(range(256)) * 50):
        assert gzip_bytes(data)[:10] == header
        buf = io.BytesIO()
        with gzip_writer(buf) as gz:
            gz.write(data[:7])
            gz.write(data[7:])
        assert buf.getvalue() == gzip_bytes(data)
        assert not buf.closed, "closing the gzip stream leaves its file open"
    assert gzip_bytes(b"x", level=1)[8:9] == b"\x04", "XFL 4: the fastest level, as asked"


def test_a_tar_member_header_is_normalised():
    """uid/gid 0, empty owner names, the integer mtime given, the mode given, no PAX record:
    the 512-byte ustar header is all there is, whoever runs it, under any umask or TZ."""
    buf = io.BytesIO()
    with tar_writer(buf) as tar:
        tar.addfile(
            tar_member("etc/app.conf", mtime=1700000000, mode=0o644, size=2), io.BytesIO(b"hi")
        )
        tar.addfile(tar_member("etc", mtime=5, mode=0o755, kind=tarfile.DIRTYPE))
        tar.addfile(tar_member("l", mtime=5, mode=0o777, kind=tarfile.SYMTYPE, linkname="etc"))
    data = buf.getvalue()
    header = data[:512]
    assert header[156:157] == b"0" and data[1024 + 156 : 1024 + 157] == b"5", "no PAX header block"
    assert len(data) == tarfile.RECORDSIZE, "3 headers, 1 data block, the end, padded to 10 KiB"
    assert header[108:116] == b"0000000\0" and header[116:124] == b"0000000\0", "uid/gid 0"
    assert header[265:297] == b"\0" * 32 and header[297:329] == b"\0" * 32, "no owner names"
    assert header[136:148] == b"14524770400\0", "mtime 1700000000, octal, no fraction"
    assert header[100:108] == b"0000644\0"
    assert header[257:263] == b"ustar\x00", "POSIX ustar magic (PAX format, no PAX record needed)"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = tar.getmembers()
    assert [(m.name, m.type, m.mode, m.mtime, m.linkname) for m in members] == [
        ("etc/app.conf", tarfile.REGTYPE, 0o644, 1700000000, ""),
        ("etc", tarfile.DIRTYPE, 0o755, 5, ""),
        ("l", tarfile.SYMTYPE, 0o777, 5, "etc"),
    ]
    assert all(not m.pax_headers for m in members), "no PAX atime/ctime or other records"
    assert [normal_mode(m) for m in (0o600, 0o100700, 0o040700, 0o664, 0o001)] == [
        0o644,
        0o755,
        0o755,
        0o644,
        0o755,
    ]


def test_the_sorted_walk_orders_by_path_bytes(tmp_path):
    """Directories included, their contents after them, by bytes: uppercase before lowercase,
    ``b-`` (0x2d) before ``b/`` (0x2f), a non-ASCII name by its UTF-8 bytes; excluded
    directories are not entered."""
    for d in ("b/c", "skip/deep", "é"):
        (tmp_path / d).mkdir(parents=True)
    for f in ("a", "B", "b-", "b/x", "b/c/y", "skip/deep/z", "é/f", "z"):
        (tmp_path / f).write_text(f)
    os.symlink("b", tmp_path / "link")
    assert sorted_tree(tmp_path, lambda rel: rel == "skip") == [
        "B", "a", "b", "b-", "b/c", "b/c/y", "b/x", "link", "z", "é", "é/f",
    ]  # fmt: skip
    assert path_key("é") == b"\xc3\xa9" and path_key("b-") < path_key("b/")
    assert "skip/deep/z" in sorted_tree(tmp_path)


def test_clamping_mtimes(tmp_path):
    """Nothing newer than the epoch, nothing before 1970, whole seconds; a tree's newer entries
    (symlinks themselves, the root too) are set to the epoch, older ones keep their time."""
    assert [clamp_mtime(t, 1000) for t in (5000, 999.9, -3, 1000)] == [1000, 999, 0, 1000]
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "new").write_text("x")
    (tree / "old").write_text("y")
    os.utime(tree / "old", (100, 100))
    os.symlink("d/new", tree / "link")
    clamp_tree_mtimes(tree, 1000)
    assert os.lstat(tree / "d" / "new").st_mtime == 1000
    assert os.lstat(tree / "link").st_mtime == 1000
    assert os.lstat(tree / "old").st_mtime == 100, "older files keep their time"
    assert os.lstat(tree).st_mtime == 1000


def test_epoch_order_and_validation(monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    assert source_date_epoch("100", fallback=5) == 100
    assert source_date_epoch(None, fallback=5) == 5
    assert source_date_epoch(None) == 0
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "42")
    assert source_date_epoch("100") == 42
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1.5")
    with pytest.raises(UsageError, match="SOURCE_DATE_EPOCH"):
        source_date_epoch("100")


@pytest.mark.parametrize("value", ["99999999999999999999", str(EPOCH_MAX + 1), "-1", "1e9", ""])
def test_an_epoch_out_of_range_names_the_variable_and_the_range(monkeypatch, value):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    with pytest.raises(UsageError) as e:
        source_date_epoch("100")
    assert e.value.exit_code == 2
    assert "SOURCE_DATE_EPOCH" in e.value.message and f"0 .. {EPOCH_MAX}" in e.value.message


def test_the_largest_epoch_is_accepted_and_the_fallback_is_checked(monkeypatch):
    assert EPOCH_MAX == 2**32 - 1, "cpio newc (initramfs), gzip MTIME: 32-bit unsigned seconds"
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(EPOCH_MAX))
    assert source_date_epoch(None) == EPOCH_MAX
    monkeypatch.delenv("SOURCE_DATE_EPOCH")
    with pytest.raises(RecipeError, match="newest git commit time"):
        source_date_epoch(None, fallback=EPOCH_MAX + 1)


def _tar_with_link(tmp_path, name, target):
    tree = tmp_path / "tree"
    (tree / "chart" / "templates").mkdir(parents=True)
    (tree / "chart" / "Chart.yaml").write_text("name: x\n")
    os.symlink(target, tree / "chart" / "templates" / name)
    return io.BytesIO(tar_bytes(tree, epoch=0))


@pytest.mark.parametrize(
    ("target", "problem"),
    [("/etc/passwd", "an absolute path"), ("../../../outside", "which leads out of the source")],
)
def test_a_link_out_of_the_tree_names_the_link_and_its_target(tmp_path, target, problem):
    data = _tar_with_link(tmp_path, "cm.yaml", target)
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(RecipeError) as e:
        extract_tar(data, dest, what="chart ../charts/x", under="chart")
    assert e.value.message == (
        f"chart ../charts/x: templates/cm.yaml is a link to {target!r}, {problem}"
    )
    assert str(dest) not in e.value.message and str(tmp_path) not in e.value.message
