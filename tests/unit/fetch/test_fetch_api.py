"""The nvkr.fetch entry points: dispatch, entry shapes, the no-op rebuild fast path."""

from __future__ import annotations

import hashlib
import json
import typing
from pathlib import Path

import pytest

from nvkr.canonical import DIGEST_RE, canonical_json
from nvkr.errors import LockError
from nvkr.fetch.api import SourceKind, ensure, fetcher_for, fetcher_of, resolve
from nvkr.fetch.context import FetchContext
from nvkr.fetch.mirrors import Mirrors
from nvkr.fetch.table import SOURCE_TABLE
from nvkr.recipe.models import Source
from nvkr.recipe.sources import AptSource, GitSource, OciSource, PathSource, PypiSource, UrlSource

BODY = b"payload\n" * 100


def test_every_source_kind_has_a_fetcher() -> None:
    union = typing.get_args(typing.get_args(Source)[0])
    kinds = {typing.get_args(member)[0] for member in union}
    assert kinds == {UrlSource, GitSource, PypiSource, PathSource, OciSource, AptSource}
    assert {line.model for line in SOURCE_TABLE} == kinds
    assert [line.kind for line in SOURCE_TABLE] == ["url", "git", "pypi", "path", "oci", "apt"]
    for line in SOURCE_TABLE:
        fetcher = fetcher_for(line.kind)
        assert isinstance(fetcher, SourceKind) and fetcher.kind == line.kind
        assert fetcher_of(line.model.model_construct()) is fetcher


def test_unknown_kind() -> None:
    with pytest.raises(LockError, match="unknown source kind 'svn'"):
        fetcher_for("svn")


def test_unknown_source_type(ctx: FetchContext, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="no fetcher"):
        resolve("x", object(), ctx, base_dir=tmp_path)  # type: ignore[arg-type]


def test_context_defaults(ctx: FetchContext) -> None:
    assert ctx.mirrors == Mirrors()
    assert ctx.offline is False


def test_entries_are_canonical_json_and_rebuild_is_offline(
    http_server, git_repo, ctx: FetchContext, tmp_path: Path, request
) -> None:
    (tmp_path / "agent").mkdir()
    (tmp_path / "agent" / "main.go").write_text("package main\n")
    sources = {
        "kubelet": UrlSource(
            url=http_server.add("/kubelet", BODY), sha256=hashlib.sha256(BODY).hexdigest()
        ),
        "kubectl": UrlSource(
            url=http_server.add("/kubectl", BODY), sha512=hashlib.sha512(BODY).hexdigest()
        ),
        "repo": GitSource(git=git_repo.url, commit=git_repo.commits[1], subdir="tool"),
        "agent": PathSource(path="agent"),
    }
    entries = {name: resolve(name, src, ctx, base_dir=tmp_path) for name, src in sources.items()}
    for name, entry in entries.items():
        data = entry.to_json()
        assert json.loads(canonical_json(data)) == data, name
        assert DIGEST_RE.match(entry.digest), name
        assert ctx.store.has_blob(entry.digest), name

    # a no-op rebuild: everything is in the store, nothing may touch the network or run a tool
    request.getfixturevalue("no_network")
    hits = http_server.total_hits
    for offline in (False, True):
        c = FetchContext(
            store=ctx.store, offline=offline, mirrors=Mirrors.parse(["http://=http://unused/"])
        )
        for name, src in sources.items():
            assert ensure(name, src, entries[name], c, base_dir=tmp_path) == entries[name].digest
    assert http_server.total_hits == hits
