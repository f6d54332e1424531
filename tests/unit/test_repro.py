"""Deterministic archives and SOURCE_DATE_EPOCH."""

from __future__ import annotations

import gzip
import io
import os
import tarfile

import pytest

from nvkr.errors import RecipeError, UsageError
from nvkr.repro import EPOCH_MAX, extract_tar, gzip_bytes, source_date_epoch, tar_bytes


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
