"""A small recipe to fan out, for tests of ``build --action``, ``plan --fan-out`` and
``ci generate``: two GPU generations x two arches of a container image (files from a path
source, so it builds in seconds with no toolchain and no network), its multi-arch index, a Helm
chart pinning it, and a per-variant image whose label names the GPU (so the variants differ).
Written into a directory laid out as a project: ``recipes/fan.yaml``, ``files/``, ``charts/``."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers import REPO

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: fan}
epoch: "1700000000"
matrix:
  gpu: [hopper, blackwell]
  kubernetes: ["1.36"]
  arch: [amd64, arm64]
sources:
  files: {path: ../files}
  charts: {path: ../charts}
artifacts:
  tool-image:
    builder: container-image
    files: {/opt/tool: {source: files}}
  gpu-image:
    builder: container-image
    files: {/opt/tool: {source: files}}
    labels: {dev.nvkr.gpu: "{{ gpu }}"}
  tool-chart:
    builder: helm-chart
    source: charts
    subdir: node-agent
    version: "0.1.0"
    images: {image: {artifact: tool-image, repository: registry.example/tool}}
releaseSet:
  name: "fan-k8s{{ kubernetes }}"
  clusterRelease: {kubernetes: "1.36.4", charts: [tool-chart], images: [tool-image]}
"""


def write_fan_project(root: Path, recipe: str = RECIPE) -> Path:
    """``root`` laid out as a project holding the fan recipe; returns ``root``."""
    (root / "recipes").mkdir(parents=True)
    (root / "recipes" / "fan.yaml").write_text(recipe)
    (root / "files").mkdir()
    (root / "files" / "tool.conf").write_text("greeting = hello\n")
    shutil.copytree(REPO / "charts", root / "charts")
    return root
