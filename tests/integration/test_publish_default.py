"""End to end: the default recipe built from a fresh clone, published with ``nvkr publish`` to
real CNCF distribution on loopback, read back by skopeo with the same digests."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader
from nvkr.oci.registry import RegistryClient, fallback_tag
from tests.helpers.nvkr import make_clone, run_nvkr
from tests.helpers.registry import nvkr_cli, skopeo

pytestmark = pytest.mark.slow


SET = "nvkr-default-k8s1.36"


@pytest.fixture(scope="module")
def built(tmp_path_factory, default_build) -> tuple[Path, Path]:
    """(clone, store) after one unsigned build of the default recipe (a no-op on the session's
    store, writing this module's own clone's dist/)."""
    tmp = tmp_path_factory.mktemp("publish-default")
    clone = make_clone(tmp / "clone")
    store = default_build.store
    result = run_nvkr("build", cwd=clone, store=store)
    assert result.code == 0, result.stderr
    return clone, store


@pytest.fixture(scope="module")
def layout(built) -> Path:
    return built[0] / "dist" / SET


def test_publish_the_default_release_set_and_copy_its_image_back(registry, layout, tmp_path):
    repo = f"{registry.host}/nvkr/default"
    first = nvkr_cli("publish", str(layout), repo, "--json")
    assert first.returncode == 0, first.stderr
    report = json.loads(first.stdout.splitlines()[-1])
    reader = LayoutReader(layout)
    root = reader.index["manifests"][0]
    assert report["event"] == "result" and report["digest"] == root["digest"]
    assert report["tag"] == SET and report["bytesUploaded"] > 0
    # the release set index, by tag, is the layout's bytes
    raw = skopeo("inspect", "--raw", "--tls-verify=false", f"docker://{repo}:{SET}")
    assert raw.encode() == reader.read_blob(root)
    # skopeo copies each image index back into an OCI layout with the same digests
    index = json.loads(reader.read_blob(root))
    images = [m for m in index["manifests"] if m["mediaType"] == mt.OCI_INDEX]
    assert images, "the default release set holds a container image"
    for n, image in enumerate(images):
        out = tmp_path / f"copy{n}"
        skopeo(
            "copy",
            "--all",
            "--preserve-digests",
            "--src-tls-verify=false",
            f"docker://{repo}@{image['digest']}",
            f"oci:{out}:image",
        )
        copied = LayoutReader(out)
        assert copied.index["manifests"][0]["digest"] == image["digest"]
        for blob in copied.walk():
            theirs = copied.blob_path(blob.digest).read_bytes()
            assert theirs == reader.blob_path(blob.digest).read_bytes(), blob
            assert hashlib.sha256(theirs).hexdigest() == blob.digest[7:]
    # provenance is reachable through the referrers fallback tags
    client = RegistryClient(registry.host)
    for m in index["manifests"]:
        doc = json.loads(reader.read_blob(m))
        if "subject" in doc:
            tag = fallback_tag(doc["subject"]["digest"])
            listed = json.loads(client.get_manifest("nvkr/default", tag)[0])["manifests"]
            assert m["digest"] in [e["digest"] for e in listed]
    # a re-publish uploads nothing and says so
    again = nvkr_cli("publish", str(layout), repo)
    assert again.returncode == 0, again.stderr
    assert "0 bytes uploaded" in again.stderr


def test_build_sign_and_push_publishes_the_signatures(registry, built, tmp_path):
    clone, store = built
    unsigned = LayoutReader(clone / "dist" / SET).index["manifests"][0]["digest"]
    keys = run_nvkr("keys", "generate", "--out", str(tmp_path / "key"), cwd=clone, store=store)
    assert keys.code == 0, keys.stderr
    pushed = run_nvkr(
        "build",
        "--sign",
        str(tmp_path / "key.key"),
        "--push",
        f"{registry.host}/nvkr/signed",
        cwd=clone,
        store=store,
    )
    assert pushed.code == 0, pushed.stderr
    client = RegistryClient(registry.host)
    assert client.manifest_digest("nvkr/signed", SET) == unsigned, "signing keeps the digest"
    reader = LayoutReader(clone / "dist" / SET)
    signatures = reader.index["manifests"][1:]
    assert signatures, "the signed layout lists its signatures beside the release set"
    for entry in signatures:
        assert client.manifest_digest("nvkr/signed", entry["digest"]) == entry["digest"]
        subject = json.loads(reader.read_blob(entry))["subject"]["digest"]
        listed = json.loads(client.get_manifest("nvkr/signed", fallback_tag(subject))[0])
        assert entry["digest"] in [m["digest"] for m in listed["manifests"]]
    # publish -> pull -> verify: the pulled layout is the signed one, byte for byte
    pulled = tmp_path / "pulled"
    pull = run_nvkr(
        "pull",
        f"{registry.host}/nvkr/signed@{unsigned}",
        str(pulled),
        "--key",
        str(tmp_path / "key.pub"),
        cwd=clone,
        store=store,
    )
    assert pull.code == 0, pull.stderr
    assert (pulled / "index.json").read_bytes() == (
        clone / "dist" / SET / "index.json"
    ).read_bytes()
    verified = run_nvkr(
        "verify", str(pulled), "--key", str(tmp_path / "key.pub"), cwd=clone, store=store
    )
    assert verified.code == 0, verified.stderr
    for blob in LayoutReader(pulled).walk():
        assert (pulled / "blobs" / "sha256" / blob.digest[7:]).read_bytes() == reader.blob_path(
            blob.digest
        ).read_bytes()
    # management systems read the published set by reference, without its payload
    exported = run_nvkr(
        "release-set",
        "export",
        f"{registry.host}/nvkr/signed:{SET}",
        "--format",
        "json",
        cwd=clone,
        store=store,
    )
    assert exported.code == 0, exported.stderr
    doc = json.loads(exported.stdout)
    assert doc["digest"] == unsigned and doc["clusterRelease"]["kubernetesVersion"] == "1.36.4"
    # Cluster API from the registry: the default images install no kubeadm or kubelet (the
    # recipe stages kubectl only), which their SBOMs show and the export says
    capi = run_nvkr(
        "release-set",
        "export",
        f"{registry.host}/nvkr/signed:{SET}",
        "--format",
        "capi",
        cwd=clone,
        store=store,
    )
    assert capi.code == 0, capi.stderr
    assert "KubeadmControlPlane" in capi.stdout and "version: v1.36.4" in capi.stdout
    assert "the SBOMs show no kubeadm or kubelet in machine image(s) node-image [" in capi.stderr
    assert capi.stderr.count("node-image [") == 4
