"""The kube-packages builder: Kubernetes node binaries (and crictl out of its archive) staged
under a prefix as one deterministic tar; plan errors; a missing member; the same bytes in any
store, umask or time zone; and the action planned from a recipe whose url sources come from a
loopback mirror with dl.k8s.io's layout."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
import types
from pathlib import Path
from typing import Any

import pydantic
import pytest

from nvkr.action import Action, action_key
from nvkr.builders import api
from nvkr.builders.api import ActionSpec, ResolvedSource
from nvkr.builders.kube_packages.artifact import KubePackagesArtifact
from nvkr.builders.kube_packages.builder import MEDIA_TYPE, KubePackagesBuilder
from nvkr.errors import BuildError
from nvkr.execute import run_action
from nvkr.fetch.context import FetchContext
from nvkr.fetch.mirrors import Mirrors
from nvkr.lock import Resolver
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from nvkr.recipe.sources import PathSource, UrlSource
from nvkr.repro import tar_bytes
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.k8smirror import K8sMirror, crictl_archive, kube_payload, serve_k8s_mirror

EPOCH = 1_764_547_200
VERSION = "1.36.3"
CRICTL = "1.36.0"


class Refs:
    def __init__(self, sources: dict[str, ResolvedSource]) -> None:
        self.sources = sources

    def source(self, name: str) -> ResolvedSource:
        return self.sources[name]

    def artifact(self, name: str) -> Action:  # pragma: no cover - no artifact references
        raise AssertionError(name)

    def image_index(self, name: str) -> Action:  # pragma: no cover
        raise AssertionError(name)


def to_action(spec: ActionSpec, epoch: int = EPOCH) -> Action:
    key = action_key("kube-packages", "1", spec.params, spec.inputs, spec.tools, epoch, spec.deps)
    return Action(
        key=key,
        builder="kube-packages",
        builder_version="1",
        name="kube [amd64]",
        params=spec.params,
        inputs=spec.inputs,
        tools=spec.tools,
        epoch=epoch,
        deps=spec.deps,
        sources=spec.sources,
    )


def url_source(store: Store, name: str, url: str, data: bytes) -> ResolvedSource:
    info = store.add_bytes(data)
    entry = {"kind": "url", "url": url, "size": info.size, "digest": info.digest}
    spec = UrlSource(url=url, sha256=info.digest[7:])
    return ResolvedSource(name, spec, lock_entry(entry), store.root)


class World:
    """Locked sources (blobs in ``store``) as a Kubernetes recipe would have them, for amd64."""

    def __init__(self, tmp: Path, store: Store) -> None:
        self.tmp, self.store = tmp, store
        base = f"https://dl.k8s.io/release/v{VERSION}/bin/linux/amd64"
        self.sources = {
            name: url_source(store, name, f"{base}/{name}", kube_payload(name, VERSION, "amd64"))
            for name in ("kubelet", "kubeadm", "kubectl")
        }
        crictl_url = (
            "https://github.com/kubernetes-sigs/cri-tools/releases/download/"
            f"v{CRICTL}/crictl-v{CRICTL}-linux-amd64.tar.gz"
        )
        self.sources["crictl"] = url_source(
            store, "crictl", crictl_url, crictl_archive(CRICTL, "amd64")
        )

    def add_tar(self, name: str, members: dict[str, bytes | None], *, mode: str = "w:gz") -> None:
        """A url source that is a tar with ``members`` (``None``: a directory)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode=mode) as tar:
            for member, data in members.items():
                info = tarfile.TarInfo(member)
                if data is None:
                    info.type = tarfile.DIRTYPE
                    tar.addfile(info)
                else:
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        self.sources[name] = url_source(
            self.store, name, f"https://files.example.org/{name}.tgz", buf.getvalue()
        )

    def plan(self, **fields: Any) -> ActionSpec:
        artifact = KubePackagesArtifact.model_validate({"builder": "kube-packages", **fields})
        variant = types.SimpleNamespace(arch="amd64", gpu="hopper", kubernetes="1.36")
        return KubePackagesBuilder().plan("kube", artifact, variant, Refs(self.sources))  # type: ignore[arg-type]

    def build(self, epoch: int = EPOCH, **fields: Any) -> dict[str, Any]:
        return run_action(to_action(self.plan(**fields), epoch), self.store, {}).to_json()


BINARIES: dict[str, Any] = {
    "kubelet": "kubelet",
    "kubeadm": "kubeadm",
    "kubectl": {"source": "kubectl"},
    "crictl": {"source": "crictl", "member": "crictl"},
}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path, Store(tmp_path / "store"))


def tar_members(data: bytes) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    out = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for m in tar.getmembers():
            f = tar.extractfile(m)
            out.append((m, f.read() if f is not None else None))
    return out


def primary(store: Store, result: dict[str, Any]) -> bytes:
    (out,) = result["outputs"]
    assert out["role"] == "primary"
    return store.read_blob(out["digest"])


# -- the builder --------------------------------------------------------------------------------
def test_registered() -> None:
    builder = api.get_builder("kube-packages")
    assert isinstance(builder, KubePackagesBuilder)
    assert (builder.per_arch, builder.release_kind) == (True, "internal")


def test_tar_layout_contents_and_metadata(world: World) -> None:
    result = world.build(binaries=BINARIES)
    (out,) = result["outputs"]
    assert (out["name"], out["mediaType"], out["role"]) == ("kube.tar", MEDIA_TYPE, "primary")
    data = primary(world.store, result)
    assert out["digest"] == "sha256:" + hashlib.sha256(data).hexdigest()
    members = tar_members(data)
    assert [m.name for m, _ in members] == [
        "usr",
        "usr/bin",
        "usr/bin/crictl",
        "usr/bin/kubeadm",
        "usr/bin/kubectl",
        "usr/bin/kubelet",
    ]
    for m, _ in members:
        assert (m.mode, m.uid, m.gid, m.uname, m.gname, m.mtime) == (0o755, 0, 0, "", "", EPOCH)
        assert not m.pax_headers, "no PAX atime/ctime or other extended headers"
    assert [m.isdir() for m, _ in members] == [True, True, False, False, False, False]
    contents = {m.name: body for m, body in members if m.isfile()}
    assert contents["usr/bin/kubelet"] == kube_payload("kubelet", VERSION, "amd64")
    assert contents["usr/bin/crictl"].startswith(b"#!/bin/sh\n")
    assert b'echo "crictl version v1.36.0"' in contents["usr/bin/crictl"]

    meta = result["metadata"]
    assert meta["prefix"] == "/usr/bin"
    assert [f["path"] for f in meta["files"]] == [f"/{m.name}" for m, _ in members[2:]]
    for f in meta["files"]:
        body = contents[f["path"][1:]]
        assert f["digest"] == "sha256:" + hashlib.sha256(body).hexdigest()
        assert f["size"] == len(body) and f["mode"] == "0755"
    crictl = next(f for f in meta["files"] if f["path"] == "/usr/bin/crictl")
    assert (crictl["source"], crictl["member"]) == ("crictl", "crictl")
    kubelet = next(f for f in meta["files"] if f["path"] == "/usr/bin/kubelet")
    assert (kubelet["source"], kubelet["member"]) == ("kubelet", None)


def test_plan_params_inputs_and_sources(world: World) -> None:
    spec = world.plan(binaries=BINARIES, prefix="/usr/local/bin")
    assert spec.params == {
        "output": "kube.tar",
        "prefix": "usr/local/bin",
        "files": [
            {
                "name": "crictl",
                "path": "usr/local/bin/crictl",
                "source": "crictl",
                "input": "binary:crictl",
                "member": "crictl",
            },
            *(
                {
                    "name": n,
                    "path": f"usr/local/bin/{n}",
                    "source": n,
                    "input": f"binary:{n}",
                    "member": None,
                }
                for n in ("kubeadm", "kubectl", "kubelet")
            ),
        ],
    }
    assert spec.inputs == {f"binary:{n}": world.sources[n].digest for n in BINARIES}
    assert spec.sources == {f"binary:{n}": world.sources[n] for n in BINARIES}
    assert spec.tools == {} and spec.deps == ()


def test_key_ignores_the_order_binaries_are_listed_in(world: World) -> None:
    forward = to_action(world.plan(binaries=BINARIES))
    backward = to_action(world.plan(binaries=dict(reversed(list(BINARIES.items())))))
    assert forward.key == backward.key


@pytest.mark.parametrize(
    ("prefix", "names"),
    [
        ("/usr/local/bin", ["usr", "usr/local", "usr/local/bin", "usr/local/bin/kubelet"]),
        ("/opt/k8s/", ["opt", "opt/k8s", "opt/k8s/kubelet"]),
        ("/", ["kubelet"]),
    ],
)
def test_prefix_directories(world: World, prefix: str, names: list[str]) -> None:
    result = world.build(binaries={"kubelet": "kubelet"}, prefix=prefix)
    members = tar_members(primary(world.store, result))
    assert [m.name for m, _ in members] == names
    assert all(m.mode == 0o755 for m, _ in members)
    assert result["metadata"]["files"][0]["path"] == "/" + names[-1]


def test_same_bytes_in_any_store_umask_and_time_zone(world: World, tmp_path: Path) -> None:
    first = primary(world.store, world.build(binaries=BINARIES))
    old_umask, old_tz = os.umask(0o077), os.environ.get("TZ")
    os.environ["TZ"] = "Asia/Kolkata"
    try:
        other = World(tmp_path / "other", Store(tmp_path / "other-store"))
        again = primary(other.store, other.build(binaries=BINARIES))
    finally:
        os.umask(old_umask)
        if old_tz is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = old_tz
    assert again == first
    # the epoch is the only time in it
    later = primary(world.store, world.build(binaries=BINARIES, epoch=EPOCH + 1))
    assert later != first and {m.mtime for m, _ in tar_members(later)} == {EPOCH + 1}


def test_member_with_a_dot_slash_prefix_in_an_uncompressed_tar(world: World) -> None:
    world.add_tar("bundle", {"./": None, "./bin/": None, "./bin/crictl": b"#!/bin/sh\n"}, mode="w")
    result = world.build(binaries={"crictl": {"source": "bundle", "member": "bin/crictl"}})
    (member,) = [m for m, _ in tar_members(primary(world.store, result)) if m.isfile()]
    assert member.name == "usr/bin/crictl" and member.mode == 0o755


def test_missing_member_names_source_and_member(world: World) -> None:
    with pytest.raises(BuildError) as info:
        world.build(binaries={"crictl": {"source": "crictl", "member": "bin/crictl"}})
    message = info.value.message
    assert "source 'crictl' has no member 'bin/crictl'" in message
    assert "it holds: crictl" in message, "the error lists what the archive holds"


def test_member_that_is_a_directory(world: World) -> None:
    world.add_tar("bundle", {"bin": None, "bin/x": b"x"})
    with pytest.raises(BuildError, match="member 'bin' is not a regular file"):
        world.build(binaries={"x": {"source": "bundle", "member": "bin"}})


def test_member_of_a_source_that_is_not_a_tar(world: World) -> None:
    with pytest.raises(BuildError, match="source 'kubelet' is not a readable tar archive"):
        world.build(binaries={"kubelet": {"source": "kubelet", "member": "kubelet"}})


def test_member_of_a_tree_source(world: World, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "tool").write_bytes(b"#!/bin/sh\necho tool\n")
    digest = world.store.add_bytes(tar_bytes(tree, epoch=0)).digest
    world.sources["tree"] = ResolvedSource(
        "tree",
        PathSource(path="tree"),
        lock_entry({"kind": "path", "path": "tree", "digest": digest}),
        tmp_path,
    )
    result = world.build(binaries={"tool": {"source": "tree", "member": "bin/tool"}})
    assert result["metadata"]["files"][0]["path"] == "/usr/bin/tool"
    # a tree source without member: tests/unit/test_plancheck.py (checked before planning)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"binaries": {"kubelet": "kubelet"}, "prefix": "usr/bin"}, "normalised absolute"),
        ({"binaries": {"kubelet": "kubelet"}, "prefix": "/usr/../bin"}, "normalised absolute"),
        ({"binaries": {"kubelet": "kubelet"}, "prefix": "/usr//bin"}, "normalised absolute"),
        ({"binaries": {"c": {"source": "crictl", "member": "/crictl"}}}, "relative to the archive"),
        ({"binaries": {"c": {"source": "crictl", "member": "../crictl"}}}, "without '..'"),
        ({"binaries": {"c": {"source": "crictl", "member": "."}}}, "relative to the archive"),
    ],
)
def test_bad_fields_are_refused_by_the_model(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=re.escape(message)):
        KubePackagesArtifact.model_validate({"builder": "kube-packages", **fields})


# -- from a recipe, through the lock resolver and the planner -----------------------------------
RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: kube}
epoch: "%(epoch)d"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
vars: {kubernetesPatch: "1.36.3", crictl: "1.36.0"}
sources:
  kubelet:
    url: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubelet"
    checksumUrl: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubelet.sha512"
  crictl:
    url: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictl }}/crictl-v{{ vars.crictl }}-linux-{{ arch }}.tar.gz"
    checksumUrl: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictl }}/crictl-v{{ vars.crictl }}-linux-{{ arch }}.tar.gz.sha256"
artifacts:
  kube:
    builder: kube-packages
    binaries: {kubelet: kubelet, crictl: {source: crictl, member: crictl}}
releaseSet: {name: kube}
"""


def test_planned_from_a_recipe_with_sources_from_the_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with serve_k8s_mirror(tmp_path / "mirror") as k8s_mirror:
        _plan_and_build_from_the_mirror(tmp_path, monkeypatch, k8s_mirror)


def _plan_and_build_from_the_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k8s_mirror: K8sMirror
) -> None:
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    (tmp_path / "kube.yaml").write_text(RECIPE % {"epoch": EPOCH})
    loaded = load_recipe(tmp_path / "kube.yaml")
    store = Store(tmp_path / "store")
    mirrors = Mirrors.parse(
        [f"https://dl.k8s.io/={k8s_mirror.url}/", f"https://github.com/={k8s_mirror.url}/"]
    )
    ctx = FetchContext(store=store, mirrors=mirrors)
    resolver = Resolver(loaded=loaded, lock_path=tmp_path / "x.lock.json", lock=None, ctx=ctx)
    variants = expand(loaded, None)
    assert [v.arch for v in variants] == ["amd64", "arm64"]
    for variant in variants:
        refs = Refs({n: resolver.source_for(variant, n) for n in ("kubelet", "crictl")})
        artifact = variant.recipe.artifacts["kube"]
        action = to_action(KubePackagesBuilder().plan("kube", artifact, variant, refs))
        result = run_action(action, store, {}).to_json()
        files = {f["path"]: f for f in result["metadata"]["files"]}
        assert sorted(files) == ["/usr/bin/crictl", "/usr/bin/kubelet"]
        kubelet = k8s_mirror.kube("kubelet", variant.arch)
        assert files["/usr/bin/kubelet"]["digest"] == f"sha256:{kubelet.sha256}"
        assert variant.arch.encode() in store.read_blob(files["/usr/bin/kubelet"]["digest"])
        assert resolver.source_for(variant, "crictl").digest == (
            f"sha256:{k8s_mirror.crictl(variant.arch).sha256}"
        )
    assert f"/release/v{VERSION}/bin/linux/arm64/kubelet.sha512" in k8s_mirror.requests
