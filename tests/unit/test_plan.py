"""The planner: action keys, dedupe across variants, artifact references, image-index joins."""

from __future__ import annotations

from typing import Any

import pytest

from nvkr.builders import api
from nvkr.builders.api import ActionSpec
from nvkr.errors import RecipeReferenceError
from nvkr.fetch.context import FetchContext
from nvkr.lock import Resolver
from nvkr.plan import make_plan
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from nvkr.store import Store

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: planned}
matrix:
  gpu: [hopper, blackwell]
  kubernetes: ["1.36"]
  arch: [amd64, arm64]
sources:
  code: {path: code}
artifacts:
  bin: {builder: go-binary, source: code, toolchain: code}
  img: {builder: container-image, files: {/usr/bin/bin: %(img_file)s}}
  chart:
    builder: helm-chart
    source: code
    version: "0.1.0"
    images: {image: {artifact: img, repository: example.org/img}}
releaseSet:
  name: planned
  artifacts: [%(wanted)s]
"""


class Fake(api.Builder[Any]):
    """A builder that plans by the rules of the real one of the same name, minus the work."""

    version = "1"

    def __init__(self, real):
        self.real = real
        self.name, self.per_arch, self.release_kind = real.name, real.per_arch, real.release_kind
        self.artifact_model = real.artifact_model

    def sbom_inputs(self, action, actions):
        if self.name == "container-image":  # the real one reads its own params; these have no files
            return api.SbomInputs()
        return self.real.sbom_inputs(action, actions)

    def plan(self, artifact_name, artifact, variant, refs):
        params = {"arch": variant.arch} if self.per_arch else {}
        deps: list[str] = []
        if artifact.builder == "container-image":
            deps = [
                refs.artifact(v if isinstance(v, str) else v.artifact).key
                for v in artifact.files.values()
            ]
        if artifact.builder == "helm-chart":
            deps = [refs.image_index(i.artifact).key for i in artifact.images.values()]
        src = refs.source("code")
        return ActionSpec(
            params=params, inputs={"src": src.digest}, sources={"src": src}, deps=tuple(deps)
        )

    def check(self, artifact_name, artifact, variant):
        return []  # the real builders' checks are tests/unit/test_plancheck.py's

    def run(self, ctx):  # pragma: no cover - plans only
        raise AssertionError


@pytest.fixture
def fakes(monkeypatch):
    api.get_builder("go-binary")  # fill the registry first
    for name in ("go-binary", "container-image", "helm-chart"):
        monkeypatch.setitem(api.REGISTRY, name, Fake(api.REGISTRY[name]))


def _plan(tmp_path, img_file="bin", wanted="bin, img, chart"):
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "main.go").write_text("package main\n")
    path = tmp_path / "planned.yaml"
    path.write_text(RECIPE % {"img_file": img_file, "wanted": wanted})
    loaded = load_recipe(path)
    variants = expand(loaded, None)
    store = Store(tmp_path / "store")
    resolver = Resolver(
        loaded=loaded, lock_path=tmp_path / "x.lock.json", lock=None, ctx=FetchContext(store=store)
    )
    return make_plan(
        loaded,
        variants,
        resolver.source_for,
        epoch=0,
        lockfile={"path": "x", "digest": "sha256:" + "0" * 64},
    )


def test_images_join_across_arches_and_dedupe_across_gpus(fakes, tmp_path):
    plan = _plan(tmp_path)
    by_builder: dict[str, list] = {}
    for action in plan.actions.values():
        by_builder.setdefault(action.builder, []).append(action)
    # 4 variants; binaries and images differ only by arch, so 2 each; one index, one chart.
    assert {b: len(a) for b, a in by_builder.items()} == {
        "go-binary": 2,
        "container-image": 2,
        "image-index": 1,
        "helm-chart": 1,
        "sbom": 4,  # one per released action: 2 binaries, the index, the chart
        "release-set": 1,
    }
    index = by_builder["image-index"][0]
    assert index.params["platforms"] == [
        {"os": "linux", "architecture": "amd64"},
        {"os": "linux", "architecture": "arm64"},
    ]
    assert set(index.deps) == {a.key for a in by_builder["container-image"]}
    chart = by_builder["helm-chart"][0]
    assert chart.deps == (index.key,)
    release = plan.actions[plan.roots[0]]
    kinds = {(e["name"], e["kind"], e["actionKey"]) for e in release.params["artifacts"]}
    assert ("img", "image", index.key) in kinds and ("chart", "chart", chart.key) in kinds
    # Provenance of the image lists the sources of everything it was built from.
    img_entry = next(e for e in release.params["artifacts"] if e["name"] == "img")
    assert [d["name"] for d in img_entry["dependencies"]] == ["code"]


def test_plan_is_stable(fakes, tmp_path):
    assert _plan(tmp_path).build_digest == _plan(tmp_path).build_digest


def test_artifact_cycle_is_a_reference_error(fakes, tmp_path):
    with pytest.raises(RecipeReferenceError, match="cycle: img -> img"):
        _plan(tmp_path, img_file="img", wanted="img")


def test_a_leading_v_gives_the_same_release_set(fakes, tmp_path):
    """`kubernetes: v1.36.4` and `1.36.4` are one version: the same action keys, release set
    included (its metadata records the cluster version and the recipe digest)."""
    digests = set()
    for spelling in ("1.36.4", "v1.36.4"):
        project = tmp_path / spelling  # the same recipe path in each (it is recorded too)
        (project / "code").mkdir(parents=True)
        (project / "code" / "main.go").write_text("package main\n")
        path = project / "planned.yaml"
        path.write_text(
            RECIPE % {"img_file": "bin", "wanted": "bin, img, chart"}
            + f"  clusterRelease: {{kubernetes: {spelling}, charts: [chart], images: [img]}}\n"
        )
        loaded = load_recipe(path)
        store = Store(tmp_path / "store")
        resolver = Resolver(
            loaded=loaded, lock_path=tmp_path / "x.lock.json", lock=None, ctx=FetchContext(store)
        )
        plan = make_plan(
            loaded,
            expand(loaded, None),
            resolver.source_for,
            epoch=0,
            lockfile={"path": "x", "digest": "sha256:" + "0" * 64},
        )
        (key,) = plan.release_sets.values()
        assert plan.actions[key].params["clusterRelease"]["kubernetes"] == "1.36.4"
        digests.add(plan.build_digest)
    assert len(digests) == 1


HERMETIC = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: hermetic}
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
sources:
  code: {path: code}
artifacts:
  daemonless: {builder: container-image, files: {/etc/motd: {source: code, path: motd}}}
  dockerfile: {builder: container-image, backend: docker, context: code}
releaseSet:
  name: hermetic
  artifacts: [%(wanted)s]
"""


def _plan_real(tmp_path, wanted):
    """Plan ``HERMETIC`` with the real builders (nothing here needs a lockfile)."""
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "motd").write_text("hello\n")
    (tmp_path / "code" / "Dockerfile").write_text("FROM scratch\nCOPY motd /etc/motd\n")
    path = tmp_path / "hermetic.yaml"
    path.write_text(HERMETIC % {"wanted": wanted})
    loaded = load_recipe(path)
    store = Store(tmp_path / "store")
    resolver = Resolver(
        loaded=loaded, lock_path=tmp_path / "x.lock.json", lock=None, ctx=FetchContext(store=store)
    )
    return make_plan(
        loaded,
        expand(loaded, None),
        resolver.source_for,
        epoch=0,
        lockfile={"path": "x", "digest": "sha256:" + "0" * 64},
    )


def test_docker_builds_are_not_hermetic_nor_is_what_reads_them(tmp_path):
    """The Docker daemon (and the base images it resolves) is outside every key: its images,
    their index and SBOM, and the release set holding them may not be shared; the daemonless
    image next to them may."""
    plan = _plan_real(tmp_path, "daemonless, dockerfile")
    by_name = {a.name: a for a in plan.actions.values()}
    hermetic = {name: a.hermetic for name, a in by_name.items()}
    assert hermetic == {
        "daemonless [amd64]": True,
        "daemonless [arm64]": True,
        "daemonless": True,  # the image index
        "sbom daemonless": True,
        "dockerfile [amd64]": False,
        "dockerfile [arm64]": False,
        "dockerfile": False,
        "sbom dockerfile": False,
        "release set hermetic": False,
    }
    assert [a["hermetic"] for a in plan.to_json()["actions"]] == [
        a.hermetic for a in plan.actions.values()
    ]
    # the property is no part of the key: the same recipe with only daemonless images has the
    # same keys for them
    alone = _plan_real(tmp_path, "daemonless")
    assert {a.key for a in alone.actions.values() if a.name.startswith("daemonless")} == {
        a.key for a in by_name.values() if a.name.startswith("daemonless")
    }
    assert all(a.hermetic for a in alone.actions.values())
