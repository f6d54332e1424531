"""Typed action params read back exactly the params they write: the JSON enters the action key,
so a field that moved, vanished or changed from absent to null would change every key."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

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
