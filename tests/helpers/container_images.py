"""Container images for the container-image builder tests: :class:`World` (a store with sources
and planned artifact actions to build images from), base image layouts, the ``FILES`` of the
determinism test, and :func:`write_image_layout` / :func:`tool` to hand an image to skopeo and
umoci."""

from __future__ import annotations

import shutil
import subprocess
import types
from pathlib import Path
from typing import Any

import pytest

from nvkr.action import Action, action_key
from nvkr.builders import api
from nvkr.builders.api import ActionSpec, ResolvedSource
from nvkr.builders.container_image.artifact import ContainerImageArtifact
from nvkr.builders.container_image.builder import ContainerImageBuilder
from nvkr.execute import run_action
from nvkr.fetch.api import resolve
from nvkr.fetch.context import FetchContext
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import image_config, image_manifest, layer_from_tree, platform_of
from nvkr.oci.layout import descriptor, image_index, index_bytes
from nvkr.oci.layoutdir import write_layout
from nvkr.recipe.sources import GitSource, OciSource, PathSource, UrlSource
from nvkr.repro import tar_bytes
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.results import results

EPOCH = 1_764_547_200
CREATED = "2025-12-01T00:00:00Z"
SCRIPT = b"#!/bin/sh\necho hello from nvkr\n"


@pytest.fixture
def container_image_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container-image builder in the registry for the test (``usefixtures`` it)."""
    api.get_builder("go-binary")  # fill the registry first
    monkeypatch.setitem(api.REGISTRY, "container-image", ContainerImageBuilder())


class Refs:
    """PlanRefs over hand-made sources and artifact actions."""

    def __init__(self, sources: dict[str, ResolvedSource], artifacts: dict[str, Action]):
        self.sources, self.artifacts = sources, artifacts

    def source(self, name):
        return self.sources[name]

    def artifact(self, name):
        return self.artifacts[name]

    def image_index(self, name):  # pragma: no cover - images do not name indexes
        raise AssertionError


def variant(arch: str) -> Any:
    return types.SimpleNamespace(arch=arch, gpu="hopper", kubernetes="1.36")


def to_action(spec: ActionSpec, name: str = "img", epoch: int = EPOCH) -> Action:
    key = action_key("container-image", "1", spec.params, spec.inputs, spec.tools, epoch, spec.deps)
    return Action(
        key=key,
        builder="container-image",
        builder_version="1",
        name=name,
        params=spec.params,
        inputs=spec.inputs,
        tools=spec.tools,
        epoch=epoch,
        deps=spec.deps,
        sources=spec.sources,
    )


class World:
    """The sources and artifacts a recipe would have, with their blobs in ``store``."""

    def __init__(self, tmp: Path, store: Store):
        self.tmp, self.store = tmp, store
        tree = tmp / "app"
        (tree / "bin").mkdir(parents=True, exist_ok=True)
        (tree / "bin" / "run.sh").write_bytes(SCRIPT)
        (tree / "bin" / "run.sh").chmod(0o755)
        (tree / "conf").mkdir(exist_ok=True)
        (tree / "conf" / "app.toml").write_text("level = 'info'\n")
        (tree / "conf" / "current").unlink(missing_ok=True)
        (tree / "conf" / "current").symlink_to("/etc/app/app.toml")
        tree_digest = store.add_bytes(tar_bytes(tree, epoch=0)).digest
        data = store.add_bytes(b"some data\n")
        agent = store.add_bytes(SCRIPT)
        self.agent_result = {
            "outputs": [
                {
                    "name": "agent",
                    "digest": agent.digest,
                    "size": agent.size,
                    "mediaType": mt.OCTET_STREAM,
                    "role": "primary",
                }
            ]
        }
        agent_action = Action(
            key=action_key("go-binary", "1", {"a": 1}, {}, {}, EPOCH),
            builder="go-binary",
            builder_version="1",
            name="agent",
            params={"a": 1},
            inputs={},
            tools={},
            epoch=EPOCH,
        )
        git_entry = {
            "kind": "git",
            "url": "https://git.example.org/app.git",
            "commit": "a" * 40,
            "digest": tree_digest,
            "commitTime": 0,
        }
        self.sources = {
            "app": ResolvedSource(
                "app",
                PathSource(path="app"),
                lock_entry({"kind": "path", "path": "app", "digest": tree_digest}),
                tmp,
            ),
            "data": ResolvedSource(
                "data",
                UrlSource(url="https://files.example.org/data.txt", sha256=data.digest[7:]),
                lock_entry(
                    {
                        "kind": "url",
                        "url": "https://files.example.org/data.txt",
                        "digest": data.digest,
                        "size": data.size,
                    }
                ),
                tmp,
            ),
            "repo": ResolvedSource(
                "repo",
                GitSource(git=str(git_entry["url"]), commit="a" * 40),
                lock_entry(git_entry),
                tmp,
            ),
        }
        self.artifacts = {"agent": agent_action}

    def add_base(self, name: str, arches: tuple[str, ...] = ("amd64", "arm64")) -> str:
        """An OCI layout base image (index over ``arches``), resolved into the store."""
        layout = make_base_layout(self.tmp / f"layout-{name}", arches)
        src = OciSource(oci=f"oci-layout:layout-{name}", digest=layout)
        entry = resolve(name, src, FetchContext(store=self.store), base_dir=self.tmp)
        self.sources[name] = ResolvedSource(name, src, entry, self.tmp)
        return layout

    def plan(self, arch: str = "amd64", **fields: Any) -> ActionSpec:
        artifact = ContainerImageArtifact(builder="container-image", **fields)
        return ContainerImageBuilder().plan(
            "img", artifact, variant(arch), Refs(self.sources, self.artifacts)
        )

    def build(self, arch: str = "amd64", **fields: Any) -> dict[str, Any]:
        action = to_action(self.plan(arch, **fields))
        deps = results({k: self.agent_result for k in action.deps})
        return run_action(action, self.store, deps).to_json()


def make_base_layout(root: Path, arches: tuple[str, ...]) -> str:
    store = Store(root.parent / f"{root.name}-store")
    manifests, blobs = [], []
    for arch in arches:
        tree = root.parent / f"{root.name}-tree-{arch}"
        (tree / "etc").mkdir(parents=True)
        (tree / "etc" / "os-release").write_text(f"ID=nvkr-test\nARCH={arch}\n")
        (tree / "bin").mkdir()
        (tree / "bin" / "sh").write_text("#!/bin/false\n")
        (tree / "bin" / "sh").chmod(0o755)
        layer = layer_from_tree(tree, store, epoch=0)
        config = store.add_bytes(
            image_config(
                arch=arch,
                diff_ids=[layer.diff_id],
                epoch=0,
                env={"PATH": "/usr/bin:/bin"},
                cmd=["/bin/sh"],
                labels={"base": "yes"},
            )
        )
        manifest = store.add_bytes(
            image_manifest(
                descriptor(mt.OCI_IMAGE_CONFIG, config.digest, config.size),
                [layer.descriptor()],
                {},
            )
        )
        manifests.append(
            descriptor(mt.OCI_MANIFEST, manifest.digest, manifest.size, platform=platform_of(arch))
        )
        blobs += [layer.digest, config.digest, manifest.digest]
    index = store.add_bytes(index_bytes(image_index(manifests)))
    blobs.append(index.digest)
    (root / "blobs" / "sha256").mkdir(parents=True)
    for d in blobs:
        shutil.copyfile(store.blob_path(d), root / "blobs" / "sha256" / d[7:])
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    top = descriptor(mt.OCI_INDEX, index.digest, index.size, annotations={mt.ANN_REF_NAME: "base"})
    (root / "index.json").write_bytes(index_bytes(image_index([top])))
    return index.digest


def write_image_layout(
    store: Store, result: dict[str, Any], target: Path, tag: str = "test"
) -> None:
    manifest = next(o for o in result["outputs"] if o["role"] == "manifest")
    top = descriptor(
        manifest["mediaType"],
        manifest["digest"],
        manifest["size"],
        annotations={mt.ANN_REF_NAME: tag},
    )
    blobs = [(o["digest"], o["size"]) for o in result["outputs"]]
    write_layout(target, index_bytes(image_index([top])), blobs, store.blob_path)


def tool(*argv: str | Path) -> str:
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"{argv}: {proc.stderr}"
    return proc.stdout


FILES = {
    "/usr/bin/agent": "agent",
    "/etc/app/data.txt": {"source": "data", "mode": "0600"},
    "/opt/app": {"source": "app"},
    "/usr/local/bin/run": {"source": "app", "path": "bin/run.sh"},
}
