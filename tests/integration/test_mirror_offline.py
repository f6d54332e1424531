"""End to end: the default recipe's amd64 hopper variant carried to a store that never saw the
network — ``nvkr mirror export`` from a store holding every locked source, ``nvkr mirror import``
into a fresh store, ``nvkr build --offline`` — gives the artifacts a connected build gives.

The connected reference is the session's ``default_build`` (every variant in one release set):
each artifact the offline build makes for the variant must have the digest the connected build
gave that artifact for that variant. Artifacts joined over the variants' arches (the agent's image
index and the chart pinned to it) are per-variant only in a one-arch build, so they are compared
through the per-arch artifacts they are made of.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.helpers.nvkr import make_clone, run_nvkr

VARIANT = "gpu=hopper,kubernetes=1.36,arch=amd64"
SET = "nvkr-default-k8s1.36"


def _sets(stdout: str) -> dict[str, str]:
    (result,) = [e for e in map(json.loads, stdout.splitlines()) if e.get("event") == "result"]
    return {s["name"]: s["digest"] for s in result["releaseSets"]}


def _by_variant(layout) -> dict[tuple[str, str], str]:
    """``{(artifact name, variant as JSON): digest of its manifest or image index}``."""
    from nvkr.releaseset import read_metadata

    digests = {}
    for a in read_metadata(layout)["artifacts"]:
        top = a.get("manifest") or a["index"]  # multi-arch images have an index
        digests[(a["name"], json.dumps(a["variant"], sort_keys=True))] = top["digest"]
    return digests


@pytest.mark.slow
def test_export_import_offline_build_of_one_variant_matches_the_connected_build(
    default_build, tmp_path
) -> None:
    started = time.monotonic()
    clone = make_clone(tmp_path / "clone")
    sources = default_build.store  # every locked source, fetched by the connected build
    out = tmp_path / "export"
    res = run_nvkr(
        "mirror", "export", "recipes/default.yaml", str(out), "--variant", VARIANT, "--offline",
        cwd=clone, store=sources,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert "skipped path sources" in res.stdout and "default/node-agent" in res.stdout
    doc = json.loads((out / "index.json").read_text())
    kinds = {s["name"]: s["kind"] for s in doc["sources"]}
    assert kinds == {"go": "pypi", "kubectl": "pypi", "node-packages": "apt"}
    assert all(s["variants"] == [VARIANT] for s in doc["sources"])
    (apt,) = [s for s in doc["sources"] if s["kind"] == "apt"]
    debs = [b for b in apt["blobs"] if b.get("package")]
    assert debs and all(b["urls"][0].startswith("http") for b in debs)
    assert doc["blobs"]["count"] == len(os.listdir(out / "blobs" / "sha256")) == len(debs) + 3

    fresh = tmp_path / "fresh"
    res = run_nvkr("mirror", "import", str(out), cwd=clone, store=fresh)
    assert res.code == 0, res.stderr
    assert f"imported {doc['blobs']['count']} blobs" in res.stdout
    moved = time.monotonic() - started

    off = run_nvkr(
        "build", "--variant", VARIANT, "--locked", "--json", "--offline", "--out", "dist-offline",
        cwd=clone, store=fresh,
    )  # fmt: skip
    assert off.code == 0, off.stderr
    built = {e["builder"] for e in off.json_events() if "builder" in e}
    assert {"rootfs", "node-image", "go-binary"} <= built
    offline = _by_variant(clone / "dist-offline" / SET)
    connected = _by_variant(default_build.clone / "dist" / SET)
    per_variant = {k: v for k, v in offline.items() if k[0] in ("agent", "node-image")}
    assert len(per_variant) == 2
    for key, digest in per_variant.items():
        assert connected[key] == digest, key
    print(f"export + import {moved:.1f} s, with the build {time.monotonic() - started:.1f} s")
