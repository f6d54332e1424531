"""A release set of machine images only (random bytes, seeded), for the parallel pull tests and
benchmarks/pull.py: :func:`make_machine_image_set`."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from nvkr import releaseset
from nvkr.oci import mediatypes as mt
from nvkr.releasespec import ReleaseSetSpec
from nvkr.store import Store
from tests.helpers.results import results

NAME = "nvkr-machines-k8s1.36"
EPOCH = 1764547200
VARIANTS = [
    {"gpu": gpu, "kubernetes": "1.36", "arch": arch}
    for gpu in ("hopper", "blackwell")
    for arch in ("amd64", "arm64")
]
IMAGES = 6  # machine images in the test set (more than the default 4 workers)
IMAGE_SIZE = 1 << 20  # bytes each


def make_machine_image_set(
    root: Path,
    *,
    count: int = 4,
    size: int = IMAGE_SIZE,
    seed: int | None = 0,
    pools: bool = False,
    name: str = NAME,
) -> Path:
    """A release set of ``count`` machine-image artifacts of ``size`` random bytes each (seeded
    for a reproducible set; ``seed`` None: os.urandom), materialised under ``root/dist``; its
    layout dir. ``pools``: a node-pool release ``pool-<n>`` booting each image (what a Metal3
    export needs)."""
    store = Store(root / "store")
    rng = random.Random(seed)
    artifacts: dict[str, dict[str, Any]] = {}
    spec_artifacts = []
    for n in range(count):
        variant = VARIANTS[n % len(VARIANTS)]
        data = os.urandom(size) if seed is None else rng.randbytes(size)
        info = store.add_bytes(data)
        key = f"sha256:{n + 1:064x}"
        artifacts[key] = {
            "outputs": [
                {
                    "name": f"disk-{n}.qcow2",
                    "digest": info.digest,
                    "size": info.size,
                    "mediaType": mt.NVKR_QCOW2,
                    "role": "primary",
                }
            ],
            "metadata": {},
        }
        spec_artifacts.append(
            {
                "name": f"node-image-{n}",
                "kind": "machine-image",
                "actionKey": key,
                "builder": "node-image",
                "builderVersion": "1",
                "variant": variant,
                "platform": {"os": "linux", "architecture": variant["arch"]},
                "artifactType": mt.NVKR_MACHINE_IMAGE,
                "dependencies": [{"name": "rootfs", "digest": {"sha256": "9" * 64}}],
            }
        )
    spec = {
        "name": name,
        "epoch": EPOCH,
        "recipe": {"path": "recipes/test.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/test.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0",
        "variants": VARIANTS,
        "artifacts": spec_artifacts,
        "machineImages": [a["name"] for a in spec_artifacts],
        "clusterRelease": {"kubernetes": "1.36.3", "charts": [], "images": []},
        "nodePoolReleases": [
            {
                "name": f"pool-{n}",
                "machineImage": a["name"],
                "artifacts": [],
                "variant": a["variant"],
            }
            for n, a in enumerate(spec_artifacts)
            if pools
        ],
    }
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results(artifacts), store)
    return releaseset.materialize(result, store, root / "dist")


def make_disk_set(root: Path, disks: list[tuple[dict[str, str], Path]]) -> Path:
    """A release set whose machine images, all named ``node-image``, are the given disk files
    (``(variant, QCOW2 path)``, e.g. made by :func:`tests.helpers.disk.make_disk`),
    materialised under ``root/dist``; its layout dir."""
    store = Store(root / "store")
    artifacts: dict[str, dict[str, Any]] = {}
    spec_artifacts = []
    for n, (variant, disk) in enumerate(disks):
        info = store.add_bytes(disk.read_bytes())
        key = f"sha256:{n + 1:064x}"
        artifacts[key] = {
            "outputs": [
                {"name": f"node-image-{variant['gpu']}.qcow2", "digest": info.digest,
                 "size": info.size, "mediaType": mt.NVKR_QCOW2, "role": "primary"}
            ],
            "metadata": {},
        }  # fmt: skip
        spec_artifacts.append(
            {
                "name": "node-image",
                "kind": "machine-image",
                "actionKey": key,
                "builder": "node-image",
                "builderVersion": "2",
                "variant": variant,
                "platform": {"os": "linux", "architecture": variant["arch"]},
                "artifactType": mt.NVKR_MACHINE_IMAGE,
                "dependencies": [{"name": "rootfs", "digest": {"sha256": "9" * 64}}],
            }
        )
    spec = {
        "name": NAME,
        "epoch": EPOCH,
        "recipe": {"path": "recipes/test.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/test.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0",
        "variants": [v for v, _ in disks],
        "artifacts": spec_artifacts,
        "machineImages": ["node-image"],
        "clusterRelease": {"kubernetes": "1.36.3", "charts": [], "images": []},
        "nodePoolReleases": [],
    }
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results(artifacts), store)
    return releaseset.materialize(result, store, root / "dist")
