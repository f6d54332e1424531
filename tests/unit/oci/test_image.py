"""Reproducible image primitives: layers from trees, normalised foreign layers, configs,
manifests, and picking a platform's image out of a stored index."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from nvkr.canonical import canonical_json
from nvkr.errors import BuildError
from nvkr.oci import mediatypes as mt
from nvkr.oci.image import (
    OCI_LAYER_TAR_ZSTD,
    Layer,
    image_config,
    image_manifest,
    layer_from_tree,
    load_image,
    normalise_layer,
    platform_of,
    select_manifest,
)
from nvkr.oci.layout import descriptor, image_index, index_bytes
from nvkr.store import Store

EPOCH = 1_764_547_200
CREATED = "2025-12-01T00:00:00Z"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def make_tree(root: Path) -> Path:
    (root / "usr" / "bin").mkdir(parents=True)
    (root / "usr" / "bin" / "hello").write_text("#!/bin/sh\necho hello\n")
    (root / "usr" / "bin" / "hello").chmod(0o700)
    (root / "etc").mkdir()
    (root / "etc" / "hello.conf").write_text("greeting = hi\n")
    (root / "etc" / "secret").write_text("s3cret\n")
    (root / "etc" / "link").symlink_to("hello.conf")
    (root / "usr" / "a-b").write_text("sorts before usr/bin by bytes\n")
    for p in root.rglob("*"):
        if not p.is_symlink():
            os.utime(p, (1_000_000_000 + hash(p.name) % 1000, 1_000_000_000))
    return root


def plain_tar(store: Store, layer: Layer) -> bytes:
    data = store.read_blob(layer.digest)
    if layer.media_type == OCI_LAYER_TAR_ZSTD:
        import zstandard

        return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)).read()
    return gzip.decompress(data)


def members(tar_bytes: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes)) as tar:
        return tar.getmembers()


# -- layer_from_tree -------------------------------------------------------------------------------
def test_layer_from_tree_is_deterministic_and_normalised(tmp_path):
    store = Store(tmp_path / "store")
    layer = layer_from_tree(
        make_tree(tmp_path / "tree"), store, epoch=EPOCH, modes={"etc/secret": 0o600}
    )
    assert layer.media_type == mt.OCI_LAYER_TAR_GZIP
    blob = store.read_blob(layer.digest)
    assert sha(blob) == layer.digest and len(blob) == layer.size
    # gzip header: no FNAME flag, mtime 0, XFL 2 (level 9), OS 255
    assert (
        blob[:4] == b"\x1f\x8b\x08\x00" and blob[4:8] == b"\0\0\0\0" and blob[8:10] == b"\x02\xff"
    )
    raw = gzip.decompress(blob)
    assert sha(raw) == layer.diff_id
    got = members(raw)
    names = [m.name for m in got]
    assert names == sorted(names, key=str.encode)
    assert names == [
        "etc",
        "etc/hello.conf",
        "etc/link",
        "etc/secret",
        "usr",
        "usr/a-b",
        "usr/bin",
        "usr/bin/hello",
    ]
    by = {m.name: m for m in got}
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in got} == {(0, 0, "", "", EPOCH)}
    assert by["usr/bin/hello"].mode == 0o755  # any execute bit -> 0755
    assert by["etc/hello.conf"].mode == 0o644
    assert by["etc/secret"].mode == 0o600  # explicit
    assert by["etc"].isdir() and by["etc"].mode == 0o755
    assert by["etc/link"].issym() and by["etc/link"].linkname == "hello.conf"
    assert b"atime" not in raw and b"ctime" not in raw


_SUBPROCESS_BUILD = """
import json, os, sys
from pathlib import Path
from nvkr.store import Store
from nvkr.oci.image import layer_from_tree
os.umask(0o077)
layer = layer_from_tree(Path(sys.argv[1]), Store(Path(sys.argv[2])), epoch=int(sys.argv[3]),
                        compression=sys.argv[4])
print(json.dumps([layer.digest, layer.diff_id]))
"""


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_layer_is_byte_identical_across_stores_umasks_and_time_zones(tmp_path, compression):
    old = os.umask(0o022)
    try:
        a = layer_from_tree(
            make_tree(tmp_path / "a"), Store(tmp_path / "s1"), epoch=EPOCH, compression=compression
        )
    finally:
        os.umask(old)
    # the second tree is made under umask 077 (files 0600, dirs 0700) with other mtimes, and
    # layered in another process with another time zone and locale
    old = os.umask(0o077)
    try:
        make_tree(tmp_path / "b")
    finally:
        os.umask(old)
    env = {**os.environ, "TZ": "Pacific/Chatham", "LC_ALL": "C"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _SUBPROCESS_BUILD,
            tmp_path / "b",
            tmp_path / "s2",
            str(EPOCH),
            compression,
        ],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    assert json.loads(out.stdout) == [a.digest, a.diff_id]
    assert (tmp_path / "s1" / "blobs" / "sha256" / a.digest[7:]).read_bytes() == (
        tmp_path / "s2" / "blobs" / "sha256" / a.digest[7:]
    ).read_bytes()


def test_zstd_layer(tmp_path):
    store = Store(tmp_path / "store")
    layer = layer_from_tree(make_tree(tmp_path / "t"), store, epoch=EPOCH, compression="zstd")
    assert layer.media_type == "application/vnd.oci.image.layer.v1.tar+zstd"
    assert store.read_blob(layer.digest)[:4] == b"\x28\xb5\x2f\xfd"
    assert sha(plain_tar(store, layer)) == layer.diff_id
    gz = layer_from_tree(tmp_path / "t", store, epoch=EPOCH)
    assert gz.diff_id == layer.diff_id  # same tar, other compression


def test_unknown_compression(tmp_path):
    with pytest.raises(ValueError, match="compression"):
        layer_from_tree(make_tree(tmp_path / "t"), Store(tmp_path / "s"), epoch=0, compression="xz")


# -- normalise_layer -------------------------------------------------------------------------------
def _messy_layer() -> bytes:
    """A layer as a daemon might save it: unsorted, wall-clock times, PAX times, owner names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name, type=tarfile.REGTYPE, data=b"", **kw):
            info = tarfile.TarInfo(name)
            info.type = type
            info.mtime = kw.pop("mtime", EPOCH + 86_400 * 30)
            info.uname, info.gname = "builder", "builder"
            info.uid = kw.pop("uid", 1000)
            info.gid = kw.pop("gid", 1000)
            info.pax_headers = kw.pop(
                "pax", {"atime": "1790000000.123", "ctime": "1790000001.5", "comment": "noise"}
            )
            for k, v in kw.items():
                setattr(info, k, v)
            if type == tarfile.REGTYPE:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)

        add("z", tarfile.DIRTYPE, mode=0o755)
        add("z/file", data=b"payload\n", mode=0o640, uid=33, gid=44)
        add("b", tarfile.DIRTYPE, mode=0o755)
        add("b/hard", tarfile.LNKTYPE, linkname="z/file", mode=0o640, uid=33, gid=44)
        add("a", tarfile.DIRTYPE, mode=0o700)
        add("a/.wh..wh..opq", mode=0o644, uid=0, gid=0)
        add("a/.wh.gone", mode=0o644, uid=0, gid=0)
        add("link", tarfile.SYMTYPE, linkname="/z/file", mode=0o777)
        add("m-early", data=b"old\n", mode=0o644, mtime=100)
        add(
            "usr/bin/ping",
            data=b"\x7fELF",
            mode=0o4755,
            uid=0,
            gid=0,
            pax={"atime": "1.5", "SCHILY.xattr.security.capability": "\x01\x00\x00\x02"},
        )
    return buf.getvalue()


def test_normalise_layer_sorts_clamps_and_keeps_what_matters(tmp_path):
    store = Store(tmp_path / "store")
    layer = normalise_layer(io.BytesIO(_messy_layer()), store, epoch=EPOCH)
    raw = plain_tar(store, layer)
    assert sha(raw) == layer.diff_id
    got = members(raw)
    names = [m.name for m in got]
    assert names == sorted(names, key=str.encode)
    by = {m.name: m for m in got}
    assert set(by) == {
        "a",
        "a/.wh..wh..opq",
        "a/.wh.gone",
        "b",
        "b/hard",
        "link",
        "m-early",
        "usr/bin/ping",
        "z",
        "z/file",
    }
    assert by["m-early"].mtime == 100, "times before the epoch stay"
    assert {m.mtime for n, m in by.items() if n != "m-early"} == {EPOCH}, "later times clamp"
    assert {(m.uname, m.gname) for m in got} == {("", "")}
    assert (by["z/file"].uid, by["z/file"].gid, by["z/file"].mode) == (33, 44, 0o640)
    assert by["a"].mode == 0o700 and by["usr/bin/ping"].mode == 0o4755
    assert by["link"].issym() and by["link"].linkname == "/z/file"
    # the hard link now comes first in sorted order, so it holds the data and the file links to it
    assert by["b/hard"].isreg() and by["b/hard"].size == len(b"payload\n")
    assert by["z/file"].islnk() and by["z/file"].linkname == "b/hard"
    assert (
        by["usr/bin/ping"].pax_headers.get("SCHILY.xattr.security.capability") == "\x01\x00\x00\x02"
    )
    for noise in (b"atime", b"ctime", b"comment", b"builder"):
        assert noise not in raw
    out = tmp_path / "out"
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        tar.extractall(out, filter="fully_trusted")
    assert (out / "b" / "hard").read_bytes() == b"payload\n"
    assert os.stat(out / "b" / "hard").st_ino == os.stat(out / "z" / "file").st_ino


def test_normalise_layer_is_idempotent_and_ignores_input_compression(tmp_path):
    store = Store(tmp_path / "store")
    messy = _messy_layer()
    first = normalise_layer(io.BytesIO(messy), store, epoch=EPOCH)
    from_gzip = normalise_layer(io.BytesIO(gzip.compress(messy, mtime=12345)), store, epoch=EPOCH)
    again = normalise_layer(io.BytesIO(plain_tar(store, first)), store, epoch=EPOCH)
    assert first == from_gzip == again
    zstd = normalise_layer(io.BytesIO(messy), store, epoch=EPOCH, compression="zstd")
    assert zstd.diff_id == first.diff_id and zstd.media_type == OCI_LAYER_TAR_ZSTD
    from_zstd = normalise_layer(io.BytesIO(store.read_blob(zstd.digest)), store, epoch=EPOCH)
    assert from_zstd == first
    assert not os.listdir(store.tmp_dir)


def test_normalise_layer_rejects_garbage(tmp_path):
    with pytest.raises(BuildError, match="cannot decompress"):
        normalise_layer(io.BytesIO(b"\x1f\x8b" + b"x" * 10), Store(tmp_path / "s"), epoch=0)


# -- config and manifest ---------------------------------------------------------------------------
def test_image_config_has_only_epoch_times():
    data = image_config(
        arch="amd64",
        diff_ids=["sha256:" + "a" * 64],
        epoch=EPOCH,
        entrypoint=["/usr/bin/hello"],
        env={"B": "2", "A": "1"},
        user="65532",
        workdir="/work",
        labels={"x": "y"},
    )
    assert data == canonical_json(json.loads(data))
    doc = json.loads(data)
    assert doc["created"] == CREATED and doc["os"] == "linux" and doc["architecture"] == "amd64"
    assert "variant" not in doc
    assert doc["rootfs"] == {"type": "layers", "diff_ids": ["sha256:" + "a" * 64]}
    assert doc["history"] == [{"created": CREATED, "created_by": "nvkr"}]
    assert doc["config"] == {
        "Entrypoint": ["/usr/bin/hello"],
        "Env": ["A=1", "B=2"],
        "User": "65532",
        "WorkingDir": "/work",
        "Labels": {"x": "y"},
    }
    stamps = re.findall(r"\d{4}-\d\d-\d\dT[0-9:.]+Z?", data.decode())
    assert set(stamps) == {CREATED}


def test_image_config_extends_a_base():
    base = {
        "architecture": "arm64",
        "variant": "v8",
        "os": "linux",
        "created": "2020-01-01T12:34:56.789Z",
        "config": {"Env": ["PATH=/bin", "A=old"], "Cmd": ["/bin/sh"], "Labels": {"base": "1"}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "b" * 64]},
        "history": [{"created": "2020-01-01T12:34:56.789Z", "created_by": "base"}],
    }
    doc = json.loads(
        image_config(
            arch="arm64",
            diff_ids=["sha256:" + "c" * 64],
            epoch=EPOCH,
            entrypoint=["/app"],
            env={"A": "new", "Z": "z"},
            labels={"app": "2"},
            history=[{"created_by": "files", "created": "2030-01-01T00:00:00Z"}],
            base_config=base,
        )
    )
    assert doc["created"] == CREATED and doc["variant"] == "v8"
    assert doc["rootfs"]["diff_ids"] == ["sha256:" + "b" * 64, "sha256:" + "c" * 64]
    assert doc["history"] == [
        {"created": "2020-01-01T12:34:56.789Z", "created_by": "base"},
        {"created": CREATED, "created_by": "files"},
    ]
    assert doc["config"]["Env"] == ["PATH=/bin", "A=new", "Z=z"]
    assert doc["config"]["Entrypoint"] == ["/app"] and "Cmd" not in doc["config"]
    assert doc["config"]["Labels"] == {"base": "1", "app": "2"}
    assert base["config"]["Env"] == ["PATH=/bin", "A=old"], "the base is not modified"
    # nothing given: the base's execution config is kept as it is
    kept = json.loads(image_config(arch="arm64", diff_ids=[], epoch=0, base_config=base))
    assert kept["config"] == base["config"] and kept["created"] == "1970-01-01T00:00:00Z"


def test_image_manifest():
    config = descriptor(mt.OCI_IMAGE_CONFIG, b"{}")
    layer = Layer("sha256:" + "d" * 64, 10, "sha256:" + "e" * 64, mt.OCI_LAYER_TAR_GZIP)
    data = image_manifest(config, [layer.descriptor()], {"b": "2", "a": "1"})
    assert data == canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": mt.OCI_MANIFEST,
            "config": config,
            "layers": [{"mediaType": mt.OCI_LAYER_TAR_GZIP, "digest": layer.digest, "size": 10}],
            "annotations": {"a": "1", "b": "2"},
        }
    )
    assert "annotations" not in json.loads(image_manifest(config, [layer.descriptor()], {}))
    with pytest.raises(ValueError, match="at least one layer"):
        image_manifest(config, [], {})


# -- stored images -----------------------------------------------------------------------------------
def _stored_index(tmp_path: Path, store: Store, platforms: list[dict], docker: bool = False) -> str:
    manifests = []
    for i, platform in enumerate(platforms):
        tree = tmp_path / f"tree{i}"
        (tree / "etc").mkdir(parents=True)
        (tree / "etc" / "arch").write_text(platform["architecture"] + "\n")
        layer = layer_from_tree(tree, store, epoch=0)
        config = store.add_bytes(
            image_config(arch=platform["architecture"], diff_ids=[layer.diff_id], epoch=0)
        )
        layer_desc = layer.descriptor()
        manifest = {
            "schemaVersion": 2,
            "mediaType": mt.DOCKER_MANIFEST if docker else mt.OCI_MANIFEST,
            "config": {
                "mediaType": mt.DOCKER_CONFIG if docker else mt.OCI_IMAGE_CONFIG,
                "digest": config.digest,
                "size": config.size,
            },
            "layers": [
                {**layer_desc, "mediaType": mt.DOCKER_LAYER_TAR_GZIP} if docker else layer_desc
            ],
        }
        info = store.add_bytes(canonical_json(manifest))
        manifests.append(
            descriptor(manifest["mediaType"], info.digest, info.size, platform=platform)
        )
    if docker:
        data = canonical_json(
            {"schemaVersion": 2, "mediaType": mt.DOCKER_MANIFEST_LIST, "manifests": manifests}
        )
    else:
        data = index_bytes(image_index(manifests))
    return store.add_bytes(data).digest


def test_load_image_picks_the_platform(tmp_path):
    store = Store(tmp_path / "store")
    top = _stored_index(
        tmp_path,
        store,
        [{"os": "linux", "architecture": "amd64"}, {"os": "linux", "architecture": "arm64"}],
    )
    image = load_image(store, top, platform_of("arm64"), what="base 'b'")
    assert image.config["architecture"] == "arm64"
    layer = image.layers[0]
    assert b"etc/arch" in gzip.decompress(store.read_blob(layer["digest"]))
    # asking a single manifest for its own platform gives it back
    digest, manifest = select_manifest(store, image.manifest_digest, platform_of("arm64"), what="x")
    assert digest == image.manifest_digest and manifest == image.manifest
    with pytest.raises(BuildError, match=r"base 'b'.*amd64, not linux/arm64/v8"):
        load_image(
            store,
            load_image(store, top, platform_of("amd64"), what="x").manifest_digest,
            platform_of("arm64"),
            what="base 'b'",
        )


def test_load_image_missing_platform_names_it(tmp_path):
    store = Store(tmp_path / "store")
    top = _stored_index(tmp_path, store, [{"os": "linux", "architecture": "amd64"}])
    with pytest.raises(
        BuildError, match=r"base 'x'.*no image for linux/arm64/v8; it has linux/amd64"
    ):
        load_image(store, top, platform_of("arm64"), what="base 'x'")


def test_load_image_reads_docker_lists_and_prefers_exact_variants(tmp_path):
    store = Store(tmp_path / "store")
    top = _stored_index(
        tmp_path,
        store,
        [
            {"os": "linux", "architecture": "amd64", "variant": "v3"},
            {"os": "linux", "architecture": "amd64"},
            {"os": "linux", "architecture": "arm64"},
        ],
        docker=True,
    )
    amd64 = load_image(store, top, platform_of("amd64"), what="b")
    assert amd64.manifest["mediaType"] == mt.DOCKER_MANIFEST
    assert amd64.layers[0]["mediaType"] == mt.OCI_LAYER_TAR_GZIP, "Docker types become OCI ones"
    index = json.loads(store.read_blob(top))
    assert amd64.manifest_digest == index["manifests"][1]["digest"], "not the v3 one"
    arm64 = load_image(store, top, platform_of("arm64"), what="b")
    assert arm64.manifest_digest == index["manifests"][2]["digest"], "v8 is arm64's default"


def test_normalise_layer_rejects_a_non_tar(tmp_path):
    with pytest.raises(BuildError, match="not a readable tar"):
        normalise_layer(io.BytesIO(b"x" * 100), Store(tmp_path / "s"), epoch=0)
