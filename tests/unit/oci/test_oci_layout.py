"""Descriptors, manifests and indexes as canonical bytes; reading a layout back and checking it."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import (
    LayoutReader,
    artifact_manifest,
    blob_name,
    descriptor,
    image_index,
    index_bytes,
    layout_file_bytes,
    manifest_bytes,
    rfc3339,
    subject_of,
)


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- constants -----------------------------------------------------------------------------------
def test_empty_descriptor_is_the_specs() -> None:
    d = mt.empty_descriptor()
    assert d == {
        "mediaType": "application/vnd.oci.empty.v1+json",
        "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "size": 2,
        "data": "e30=",
    }
    assert sha(mt.EMPTY_JSON) == d["digest"] and base64.b64decode(d["data"]) == mt.EMPTY_JSON
    d["size"] = 3
    assert mt.empty_descriptor()["size"] == 2  # a fresh dict each time


def test_media_types() -> None:
    assert mt.OCI_MANIFEST == "application/vnd.oci.image.manifest.v1+json"
    assert mt.OCI_INDEX == "application/vnd.oci.image.index.v1+json"
    assert mt.IN_TOTO_JSON == "application/vnd.in-toto+json"
    assert mt.NVKR_BINARY == "application/vnd.nvkr.binary.v1"
    assert mt.NVKR_RELEASE_SET == "application/vnd.nvkr.release-set.v1+json"
    assert mt.NVKR_RELEASE_SET_METADATA == "application/vnd.nvkr.release-set.metadata.v1+json"
    assert mt.NVKR_GO_BUILDINFO == "application/vnd.nvkr.go-buildinfo.v1+json"
    assert mt.ANN_REF_NAME == "org.opencontainers.image.ref.name"
    assert all(
        k.startswith("dev.nvkr.") for k in (mt.ANN_NVKR_ARTIFACT, mt.ANN_NVKR_ARCH, mt.ANN_NVKR_GPU)
    )


# -- constructors --------------------------------------------------------------------------------
def test_descriptor_from_bytes_and_from_digest() -> None:
    d = descriptor(mt.OCTET_STREAM, b"hello")
    assert d == {"mediaType": mt.OCTET_STREAM, "digest": sha(b"hello"), "size": 5}
    assert descriptor(mt.OCTET_STREAM, sha(b"hello"), 5) == d
    full = descriptor(
        mt.OCI_MANIFEST,
        b"{}",
        annotations={"a": "b"},
        artifact_type=mt.NVKR_BINARY,
        platform={"os": "linux", "architecture": "arm64", "variant": "v8"},
    )
    assert full["annotations"] == {"a": "b"} and full["artifactType"] == mt.NVKR_BINARY
    assert full["platform"] == {"os": "linux", "architecture": "arm64", "variant": "v8"}
    assert "annotations" not in descriptor(mt.OCTET_STREAM, b"x", annotations={})


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((mt.OCTET_STREAM, "sha256:abc", 1), {}, ValueError),
        ((mt.OCTET_STREAM, sha(b"x")), {}, ValueError),  # digest without size
        ((mt.OCTET_STREAM, sha(b"x"), -1), {}, ValueError),
        ((mt.OCTET_STREAM, b"x", 2), {}, ValueError),  # size disagrees with bytes
        ((mt.OCTET_STREAM, b"x"), {"platform": {"os": "linux"}}, ValueError),
        ((mt.OCTET_STREAM, b"x"), {"annotations": {"a": 1}}, TypeError),
    ],
)
def test_descriptor_rejects(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        descriptor(*args, **kwargs)


def test_artifact_manifest_defaults_follow_the_artifact_guidance() -> None:
    layer = descriptor(mt.OCTET_STREAM, b"bin", annotations={mt.ANN_TITLE: "bin"})
    m = artifact_manifest(mt.NVKR_BINARY, [layer], {mt.ANN_CREATED: "2025-12-01T00:00:00Z"})
    assert m == {
        "schemaVersion": 2,
        "mediaType": mt.OCI_MANIFEST,
        "artifactType": mt.NVKR_BINARY,
        "config": mt.empty_descriptor(),
        "layers": [layer],
        "annotations": {mt.ANN_CREATED: "2025-12-01T00:00:00Z"},
    }
    assert artifact_manifest(mt.NVKR_BINARY, [])["layers"] == [mt.empty_descriptor()]
    subject = descriptor(
        mt.OCI_MANIFEST,
        b"{}",
        annotations={"x": "y"},
        platform={"os": "linux", "architecture": "amd64"},
    )
    referrer = artifact_manifest(mt.IN_TOTO_JSON, [layer], subject=subject)
    assert (
        referrer["subject"]
        == subject_of(subject)
        == {k: subject[k] for k in ("mediaType", "digest", "size")}
    )
    assert "annotations" not in referrer


def test_manifest_bytes_are_canonical_and_stable() -> None:
    layer = descriptor(mt.OCTET_STREAM, b"bin", annotations={"z": "1", "a": "2"})
    one = manifest_bytes(artifact_manifest(mt.NVKR_BINARY, [layer], {"b": "1", "a": "2"}))
    two = manifest_bytes(
        artifact_manifest(mt.NVKR_BINARY, [dict(reversed(layer.items()))], {"a": "2", "b": "1"})
    )
    assert one == two
    assert b" " not in one and b"\n" not in one
    assert json.loads(one)["artifactType"] == mt.NVKR_BINARY


def test_manifest_bytes_rejects_non_manifests() -> None:
    m = artifact_manifest(mt.NVKR_BINARY, [])
    with pytest.raises(ValueError, match="artifactType must be set"):
        manifest_bytes({k: v for k, v in m.items() if k != "artifactType"})
    with pytest.raises(ValueError, match="schemaVersion 2"):
        manifest_bytes(dict(m, mediaType=mt.OCI_INDEX))
    with pytest.raises(ValueError, match="at least one layer"):
        manifest_bytes(dict(m, layers=[]))
    with pytest.raises(TypeError, match="float"):
        manifest_bytes(dict(m, annotations={"x": 1.5}))


def test_index_bytes() -> None:
    d = descriptor(mt.OCI_MANIFEST, b"{}")
    idx = image_index([d], {mt.ANN_TITLE: "x"}, artifact_type=mt.NVKR_RELEASE_SET)
    assert idx == {
        "schemaVersion": 2,
        "mediaType": mt.OCI_INDEX,
        "manifests": [d],
        "artifactType": mt.NVKR_RELEASE_SET,
        "annotations": {mt.ANN_TITLE: "x"},
    }
    assert index_bytes(idx) == index_bytes(json.loads(index_bytes(idx)))
    assert image_index([]) == {"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": []}
    with pytest.raises(ValueError):
        index_bytes(dict(idx, mediaType=mt.OCI_MANIFEST))


def test_small_helpers() -> None:
    assert layout_file_bytes() == b'{"imageLayoutVersion":"1.0.0"}'
    assert blob_name(sha(b"x")) == "blobs/sha256/" + sha(b"x")[7:]
    with pytest.raises(ValueError):
        blob_name("md5:abc")
    assert rfc3339(1764547200) == "2025-12-01T00:00:00Z"
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    for bad in (-1, True, "1"):
        with pytest.raises(ValueError):
            rfc3339(bad)  # type: ignore[arg-type]


# -- a hand-made layout --------------------------------------------------------------------------
class Layout:
    """An image layout written by hand in a temp dir: a binary artifact plus its provenance,
    under an index named ``demo``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs" / "sha256").mkdir(parents=True)
        (root / "oci-layout").write_bytes(layout_file_bytes())
        self.put(mt.EMPTY_JSON)
        self.binary = self.put(b"\x7fELF pretend")
        self.layer = descriptor(mt.OCTET_STREAM, self.binary, 12, {mt.ANN_TITLE: "agent"})
        self.manifest = self.put(manifest_bytes(artifact_manifest(mt.NVKR_BINARY, [self.layer])))
        man_desc = descriptor(mt.OCI_MANIFEST, self.read(self.manifest))
        self.statement = self.put(b'{"_type":"https://in-toto.io/Statement/v1"}')
        prov = artifact_manifest(
            mt.IN_TOTO_JSON,
            [descriptor(mt.IN_TOTO_JSON, self.read(self.statement))],
            subject=man_desc,
        )
        self.prov = self.put(manifest_bytes(prov))
        index = image_index([man_desc, descriptor(mt.OCI_MANIFEST, self.read(self.prov))])
        self.index = self.put(index_bytes(index))
        top = image_index(
            [descriptor(mt.OCI_INDEX, self.read(self.index), annotations={mt.ANN_REF_NAME: "demo"})]
        )
        (root / "index.json").write_bytes(index_bytes(top))

    def put(self, data: bytes) -> str:
        digest = sha(data)
        (self.root / blob_name(digest)).write_bytes(data)
        return digest

    def read(self, digest: str) -> bytes:
        return (self.root / blob_name(digest)).read_bytes()

    def rewrite(self, digest: str, data: bytes) -> None:
        (self.root / blob_name(digest)).write_bytes(data)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path / "layout")


def test_walk_visits_the_closure_once_in_document_order(layout: Layout) -> None:
    reader = LayoutReader(layout.root)
    walked = reader.walk()
    assert [b.digest for b in walked] == [
        layout.index,
        layout.manifest,
        mt.EMPTY_DIGEST,
        layout.binary,
        layout.prov,
        layout.statement,
    ]
    assert len(walked) == 6 and len({b.digest for b in walked}) == 6
    assert walked[0].referrer == "index.json manifests[0]"
    assert walked[3].referrer == f"manifest {layout.manifest} layers[0]"
    assert walked[3].media_type == mt.OCTET_STREAM and walked[3].size == 12
    assert reader.unreferenced(walked) == []
    assert reader.walk(deep=False) == walked


def test_walk_from_one_root(layout: Layout) -> None:
    reader = LayoutReader(layout.root)
    root = descriptor(mt.OCI_MANIFEST, layout.read(layout.manifest))
    assert [b.digest for b in reader.walk(root)] == [
        layout.manifest,
        mt.EMPTY_DIGEST,
        layout.binary,
    ]


def test_resolve_and_names(layout: Layout) -> None:
    reader = LayoutReader(layout.root)
    assert reader.names() == ["demo"]
    assert reader.resolve("demo")["digest"] == layout.index
    with pytest.raises(UsageError, match="0 manifests named 'other'"):
        reader.resolve("other")


def test_flipped_byte_in_a_leaf_blob(layout: Layout) -> None:
    layout.rewrite(layout.binary, b"\x7fELF pretenD")
    with pytest.raises(IntegrityError) as e:
        LayoutReader(layout.root).walk()
    assert e.value.message.startswith(
        f"blob {layout.binary} (referenced by manifest {layout.manifest} layers[0]) is corrupt"
    )
    LayoutReader(layout.root).walk(deep=False)  # sizes only: a same-size edit passes the quick walk


def test_flipped_byte_in_a_manifest_is_caught_even_when_shallow(layout: Layout) -> None:
    data = layout.read(layout.manifest).replace(b"agent", b"agenT")
    layout.rewrite(layout.manifest, data)
    with pytest.raises(
        IntegrityError,
        match=f"blob {layout.manifest} \\(referenced by index {layout.index} manifests\\[0\\]\\) is corrupt",
    ):
        LayoutReader(layout.root).walk(deep=False)


def test_truncated_and_missing_blobs(layout: Layout) -> None:
    layout.rewrite(layout.binary, b"short")
    with pytest.raises(IntegrityError, match="is 5 bytes, expected 12"):
        LayoutReader(layout.root).walk(deep=False)
    (layout.root / blob_name(layout.binary)).unlink()
    with pytest.raises(IntegrityError, match=f"blob {layout.binary} .* is missing"):
        LayoutReader(layout.root).walk()


def test_empty_blob_checked_both_inline_and_on_disk(layout: Layout) -> None:
    layout.rewrite(mt.EMPTY_DIGEST, b"[]")
    with pytest.raises(IntegrityError, match=f"blob {mt.EMPTY_DIGEST} .*config"):
        LayoutReader(layout.root).walk()


def test_bad_embedded_data(tmp_path: Path, layout: Layout) -> None:
    bad = dict(mt.empty_descriptor(), data=base64.b64encode(b"[]").decode())
    m = manifest_bytes(artifact_manifest(mt.NVKR_BINARY, [layout.layer], config=bad))
    digest = layout.put(m)
    with pytest.raises(IntegrityError, match="embedded data"):
        LayoutReader(layout.root).walk(descriptor(mt.OCI_MANIFEST, digest, len(m)))


def test_media_type_mismatch(layout: Layout) -> None:
    idx = descriptor(mt.OCI_INDEX, layout.manifest, len(layout.read(layout.manifest)))
    with pytest.raises(IntegrityError, match="says mediaType"):
        LayoutReader(layout.root).walk(idx)


def test_malformed_descriptors(layout: Layout) -> None:
    reader = LayoutReader(layout.root)
    for desc, message in [
        ({"mediaType": mt.OCTET_STREAM, "digest": "sha256:xyz", "size": 1}, "malformed digest"),
        ({"mediaType": mt.OCTET_STREAM, "digest": layout.binary, "size": "12"}, "bad size"),
        ({"digest": layout.binary, "size": 12}, "no mediaType"),
        ("not a descriptor", "must be a JSON object"),
    ]:
        with pytest.raises(IntegrityError, match=message):
            reader.walk(desc)  # type: ignore[arg-type]


def test_same_digest_two_sizes(layout: Layout) -> None:
    layer2 = dict(layout.layer, size=13)
    m = manifest_bytes(artifact_manifest(mt.NVKR_BINARY, [layout.layer, layer2]))
    digest = layout.put(m)
    with pytest.raises(IntegrityError, match="gives size 13"):
        LayoutReader(layout.root).walk(descriptor(mt.OCI_MANIFEST, digest, len(m)))


def test_unreferenced_blobs(layout: Layout) -> None:
    stray = layout.put(b"stray")
    assert LayoutReader(layout.root).unreferenced() == [stray]


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("oci-layout", None, "no readable oci-layout"),
        ("oci-layout", b'{"imageLayoutVersion":"2.0.0"}', "imageLayoutVersion"),
        ("index.json", None, "missing or not JSON"),
        ("index.json", b"{]", "missing or not JSON"),
        ("index.json", b'{"schemaVersion":1,"manifests":[]}', "not an OCI image index"),
        ("index.json", b'{"schemaVersion":2,"mediaType":"x","manifests":[]}', "mediaType"),
    ],
)
def test_not_a_layout(layout: Layout, file: str, content: bytes | None, message: str) -> None:
    if content is None:
        (layout.root / file).unlink()
    else:
        (layout.root / file).write_bytes(content)
    with pytest.raises(IntegrityError, match=message):
        LayoutReader(layout.root)


def test_subject_is_checked_when_present(layout: Layout) -> None:
    # the artifact manifest appears in the index and as the provenance's subject; break only the
    # subject's size in a copy of the provenance manifest
    prov = json.loads(layout.read(layout.prov))
    prov["subject"]["size"] += 1
    data = manifest_bytes(prov)
    digest = layout.put(data)
    with pytest.raises(IntegrityError, match="subject"):
        LayoutReader(layout.root).walk(descriptor(mt.OCI_MANIFEST, digest, len(data)))
