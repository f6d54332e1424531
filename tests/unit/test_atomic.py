"""nvkr.atomic: the one atomic writer: whole or nothing, modes as a user expects, no leftovers;
and the files nvkr writes for a user to keep (a generated pipeline, `ci check --write`'s rewrite,
a lockfile) readable as any file they write (0666 less the umask), which `nvkr ci generate
--out` once wrote 0600 through the store's private-temp writer."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvkr.atomic import stage, write_atomic
from tests.helpers.cli import invoke
from tests.helpers.fanout import write_fan_project

IMAGE = "registry.example/nvkr/nvkr-ci@sha256:" + "cd" * 32


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_file_is_written_whole_with_the_umasks_mode_or_the_one_asked(
    tmp_path: Path, umask_022: None
) -> None:
    target = tmp_path / "f.json"
    write_atomic(target, b"one")
    assert target.read_bytes() == b"one" and _mode(target) == 0o644
    write_atomic(target, b"two", mode=0o600)
    assert target.read_bytes() == b"two" and _mode(target) == 0o600
    os.umask(0o077)
    write_atomic(target, b"three")
    assert _mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.json"]  # no temp file left


def test_a_failed_rename_leaves_the_target_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "d"
    (target / "inside").mkdir(parents=True)  # a directory with content: the rename fails
    with pytest.raises(OSError):
        write_atomic(target, b"data", prefix=".owner-tmp-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    with pytest.raises(FileNotFoundError):  # no directory to write in: nothing is made
        write_atomic(tmp_path / "missing" / "f", b"data")


def test_staged_files_carry_the_prefix_and_are_distinct(tmp_path: Path) -> None:
    target = tmp_path / "f"
    a, b = stage(target, b"a", prefix=".owner-tmp-"), stage(target, b"b", prefix=".owner-tmp-")
    assert a != b and a.name.startswith(".owner-tmp-") and b.name.startswith(".owner-tmp-")
    assert (a.read_bytes(), b.read_bytes()) == (b"a", b"b")
    assert not target.exists()


def test_generated_pipelines_and_their_rewrite_are_readable_by_others(
    tmp_path: Path, umask_022: None
) -> None:
    project = write_fan_project(tmp_path / "proj")
    store = tmp_path / "store"
    out = project / "ci" / "github" / "fan.yml"
    res = invoke(
        "ci", "generate", "github", "recipes/fan.yaml", "--cache", "registry.example/c",
        "--image", IMAGE, "--out", "ci/github/fan.yml", cwd=project, store=store,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert _mode(out) == 0o644
    out.write_text(out.read_text().replace("fail-fast: false", "fail-fast: true"))
    os.chmod(out, 0o640)
    fixed = invoke("ci", "check", "--write", cwd=project, store=store)
    assert fixed.code == 0, fixed.stderr
    assert _mode(out) == 0o644
