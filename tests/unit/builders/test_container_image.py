"""The container-image builder (daemonless): files from artifacts and sources on scratch or on a
pinned base, checked with skopeo and umoci; plan errors; delegation to the docker backend."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import time
import types
from typing import Any

import pydantic
import pytest

import nvkr.builders
from nvkr.builders.api import ActionSpec, ResolvedSource
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.builders.container_image.params import DockerParams
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError
from nvkr.execute import execute, run_action
from nvkr.fetch.context import FetchContext
from nvkr.lock import Resolver
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import platform_of
from nvkr.oci.layout import descriptor, image_index, index_bytes
from nvkr.oci.layoutdir import write_layout
from nvkr.plan import Plan, make_plan
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from nvkr.recipe.sources import PathSource
from nvkr.repro import tar_bytes
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.container_images import (
    CREATED,
    EPOCH,
    FILES,
    SCRIPT,
    World,
    make_base_layout,
    to_action,
    tool,
    write_image_layout,
)
from tests.helpers.results import results

pytestmark = pytest.mark.usefixtures("container_image_builder")


@pytest.fixture
def world(tmp_path):
    return World(tmp_path, Store(tmp_path / "store"))


# -- scratch images --------------------------------------------------------------------------------
def test_scratch_image_outputs_and_skopeo_umoci(world, tmp_path):
    result = world.build(
        files=FILES,
        entrypoint=["/usr/bin/agent"],
        env={"LOG": "info"},
        user="65532",
        labels={"app": "agent"},
        annotations={"org.opencontainers.image.title": "agent"},
        version="1.2.3",
        revisionSource="repo",
    )
    roles = [(o["role"], o["name"], o["mediaType"]) for o in result["outputs"]]
    assert roles == [
        ("layer", "layer-0.tar.gz", mt.OCI_LAYER_TAR_GZIP),
        ("config", "config.json", mt.OCI_IMAGE_CONFIG),
        ("manifest", "manifest.json", mt.OCI_MANIFEST),
    ]
    out = {o["role"]: o for o in result["outputs"]}
    meta = result["metadata"]
    assert meta == {
        "platform": {"os": "linux", "architecture": "amd64"},
        "manifestDigest": out["manifest"]["digest"],
        "configDigest": out["config"]["digest"],
    }
    manifest = json.loads(world.store.read_blob(meta["manifestDigest"]))
    assert manifest["config"]["digest"] == meta["configDigest"]
    assert [layer["digest"] for layer in manifest["layers"]] == [out["layer"]["digest"]]
    assert manifest["annotations"] == {
        "org.opencontainers.image.created": CREATED,
        "org.opencontainers.image.revision": "a" * 40,
        "org.opencontainers.image.source": "https://git.example.org/app.git",
        "org.opencontainers.image.title": "agent",
        "org.opencontainers.image.version": "1.2.3",
    }
    config_text = world.store.read_blob(meta["configDigest"]).decode()
    config = json.loads(config_text)
    assert config["created"] == CREATED and config["architecture"] == "amd64"
    assert set(re.findall(r"\d{4}-\d\d-\d\dT[0-9:.]+Z?", config_text)) == {CREATED}
    assert config["config"] == {
        "Entrypoint": ["/usr/bin/agent"],
        "Env": ["LOG=info"],
        "User": "65532",
        "Labels": {"app": "agent"},
    }
    assert [h["created"] for h in config["history"]] == [CREATED]

    layout = tmp_path / "layout"
    write_image_layout(world.store, result, layout)
    raw = tool("skopeo", "inspect", "--raw", f"oci:{layout}:test")
    assert raw.encode() == world.store.read_blob(meta["manifestDigest"])
    inspect = json.loads(tool("skopeo", "inspect", f"oci:{layout}:test"))
    assert inspect["Architecture"] == "amd64" and inspect["Labels"] == {"app": "agent"}
    copy = tmp_path / "copy"
    tool("skopeo", "--insecure-policy", "copy", f"oci:{layout}:test", f"oci:{copy}:test")
    copied = tool("skopeo", "inspect", "--raw", f"oci:{copy}:test")
    assert hashlib.sha256(copied.encode()).hexdigest() == meta["manifestDigest"][7:]

    bundle = tmp_path / "bundle"
    tool("umoci", "unpack", "--rootless", "--image", f"{layout}:test", bundle)
    rootfs = bundle / "rootfs"

    def mode(rel: str) -> int:
        return stat.S_IMODE(os.lstat(rootfs / rel).st_mode)

    assert (rootfs / "usr/bin/agent").read_bytes() == SCRIPT and mode("usr/bin/agent") == 0o755
    assert (rootfs / "usr/local/bin/run").read_bytes() == SCRIPT and mode(
        "usr/local/bin/run"
    ) == 0o755
    assert (rootfs / "etc/app/data.txt").read_text() == "some data\n" and mode(
        "etc/app/data.txt"
    ) == 0o600
    assert mode("etc/app") == 0o755 and mode("usr/local/bin") == 0o755
    assert (rootfs / "opt/app/conf/app.toml").read_text() == "level = 'info'\n"
    assert mode("opt/app/conf/app.toml") == 0o644 and mode("opt/app/bin/run.sh") == 0o755
    assert os.readlink(rootfs / "opt/app/conf/current") == "/etc/app/app.toml"
    assert os.lstat(rootfs / "usr/bin/agent").st_mtime == EPOCH
    # the script runs: it is a real file with its mode, not a copy of some store path
    assert (
        subprocess.run([rootfs / "usr/bin/agent"], capture_output=True, text=True).stdout
        == "hello from nvkr\n"
    )


def test_arm64_platform_carries_the_v8_variant(world):
    result = world.build(arch="arm64", files={"/usr/bin/agent": "agent"})
    assert result["metadata"]["platform"] == {
        "os": "linux",
        "architecture": "arm64",
        "variant": "v8",
    }
    config = json.loads(world.store.read_blob(result["metadata"]["configDigest"]))
    assert (config["architecture"], config["variant"]) == ("arm64", "v8")


_REBUILD = """
import json, os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
os.umask(0o077)
os.environ["TZ"] = "Pacific/Chatham"
time.tzset()
from tests.helpers.container_images import World, FILES
from nvkr.builders import api
from nvkr.builders.container_image.builder import ContainerImageBuilder
api.get_builder("go-binary")
api.REGISTRY["container-image"] = ContainerImageBuilder()
from nvkr.store import Store
tmp = Path(sys.argv[2])
result = World(tmp, Store(tmp / "store")).build(files=FILES, compression=sys.argv[3])
print(json.dumps(result["outputs"]))
"""


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_same_image_across_stores_umasks_and_time_zones(world, tmp_path, repo_root, compression):
    first = world.build(files=FILES, compression=compression)
    other = tmp_path / "elsewhere"
    other.mkdir()
    proc = subprocess.run(
        [sys.executable, "-c", _REBUILD, repo_root, other, compression],
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == first["outputs"]
    for out in first["outputs"]:
        assert (
            other / "store" / "blobs" / "sha256" / out["digest"][7:]
        ).read_bytes() == world.store.read_blob(out["digest"])


def test_empty_scratch_image_has_one_empty_layer(world):
    result = world.build(cmd=["/nothing"])
    layers = [o for o in result["outputs"] if o["role"] == "layer"]
    assert len(layers) == 1


# -- images on a base --------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_image_on_a_base_from_an_oci_layout(world, tmp_path, arch):
    base_index = world.add_base("debian")
    spec = world.plan(
        arch,
        base="debian",
        files={"/usr/bin/agent": "agent"},
        env={"A": "1"},
        cmd=["/usr/bin/agent"],
    )
    assert spec.inputs["base"] == base_index and spec.sources["base"].name == "debian"
    deps = results({k: world.agent_result for k in spec.deps})
    result = run_action(to_action(spec), world.store, deps).to_json()
    layers = [o for o in result["outputs"] if o["role"] == "layer"]
    assert len(layers) == 2
    manifest = json.loads(world.store.read_blob(result["metadata"]["manifestDigest"]))
    assert manifest["annotations"]["org.opencontainers.image.base.digest"] == base_index
    assert "org.opencontainers.image.base.name" not in manifest["annotations"]
    config = json.loads(world.store.read_blob(result["metadata"]["configDigest"]))
    assert config["architecture"] == arch and len(config["rootfs"]["diff_ids"]) == 2
    assert config["config"]["Env"] == ["PATH=/usr/bin:/bin", "A=1"]
    assert config["config"]["Cmd"] == ["/usr/bin/agent"] and config["config"]["Labels"] == {
        "base": "yes"
    }
    assert [h["created"] for h in config["history"]] == ["1970-01-01T00:00:00Z", CREATED]
    layout = tmp_path / "layout"
    write_image_layout(world.store, result, layout)
    bundle = tmp_path / "bundle"
    tool("umoci", "unpack", "--rootless", "--image", f"{layout}:test", bundle)
    assert (bundle / "rootfs/etc/os-release").read_text() == f"ID=nvkr-test\nARCH={arch}\n"
    assert (bundle / "rootfs/usr/bin/agent").read_bytes() == SCRIPT
    assert (bundle / "rootfs/bin/sh").exists()


def test_base_without_the_platform(world):
    world.add_base("amd64only", arches=("amd64",))
    spec = world.plan("arm64", base="amd64only", files={"/usr/bin/agent": "agent"})
    with pytest.raises(
        BuildError, match=r"base 'amd64only'.*no image for linux/arm64/v8; it has linux/amd64"
    ):
        run_action(
            to_action(spec), world.store, results({k: world.agent_result for k in spec.deps})
        )


def test_base_with_no_files_keeps_its_layers_and_changes_the_config(world):
    world.add_base("debian")
    result = world.build(base="debian", labels={"extra": "1"})
    assert len([o for o in result["outputs"] if o["role"] == "layer"]) == 1
    config = json.loads(world.store.read_blob(result["metadata"]["configDigest"]))
    assert config["history"][-1] == {
        "created": CREATED,
        "created_by": "nvkr container-image: config",
        "empty_layer": True,
    }
    assert config["config"]["Labels"] == {"base": "yes", "extra": "1"}


# -- planning ----------------------------------------------------------------------------------------
def test_plan_params_and_inputs(world):
    spec = world.plan(files=FILES)
    assert set(spec.inputs) == {
        "file:/etc/app/data.txt",
        "file:/opt/app",
        "file:/usr/local/bin/run",
    }
    assert spec.deps == (world.artifacts["agent"].key,)
    assert spec.params["platform"] == {"os": "linux", "architecture": "amd64"}
    assert [f["path"] for f in spec.params["files"]] == [
        "etc/app/data.txt",
        "opt/app",
        "usr/bin/agent",
        "usr/local/bin/run",
    ]
    assert canonical_json(spec.params)  # JSON-able, no floats
    # the order of files and env in the recipe does not matter
    again = world.plan(files=dict(reversed(list(FILES.items()))))
    assert to_action(again).key == to_action(spec).key
    assert to_action(world.plan(files=FILES, user="1")).key != to_action(spec).key


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"files": {"/x": {"artifact": "agent", "path": "a"}}}, "'path' selects inside a source"),
        ({"files": {"relative/x": "agent"}}, "normalised absolute path"),
        ({"files": {"/a/../b": "agent"}}, "normalised absolute path"),
        ({"files": {"/x": {"source": "app", "path": "../up"}}}, "without '..'"),
    ],
)
def test_bad_fields_are_refused_by_the_model(fields, message):
    """The kinds files name (an oci source as a file, a path in a file source, '/' for a
    file) are checked before planning: tests/unit/test_plancheck.py."""
    with pytest.raises(pydantic.ValidationError, match=re.escape(message)):
        ContainerImageArtifact(builder="container-image", **fields)


def test_missing_path_in_a_source_is_a_build_error(world):
    with pytest.raises(BuildError, match="source 'app' has no 'nope'"):
        world.build(files={"/x": {"source": "app", "path": "nope"}})


def test_docker_backend_is_delegated(world, monkeypatch):
    calls: list[Any] = []
    params = DockerParams(
        backend="docker",
        platform=platform_of("amd64"),
        dockerfile="Dockerfile",
        buildArgs={},
        entrypoint=[],
        cmd=[],
        env={},
        user=None,
        workdir=None,
        labels={},
        compression="gzip",
        annotations={},
    ).to_json()
    fake = types.SimpleNamespace(
        plan=lambda *a: calls.append(("plan", a)) or ActionSpec(params=params),
        run=lambda ctx: calls.append(("run", ctx.action.params)),
    )
    monkeypatch.setitem(sys.modules, "nvkr.builders.container_image.docker_backend", fake)
    monkeypatch.setattr(nvkr.builders.container_image, "docker_backend", fake, raising=False)
    spec = world.plan(backend="docker", context="app")
    assert spec.params == params
    assert calls[0][0] == "plan" and calls[0][1][0] == "img"
    run_action(to_action(spec), world.store, {})
    assert calls[1] == ("run", params)


# -- through the planner and the executor ----------------------------------------------------------------
RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: images}
epoch: "%(epoch)d"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
sources:
  app: {path: app}
  base: {oci: "oci-layout:base", digest: "%(base)s"}
artifacts:
  img:
    builder: container-image
    base: base
    files:
      /opt/app: {source: app}
      /usr/local/bin/run: {source: app, path: bin/run.sh, mode: "0750"}
    entrypoint: [/usr/local/bin/run]
releaseSet: {name: images}
"""


def test_planned_images_join_into_an_index(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    World(tmp_path, Store(tmp_path / "scratch"))  # writes tmp_path/app
    base = make_base_layout(tmp_path / "base", ("amd64", "arm64"))
    (tmp_path / "images.yaml").write_text(RECIPE % {"epoch": EPOCH, "base": base})
    loaded = load_recipe(tmp_path / "images.yaml")
    store = Store(tmp_path / "store")
    ctx = FetchContext(store=store)
    resolver = Resolver(loaded=loaded, lock_path=tmp_path / "x.lock.json", lock=None, ctx=ctx)
    plan = make_plan(
        loaded,
        expand(loaded, None),
        resolver.source_for,
        epoch=EPOCH,
        lockfile={"path": "x", "digest": "sha256:" + "0" * 64},
    )
    index = next(a for a in plan.actions.values() if a.builder == "image-index")
    sub = Plan(
        recipe=loaded,
        variants=plan.variants,
        epoch=EPOCH,
        actions=plan.actions,
        roots=[index.key],
        release_sets={},
    )
    start = time.monotonic()
    report = execute(sub, store, ctx, jobs=2)
    assert len(report.built) == 3 and time.monotonic() - start < 60
    result = report.results[index.key].to_json()
    index_doc = json.loads(store.read_blob(result["metadata"]["indexDigest"]))
    assert [m["platform"] for m in index_doc["manifests"]] == [
        platform_of("amd64"),
        platform_of("arm64"),
    ]
    blobs = {
        (o["digest"], o["size"]) for k in index.deps for o in report.results[k].to_json()["outputs"]
    }
    top = descriptor(
        mt.OCI_INDEX,
        result["metadata"]["indexDigest"],
        result["metadata"]["indexSize"],
        annotations={mt.ANN_REF_NAME: "images"},
    )
    layout = tmp_path / "dist"
    write_layout(
        layout,
        index_bytes(image_index([top])),
        sorted({*blobs, (top["digest"], top["size"])}),
        store.blob_path,
    )
    raw = tool("skopeo", "inspect", "--raw", f"oci:{layout}:images")
    assert json.loads(raw) == index_doc
    tool(
        "skopeo",
        "--insecure-policy",
        "copy",
        "--all",
        f"oci:{layout}:images",
        f"oci:{tmp_path / 'copy'}:images",
    )
    # a second build is all cached
    again = execute(sub, store, ctx, jobs=2)
    assert again.up_to_date


def _tree_source(world: World, name: str, build) -> None:
    root = world.tmp / name
    root.mkdir()
    build(root)
    digest = world.store.add_bytes(tar_bytes(root, epoch=0)).digest
    entry = lock_entry({"kind": "path", "path": name, "digest": digest})
    world.sources[name] = ResolvedSource(name, PathSource(path=name), entry, world.tmp)


def test_files_never_reach_outside_the_work_dir(world, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host file\n")
    _tree_source(world, "evil", lambda root: (root / "up").symlink_to(outside))
    with pytest.raises(BuildError, match="'up/secret' leads outside the source"):
        world.build(files={"/x": {"source": "evil", "path": "up/secret"}})
    # a later tree merged onto a symlink an earlier one left
    with pytest.raises(BuildError, match="/up, which is already a symlink"):
        world.build(files={"/": {"source": "evil"}, "/up": {"source": "app"}})
    with pytest.raises(BuildError, match="already a file in the image"):
        world.build(files={"/": {"source": "evil"}, "/up/x": {"source": "data"}})
    assert sorted(os.listdir(outside)) == ["secret"]


def test_tree_to_the_root_with_an_explicit_mode(world, tmp_path):
    result = world.build(files={"/": {"source": "app", "mode": "0700"}})
    layer = next(o for o in result["outputs"] if o["role"] == "layer")
    with tarfile.open(
        fileobj=io.BytesIO(gzip.decompress(world.store.read_blob(layer["digest"])))
    ) as tar:
        modes = {m.name: m.mode for m in tar.getmembers()}
    assert modes == {
        "bin": 0o755,
        "bin/run.sh": 0o700,
        "conf": 0o755,
        "conf/app.toml": 0o700,
        "conf/current": 0o777,
    }


# -- dynamically linked binaries -------------------------------------------------------------------
def test_a_dynamic_binary_on_scratch_warns(world):
    """A binary that needs an ELF interpreter cannot start on scratch: the build says so, naming
    the image, the path and the artifact; a static one, or one on a base, does not warn."""
    world.agent_result["metadata"] = {
        "linkage": "dynamic",
        "interpreter": "/lib64/ld-linux-x86-64.so.2",
    }
    result = world.build(files={"/usr/bin/agent": "agent"})
    (warning,) = result["warnings"]
    assert warning["message"] == (
        "image img: /usr/bin/agent (artifact 'agent') is dynamically linked (ELF interpreter "
        "/lib64/ld-linux-x86-64.so.2) and cannot start on base scratch, which has no ELF "
        "interpreter and no libc"
    )
    assert "-extldflags=-static" in warning["hint"] and "cgo: false" in warning["hint"]
    world.add_base("debian")
    on_base = world.build(base="debian", files={"/usr/bin/agent": "agent"})
    assert "warnings" not in on_base
    world.agent_result["metadata"] = {"linkage": "static"}
    assert "warnings" not in world.build(files={"/usr/bin/agent": "agent"})


def test_the_scratch_hint_does_not_recommend_static_linking_to_a_binary_that_loads_libraries(
    world,
):
    """A binary importing dlopen (e.g. to load NVML) would lose that by linking statically."""
    world.agent_result["metadata"] = {
        "linkage": "dynamic",
        "interpreter": "/lib64/ld-linux-x86-64.so.2",
        "loadsLibraries": True,
    }
    (warning,) = world.build(files={"/usr/bin/agent": "agent"})["warnings"]
    assert "loads shared libraries at run time (dlopen)" in warning["message"]
    assert "static" not in warning["hint"] and "cgo: false" not in warning["hint"]
    assert "base image that has libc" in warning["hint"]
