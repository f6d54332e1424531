"""The typed release-set spec (:mod:`nvkr.releasespec`): what the planner writes into the
release-set action's params comes back from them unchanged, and params of another shape are
refused naming the set, the field and what was expected."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from nvkr.action import ReleaseKind
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError
from nvkr.releasespec import ReleaseSetSpec
from tests.helpers.golden import current_plan

HEX = "sha256:" + "4" * 64


def _params() -> dict[str, Any]:
    """A spec as the planner writes it, with a cgo binary's release field and a node pool."""
    variant = {"gpu": "hopper", "kubernetes": "1.36", "arch": "amd64"}
    return {
        "name": "set-1.36",
        "epoch": 1764547200,
        "recipe": {"path": "recipes/r.yaml", "digest": HEX},
        "lockfile": {"path": "lockfiles/r.lock.json", "digest": HEX},
        "nvkrVersion": "0.1.0",
        "variants": [variant],
        "artifacts": [
            {
                "name": "agent",
                "kind": "binary",
                "actionKey": "sha256:" + "1" * 64,
                "sbomActionKey": "sha256:" + "2" * 64,
                "builder": "go-binary",
                "builderVersion": "1",
                "variant": variant,
                "platform": {"os": "linux", "architecture": "amd64"},
                "artifactType": "application/vnd.nvkr.binary.v1",
                "dependencies": [{"name": "agent-src", "digest": {"sha256": "3" * 64}}],
                "cToolchain": {"cc": "gcc-12", "packages": {"gcc-12": "12.2.0-14"}},
            }
        ],
        "machineImages": [],
        "clusterRelease": {"kubernetes": "1.36.3", "charts": [], "images": []},
        "nodePoolReleases": [
            {"name": "gpu", "machineImage": None, "artifacts": ["agent"], "variant": variant}
        ],
    }


def test_the_default_recipes_spec_reads_back_to_the_same_params(tmp_path: Path) -> None:
    plan = current_plan(tmp_path / "store")
    specs = [a["params"] for a in plan["actions"] if a["builder"] == "release-set"]
    assert specs, "the default recipe plans a release set"
    for params in specs:
        spec = ReleaseSetSpec.from_params(params)
        assert spec.to_params() == params
        assert canonical_json(spec.to_params()) == canonical_json(params)  # the key's bytes
        assert spec.artifacts and spec.cluster_release is not None


def test_a_builders_release_fields_ride_along_verbatim() -> None:
    params = _params()
    spec = ReleaseSetSpec.from_params(params)
    assert list(spec.to_params()) == list(params)  # the planner's key order, too
    assert spec.to_params() == params
    (art,) = spec.artifacts
    assert art.c_toolchain == {"cc": "gcc-12", "packages": {"gcc-12": "12.2.0-14"}}
    assert art.kind is ReleaseKind.BINARY and art.extra == {"cToolchain": art.c_toolchain}


def test_a_spec_from_before_kinds_holds_binaries() -> None:
    params = _params()
    del params["artifacts"][0]["kind"]
    assert ReleaseSetSpec.from_params(params).artifacts[0].kind is ReleaseKind.BINARY


def _set(params: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    target = params
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("recipe",), _DELETE, "recipe is null, expected an object"),
        (("lockfile", "digest"), 5, "lockfile.digest is a number, expected a string"),
        (("nvkrVersion",), None, "nvkrVersion is null, expected a string"),
        (("variants",), {"gpu": "x"}, "variants is an object, expected a list"),
        (("variants", 0, "arch"), 64, r"variants\[0\]\.arch is a number, expected a string"),
        (("artifacts", 0, "actionKey"), _DELETE, r"artifacts\[0\]\.actionKey is null"),
        (("artifacts", 0, "platform"), "linux", r"artifacts\[0\]\.platform is a string"),
        (("artifacts", 0, "dependencies"), [3], r"artifacts\[0\]\.dependencies\[0\] is a number"),
        (("artifacts", 0, "sbomActionKey"), [], r"artifacts\[0\]\.sbomActionKey is a list, expected a string or null"),
        (("machineImages",), [1], r"machineImages\[0\] is a number, expected a string"),
        (("clusterRelease", "charts"), "agent", "clusterRelease.charts is a string, expected a list"),
        (("nodePoolReleases", 0, "name"), None, r"nodePoolReleases\[0\]\.name is null"),
    ],
)  # fmt: skip
def test_params_of_another_shape_name_the_field(
    path: tuple[Any, ...], value: Any, message: str
) -> None:
    params = copy.deepcopy(_params())
    _set(params, path, value)
    with pytest.raises(BuildError, match=f"release set set-1.36: {message}"):
        ReleaseSetSpec.from_params(params)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "../up", "release set name '../up' is not usable"),
        ("name", None, "release set name None is not usable"),
        ("epoch", -1, "epoch is -1, expected seconds since 1970"),
        ("epoch", True, "epoch is True, expected seconds since 1970"),
    ],
)
def test_the_name_and_epoch_rules(field: str, value: Any, message: str) -> None:
    with pytest.raises(BuildError, match=message):
        ReleaseSetSpec.from_params({**_params(), field: value})


def test_an_unknown_kind_is_refused() -> None:
    params = _params()
    params["artifacts"][0]["kind"] = "internal"
    with pytest.raises(BuildError, match="artifact agent has kind 'internal', expected one of"):
        ReleaseSetSpec.from_params(params)
