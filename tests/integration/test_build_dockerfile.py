"""A Dockerfile recipe built by `nvkr build` through podman's Docker-API service, twice, in two
stores: the release sets are identical."""

from __future__ import annotations

import shutil

import pytest

from tests.helpers import REPO
from tests.helpers.nvkr import run_nvkr

pytestmark = pytest.mark.slow

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: greeter}
epoch: "1700000000"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
sources:
  context: {path: ../context}
artifacts:
  greeter-image:
    builder: container-image
    backend: docker
    context: context
    dockerfile: Dockerfile
    labels: {org.opencontainers.image.title: greeter}
releaseSet: {name: greeter}
"""


def _project(root):
    (root / "recipes").mkdir(parents=True)
    (root / "recipes" / "greeter.yaml").write_text(RECIPE)
    shutil.copytree(REPO / "tests" / "fixtures" / "dockerfile", root / "context")
    return root


def test_dockerfile_recipe_is_reproducible_through_podman(tmp_path, podman_docker_host):
    builds = []
    for n in range(2):
        proj = _project(tmp_path / f"proj{n}")
        res = run_nvkr(
            "build",
            "recipes/greeter.yaml",
            "--json",
            cwd=proj,
            store=tmp_path / f"store{n}",
            env={"DOCKER_HOST": podman_docker_host},
            umask=0o022 if n == 0 else 0o002,
        )
        assert res.code == 0, res.stderr
        result = res.json_events()[-1]
        assert result["built"], "the first build in a fresh store runs the builders"
        index = (proj / "dist" / "greeter" / "index.json").read_bytes()
        builds.append((result["releaseSets"][0]["digest"], index))
    assert builds[0] == builds[1]


def test_without_a_socket_the_docker_backend_says_so_in_one_line(tmp_path):
    proj = _project(tmp_path / "proj")
    res = run_nvkr(
        "build",
        "recipes/greeter.yaml",
        cwd=proj,
        store=tmp_path / "store",
        env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"},
    )
    assert res.code == 1
    error = [line for line in res.stderr.splitlines() if line.startswith("error[")]
    assert len(error) == 1 and "DOCKER_HOST" in error[0], res.stderr
    assert "Traceback" not in res.stderr
