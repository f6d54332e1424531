"""``nvkr release-set show`` gives each machine image's size: the QCOW2's bytes, the virtual disk
size from its header and its compression, from a layout and from a real registry (distribution
2.8); a compressed image's provenance names how it was compressed and the raw disk's digest."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from nvkr import releaseset
from nvkr.delivery.publish import publish_layout
from nvkr.oci import mediatypes as mt
from nvkr.oci.registry import RegistryClient
from nvkr.releasespec import ReleaseSetSpec
from nvkr.store import Store
from tests.helpers.cli import invoke, invoke_output
from tests.helpers.disk import needs_tools
from tests.helpers.results import results

pytestmark = [needs_tools]
MIB = 1 << 20
RECORD = {
    "compression": "zstd",
    "level": "ZSTD_CLEVEL_DEFAULT",
    "coroutines": 1,
    "qemuImg": "1:7.2+dfsg-7+deb12u18+b3",
    "library": {"libzstd1": "1.5.4+dfsg2-5"},
    "compressedClusters": 16,
    "rawDigest": "sha256:" + "c" * 64,
    "rawSize": 8 * MIB,
}


def _variant(gpu: str, arch: str) -> dict[str, str]:
    return {"gpu": gpu, "kubernetes": "1.36", "arch": arch}


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three machine images: a plain 64 MiB QCOW2 shared by hopper/amd64 and blackwell/amd64,
    a zstd-compressed 8 MiB one (hopper/arm64) and random bytes that are no QCOW2
    (blackwell/arm64)."""
    tmp = tmp_path_factory.mktemp("sizes")
    store = Store(tmp / "store")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(tmp / "plain.qcow2"), "64M"],
                   check=True)  # fmt: skip
    (tmp / "disk.raw").write_bytes(b"compressible text\n" * (8 * MIB // 18) + b"\0" * 8)
    subprocess.run(["truncate", "-s", str(8 * MIB), str(tmp / "disk.raw")], check=True)
    subprocess.run(["qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", "-o",
                    "compression_type=zstd", str(tmp / "disk.raw"), str(tmp / "zstd.qcow2")],
                   check=True)  # fmt: skip
    blobs = {
        1: ((tmp / "plain.qcow2").read_bytes(), {}),
        2: (
            (tmp / "zstd.qcow2").read_bytes(),
            {"annotations": {mt.ANN_NVKR_DISK_COMPRESSION: "zstd"}, "disk": {"qcow2": RECORD}},
        ),
        3: (random.Random(0).randbytes(4096), {}),
    }
    records: dict[str, dict[str, Any]] = {}
    for n, (data, metadata) in blobs.items():
        info = store.add_bytes(data)
        records[f"sha256:{n:064x}"] = {
            "outputs": [{"name": f"disk-{n}.qcow2", "digest": info.digest, "size": info.size,
                         "mediaType": mt.NVKR_QCOW2, "role": "primary"}],
            "metadata": metadata,
        }  # fmt: skip
    variants = [_variant(g, a) for g in ("hopper", "blackwell") for a in ("amd64", "arm64")]
    keys = [1, 2, 1, 3]  # hopper/amd64, hopper/arm64, blackwell/amd64, blackwell/arm64
    spec_artifacts = [
        {"name": "node-image", "kind": "machine-image", "actionKey": f"sha256:{k:064x}",
         "builder": "node-image", "builderVersion": "1", "variant": v,
         "platform": {"os": "linux", "architecture": v["arch"]},
         "artifactType": mt.NVKR_MACHINE_IMAGE, "dependencies": []}
        for v, k in zip(variants, keys, strict=True)
    ]  # fmt: skip
    spec = {
        "name": "sizes-1.36", "epoch": 1764547200,
        "recipe": {"path": "recipes/t.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/t.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0", "variants": variants, "artifacts": spec_artifacts,
        "machineImages": ["node-image"],
        "clusterRelease": {"kubernetes": "1.36.3", "charts": [], "images": []},
        "nodePoolReleases": [],
    }  # fmt: skip
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results(records), store)
    return releaseset.materialize(result, store, tmp / "dist")


def _expected(layout: Path) -> list[dict[str, Any]]:
    sizes = {p.name: p.stat().st_size for p in (layout.parent.parent).glob("*.qcow2")}
    meta = json.loads(invoke("release-set", "show", str(layout), "--json").stdout)["metadata"]
    digest = {a["variant"]["arch"] + a["variant"]["gpu"]: a["primary"]["digest"]
              for a in meta["artifacts"]}  # fmt: skip
    return [
        {"name": "node-image", "variants": ["hopper/amd64", "blackwell/amd64"],
         "digest": digest["amd64hopper"], "size": sizes["plain.qcow2"],
         "virtualSize": 64 * MIB, "compression": "none", "secureBoot": None},
        {"name": "node-image", "variants": ["hopper/arm64"], "digest": digest["arm64hopper"],
         "size": sizes["zstd.qcow2"], "virtualSize": 8 * MIB, "compression": "zstd",
         "secureBoot": None},
        {"name": "node-image", "variants": ["blackwell/arm64"],
         "digest": digest["arm64blackwell"], "size": 4096, "virtualSize": None,
         "compression": "none", "secureBoot": None},
    ]  # fmt: skip


def test_show_gives_each_machine_images_size_from_a_layout(layout: Path) -> None:
    code, text = invoke_output("release-set", "show", str(layout), "--json")
    assert code == 0, text
    assert json.loads(text)["machineImages"] == _expected(layout)
    human = invoke("release-set", "show", str(layout), env={"COLUMNS": "200"})
    assert human.code == 0, human.output
    assert "virtual disk" in human.stdout and "compression" in human.stdout
    assert "67108864 bytes (64.0 MiB)" in human.stdout and "8388608 bytes (8.0 MiB)" in human.stdout
    assert "zstd" in human.stdout
    assert "hopper/amd64, blackwell/amd64" in human.stdout


def test_show_gives_the_same_sizes_from_a_registry(layout: Path, registry) -> None:
    report = publish_layout(layout, f"{registry.host}/sizes/set", RegistryClient(registry.host))
    ref = f"{registry.host}/sizes/set@{report.digest}"
    code, text = invoke_output("release-set", "show", ref, "--json", "--insecure")
    assert code == 0, text
    assert json.loads(text)["machineImages"] == _expected(layout)


def test_a_compressed_images_provenance_names_its_compression_and_raw_disk(layout: Path) -> None:
    meta = json.loads(invoke("release-set", "show", str(layout), "--json").stdout)["metadata"]

    def internal(arch: str, gpu: str) -> dict[str, Any]:
        (art,) = [a for a in meta["artifacts"] if a["variant"] == _variant(gpu, arch)]
        blob = layout / "blobs" / "sha256"
        manifest = json.loads((blob / art["provenance"]["digest"][7:]).read_bytes())
        statement = json.loads((blob / manifest["layers"][0]["digest"][7:]).read_bytes())
        params: dict[str, Any] = statement["predicate"]["buildDefinition"]["internalParameters"]
        return params

    assert internal("arm64", "hopper")["diskImage"] == RECORD
    assert "diskImage" not in internal("amd64", "hopper")


def test_a_secure_boot_images_owner_and_predictions_are_read_from_its_layers(
    tmp_path: Path,
) -> None:
    """release-set show: the owner certificate's subject and the predicted PCRs of an image
    whose manifest carries them as layers (a set assembled before the predictions became an
    attestation of the image: tests/unit/test_secure_boot_predictions.py)."""
    import hashlib

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    from nvkr.delivery.imagesizes import _secure_boot
    from nvkr.oci import mediatypes as mt

    key = rsa.generate_private_key(65537, 2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "owner")])
    import datetime

    now = datetime.datetime(2025, 12, 1, tzinfo=datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))  # fmt: skip
    der = cert.public_bytes(serialization.Encoding.DER)
    statement = json.dumps({"predicate": {"firmware": {"package": "ovmf", "version": "1"},
                                          "phase": "after-stub", "pcrs": {"4": "ab" * 32}}}).encode()  # fmt: skip
    blobs = {"sha256:" + hashlib.sha256(b).hexdigest(): b for b in (der, statement)}

    def layer(title: str, data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        return {"digest": digest, "size": len(data), "annotations": {mt.ANN_TITLE: title}}

    manifest = {"layers": [layer("node.qcow2", b"q"), layer("secure-boot-owner.der", der),
                           layer("pcr-predictions.intoto.json", statement)]}  # fmt: skip
    got = _secure_boot({}, manifest, lambda desc: b"", lambda digest, size: blobs[digest][:size])
    pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    certificate = {"sha256": "sha256:" + hashlib.sha256(der).hexdigest(), "pem": pem}
    assert got == {"owner": "CN=owner", "certificate": certificate, "firmware": "ovmf 1",
                   "phase": "after-stub", "pcrs": {"4": "ab" * 32}}  # fmt: skip
    assert (
        _secure_boot({}, {"layers": manifest["layers"][:1]}, lambda d: b"", lambda d, s: b"")
        is None
    )
