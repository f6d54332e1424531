"""Typed action params read back exactly the params they write: the JSON enters the action key,
so a field that moved, vanished or changed from absent to null would change every key."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from nvkr.builders.container_image import params as ci
from nvkr.builders.go_binary.params import GoBinaryParams
from nvkr.builders.helm_chart.params import HelmChartParams
from nvkr.builders.kube_packages.params import KubePackagesParams
from nvkr.builders.node_image.params import ArtifactFile, NodeImageParams, SourceFile
from nvkr.builders.rootfs.params import RootfsParams
from nvkr.builders.sbom.params import SbomParams

KEY = "sha256:" + "a" * 64
GO = {
    "package": ".",
    "output": "agent",
    "goos": "linux",
    "goarch": "amd64",
    "isa": {"GOAMD64": "v1"},
    "cgo": False,
    "tags": [],
    "ldflags": [],
}
NODE: dict[str, Any] = {
    "arch": "amd64",
    "gpu": "hopper",
    "kubernetes": "1.36",
    "kubernetesVersion": "1.36.3",
    "nvidiaRuntime": None,
    "kubelet": {"maxPods": 110, "extraLabels": {}, "extraArgs": []},
    "sizeBytes": 4 << 30,
    "kernelArgs": [],
    "format": "qcow2",
    "backend": "native",
    "bootTest": False,
    "deps": {"rootfs": KEY},
    "files": [
        {"path": "/usr/bin/x", "mode": None, "action": KEY},
        {"path": "/etc/y", "mode": "0644", "input": "file:/etc/y", "member": None},
    ],
    "sandboxImage": "registry.k8s.io/pause:3.10",
}
IMAGE: dict[str, Any] = {
    "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"},
    "entrypoint": ["/usr/bin/x"],
    "cmd": [],
    "env": {"A": "1"},
    "user": None,
    "workdir": None,
    "labels": {},
    "compression": "gzip",
    "annotations": {"org.opencontainers.image.version": "0.1.0"},
}
DAEMONLESS: dict[str, Any] = {
    **IMAGE,
    "backend": "daemonless",
    "base": "scratch",
    "files": [
        {"path": "usr/bin/x", "artifact": "agent", "action": KEY, "mode": "0755"},
        {
            "path": "etc/app.toml",
            "source": "conf",
            "input": "file:/etc/app.toml",
            "tree": False,
            "select": "",
            "mode": "0644",
        },
        {
            "path": "",
            "source": "app",
            "input": "file:/",
            "tree": True,
            "select": "",
            "mode": None,
        },
        {
            "path": "srv/lib",
            "source": "app",
            "input": "file:/srv/lib#0",
            "tree": True,
            "select": "lib",
            "mode": "0600",
        },
        {
            "path": "usr/lib/python3/dist-packages",
            "source": "wheel",
            "input": "file:/usr/lib/python3/dist-packages",
            "tree": False,
            "unpack": True,
            "select": "",
            "mode": None,
        },
    ],
}
DOCKER: dict[str, Any] = {
    **IMAGE,
    "backend": "docker",
    "dockerfile": "build/Dockerfile",
    "buildArgs": {"VERSION": "1"},
}
CASES: list[tuple[type[BaseModel], dict[str, Any]]] = [
    (GoBinaryParams, GO),
    (GoBinaryParams, {**GO, "cgo": True, "cc": "gcc", "toolsTree": KEY}),
    (
        HelmChartParams,
        {
            "version": "0.1.0",
            "appVersion": None,
            "subdir": None,
            "images": {"image": {"repository": "example.org/a", "index": KEY}},
        },
    ),
    (
        HelmChartParams,
        {
            "version": "0.1.0",
            "appVersion": "1.0",
            "subdir": "charts/a",
            "images": {},
            "check": {"namespace": "kube-system", "values": {"a": {"b": [1, "x"]}}},
        },
    ),
    (
        KubePackagesParams,
        {
            "output": "kube.tar",
            "prefix": "usr/bin",
            "files": [
                {
                    "name": "kubelet",
                    "path": "usr/bin/kubelet",
                    "source": "k",
                    "input": "binary:kubelet",
                    "member": None,
                }
            ],
        },
    ),
    (
        RootfsParams,
        {
            "arch": "arm64",
            "base": "minbase",
            "include": ["systemd"],
            "repositories": [
                {
                    "name": "debian",
                    "url": "http://deb.debian.org/debian",
                    "suite": "bookworm",
                    "components": ["main"],
                    "keyring": KEY,
                }
            ],
            "suite": "bookworm",
            "hostname": "nvkr-node",
        },
    ),
    (
        SbomParams,
        {
            "artifact": "agent",
            "kind": "binary",
            "subject": KEY,
            "binaries": [],
            "images": [],
            "nvkrVersion": "0.1.0",
        },
    ),
    (NodeImageParams, NODE),
    (ci.DaemonlessParams, DAEMONLESS),
    (ci.DaemonlessParams, {**DAEMONLESS, "base": "debian", "files": []}),
    (ci.DaemonlessParams, {**DAEMONLESS, "base": {"rootfs": "tree", "action": KEY}}),
    (ci.DockerParams, DOCKER),
]


@pytest.mark.parametrize(("model", "params"), CASES)
def test_params_round_trip_to_the_same_json(model: type[BaseModel], params: dict[str, Any]) -> None:
    typed = model.model_validate(params)
    assert typed.to_json() == params  # type: ignore[attr-defined]


def test_node_image_files_keep_their_kind() -> None:
    typed = NodeImageParams.model_validate(NODE)
    assert [type(f) for f in typed.files] == [ArtifactFile, SourceFile]


def test_unknown_or_missing_keys_are_refused() -> None:
    with pytest.raises(ValidationError):
        GoBinaryParams.model_validate({**GO, "extra": 1})
    with pytest.raises(ValidationError):
        GoBinaryParams.model_validate({k: v for k, v in GO.items() if k != "cgo"})


def test_container_image_params_keep_their_backend_and_kinds() -> None:
    daemonless = ci.image_params(DAEMONLESS)
    assert isinstance(daemonless, ci.DaemonlessParams)
    assert [type(f) for f in daemonless.files] == [
        ci.ArtifactFile,
        ci.SourceFile,
        ci.TreeFile,
        ci.TreeFile,
        ci.UnpackedFile,
    ]
    assert isinstance(
        ci.image_params({**DAEMONLESS, "base": {"rootfs": "t", "action": KEY}}).base, ci.RootfsBase
    )
    assert isinstance(ci.image_params(DOCKER), ci.DockerParams)
    assert ci.image_params(DOCKER).to_json() == DOCKER


@pytest.mark.parametrize(
    "params",
    [
        # unpack is there only when true: false or null would be another key
        {**DAEMONLESS, "files": [{**DAEMONLESS["files"][1], "unpack": False}]},
        {**DAEMONLESS, "files": [{**DAEMONLESS["files"][1], "unpack": None}]},
        # user and workdir are null when unset, never absent
        {k: v for k, v in DAEMONLESS.items() if k != "user"},
        # a whole file source always has its mode, a select only in a tree
        {**DAEMONLESS, "files": [{**DAEMONLESS["files"][1], "mode": None}]},
        {**DAEMONLESS, "files": [{**DAEMONLESS["files"][1], "select": "a"}]},
        # each backend has only its own fields
        {**DAEMONLESS, "dockerfile": "Dockerfile"},
        {**DOCKER, "files": []},
        {**DOCKER, "backend": "kaniko"},
    ],
)
def test_container_image_params_refuse_what_no_plan_writes(params: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ci.image_params(params)
