"""path sources: directories of this repository (nvkr.fetch.path)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from nvkr.canonical import sha256_bytes
from nvkr.errors import FetchError, LockError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.path import ensure, resolve
from nvkr.recipe.sources import PathSource
from nvkr.repro import tar_bytes


def make_tree(root: Path, umask: int, mtime: int) -> Path:
    old = os.umask(umask)
    try:
        (root / "cmd" / "agent").mkdir(parents=True)
        (root / "go.mod").write_text("module example.com/agent\n")
        (root / "cmd" / "agent" / "main.go").write_text("package main\nfunc main() {}\n")
        script = root / "build.sh"
        script.write_text("#!/bin/sh\n")
        script.chmod(0o777 & ~umask)
        (root / "link").symlink_to("go.mod")
    finally:
        os.umask(old)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            os.utime(Path(dirpath) / name, (mtime, mtime), follow_symlinks=False)
    return root


def test_resolve(ctx: FetchContext, tmp_path: Path) -> None:
    make_tree(tmp_path / "agents" / "node-agent", 0o022, 1_000)
    entry = resolve("agent", PathSource(path="agents/node-agent"), ctx, base_dir=tmp_path)
    data = tar_bytes(tmp_path / "agents" / "node-agent", epoch=0)
    assert entry == {"kind": "path", "path": "agents/node-agent", "digest": sha256_bytes(data)}
    assert ctx.store.read_blob(entry["digest"]) == data


def test_digest_stable_across_copies(ctx: FetchContext, tmp_path: Path) -> None:
    a = make_tree(tmp_path / "a" / "src", 0o022, 1_000)
    b = make_tree(tmp_path / "b" / "src", 0o077, 1_700_000_000)
    (b / ".git").mkdir()  # a checkout's .git never counts
    (b / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert (a / "go.mod").stat().st_mode != (b / "go.mod").stat().st_mode
    da = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path / "a")["digest"]
    db = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path / "b")["digest"]
    assert da == db


def test_exec_bit_and_content_count(ctx: FetchContext, tmp_path: Path) -> None:
    root = make_tree(tmp_path / "src", 0o022, 1_000)
    before = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path)["digest"]
    (root / "build.sh").chmod(0o644)
    after_mode = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path)["digest"]
    (root / "go.mod").write_text("module example.com/other\n")
    after_content = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path)["digest"]
    assert len({before, after_mode, after_content}) == 3


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_missing_directory(ctx: FetchContext, tmp_path: Path, kind: str) -> None:
    if kind == "file":
        (tmp_path / "agent").write_text("not a dir")
    with pytest.raises(FetchError) as exc:
        resolve("agent", PathSource(path="agent"), ctx, base_dir=tmp_path)
    assert str(tmp_path / "agent") in exc.value.message
    assert "'agent'" in exc.value.message


def test_ensure_rehashes_and_works_offline(ctx: FetchContext, tmp_path: Path, no_network) -> None:
    root = make_tree(tmp_path / "src", 0o022, 1_000)
    source = PathSource(path="src")
    entry = resolve("s", source, ctx, base_dir=tmp_path)
    offline = FetchContext(store=ctx.store, offline=True)
    assert ensure("s", source, entry, offline, base_dir=tmp_path) == entry["digest"]
    (root / "new.go").write_text("package main\n")
    # the lockfile keeps no digest for path sources; the files on disk decide
    got = ensure("s", source, {"kind": "path", "path": "src"}, offline, base_dir=tmp_path)
    assert got != entry["digest"]
    assert ctx.store.has_blob(got)


def test_unchanged_tree_writes_nothing(ctx: FetchContext, tmp_path: Path, monkeypatch) -> None:
    make_tree(tmp_path / "src", 0o022, 1_000)
    resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path)

    def refuse(data: bytes) -> None:
        raise AssertionError("an unchanged tree must not be written again")

    monkeypatch.setattr(ctx.store, "add_bytes", refuse)
    resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path)


def test_copy_keeps_digest(ctx: FetchContext, tmp_path: Path) -> None:
    make_tree(tmp_path / "one" / "src", 0o022, 1_000)
    shutil.copytree(tmp_path / "one", tmp_path / "two", symlinks=True)
    a = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path / "one")
    b = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path / "two")
    assert a == b


def test_ensure_rejects_foreign_entry(ctx: FetchContext, tmp_path: Path) -> None:
    make_tree(tmp_path / "src", 0o022, 1_000)
    with pytest.raises(LockError, match="kind 'url'"):
        ensure(
            "s",
            PathSource(path="src"),
            {"kind": "url", "digest": "sha256:" + "0" * 64},
            ctx,
            base_dir=tmp_path,
        )
    with pytest.raises(LockError, match="path="):
        ensure(
            "s", PathSource(path="src"), {"kind": "path", "path": "other"}, ctx, base_dir=tmp_path
        )


def test_exclude_leaves_out_what_a_checkout_grows(ctx: FetchContext, tmp_path: Path) -> None:
    """A Python package's directory gains __pycache__/*.pyc (with the source's mtime inside)
    once anything imports it: ``exclude`` keeps them out of the digest and the tar."""
    make_tree(tmp_path / "a" / "src", 0o022, 1_000)
    b = make_tree(tmp_path / "b" / "src", 0o022, 1_000)
    (b / "cmd" / "__pycache__").mkdir()
    (b / "cmd" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\x00mtime")
    (b / "stray.pyc").write_bytes(b"\x00")
    spec = PathSource(path="src", exclude=["__pycache__", "*.pyc"])
    da = resolve("s", spec, ctx, base_dir=tmp_path / "a")["digest"]
    db = resolve("s", spec, ctx, base_dir=tmp_path / "b")["digest"]
    assert da == db
    plain = resolve("s", PathSource(path="src"), ctx, base_dir=tmp_path / "b")["digest"]
    assert plain != db, "without exclude every file counts"
    import io
    import tarfile

    def names(digest: str) -> list[str]:
        with tarfile.open(fileobj=io.BytesIO(ctx.store.read_blob(digest))) as tar:
            return tar.getnames()

    assert "cmd/agent/main.go" in names(db) and not any("pyc" in n for n in names(db))
    # a pattern with a '/' matches the path from the directory's root
    dc = resolve("s", PathSource(path="src", exclude=["cmd/agent"]), ctx, base_dir=tmp_path / "a")
    got = names(dc["digest"])
    assert "cmd" in got and not any(n.startswith("cmd/agent") for n in got)
