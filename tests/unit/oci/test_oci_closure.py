"""store_closure: the transitive closure of an index or manifest in the store (OCI and Docker
schema 2), each blob checked; LayoutReader.walk over the same shapes; image_manifest."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.oci import mediatypes as mt
from nvkr.oci.closure import store_closure
from nvkr.oci.layout import (
    LayoutReader,
    artifact_manifest,
    blob_name,
    descriptor,
    image_manifest,
    layout_file_bytes,
    manifest_bytes,
)
from nvkr.store import Store


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Images:
    """A store with a two-arch OCI image index (one attestation-style referrer inside it) and the
    same image as a Docker manifest list, both sharing their layer blobs."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.put(mt.EMPTY_JSON)  # the referrer's config
        self.layers = {a: self.put(f"layer {a}".encode()) for a in ("amd64", "arm64")}
        self.configs = {
            a: self.put(canonical_json({"architecture": a, "os": "linux"}))
            for a in ("amd64", "arm64")
        }
        self.oci = {
            a: self.put(
                manifest_bytes(
                    image_manifest(
                        descriptor(mt.OCI_IMAGE_CONFIG, *self.configs[a]),
                        [descriptor(mt.OCI_LAYER_TAR_GZIP, *self.layers[a])],
                    )
                )
            )
            for a in ("amd64", "arm64")
        }
        # a referrer of the amd64 image whose subject is listed too (a signature, say)
        self.statement = self.put(b'{"_type":"https://in-toto.io/Statement/v1"}')
        self.referrer = self.put(
            manifest_bytes(
                artifact_manifest(
                    mt.IN_TOTO_JSON,
                    [descriptor(mt.IN_TOTO_JSON, *self.statement)],
                    subject=descriptor(mt.OCI_MANIFEST, *self.oci["amd64"]),
                )
            )
        )
        self.index = self.put(
            canonical_json(
                {
                    "schemaVersion": 2,
                    "mediaType": mt.OCI_INDEX,
                    "manifests": [
                        descriptor(mt.OCI_MANIFEST, *self.oci[a], platform=self.platform(a))
                        for a in ("amd64", "arm64")
                    ]
                    + [descriptor(mt.OCI_MANIFEST, *self.referrer, platform=self.unknown())],
                }
            )
        )
        self.docker = {
            a: self.put(
                canonical_json(
                    {
                        "schemaVersion": 2,
                        "mediaType": mt.DOCKER_MANIFEST,
                        "config": descriptor(mt.DOCKER_CONFIG, *self.configs[a]),
                        "layers": [descriptor(mt.DOCKER_LAYER_TAR_GZIP, *self.layers[a])],
                    }
                )
            )
            for a in ("amd64", "arm64")
        }
        self.docker_list = self.put(
            canonical_json(
                {
                    "schemaVersion": 2,
                    "mediaType": mt.DOCKER_MANIFEST_LIST,
                    "manifests": [
                        descriptor(mt.DOCKER_MANIFEST, *self.docker[a], platform=self.platform(a))
                        for a in ("amd64", "arm64")
                    ],
                }
            )
        )

    @staticmethod
    def platform(arch: str) -> dict[str, str]:
        return {"os": "linux", "architecture": arch}

    @staticmethod
    def unknown() -> dict[str, str]:
        return {"os": "unknown", "architecture": "unknown"}

    def put(self, data: bytes) -> tuple[str, int]:
        info = self.store.add_bytes(data)
        return info.digest, info.size

    def desc(self, media_type: str, blob: tuple[str, int]) -> dict[str, Any]:
        return descriptor(media_type, *blob)


@pytest.fixture
def images(tmp_path: Path) -> Images:
    return Images(Store(tmp_path / "store"))


def _digests(closure: list[dict[str, Any]]) -> list[str]:
    return [d["digest"] for d in closure]


def test_oci_index_closure_in_document_order(images: Images) -> None:
    closure = store_closure(images.store, images.desc(mt.OCI_INDEX, images.index))
    assert _digests(closure) == [
        images.index[0],
        images.oci["amd64"][0],
        images.configs["amd64"][0],
        images.layers["amd64"][0],
        images.oci["arm64"][0],
        images.configs["arm64"][0],
        images.layers["arm64"][0],
        images.referrer[0],
        mt.EMPTY_DIGEST,
        images.statement[0],
        # the referrer's subject (the amd64 manifest) was reached already
    ]
    assert closure[0] == {
        "mediaType": mt.OCI_INDEX,
        "digest": images.index[0],
        "size": images.index[1],
    }
    assert [d["mediaType"] for d in closure[1:4]] == [
        mt.OCI_MANIFEST,
        mt.OCI_IMAGE_CONFIG,
        mt.OCI_LAYER_TAR_GZIP,
    ]


def test_a_subject_is_followed(images: Images) -> None:
    closure = store_closure(images.store, images.desc(mt.OCI_MANIFEST, images.referrer))
    assert _digests(closure) == [
        images.referrer[0],
        mt.EMPTY_DIGEST,
        images.statement[0],
        images.oci["amd64"][0],
        images.configs["amd64"][0],
        images.layers["amd64"][0],
    ]


def test_docker_manifest_list_closure(images: Images) -> None:
    closure = store_closure(images.store, images.desc(mt.DOCKER_MANIFEST_LIST, images.docker_list))
    assert [(d["mediaType"], d["digest"]) for d in closure] == [
        (mt.DOCKER_MANIFEST_LIST, images.docker_list[0]),
        (mt.DOCKER_MANIFEST, images.docker["amd64"][0]),
        (mt.DOCKER_CONFIG, images.configs["amd64"][0]),
        (mt.DOCKER_LAYER_TAR_GZIP, images.layers["amd64"][0]),
        (mt.DOCKER_MANIFEST, images.docker["arm64"][0]),
        (mt.DOCKER_CONFIG, images.configs["arm64"][0]),
        (mt.DOCKER_LAYER_TAR_GZIP, images.layers["arm64"][0]),
    ]


def test_a_leaf_descriptor_is_its_own_closure(images: Images) -> None:
    leaf = images.desc(mt.OCI_LAYER_TAR_GZIP, images.layers["amd64"])
    assert store_closure(images.store, leaf) == [leaf]


def _writable(store: Store, digest: str) -> Path:
    path = store.blob_path(digest)
    path.chmod(0o644)
    return path


def test_a_missing_blob_is_named_with_its_chain(images: Images) -> None:
    layer = images.layers["arm64"][0]
    images.store.blob_path(layer).unlink()
    with pytest.raises(IntegrityError) as e:
        store_closure(
            images.store, images.desc(mt.OCI_INDEX, images.index), referrer="image agent-image"
        )
    assert e.value.message == (
        f"blob {layer} ({mt.OCI_LAYER_TAR_GZIP}, referenced by image agent-image -> index "
        f"{images.index[0]} manifests[1] -> manifest {images.oci['arm64'][0]} layers[0]) is not "
        f"in the store ({images.store.blobs_dir})"
    )
    assert e.value.hint and "run the build again" in e.value.hint


def test_a_missing_root_and_a_missing_subject(images: Images) -> None:
    images.store.blob_path(images.index[0]).unlink()
    with pytest.raises(IntegrityError, match=f"blob {images.index[0]} .* not in the store"):
        store_closure(images.store, images.desc(mt.OCI_INDEX, images.index))
    images.store.blob_path(images.oci["amd64"][0]).unlink()
    with pytest.raises(IntegrityError, match=r"subject\) is not in the store"):
        store_closure(images.store, images.desc(mt.OCI_MANIFEST, images.referrer))


def test_a_truncated_layer(images: Images) -> None:
    layer = images.layers["amd64"][0]
    _writable(images.store, layer).write_bytes(b"short")
    with pytest.raises(IntegrityError, match=f"blob {layer} .* is 5 bytes in the store, expected"):
        store_closure(images.store, images.desc(mt.OCI_INDEX, images.index))


def test_a_corrupt_manifest(images: Images) -> None:
    digest = images.oci["arm64"][0]
    path = _writable(images.store, digest)
    path.write_bytes(path.read_bytes().replace(b'"schemaVersion":2', b'"schemaVersion":3'))
    with pytest.raises(IntegrityError, match=f"blob {digest} .* is corrupt"):
        store_closure(images.store, images.desc(mt.OCI_INDEX, images.index))


def test_a_media_type_mismatch(images: Images) -> None:
    with pytest.raises(IntegrityError, match="says mediaType"):
        store_closure(images.store, images.desc(mt.OCI_INDEX, images.oci["amd64"]))
    with pytest.raises(IntegrityError, match="says mediaType"):
        store_closure(images.store, images.desc(mt.DOCKER_MANIFEST, images.oci["amd64"]))


def test_schema1_is_refused(images: Images) -> None:
    blob = images.put(b'{"schemaVersion":1,"fsLayers":[]}')
    for media_type in sorted(mt.DOCKER_SCHEMA1_TYPES):
        with pytest.raises(BuildError, match="Docker schema 1"):
            store_closure(images.store, images.desc(media_type, blob))


def _index_over(images: Images, manifests: list[Any]) -> dict[str, Any]:
    data = canonical_json({"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": manifests})
    return images.desc(mt.OCI_INDEX, images.put(data))


def test_malformed_documents(images: Images) -> None:
    amd64 = images.desc(mt.OCI_MANIFEST, images.oci["amd64"])
    cases: list[tuple[list[Any], str]] = [
        ([dict(amd64, digest="sha256:xyz")], "malformed digest"),
        ([dict(amd64, size=-1)], "bad size"),
        ([{k: v for k, v in amd64.items() if k != "mediaType"}], "no mediaType"),
        ([amd64, dict(amd64, size=amd64["size"] + 1)], "gives size"),
        ([dict(amd64, digest="sha512:" + "0" * 128)], "cannot be in the store"),
        (["not a descriptor"], "must be a JSON object"),
    ]
    for manifests, message in cases:
        with pytest.raises(IntegrityError, match=message):
            store_closure(images.store, _index_over(images, manifests))
    not_json = images.desc(mt.OCI_MANIFEST, images.put(b"{not json"))
    with pytest.raises(IntegrityError, match="is not JSON"):
        store_closure(images.store, not_json)
    v1 = images.desc(mt.OCI_INDEX, images.put(b'{"schemaVersion":1,"manifests":[]}'))
    with pytest.raises(IntegrityError, match="schemaVersion is 1"):
        store_closure(images.store, v1)
    bad_data = dict(mt.empty_descriptor(), data="W10=")  # "[]": not the 2 bytes named
    with pytest.raises(IntegrityError, match="embedded data"):
        store_closure(images.store, bad_data)


def test_a_layout_is_a_blob_source_too(images: Images, tmp_path: Path) -> None:
    """The closure read from a layout on disk equals the one read from the store, and
    LayoutReader.walk (Docker types and subjects included) reaches exactly those blobs."""
    root = tmp_path / "layout"
    (root / "blobs" / "sha256").mkdir(parents=True)
    (root / "oci-layout").write_bytes(layout_file_bytes())
    top = [
        dict(images.desc(mt.OCI_INDEX, images.index), annotations={mt.ANN_REF_NAME: "oci"}),
        dict(
            images.desc(mt.DOCKER_MANIFEST_LIST, images.docker_list),
            annotations={mt.ANN_REF_NAME: "docker"},
        ),
    ]
    wanted: list[dict[str, Any]] = []
    for desc in top:
        for d in store_closure(images.store, desc):
            if d not in wanted:
                wanted.append(d)
    for d in wanted:
        (root / blob_name(d["digest"])).write_bytes(images.store.read_blob(d["digest"]))
    (root / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "manifests": top}))
    reader = LayoutReader(root)
    assert store_closure(reader, top[0]) == store_closure(images.store, top[0])
    walked = reader.walk()
    assert {b.digest for b in walked} == {d["digest"] for d in wanted}
    assert reader.unreferenced(walked) == []
    # a referrer whose subject is only reachable through it: walk follows the subject too
    sub_root = images.desc(mt.OCI_MANIFEST, images.referrer)
    assert [b.digest for b in reader.walk(sub_root)] == _digests(
        store_closure(images.store, sub_root)
    )


def test_walk_leaves_a_subject_that_is_not_in_the_layout(images: Images, tmp_path: Path) -> None:
    root = tmp_path / "layout"
    (root / "blobs" / "sha256").mkdir(parents=True)
    (root / "oci-layout").write_bytes(layout_file_bytes())
    ref = images.desc(mt.OCI_MANIFEST, images.referrer)
    for digest in (images.referrer[0], mt.EMPTY_DIGEST, images.statement[0]):
        (root / blob_name(digest)).write_bytes(images.store.read_blob(digest))
    (root / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "manifests": [ref]}))
    assert [b.digest for b in LayoutReader(root).walk()] == [
        images.referrer[0],
        mt.EMPTY_DIGEST,
        images.statement[0],
    ]


# -- image_manifest ------------------------------------------------------------------------------
def test_image_manifest_has_no_artifact_type() -> None:
    config = descriptor(mt.HELM_CONFIG, b'{"name":"x","version":"1"}')
    layer = descriptor(mt.HELM_CHART_CONTENT, b"tgz")
    subject = descriptor(mt.OCI_MANIFEST, b"{}", annotations={"a": "b"})
    m = image_manifest(config, [layer], {mt.ANN_TITLE: "x"}, subject=subject)
    assert m == {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "config": config,
        "layers": [layer],
        "annotations": {mt.ANN_TITLE: "x"},
        "subject": {k: subject[k] for k in ("mediaType", "digest", "size")},
    }
    assert json.loads(manifest_bytes(m)) == m
    assert "annotations" not in image_manifest(config, [layer], {})
    with pytest.raises(ValueError, match="artifactType"):
        image_manifest(mt.empty_descriptor(), [layer])
    with pytest.raises(ValueError, match="at least one layer"):
        image_manifest(config, [])


# -- media types ---------------------------------------------------------------------------------
def test_helm_and_docker_media_types() -> None:
    # SPECS.md "Helm constants.go"
    assert mt.HELM_CONFIG == "application/vnd.cncf.helm.config.v1+json"
    assert mt.HELM_CHART_CONTENT == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    assert mt.HELM_PROVENANCE == "application/vnd.cncf.helm.chart.provenance.v1.prov"
    # distribution docs/spec/manifest-v2-2.md
    assert mt.DOCKER_MANIFEST == "application/vnd.docker.distribution.manifest.v2+json"
    assert mt.DOCKER_MANIFEST_LIST == "application/vnd.docker.distribution.manifest.list.v2+json"
    assert mt.DOCKER_CONFIG == "application/vnd.docker.container.image.v1+json"
    assert mt.DOCKER_LAYER_TAR_GZIP == "application/vnd.docker.image.rootfs.diff.tar.gzip"
    assert {mt.OCI_INDEX, mt.DOCKER_MANIFEST_LIST} == mt.INDEX_TYPES
    assert {mt.OCI_MANIFEST, mt.DOCKER_MANIFEST} == mt.IMAGE_MANIFEST_TYPES
    assert mt.MANIFEST_TYPES == mt.INDEX_TYPES | mt.IMAGE_MANIFEST_TYPES
    assert not mt.DOCKER_SCHEMA1_TYPES & mt.MANIFEST_TYPES
    assert sha(mt.EMPTY_JSON) == mt.EMPTY_DIGEST
