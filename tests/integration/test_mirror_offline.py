"""End to end: the default recipe's amd64 hopper variant carried to a store that never saw the
network — ``nvkr mirror export`` from a store holding every locked source, ``nvkr mirror import``
into a fresh store, ``nvkr build --offline`` — gives the release set a connected build gives.

The connected reference is a build of the same variant from the store the export came from, run
at the same time as the offline one (the session's ``default_build`` holds every variant in one
release set, so it has no single-variant digest to compare with).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.conftest import make_clone, run_nvkr, start_nvkr

VARIANT = "gpu=hopper,kubernetes=1.36,arch=amd64"
SET = "nvkr-default-k8s1.36"


def _sets(stdout: str) -> dict[str, str]:
    (result,) = [e for e in map(json.loads, stdout.splitlines()) if e.get("event") == "result"]
    return {s["name"]: s["digest"] for s in result["releaseSets"]}


@pytest.mark.slow
def test_export_import_offline_build_of_one_variant_matches_the_connected_build(
    seed_store, tmp_path
) -> None:
    started = time.monotonic()
    clone = make_clone(tmp_path / "clone")
    sources = seed_store(tmp_path / "sources")
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

    # the offline build from the imported store and, at the same time, the connected reference
    # from the store the export came from (default_build's release set holds every variant)
    build = ("build", "--variant", VARIANT, "--locked", "--json")
    offline = start_nvkr(*build, "--offline", "--out", "dist-offline", cwd=clone, store=fresh)
    reference = start_nvkr(*build, "--out", "dist-connected", cwd=clone, store=sources)
    off, ref = offline.result(), reference.result()
    assert off.code == 0, off.stderr
    assert ref.code == 0, ref.stderr
    built = {e["builder"] for e in off.json_events() if "builder" in e}
    assert {"rootfs", "node-image", "go-binary"} <= built
    assert _sets(off.stdout) == _sets(ref.stdout)
    index = (clone / "dist-offline" / SET / "index.json").read_bytes()
    assert index == (clone / "dist-connected" / SET / "index.json").read_bytes()
    print(f"export + import {moved:.1f} s, with both builds {time.monotonic() - started:.1f} s")
