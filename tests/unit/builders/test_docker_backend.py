"""The docker backend of the container-image builder, through a real podman Docker-API service.

The build context is ``tests/fixtures/dockerfile`` (``FROM scratch`` + ``COPY``: no pull, no
network, no emulation). Builds run the backend's ``run`` on hand-made actions, so these tests need
neither the planner nor the container-image builder.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import docker
import pydantic
import pytest

from nvkr.action import Action, action_key
from nvkr.builders.api import ActionContext, ResolvedSource
from nvkr.builders.container_image import docker_backend as backend
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.errors import BuildError, ToolError
from nvkr.oci import mediatypes as mt
from nvkr.recipe.matrix import Variant
from nvkr.repro import tar_bytes
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.podman import podman_service

#: the tests that build through podman's service (the plan and model tests need none)
slow = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "dockerfile"
EPOCH = 1764547200


class Refs:
    """PlanRefs over a fixed table of sources."""

    def __init__(self, sources: dict[str, ResolvedSource]) -> None:
        self.sources = sources

    def source(self, name: str) -> ResolvedSource:
        return self.sources[name]

    def artifact(self, name: str) -> Action:  # pragma: no cover - not used by the backend
        raise AssertionError(name)

    def image_index(self, name: str) -> Action:  # pragma: no cover - not used by the backend
        raise AssertionError(name)


def _variant(arch: str) -> Variant:
    return cast(Variant, SimpleNamespace(gpu="hopper", kubernetes="1.36", arch=arch))


def _context_source(store: Store, root: Path = FIXTURE) -> ResolvedSource:
    """The context as the path fetcher stores it: a deterministic tar (epoch 0)."""
    digest = store.add_bytes(tar_bytes(root, epoch=0)).digest
    return ResolvedSource(
        name="greeter-src",
        spec=None,
        entry=lock_entry({"kind": "path", "path": "greeter", "digest": digest}),
        base_dir=root,
    )


def _artifact(**fields: Any) -> ContainerImageArtifact:
    base: dict[str, Any] = {
        "builder": "container-image",
        "backend": "docker",
        "context": "greeter-src",
        "labels": {"org.example.overridden": "from-recipe"},
        "env": {"LOG_LEVEL": "info"},
        "annotations": {"org.opencontainers.image.title": "greeter"},
        "version": "1.2.3",
    }
    return ContainerImageArtifact.model_validate(base | fields)


def _action(store: Store, arch: str = "amd64", context: Path = FIXTURE, **fields: Any) -> Action:
    src = _context_source(store, context)
    spec = backend.plan("greeter", _artifact(**fields), _variant(arch), Refs({src.name: src}))
    key = action_key("container-image", "1", spec.params, spec.inputs, spec.tools, EPOCH)
    return Action(
        key=key,
        builder="container-image",
        builder_version="1",
        name="greeter",
        params=spec.params,
        inputs=spec.inputs,
        tools=spec.tools,
        epoch=EPOCH,
        sources=spec.sources,
    )


@dataclass
class Built:
    store: Store
    outputs: list[dict[str, Any]]
    metadata: dict[str, Any]

    def role(self, role: str) -> list[dict[str, Any]]:
        return [o for o in self.outputs if o["role"] == role]

    def json(self, role: str) -> dict[str, Any]:
        (out,) = self.role(role)
        doc: dict[str, Any] = json.loads(self.store.read_blob(out["digest"]))
        return doc


def _build(store: Store, docker_host: str, mp: pytest.MonkeyPatch, **kw: Any) -> Built:
    action = _action(store, **kw)
    mp.setenv("DOCKER_HOST", docker_host)
    with store.workdir() as workdir:
        ctx = ActionContext(action, store, workdir, {})
        backend.run(ctx)
    return Built(store, [o.to_json() for o in ctx.outputs], ctx.metadata)


def _daemon_images(docker_host: str) -> list[str]:
    client = docker.DockerClient(base_url=docker_host)
    try:
        return sorted(str(i.id) for i in client.images.list(all=True))
    finally:
        client.close()


@pytest.fixture(scope="module")
def built(podman_docker_host: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """The fixture context built once for amd64 into a fresh store."""
    with pytest.MonkeyPatch.context() as mp:
        yield _build(Store(tmp_path_factory.mktemp("store")), podman_docker_host, mp)


# -- plan -------------------------------------------------------------------------------------


def test_plan_binds_the_context_and_the_platform(tmp_path: Path) -> None:
    store = Store(tmp_path)
    src = _context_source(store)
    artifact = _artifact(buildArgs={"B": "2", "A": "1"}, dockerfile="./Dockerfile")
    spec = backend.plan("greeter", artifact, _variant("arm64"), Refs({src.name: src}))
    assert spec.inputs == {"context": src.digest}
    assert spec.sources == {"context": src}
    p = spec.params
    assert p["backend"] == "docker"
    assert p["platform"] == {"os": "linux", "architecture": "arm64", "variant": "v8"}
    assert p["dockerfile"] == "Dockerfile"
    assert list(p["buildArgs"]) == ["A", "B"]
    assert p["labels"] == {"org.example.overridden": "from-recipe"}
    assert p["annotations"] == {
        "org.opencontainers.image.title": "greeter",
        "org.opencontainers.image.version": "1.2.3",
    }


def test_plan_annotates_the_revision_of_a_git_source(tmp_path: Path) -> None:
    store = Store(tmp_path)
    src = _context_source(store)
    commit = "0123456789abcdef0123456789abcdef01234567"
    url = "https://example.org/greeter.git"
    git = ResolvedSource(
        "repo",
        None,
        lock_entry({"kind": "git", "url": url, "commit": commit, "digest": src.digest}),
        tmp_path,
    )
    refs = Refs({src.name: src, "repo": git})
    spec = backend.plan("greeter", _artifact(revisionSource="repo"), _variant("amd64"), refs)
    assert spec.params["annotations"]["org.opencontainers.image.revision"] == commit
    assert spec.params["annotations"]["org.opencontainers.image.source"] == url


def test_a_dockerfile_outside_the_context_is_refused_by_the_model() -> None:
    """(A context that is no tree is checked before planning: tests/unit/test_plancheck.py.)"""
    with pytest.raises(pydantic.ValidationError, match="relative to the source's root"):
        _artifact(dockerfile="../Dockerfile")
    with pytest.raises(pydantic.ValidationError, match="must name a file inside the context"):
        _artifact(dockerfile=".")


# -- no daemon --------------------------------------------------------------------------------


def test_no_socket_is_one_line_tool_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "store")
    action = _action(store)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with store.workdir() as workdir, pytest.raises(ToolError) as err:
        backend.run(ActionContext(action, store, workdir, {}))
    assert err.value.message.startswith(backend.NO_SOCKET)
    assert f"unix://{tmp_path}/nothing.sock" in err.value.message
    assert "\n" not in err.value.render()


# -- a real build -----------------------------------------------------------------------------


@slow
def test_outputs_are_an_oci_image_in_the_store(built: Built, podman_docker_host: str) -> None:
    layers = built.role("layer")
    assert len(layers) == 2 and {o["mediaType"] for o in layers} == {mt.OCI_LAYER_TAR_GZIP}
    for out in built.outputs:
        built.store.verify_blob(out["digest"])
        assert built.store.blob_path(out["digest"]).stat().st_size == out["size"]
    (config_out,) = built.role("config")
    (manifest_out,) = built.role("manifest")
    assert config_out["mediaType"] == mt.OCI_IMAGE_CONFIG
    assert manifest_out["mediaType"] == mt.OCI_MANIFEST
    assert built.metadata == {
        "platform": {"os": "linux", "architecture": "amd64"},
        "manifestDigest": manifest_out["digest"],
        "configDigest": config_out["digest"],
    }
    manifest = built.json("manifest")
    assert manifest["config"]["digest"] == config_out["digest"]
    assert [d["digest"] for d in manifest["layers"]] == [o["digest"] for o in layers]
    assert manifest["annotations"] == {
        "org.opencontainers.image.created": "2025-12-01T00:00:00Z",
        "org.opencontainers.image.title": "greeter",
        "org.opencontainers.image.version": "1.2.3",
    }
    assert [o["name"] for o in built.outputs] == [
        "layer-0.tar.gz",
        "layer-1.tar.gz",
        "config.json",
        "manifest.json",
    ]
    assert _daemon_images(podman_docker_host) == [], "the built image and its steps are removed"


@slow
def test_config_merges_the_dockerfile_and_the_recipe(built: Built) -> None:
    config = built.json("config")
    assert config["architecture"] == "amd64" and config["os"] == "linux"
    c = config["config"]
    assert c["Entrypoint"] == ["/usr/local/bin/greet"]
    assert c["Cmd"] == ["--name", "world"]
    assert c["User"] == "65532:65532"
    assert c["WorkingDir"] == "/srv/greeter"
    assert set(c["Env"]) == {"PATH=/usr/local/bin", "GREETING=hello", "LOG_LEVEL=info"}
    assert c["Labels"] == {
        "org.example.fixture": "dockerfile",
        "org.example.overridden": "from-recipe",
    }, "the recipe wins, the daemon's own label is gone"
    history = config["history"]
    assert history and all(h["created"] == "2025-12-01T00:00:00Z" for h in history)
    assert not any("comment" in h for h in history)
    assert len([h for h in history if not h.get("empty_layer")]) == len(built.role("layer"))
    diff_ids = []
    for out in built.role("layer"):
        raw = gzip.decompress(built.store.read_blob(out["digest"]))
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
    assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}


@slow
def test_layers_are_deterministic_tars(built: Built) -> None:
    names: list[str] = []
    for out in built.role("layer"):
        blob = built.store.read_blob(out["digest"])
        assert blob[4:8] == b"\0\0\0\0", "gzip mtime 0"
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
            members = tar.getmembers()
        assert [m.name.encode() for m in members] == sorted(m.name.encode() for m in members)
        for m in members:
            assert m.mtime <= EPOCH, f"{m.name}: mtime {m.mtime} after the epoch"
            assert not {"atime", "ctime", "mtime"} & set(m.pax_headers), m.pax_headers
        names += [m.name.rstrip("/") for m in members]
    assert "etc/greeter/greeter.toml" in names and "usr/local/bin/greet" in names


@slow
def test_rebuilds_give_the_same_manifest(
    built: Built,
    podman_docker_host: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same service, after the first build's image was removed, into another store ...
    again = _build(Store(tmp_path / "store2"), podman_docker_host, monkeypatch)
    assert again.metadata["manifestDigest"] == built.metadata["manifestDigest"]
    assert again.outputs == built.outputs
    # ... and a fresh service with empty storage, into a third store.
    with podman_service(tmp_path / "podman2") as fresh:
        third = _build(Store(tmp_path / "store3"), fresh, monkeypatch)
    assert third.metadata["manifestDigest"] == built.metadata["manifestDigest"]


@slow
def test_umoci_unpacks_the_image(built: Built, tmp_path: Path) -> None:
    umoci = shutil.which("umoci")
    assert umoci, "umoci is not installed: apt-get install umoci"
    layout = tmp_path / "layout"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    for out in built.outputs:
        shutil.copyfile(
            built.store.blob_path(out["digest"]),
            layout / "blobs" / "sha256" / out["digest"].split(":", 1)[1],
        )
    (manifest,) = built.role("manifest")
    desc = {k: manifest[k] for k in ("mediaType", "digest", "size")}
    desc["annotations"] = {mt.ANN_REF_NAME: "greeter"}
    index = {"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": [desc]}
    (layout / "index.json").write_text(json.dumps(index))
    bundle = tmp_path / "bundle"
    proc = subprocess.run(
        [umoci, "unpack", "--image", f"{layout}:greeter", str(bundle)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    rootfs = bundle / "rootfs"
    assert (rootfs / "etc" / "greeter" / "greeter.toml").read_text() == 'greeting = "hello"\n'
    greet = rootfs / "usr" / "local" / "bin" / "greet"
    assert greet.stat().st_mode & 0o111
    process = json.loads((bundle / "config.json").read_text())["process"]
    assert process["args"] == ["/usr/local/bin/greet", "--name", "world"]
    assert process["cwd"] == "/srv/greeter"
    assert process["user"]["uid"] == 65532


@slow
def test_foreign_platform_builds_without_run_steps(
    podman_docker_host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    arm = _build(Store(tmp_path / "store"), podman_docker_host, monkeypatch, arch="arm64")
    assert arm.metadata["platform"] == {"os": "linux", "architecture": "arm64", "variant": "v8"}
    assert arm.json("config")["architecture"] == "arm64"


@slow
def test_foreign_run_step_without_emulation_names_the_platform(
    podman_docker_host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = tmp_path / "ctx"
    shutil.copytree(FIXTURE, context)
    with open(context / "Dockerfile", "a") as f:
        f.write('RUN ["/usr/local/bin/greet"]\n')
    monkeypatch.setattr(backend, "_emulated", lambda arch: False)
    with pytest.raises(BuildError) as err:
        _build(
            Store(tmp_path / "s"), podman_docker_host, monkeypatch, arch="arm64", context=context
        )
    assert "linux/arm64" in err.value.message and "emulation" in err.value.message
    assert err.value.hint and "qemu-user-static" in err.value.hint
    assert _daemon_images(podman_docker_host) == [], "a failed build leaves no images behind"


@slow
def test_failed_build_shows_the_daemon_log(
    podman_docker_host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = tmp_path / "ctx"
    shutil.copytree(FIXTURE, context)
    with open(context / "Dockerfile", "a") as f:
        f.write("COPY missing.txt /missing.txt\n")
    with pytest.raises(BuildError) as err:
        _build(Store(tmp_path / "s"), podman_docker_host, monkeypatch, context=context)
    assert "docker build for linux/amd64 failed" in err.value.message
    assert "missing.txt" in err.value.message
    assert _daemon_images(podman_docker_host) == []


@slow
def test_a_missing_dockerfile_is_named(
    podman_docker_host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BuildError, match="no 'images/Dockerfile'"):
        _build(
            Store(tmp_path / "s"), podman_docker_host, monkeypatch, dockerfile="images/Dockerfile"
        )
