"""Small but real release sets (assembled with :func:`nvkr.releaseset.assemble`: a Go-like binary
per arch as an OCI artifact, a two-arch container image index, their provenance) for the publish,
pull and registry tests: :func:`make_set`, and the module-scoped fixtures ``signed`` (a set signed
with a fresh key, plus a key that did not sign it) and ``published`` (that set pushed to the
module's ``registry``)."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from nvkr import releaseset
from nvkr.canonical import canonical_json
from nvkr.delivery.publish import publish_layout
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader, descriptor, image_manifest, manifest_bytes
from nvkr.oci.registry import RegistryClient
from nvkr.releaseset.signing import sign_release_set
from nvkr.releasespec import ReleaseSetSpec
from nvkr.repro import gzip_bytes
from nvkr.sign import generate_key, load_private_key
from nvkr.store import Store
from tests.helpers.registry import Registry
from tests.helpers.results import results

NAME = "nvkr-test-k8s1.36"
EPOCH = 1764547200
AMD64 = {"gpu": "hopper", "kubernetes": "1.36", "arch": "amd64"}
ARM64 = {"gpu": "blackwell", "kubernetes": "1.36", "arch": "arm64"}


# -- a small release set ---------------------------------------------------------------------------
def _out(store: Store, name: str, data: bytes, media_type: str, role: str) -> dict[str, Any]:
    info = store.add_bytes(data)
    return {
        "name": name,
        "digest": info.digest,
        "size": info.size,
        "mediaType": media_type,
        "role": role,
    }


def _image(store: Store, arch: str, epoch: int) -> dict[str, Any]:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        data = f"#!/bin/sh\necho agent {arch}\n".encode()
        info = tarfile.TarInfo("usr/bin/agent")
        info.size, info.mode, info.mtime = len(data), 0o755, epoch
        tar.addfile(info, io.BytesIO(data))
    layer = store.add_bytes(gzip_bytes(buf.getvalue()))
    config = canonical_json(
        {
            "architecture": arch,
            "os": "linux",
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(buf.getvalue()).hexdigest()],
            },
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


def make_set(
    root: Path, *, epoch: int = EPOCH, lock: str = "5", binary_size: int = 400, name: str = NAME
) -> Path:
    """Assemble and materialise a release set under ``root/dist``; return its layout dir.

    ``lock`` changes only the provenance (the lockfile digest it names): two sets made with
    different ``lock`` share every artifact manifest and differ in their provenance.
    """
    store = Store(root / "store")
    artifacts: dict[str, dict[str, Any]] = {}
    spec_artifacts = []
    for n, variant in enumerate((AMD64, ARM64)):
        arch = variant["arch"]
        key = "sha256:" + str(n + 1) * 64
        body = (b"\x7fELF" + arch.encode() * binary_size)[:binary_size]
        artifacts[key] = {
            "outputs": [
                _out(store, "agent", body, mt.OCTET_STREAM, "primary"),
                _out(
                    store,
                    "buildinfo.json",
                    canonical_json({"GOARCH": arch}),
                    mt.NVKR_GO_BUILDINFO,
                    "buildinfo",
                ),
            ],
            "metadata": {},
        }
        spec_artifacts.append(
            {
                "name": "agent",
                "kind": "binary",
                "actionKey": key,
                "builder": "go-binary",
                "builderVersion": "1",
                "variant": variant,
                "platform": {"os": "linux", "architecture": arch},
                "artifactType": mt.NVKR_BINARY,
                "dependencies": [{"name": "src", "digest": {"sha256": "9" * 64}}],
            }
        )
    manifests = [_image(store, "amd64", epoch), _image(store, "arm64", epoch)]
    index = canonical_json({"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": manifests})
    out = _out(store, "index.json", index, mt.OCI_INDEX, "index")
    image_key = "sha256:" + "7" * 64
    artifacts[image_key] = {
        "outputs": [out],
        "metadata": {
            "indexDigest": out["digest"],
            "indexSize": out["size"],
            "mediaType": mt.OCI_INDEX,
        },
    }
    for variant in (AMD64, ARM64):
        spec_artifacts.append(
            {
                "name": "agent-image",
                "kind": "image",
                "actionKey": image_key,
                "builder": "image-index",
                "builderVersion": "1",
                "variant": variant,
                "platform": None,
                "artifactType": None,
                "dependencies": [{"name": "src", "digest": {"sha256": "9" * 64}}],
            }
        )
    spec = {
        "name": name,
        "epoch": epoch,
        "recipe": {"path": "recipes/test.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/test.lock.json", "digest": "sha256:" + lock * 64},
        "nvkrVersion": "0.1.0",
        "variants": [AMD64, ARM64],
        "artifacts": spec_artifacts,
        "machineImages": [],
        "clusterRelease": {"kubernetes": "1.36.3", "charts": [], "images": ["agent-image"]},
        "nodePoolReleases": [],
    }
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results(artifacts), store)
    return releaseset.materialize(result, store, root / "dist")


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A small release set signed with a fresh key, and a second key that did not sign it."""
    tmp = tmp_path_factory.mktemp("pull")
    layout = make_set(tmp / "set")
    for p in layout.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    key = generate_key("ecdsa-p256", tmp / "release")
    other = generate_key("ecdsa-p256", tmp / "other")
    sign_release_set(layout, load_private_key(key.private_path))
    return {"layout": layout, "key": key.public_path, "other": other.public_path}


@pytest.fixture(scope="module")
def published(registry: Registry, signed: dict[str, Any]) -> dict[str, Any]:
    repo = "pull/set"
    report = publish_layout(
        signed["layout"], f"{registry.host}/{repo}", RegistryClient(registry.host)
    )
    assert report.referrers == "fallback-tag"
    return {**signed, "repo": repo, "digest": report.digest, "ref": f"{registry.host}/{repo}"}


def payload(layout: Path) -> Any:
    """The largest payload blob of the set (not a manifest, not the metadata)."""
    return max(
        (
            b
            for b in LayoutReader(layout).walk(deep=False)
            if b.media_type not in mt.MANIFEST_TYPES | {mt.NVKR_RELEASE_SET_METADATA}
        ),
        key=lambda b: b.size,
    )


def blobs(layout: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (layout / "blobs" / "sha256").iterdir()}
