"""Unpacked tools (``tools/<hex>/``: the Go toolchain, a cgo tools tree) are checked where they
are used, like blobs: a tree changed after it was unpacked is unpacked again from its (checked)
blob with a line saying why, never used as it is; ``nvkr store verify`` hashes every tree.

Found by a new user: one constant edited in the unpacked Go tree's ``src/fmt/print.go`` gave
another binary under the same action key, with no warning, and ``store verify`` said ok.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nvkr import treeseal
from nvkr.store import Store
from nvkr.store_verify import verify_store


class Unpacker:
    """A fake unpack: writes a small tree and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, tmp: Path) -> None:
        self.calls += 1
        (tmp / "go" / "bin").mkdir(parents=True)
        (tmp / "go" / "bin" / "go").write_text("#!/bin/sh\necho go\n")
        (tmp / "go" / "bin" / "go").chmod(0o755)
        (tmp / "go" / "src" / "fmt").mkdir(parents=True)
        (tmp / "go" / "src" / "fmt" / "print.go").write_text('const percentBang = "%!"\n')
        (tmp / "go" / "VERSION").symlink_to("bin/go")


@pytest.fixture
def tools(tmp_path: Path):
    notices: list[tuple[str, str]] = []
    store = Store(tmp_path / "store")
    store.tree_notice = lambda digest, reason: notices.append((digest, reason))
    digest = store.add_bytes(b"a toolchain wheel").digest
    unpack = Unpacker()
    root = store.unpacked(digest, unpack, check="go/bin/go")
    return store, digest, unpack, root, notices


def _again(store: Store, digest: str, unpack: Unpacker) -> Path:
    return store.unpacked(digest, unpack, check="go/bin/go")


def test_an_intact_tree_is_used_as_it_is(tools):
    store, digest, unpack, root, notices = tools
    assert _again(store, digest, unpack) == root
    assert (unpack.calls, notices) == (1, [])


def test_a_file_changed_after_unpacking_is_unpacked_again_and_said(tools):
    store, digest, unpack, root, notices = tools
    source = root / "go" / "src" / "fmt" / "print.go"
    source.write_text('const percentBang = "%?"\n')
    assert _again(store, digest, unpack) == root
    assert source.read_text() == 'const percentBang = "%!"\n', "the tree is the blob's again"
    assert unpack.calls == 2
    ((said, reason),) = notices
    assert said == digest and "go/src/fmt/print.go" in reason and "changed" in reason


def test_a_change_with_its_mtime_set_back_is_caught_by_the_ctime(tools):
    store, digest, unpack, root, notices = tools
    source = root / "go" / "src" / "fmt" / "print.go"
    st = source.stat()
    source.write_text('const percentBang = "%?"\n')  # the same size
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    _again(store, digest, unpack)
    assert unpack.calls == 2 and len(notices) == 1


@pytest.mark.parametrize("links", ["added", "removed"])
def test_a_change_hidden_by_a_link_count_change_is_caught(tools, tmp_path, links):
    """Issue 27, item 5, on a tree: a write with its mtime set back and a hard link added to (or
    removed from) the file is caught: the tree seal takes no ctime change without a hash."""
    store, digest, unpack, root, notices = tools
    source = root / "go" / "src" / "fmt" / "print.go"
    outside = tmp_path / "outside-link"
    if links == "removed":
        os.link(source, outside)
        assert _again(store, digest, unpack) == root and notices == []  # hashed, sealed again
    st = source.stat()
    source.write_text('const percentBang = "%?"\n')  # the same size
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns))
    if links == "added":
        os.link(source, outside)
    else:
        outside.unlink()
    _again(store, digest, unpack)
    assert len(notices) == 1 and "go/src/fmt/print.go" in notices[0][1], notices
    assert source.read_text() == 'const percentBang = "%!"\n'


@pytest.mark.parametrize("change", ["added", "removed", "mode", "link"])
def test_added_removed_and_changed_entries_are_caught(tools, change):
    store, digest, unpack, root, notices = tools
    if change == "added":
        (root / "go" / "src" / "fmt" / "evil.go").write_text("package fmt\n")
    elif change == "removed":
        (root / "go" / "src" / "fmt" / "print.go").unlink()
    elif change == "mode":
        (root / "go" / "src" / "fmt" / "print.go").chmod(0o755)
    else:
        (root / "go" / "VERSION").unlink()
        (root / "go" / "VERSION").symlink_to("/usr/bin/go")
    _again(store, digest, unpack)
    assert unpack.calls == 2 and len(notices) == 1, notices
    assert not (root / "go" / "src" / "fmt" / "evil.go").exists()
    assert os.readlink(root / "go" / "VERSION") == "bin/go"


def test_a_touched_file_with_the_same_bytes_is_kept_and_sealed_again(tools, monkeypatch):
    store, digest, unpack, root, notices = tools
    os.utime(root / "go" / "src" / "fmt" / "print.go", (1, 1))
    _again(store, digest, unpack)
    assert (unpack.calls, notices) == (1, [])
    hashed: list[str] = []
    real = treeseal.hash_file
    monkeypatch.setattr(treeseal, "hash_file", lambda p: hashed.append(p) or real(p))
    _again(store, digest, unpack)
    assert hashed == [], "the refreshed seal matches: nothing is hashed"


def test_a_tree_without_a_seal_is_unpacked_again_quietly(tools):
    store, digest, unpack, root, notices = tools
    (store.tools_dir / digest.split(":")[1] / "seal.json").unlink()  # unpacked by an older nvkr
    _again(store, digest, unpack)
    assert (unpack.calls, notices) == (2, [])
    assert _again(store, digest, unpack) == root and unpack.calls == 2


def test_store_verify_hashes_every_tree_and_repair_removes_a_changed_one(tools):
    store, digest, unpack, root, _ = tools
    seal = store.tools_dir / digest.split(":")[1] / "seal.json"
    doc = json.loads(seal.read_text())
    source = root / "go" / "src" / "fmt" / "print.go"
    source.write_text('const percentBang = "%?"\n')
    # what a seal cannot see: the stat fields recorded as they now are (as if the bytes had
    # changed without a write)
    st = source.lstat()
    entry = doc["entries"]["go/src/fmt/print.go"]
    entry[3:5] = [st.st_mtime_ns, st.st_ctime_ns]
    seal.write_text(json.dumps(doc))
    report = verify_store(store)
    assert report.corrupt_tools == [digest] and not report.ok
    assert report.as_json()["corruptTools"] == [digest]
    assert root.exists(), "verify without repair changes nothing"
    report = verify_store(store, repair=True)
    assert report.repaired and not root.exists()
    _again(store, digest, unpack)
    assert unpack.calls == 2 and verify_store(store).ok
