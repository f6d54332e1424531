"""End to end: the default recipe's QCOW2 node images (issue: QCOW2 node images).

One machine image per variant in the release set, as an OCI artifact with its annotations;
``qemu-img check`` accepts each; hopper's arm64 image boots under QEMU (TCG, AAVMF) through the
CLI to the node agent's readiness line and labels (the amd64 images boot in test_disk_boot.py and
the catalog leaf's tests); a disk too small for the tree and a
package pin the lockfile does not hold are clear errors that leave nothing behind.
"""

from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.releaseset import read_metadata
from tests.helpers.background import BackgroundTest
from tests.helpers.boot_child import BOOT_SLOTS
from tests.helpers.nvkr import make_clone, run_nvkr, start_nvkr

pytestmark = pytest.mark.slow

SET = "nvkr-default-k8s1.36"


@pytest.fixture(scope="module")
def layout(default_build) -> Path:
    return default_build.clone / "dist" / SET


def _machine_images(layout: Path) -> list[dict]:
    return [a for a in read_metadata(layout)["artifacts"] if a["kind"] == "machine-image"]


def test_one_machine_image_per_variant_as_an_annotated_oci_artifact(layout: Path) -> None:
    images = _machine_images(layout)
    variants = {(a["variant"]["gpu"], a["variant"]["arch"]) for a in images}
    assert variants == {(g, a) for g in ("hopper", "blackwell") for a in ("amd64", "arm64")}
    assert len({a["primary"]["digest"] for a in images}) == 4, "each variant has its own image"
    reader = LayoutReader(layout)
    for art in images:
        manifest = reader.read_json(art["manifest"])
        assert manifest["artifactType"] == mt.NVKR_MACHINE_IMAGE
        layer = manifest["layers"][0]
        assert layer["mediaType"] == mt.NVKR_QCOW2 and layer["digest"] == art["primary"]["digest"]
        ann = manifest["annotations"]
        assert ann[mt.ANN_NVKR_ARCH] == art["variant"]["arch"]
        assert ann[mt.ANN_NVKR_GPU] == art["variant"]["gpu"]
        assert ann[mt.ANN_NVKR_KUBERNETES] == "1.36.4"
        assert ann[mt.ANN_NVKR_DISK_FORMAT] == "qcow2"
        assert art["platform"] == {"os": "linux", "architecture": art["variant"]["arch"]}


def test_qemu_img_accepts_every_machine_image(layout: Path) -> None:
    for art in _machine_images(layout):
        path = layout / "blobs" / "sha256" / art["primary"]["digest"][7:]
        check = subprocess.run(
            ["qemu-img", "check", "--output=json", str(path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        assert json.loads(check.stdout)["check-errors"] == 0
        info = json.loads(
            subprocess.run(
                ["qemu-img", "info", "--output=json", str(path)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        assert info["format"] == "qcow2" and info["virtual-size"] == 4 << 30


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """The arm64 boot, started at the session's first test in a thread of its own
    (tests/helpers/background.py): it waits for the session's default build, then boots while
    the tests reading that build run (a TCG boot is a minute of a core, which the session's
    last minutes, one test at a time, leave free)."""
    return BackgroundTest.start(request, "arm64-boot", _arm64_boot, "_default_build_started")


@pytest.mark.default_build  # the session's build, which the background boot waits for
def test_the_arm64_image_boots_through_the_cli_to_the_agent_readiness_line(
    _started_in_background,
) -> None:
    """:func:`_arm64_boot`, run in the background (:func:`start_in_background`)."""
    _started_in_background[__name__].check()


def _arm64_boot(tmp: Path, started: Future[Any]) -> None:
    """Hopper's arm64 image boots by itself, through the CLI (``nvkr boot-test --json``), to
    the agent's readiness line and labels. The amd64 images boot elsewhere, one boot each (a TCG
    boot is a minute of both cores): blackwell's with OVMF and a config drive on a larger disk
    in tests/integration/test_disk_boot.py, the catalog leaves' hopper images with SeaBIOS
    through Cluster API's bootstrap data in tests/integration/test_catalog_leaf.py; between them, both
    arches, both firmwares and both GPU generations. Blackwell's arm64 image differs from
    hopper's only in its GPU settings and labels, and an arm64 boot is emulated here (TCG on the
    amd64 host: minutes with cloud-init's Python start-up), so it is left out."""
    clone, store, first = started.result().first
    assert first.code == 0, f"the session's default build failed: {first.stderr[-3000:]}"
    with BOOT_SLOTS:  # at most two of the session's background boots at once
        res = start_nvkr(
            "boot-test", f"dist/{SET}", "--variant", "gpu=hopper,arch=arm64", "--json",
            "--timeout", "1200", cwd=clone, store=store, timeout=3600,
        ).result()  # fmt: skip
    assert res.code == 0, res.stdout + res.stderr
    events = [json.loads(line) for line in res.stdout.splitlines()]
    assert all(e["v"] == 1 and e["ts"] for e in events)
    booted = [e for e in events if e["event"] == "image-result"]
    assert len(booted) == 1 and booted[0]["ok"], booted
    assert events[-1]["event"] == "result" and events[-1]["images"] == 1, events[-1]
    (b,) = booted
    # the whole console of the image stays in the store's logs/boot-test
    assert b["accel"] in ("kvm", "tcg") and b["log"].startswith(f"{store}/")
    assert "console: " in Path(b["log"]).read_text()
    assert "nvkr-node-agent: ready gpus=0" in b["line"]
    assert "manifest=ok(2 files)" in b["line"], "the agent checked node-agent and kubectl"
    assert b["labels"]["nvidia.com/gpu.present"] == "false"
    assert b["labels"]["nvidia.com/gpu.count"] == "0"
    assert b["image"].split("[")[1].split()[-1].rstrip("]") == "arm64", b["image"]


def test_a_disk_too_small_for_the_tree_names_both_sizes(default_build, tmp_path) -> None:
    clone = make_clone(tmp_path / "clone")
    recipe = clone / "recipes" / "default.yaml"
    recipe.write_text(recipe.read_text().replace("    size: 4GiB\n", "    size: 256MiB\n"))
    res = run_nvkr(
        "build",
        "--variant",
        "gpu=hopper,arch=amd64",
        cwd=clone,
        store=default_build.store,
    )
    assert res.code == 1, res.stderr
    assert "error[NVKR-E-DISK]" in res.stderr or "NVKR-E-BUILD" in res.stderr
    assert "does not fit the root partition" in res.stderr and "MiB" in res.stderr
    assert "Traceback" not in res.stderr
    assert not (clone / "dist").exists(), "no half-written release set"


def test_a_package_pin_the_lockfile_does_not_hold_is_refused(default_build, tmp_path) -> None:
    clone = make_clone(tmp_path / "clone")
    recipe = clone / "recipes" / "default.yaml"
    text = recipe.read_text()
    pinned = re.search(r'^      containerd: "([^"]+)"$', text, re.M)
    assert pinned is not None
    recipe.write_text(text.replace(pinned[0], pinned[0].replace(pinned[1], pinned[1] + "+nvkr1")))
    res = run_nvkr("build", "--locked", cwd=clone, store=default_build.store)
    assert res.code == 2, res.stderr
    assert "error[NVKR-E-LOCK]" in res.stderr and "node-packages" in res.stderr
    assert not (clone / "dist").exists()
