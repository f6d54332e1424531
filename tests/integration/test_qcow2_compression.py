"""End to end: a compressed QCOW2 node image (issue 15 item 6) is bit-identical across two
clones, holds the very disk the uncompressed image holds, and says how it was compressed.

The default recipe with ``compression: zlib`` on its node image, built for hopper/amd64 in two
clones at once, each with its own store seeded from the session's default build (so only the
node-image action and the release set run), with other umasks, time zones and locales. In the
background (:func:`start_in_background`): its thread waits for the default build, then builds
while pytest's own lane runs the other tests.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.background import BackgroundTest
from tests.helpers.nvkr import make_clone, run_nvkr, seed_from_build, start_nvkr

pytestmark = [pytest.mark.slow, pytest.mark.default_build]

SET = "nvkr-default-k8s1.36"
VARIANT = "gpu=hopper,arch=amd64"


def _compressed_clone(dest: Path, compression: str) -> Path:
    clone = make_clone(dest)
    recipe = clone / "recipes" / "default.yaml"
    text = recipe.read_text()
    assert "    size: 4GiB\n" in text
    recipe.write_text(
        text.replace("    size: 4GiB\n", f"    size: 4GiB\n    compression: {compression}\n")
    )
    return clone


def _qemu_img(*args: str) -> dict[str, Any]:
    out = subprocess.run(["qemu-img", *args, "--output=json"], capture_output=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def _record(store: Path, events: list[dict[str, Any]]) -> dict[str, Any]:
    (key,) = {e["key"] for e in events if e.get("builder") == "node-image" and "key" in e}
    record: dict[str, Any] = json.loads((store / "actions" / f"{key[7:]}.json").read_text())
    return record


def _raw_sha256(image: Path, scratch: Path) -> str:
    raw = scratch / "disk.raw"
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(image), str(raw)],
                   check=True)  # fmt: skip
    h = hashlib.sha256()
    with open(raw, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    raw.unlink()
    return "sha256:" + h.hexdigest()


def _body(tmp_path: Path, default_started: Future[Any]) -> None:
    """The test's body, run in the background once the session's default build is done."""
    _, default_store, first = default_started.result().first
    assert first.code == 0, f"the session's default build failed: {first.stderr[-3000:]}"
    runs = []
    for name, umask, env in (
        ("clone", 0o022, {"TZ": "UTC", "LC_ALL": "C.UTF-8"}),
        ("second-clone-with-a-longer-name", 0o002, {"TZ": "Pacific/Chatham", "LC_ALL": "C"}),
    ):
        clone = _compressed_clone(tmp_path / name, "zlib")
        store = seed_from_build(tmp_path / f"{name}-store", built=default_store)
        started = start_nvkr("build", "--variant", VARIANT, "--json", cwd=clone, store=store,
                             env=env, umask=umask)  # fmt: skip
        runs.append((clone, store, started))
    done = [(clone, store, started.result()) for clone, store, started in runs]
    for _, _, res in done:
        assert res.code == 0, res.stderr
    records = [_record(store, res.json_events()) for _, store, res in done]
    built = {e.get("builder") for _, _, res in done for e in res.json_events()
             if e["event"] == "action-done"}  # fmt: skip
    assert "rootfs" not in built and "node-image" in built, "only the image was rebuilt"
    (a,), (b,) = ([o for o in r["outputs"] if o["role"] == "primary"] for r in records)
    assert a["digest"] == b["digest"] and a["size"] == b["size"]
    assert records[0]["metadata"]["disk"] == records[1]["metadata"]["disk"]
    qcow2 = records[0]["metadata"]["disk"]["qcow2"]
    assert qcow2["compression"] == "zlib" and qcow2["coroutines"] == 1
    assert qcow2["level"] == "Z_DEFAULT_COMPRESSION" and set(qcow2["library"]) == {"zlib1g"}
    assert qcow2["compressedClusters"] > 0

    clone, store, _ = done[0]
    image = store / "blobs" / "sha256" / a["digest"][7:]
    checked = _qemu_img("check", "-f", "qcow2", str(image))
    assert checked["check-errors"] == 0 and checked["compressed-clusters"] > 0
    info = _qemu_img("info", "-f", "qcow2", str(image))
    assert info["format-specific"]["data"]["compression-type"] == "zlib"
    assert info["virtual-size"] == 4 << 30

    # the very disk the uncompressed default image holds, which is larger
    plain = _default_record(default_store)
    (p,) = [o for o in plain["outputs"] if o["role"] == "primary"]
    plain_image = default_store / "blobs" / "sha256" / p["digest"][7:]
    assert subprocess.run(["qemu-img", "compare", "-f", "qcow2", "-F", "qcow2", str(plain_image),
                           str(image)], capture_output=True).returncode == 0  # fmt: skip
    assert a["size"] < p["size"]
    assert qcow2["rawDigest"] == _raw_sha256(image, tmp_path) and qcow2["rawSize"] == 4 << 30
    # the uncompressed one records the same raw disk, qemu-img and its options too
    plain_qcow2 = plain["metadata"]["disk"]["qcow2"]
    assert plain_qcow2["rawDigest"] == qcow2["rawDigest"]
    assert plain_qcow2["qemuImg"] == qcow2["qemuImg"] and "compat=1.1" in plain_qcow2["options"]

    shown = run_nvkr("release-set", "show", f"dist/{SET}", "--json", cwd=clone, store=store)
    assert shown.code == 0, shown.stderr
    (size,) = json.loads(shown.stdout)["machineImages"]
    assert size == {"name": "node-image", "variants": ["hopper/amd64"], "digest": a["digest"],
                    "size": a["size"], "virtualSize": 4 << 30, "compression": "zlib",
                    "secureBoot": None}  # fmt: skip


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """Started at the session's first test, in a thread of its own that waits for the default
    build (tests/helpers/background.py; builds only, at a lower CPU priority)."""
    return BackgroundTest.start(request, "qcow2-zlib", _body, "_default_build_started", nice=5)


def test_a_zlib_qcow2_is_identical_across_two_clones(
    _started_in_background: dict[str, BackgroundTest],
) -> None:
    _started_in_background[__name__].check()


def _default_record(store: Path) -> dict[str, Any]:
    """The action record of the default build's (uncompressed) hopper/amd64 node image."""
    for path in (store / "actions").glob("*.json"):
        record: dict[str, Any] = json.loads(path.read_text())
        meta = record.get("metadata") or {}
        if (
            record.get("builder") == "node-image"
            and meta.get("arch") == "amd64"
            and meta.get("annotations", {}).get("dev.nvkr.gpu") == "hopper"
            and meta.get("disk", {}).get("qcow2", {}).get("compression") == "none"
        ):
            return record
    raise AssertionError(f"{store} holds no uncompressed hopper/amd64 node image")
