"""SBOMs: SPDX 2.3 documents of binaries, images and charts, and their place in the release set.

Every document made here is validated against the official SPDX 2.3 JSON Schema
(``tests/fixtures/spdx/spdx-schema.json``, see its README) with the ``jsonschema`` package, and
against the stricter rules the schema leaves to the specification (:func:`check_spdx`).
The artifacts are small fakes in a store: a Go binary with a build info naming modules, a
two-arch image whose layers hold that binary among other files, and a Helm chart.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import zstandard

from nvkr import releaseset
from nvkr.action import Action
from nvkr.builders.sbom.builder import SbomBuilder, sbom_spec
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.execute import run_action
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import LayoutReader, descriptor, image_manifest, manifest_bytes
from nvkr.plan import _new_action
from nvkr.releasespec import ReleaseSetSpec
from nvkr.sbom import SPDX_MEDIA_TYPE, golang_purl, oci_purl
from nvkr.sbom.archive import member_path
from nvkr.store import Store
from tests.helpers import REPO
from tests.helpers.nvkr import run_nvkr
from tests.helpers.results import result as read_record
from tests.helpers.results import results
from tests.helpers.sample_set import (
    CREATED,
    EPOCH,
    _output,
    chart_result,
    image_index_result,
    sample,
)
from tests.helpers.spdx import SCHEMA_PATH, check_spdx


def h1(seed: str) -> str:
    """A go.sum ``h1:`` hash (base64 of 32 bytes)."""
    return "h1:" + base64.b64encode(hashlib.sha256(seed.encode()).digest()).decode()


def buildinfo(arch: str) -> dict[str, Any]:
    """``go version -m -json`` of a binary with one plain and one replaced dependency."""
    return {
        "GoVersion": "go1.27.3",
        "Path": "nvkr.dev/node-agent/cmd/node-agent",
        "Main": {"Path": "nvkr.dev/node-agent", "Version": "(devel)"},
        "Deps": [
            {"Path": "github.com/BurntSushi/toml", "Version": "v1.4.0", "Sum": h1("toml")},
            {
                "Path": "golang.org/x/sys",
                "Version": "v0.30.0",
                "Sum": h1("sys"),
                "Replace": {
                    "Path": "example.org/fork/sys",
                    "Version": "v0.30.1",
                    "Sum": h1("fork"),
                },
            },
        ],
        "Settings": [
            {"Key": "-buildmode", "Value": "exe"},
            {"Key": "-trimpath", "Value": "true"},
            {"Key": "CGO_ENABLED", "Value": "0"},
            {"Key": "GOARCH", "Value": arch},
            {"Key": "GOOS", "Value": "linux"},
        ],
    }


def binary_bytes(arch: str) -> bytes:
    return b"\x7fELF\x02\x01\x01" + f"node-agent for {arch}".encode() * 40


def go_binary_result(store: Store, key: str, arch: str) -> dict[str, Any]:
    """What the go-binary builder caches: the binary (primary) and its build info."""
    return {
        "key": key,
        "builder": "go-binary",
        "name": f"agent [{arch}]",
        "outputs": [
            _output(store, "node-agent", binary_bytes(arch), mt.OCTET_STREAM, "primary"),
            _output(
                store,
                "node-agent.buildinfo.json",
                canonical_json(buildinfo(arch)) + b"\n",
                mt.NVKR_GO_BUILDINFO,
                "buildinfo",
            ),
        ],
        "metadata": {"goVersion": "go1.27.3", "goos": "linux", "goarch": arch},
    }


def tar_bytes(members: list[tuple[str, str, bytes | str]]) -> bytes:
    """A tar of (name, type, data or link target): type is file, dir, symlink or hardlink."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = EPOCH, 0o755 if kind == "dir" else 0o644
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind in ("symlink", "hardlink"):
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = str(data)
                tar.addfile(info)
            else:
                assert isinstance(data, bytes)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


BASE_FILES = {"etc/passwd": b"root:x:0:0::/root:/sbin/nologin\n", "etc/os-release": b"ID=fake\n"}


def put_two_layer_image(store: Store, arch: str) -> tuple[dict[str, Any], dict[str, str]]:
    """An image for ``arch``: a gzip base layer shared by both arches (files, a hard link, a
    symlink, a whiteout) and a zstd layer holding the Go binary. Returns (manifest descriptor,
    layer digests by role)."""
    base_tar = tar_bytes(
        [
            ("etc", "dir", b""),
            ("./etc/passwd", "file", BASE_FILES["etc/passwd"]),
            ("etc/os-release", "file", BASE_FILES["etc/os-release"]),
            ("etc/passwd-", "hardlink", "etc/passwd"),
            ("etc/mtab", "symlink", "/proc/mounts"),
            ("etc/.wh.old.conf", "file", b""),
        ]
    )
    import gzip

    base = store.add_bytes(gzip.compress(base_tar, mtime=0))
    app_tar = tar_bytes(
        [
            ("usr", "dir", b""),
            ("usr/bin", "dir", b""),
            ("usr/bin/node-agent", "file", binary_bytes(arch)),
        ]
    )
    app = store.add_bytes(zstandard.ZstdCompressor().compress(app_tar))
    config = canonical_json(
        {
            "architecture": arch,
            "os": "linux",
            "rootfs": {
                "type": "layers",
                "diff_ids": [
                    "sha256:" + hashlib.sha256(base_tar).hexdigest(),
                    "sha256:" + hashlib.sha256(app_tar).hexdigest(),
                ],
            },
        }
    )
    manifest = manifest_bytes(
        image_manifest(
            descriptor(mt.OCI_IMAGE_CONFIG, store.add_bytes(config).digest, len(config)),
            [
                descriptor(mt.OCI_LAYER_TAR_GZIP, base.digest, base.size),
                descriptor("application/vnd.oci.image.layer.v1.tar+zstd", app.digest, app.size),
            ],
        )
    )
    desc = descriptor(
        mt.OCI_MANIFEST,
        store.add_bytes(manifest).digest,
        len(manifest),
        platform={"os": "linux", "architecture": arch},
    )
    return desc, {"base": base.digest, "app": app.digest}


KEY_BIN = {"amd64": "sha256:" + "a" * 64, "arm64": "sha256:" + "b" * 64}
KEY_INDEX = "sha256:" + "e" * 64
KEY_CHART = "sha256:" + "c" * 64


def run_sbom(
    store: Store,
    label: str,
    kind: str,
    subject: str,
    deps: dict[str, dict[str, Any]],
    binaries: list[str] | None = None,
    images: list[str] | None = None,
) -> tuple[Action, dict[str, Any], dict[str, Any], bytes]:
    """Plan and run one sbom action; returns (action, result, document, document bytes)."""
    spec = sbom_spec(label, kind, subject, binaries or [], "0.1.0", images)
    name = f"sbom {label}"
    action = _new_action(SbomBuilder.name, SbomBuilder.version, name, spec, EPOCH, {}, label)
    result = run_action(action, store, results({k: deps[k] for k in action.deps}))
    (out,) = result.outputs
    data = store.read_blob(out.digest)
    return action, result.to_json(), json.loads(data), data


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft201909Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert schema["title"] == "SPDX 2.3" and schema["$id"] == "http://spdx.org/rdf/terms/2.3"
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(schema)


def _by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["SPDXID"]: e for e in doc["packages"] + doc["files"]}


def _purl(pkg: dict[str, Any]) -> str | None:
    refs = [
        r["referenceLocator"] for r in pkg.get("externalRefs", []) if r["referenceType"] == "purl"
    ]
    return refs[0] if refs else None


def _rels(doc: dict[str, Any], kind: str, element: str | None = None) -> set[tuple[str, str]]:
    return {
        (r["spdxElementId"], r["relatedSpdxElement"])
        for r in doc["relationships"]
        if r["relationshipType"] == kind and element in (None, r["spdxElementId"])
    }


# -- binaries ------------------------------------------------------------------------------------
def test_a_go_binary_lists_its_modules_toolchain_and_file(tmp_path: Path, validator: Any) -> None:
    store = Store(tmp_path / "store")
    result = go_binary_result(store, KEY_BIN["amd64"], "amd64")
    _, sbom, doc, data = run_sbom(
        store, "agent", "binary", KEY_BIN["amd64"], {KEY_BIN["amd64"]: result}
    )
    check_spdx(doc, validator)
    assert data == canonical_json(doc)
    assert doc["name"] == "agent (linux/amd64)"
    assert doc["creationInfo"] == {"created": CREATED, "creators": ["Tool: nvkr-0.1.0"]}
    assert doc["documentNamespace"].startswith("https://nvkr.dev/spdx/agent/")
    binary = binary_bytes("amd64")
    assert sbom["metadata"]["describes"] == "sha256:" + hashlib.sha256(binary).hexdigest()
    assert (
        sbom["outputs"][0]["mediaType"] == SPDX_MEDIA_TYPE and sbom["outputs"][0]["role"] == "sbom"
    )

    elements = _by_id(doc)
    (root,) = (elements[b] for a, b in _rels(doc, "DESCRIBES"))
    assert root["name"] == "agent" and root["primaryPackagePurpose"] == "APPLICATION"
    assert root["checksums"] == [
        {"algorithm": "SHA256", "checksumValue": hashlib.sha256(binary).hexdigest()}
    ]
    (file_id,) = (b for a, b in _rels(doc, "CONTAINS", root["SPDXID"]))
    file = elements[file_id]
    assert file["fileName"] == "./node-agent" and file["fileTypes"] == ["BINARY"]
    assert {c["algorithm"]: c["checksumValue"] for c in file["checksums"]} == {
        "SHA1": hashlib.sha1(binary).hexdigest(),
        "SHA256": hashlib.sha256(binary).hexdigest(),
    }
    assert "go1.27.3" in file["comment"] and "GOARCH=amd64" in file["comment"]

    by_name = {p["name"]: p for p in doc["packages"]}
    main = by_name["nvkr.dev/node-agent"]
    assert main["versionInfo"] == "(devel)" and _purl(main) == "pkg:golang/nvkr.dev/node-agent"
    std = by_name["stdlib"]
    assert std["versionInfo"] == "go1.27.3" and _purl(std) == "pkg:golang/stdlib@1.27.3"
    toml = by_name["github.com/BurntSushi/toml"]
    assert toml["versionInfo"] == "v1.4.0"
    assert _purl(toml) == "pkg:golang/github.com/burntsushi/toml@v1.4.0"
    assert toml["checksums"][0]["checksumValue"] == base64.b64decode(h1("toml")[3:]).hex()
    assert "go.sum " + h1("toml") in toml["comment"]
    assert "golang.org/x/sys" not in by_name, "a replaced module is listed as its replacement"
    fork = by_name["example.org/fork/sys"]
    assert (
        fork["versionInfo"] == "v0.30.1" and "replaces golang.org/x/sys v0.30.0" in fork["comment"]
    )
    assert _rels(doc, "GENERATED_FROM") == {(file_id, main["SPDXID"])}
    assert _rels(doc, "STATIC_LINK") == {(file_id, p["SPDXID"]) for p in (std, toml, fork)}
    assert _rels(doc, "DEPENDS_ON") == {(main["SPDXID"], p["SPDXID"]) for p in (toml, fork)}


def test_a_binary_without_build_info_is_one_file(tmp_path: Path, validator: Any) -> None:
    store = Store(tmp_path / "store")
    result = go_binary_result(store, KEY_BIN["arm64"], "arm64")
    result["outputs"] = [o for o in result["outputs"] if o["role"] == "primary"]
    result["metadata"] = {}
    _, _, doc, _ = run_sbom(store, "tool", "binary", KEY_BIN["arm64"], {KEY_BIN["arm64"]: result})
    check_spdx(doc, validator)
    assert doc["name"] == "tool" and len(doc["packages"]) == 1 and len(doc["files"]) == 1


def test_a_cgo_binary_names_its_c_toolchain(tmp_path: Path, validator: Any) -> None:
    """A cgo build's compiler, binutils and C library (the tools tree's locked .debs) are build
    tools of the binary, with their purls and the .debs' sha256."""
    store = Store(tmp_path / "store")
    result = go_binary_result(store, KEY_BIN["arm64"], "arm64")
    gcc = {
        "name": "gcc-12-aarch64-linux-gnu",
        "version": "12.2.0-14cross1",
        "arch": "amd64",
        "sha256": "sha256:" + "a" * 64,
        "url": "http://deb.debian.org/debian/pool/main/g/gcc-12-cross/"
        "gcc-12-aarch64-linux-gnu_12.2.0-14cross1_amd64.deb",
    }
    libc = {
        "name": "libc6-dev-arm64-cross",
        "version": "2.36-8cross1",
        "arch": "all",
        "sha256": "sha256:" + "b" * 64,
        "url": "http://deb.debian.org/debian/pool/main/c/cross-toolchain-base/"
        "libc6-dev-arm64-cross_2.36-8cross1_all.deb",
    }
    result["metadata"].update(
        {
            "linkage": "dynamic",
            "interpreter": "/lib/ld-linux-aarch64.so.1",
            "cToolchain": {"cc": "aarch64-linux-gnu-gcc", "treeArch": "amd64",
                           "packages": [gcc, libc]},
        }
    )  # fmt: skip
    _, _, doc, _ = run_sbom(store, "agent", "binary", KEY_BIN["arm64"], {KEY_BIN["arm64"]: result})
    check_spdx(doc, validator)
    elements = _by_id(doc)
    (root_id,) = (b for a, b in _rels(doc, "DESCRIBES"))
    assert (
        "dynamically linked (ELF interpreter /lib/ld-linux-aarch64.so.1)"
        in (elements[root_id]["comment"])
    )
    tools = {elements[a]["name"]: elements[a] for a, b in _rels(doc, "BUILD_TOOL_OF")}
    assert {b for a, b in _rels(doc, "BUILD_TOOL_OF")} == {root_id}
    assert sorted(tools) == ["gcc-12-aarch64-linux-gnu", "libc6-dev-arm64-cross"]
    compiler = tools["gcc-12-aarch64-linux-gnu"]
    assert compiler["versionInfo"] == "12.2.0-14cross1"
    assert _purl(compiler) == "pkg:deb/debian/gcc-12-aarch64-linux-gnu@12.2.0-14cross1?arch=amd64"
    assert compiler["checksums"] == [{"algorithm": "SHA256", "checksumValue": "a" * 64}]
    assert compiler["downloadLocation"] == gcc["url"]


@pytest.mark.parametrize(
    "path, version, purl",
    [
        ("github.com/BurntSushi/toml", "v1.4.0", "pkg:golang/github.com/burntsushi/toml@v1.4.0"),
        ("example.org/m", "v2.0.0+incompatible", "pkg:golang/example.org/m@v2.0.0%2Bincompatible"),
        ("nvkr.dev/node-agent", "(devel)", "pkg:golang/nvkr.dev/node-agent"),
    ],
)
def test_golang_purls(path: str, version: str, purl: str) -> None:
    assert golang_purl(path, version) == purl


def test_oci_purl_encodes_the_digest_and_sorts_qualifiers() -> None:
    digest = "sha256:" + "f" * 64
    assert oci_purl("Node-Agent", digest, {"os": "linux", "arch": "amd64"}) == (
        f"pkg:oci/node-agent@sha256%3A{'f' * 64}?arch=amd64&os=linux"
    )


def test_bad_build_info_is_a_build_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    result = go_binary_result(store, KEY_BIN["amd64"], "amd64")
    result["outputs"][1] = _output(
        store, "bi.json", b'{"GOARCH": "amd64"}', mt.NVKR_GO_BUILDINFO, "buildinfo"
    )
    with pytest.raises(BuildError, match=r"lacks GoVersion or Main\.Path"):
        run_sbom(store, "agent", "binary", KEY_BIN["amd64"], {KEY_BIN["amd64"]: result})


# -- images --------------------------------------------------------------------------------------
def image_fixture(store: Store) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """deps for an image SBOM (the index result + both go-binary results) and facts about it."""
    deps = {KEY_BIN[a]: go_binary_result(store, KEY_BIN[a], a) for a in ("amd64", "arm64")}
    manifests, layers = [], {}
    for arch in ("amd64", "arm64"):
        desc, layers[arch] = put_two_layer_image(store, arch)
        manifests.append(desc)
    deps[KEY_INDEX] = image_index_result(store, KEY_INDEX, manifests)
    return deps, {"manifests": manifests, "layers": layers}


def test_an_image_lists_every_file_of_every_layer(tmp_path: Path, validator: Any) -> None:
    store = Store(tmp_path / "store")
    deps, facts = image_fixture(store)
    _, sbom, doc, _ = run_sbom(
        store, "agent-image", "image", KEY_INDEX, deps, list(KEY_BIN.values())
    )
    check_spdx(doc, validator)
    index_digest = deps[KEY_INDEX]["outputs"][0]["digest"]
    assert sbom["metadata"]["describes"] == index_digest
    elements = _by_id(doc)
    (root,) = (elements[b] for a, b in _rels(doc, "DESCRIBES"))
    assert root["name"] == "agent-image" and root["versionInfo"] == index_digest
    assert _purl(root) == f"pkg:oci/agent-image@sha256%3A{index_digest[7:]}"
    images = {elements[b]["name"]: elements[b] for a, b in _rels(doc, "CONTAINS", root["SPDXID"])}
    assert set(images) == {"agent-image linux/amd64", "agent-image linux/arm64"}
    amd64 = images["agent-image linux/amd64"]
    assert amd64["versionInfo"] == facts["manifests"][0]["digest"]
    assert _purl(amd64).endswith("?arch=amd64&os=linux")
    # the base layer is the same bytes for both arches: one package, contained by both images
    assert facts["layers"]["amd64"]["base"] == facts["layers"]["arm64"]["base"]
    layer_pkgs = [p for p in doc["packages"] if p["name"].startswith("layer ")]
    assert len(layer_pkgs) == 3
    files_by_layer: dict[str, dict[str, dict[str, Any]]] = {}
    for pkg in layer_pkgs:
        files_by_layer[pkg["name"][6:]] = {
            elements[f]["fileName"]: elements[f] for _, f in _rels(doc, "CONTAINS", pkg["SPDXID"])
        }
    base = files_by_layer[facts["layers"]["amd64"]["base"]]
    # regular files and hard links; no directory, symlink or whiteout
    assert set(base) == {"./etc/passwd", "./etc/passwd-", "./etc/os-release"}
    for name, content in BASE_FILES.items():
        sums = {c["algorithm"]: c["checksumValue"] for c in base[f"./{name}"]["checksums"]}
        assert sums["SHA256"] == hashlib.sha256(content).hexdigest()
    assert base["./etc/passwd-"]["checksums"] == base["./etc/passwd"]["checksums"]
    for arch in ("amd64", "arm64"):
        app = files_by_layer[facts["layers"][arch]["app"]]
        assert set(app) == {"./usr/bin/node-agent"}
        agent = app["./usr/bin/node-agent"]
        assert agent["fileTypes"] == ["BINARY"]
        linked = {elements[b]["name"] for a, b in _rels(doc, "STATIC_LINK", agent["SPDXID"])}
        assert linked == {"stdlib", "github.com/BurntSushi/toml", "example.org/fork/sys"}
        (main,) = (elements[b]["name"] for a, b in _rels(doc, "GENERATED_FROM", agent["SPDXID"]))
        assert main == "nvkr.dev/node-agent"
    # both binaries link the same module versions: one package each
    assert sum(p["name"] == "stdlib" for p in doc["packages"]) == 1


def test_an_image_without_its_binaries_lists_files_only(tmp_path: Path, validator: Any) -> None:
    store = Store(tmp_path / "store")
    deps, _ = image_fixture(store)
    _, _, doc, _ = run_sbom(store, "agent-image", "image", KEY_INDEX, deps)
    check_spdx(doc, validator)
    assert not _rels(doc, "STATIC_LINK") and "stdlib" not in {p["name"] for p in doc["packages"]}


def test_a_corrupt_layer_is_an_integrity_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    deps, facts = image_fixture(store)
    path = store.blob_path(facts["layers"]["arm64"]["app"])
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    # the executor names the action and keeps the error's class: an integrity failure (exit 3)
    with pytest.raises(IntegrityError, match=r"layers\[1\]: store blob .* is corrupt") as caught:
        run_sbom(store, "agent-image", "image", KEY_INDEX, deps, list(KEY_BIN.values()))
    assert caught.value.exit_code == 3 and "action 'sbom agent-image'" in caught.value.message


def test_a_layer_that_is_no_tar_is_a_build_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    deps, _ = image_fixture(store)
    junk = store.add_bytes(b"\x1f\x8b not really gzip")
    index = json.loads(store.read_blob(deps[KEY_INDEX]["outputs"][0]["digest"]))
    manifest = json.loads(store.read_blob(index["manifests"][0]["digest"]))
    manifest["layers"][0] = descriptor(mt.OCI_LAYER_TAR_GZIP, junk.digest, junk.size)
    raw = manifest_bytes(manifest)
    index["manifests"][0] = {**index["manifests"][0], **descriptor(mt.OCI_MANIFEST, raw)}
    store.add_bytes(raw)
    deps[KEY_INDEX] = image_index_result(store, KEY_INDEX, index["manifests"])
    with pytest.raises(BuildError, match="not a readable tar archive"):
        run_sbom(store, "agent-image", "image", KEY_INDEX, deps)


@pytest.mark.parametrize(
    "name, path", [("./a/b", "a/b"), ("/etc/x", "etc/x"), ("a/../b", "b"), (".", "")]
)
def test_member_paths(name: str, path: str) -> None:
    assert member_path(name) == path


# -- charts --------------------------------------------------------------------------------------
def test_a_chart_lists_its_files_and_pinned_images(tmp_path: Path, validator: Any) -> None:
    store = Store(tmp_path / "store")
    result = chart_result(store)
    index = "sha256:" + "9" * 64
    result["metadata"]["images"] = {
        "image": f"ghcr.io/nvkr/node-agent@{index}",
        "sidecar": f"ghcr.io/nvkr/node-agent@{index}",
    }
    _, sbom, doc, _ = run_sbom(store, "agent-chart", "chart", KEY_CHART, {KEY_CHART: result})
    check_spdx(doc, validator)
    tgz = next(o for o in result["outputs"] if o["role"] == "primary")
    assert sbom["metadata"]["describes"] == tgz["digest"]
    elements = _by_id(doc)
    (root,) = (elements[b] for a, b in _rels(doc, "DESCRIBES"))
    assert (root["name"], root["versionInfo"], root["packageFileName"]) == (
        "node-agent",
        "0.1.0",
        "node-agent-0.1.0.tgz",
    )
    files = {elements[b]["fileName"] for a, b in _rels(doc, "CONTAINS", root["SPDXID"])}
    assert files == {"./node-agent/Chart.yaml"}
    (image,) = (elements[b] for a, b in _rels(doc, "DEPENDS_ON", root["SPDXID"]))
    assert image["versionInfo"] == index and image["comment"].endswith("as image, sidecar")
    assert _purl(image) == (
        f"pkg:oci/node-agent@sha256%3A{'9' * 64}?repository_url=ghcr.io/nvkr/node-agent"
    )


def test_a_chart_refers_to_the_sboms_of_its_images(tmp_path: Path, validator: Any) -> None:
    store = Store(tmp_path / "store")
    deps, _ = image_fixture(store)
    image_action, image_result, image_doc, image_bytes = run_sbom(
        store, "agent-image", "image", KEY_INDEX, deps, list(KEY_BIN.values())
    )
    deps[image_action.key] = image_result
    index = deps[KEY_INDEX]["outputs"][0]["digest"]
    deps[KEY_CHART] = chart_result(store)
    deps[KEY_CHART]["metadata"]["images"] = {"image": f"ghcr.io/nvkr/node-agent@{index}"}
    _, _, doc, _ = run_sbom(
        store, "agent-chart", "chart", KEY_CHART, deps, images=[image_action.key]
    )
    check_spdx(doc, validator)
    (ref,) = doc["externalDocumentRefs"]
    assert ref == {
        "externalDocumentId": f"DocumentRef-agent-image-{index[7:19]}",
        "spdxDocument": image_doc["documentNamespace"],
        "checksum": {"algorithm": "SHA1", "checksumValue": hashlib.sha1(image_bytes).hexdigest()},
    }
    (image,) = (p for p in doc["packages"] if p.get("versionInfo") == index)
    assert _rels(doc, "DESCRIBED_BY") == {
        (image["SPDXID"], f"DocumentRef-agent-image-{index[7:19]}:SPDXRef-DOCUMENT")
    }
    # what the chart deploys is named in the document it refers to
    assert {"nvkr.dev/node-agent", "stdlib"} <= {p["name"] for p in image_doc["packages"]}


# -- determinism ---------------------------------------------------------------------------------
def _all_sboms(root: Path) -> list[bytes]:
    store = Store(root)
    deps, _ = image_fixture(store)
    deps[KEY_CHART] = chart_result(store)
    out = [
        run_sbom(store, "agent-image", "image", KEY_INDEX, deps, list(KEY_BIN.values()))[3],
        run_sbom(store, "agent-chart", "chart", KEY_CHART, deps)[3],
    ]
    out += [run_sbom(store, "agent", "binary", KEY_BIN[a], deps)[3] for a in ("amd64", "arm64")]
    return out


def test_two_stores_give_the_same_bytes(tmp_path: Path) -> None:
    a, b = _all_sboms(tmp_path / "a"), _all_sboms(tmp_path / "b")
    assert a == b
    assert len(set(a)) == 4, "each artifact has its own document (and namespace)"


def test_the_epoch_is_the_only_date(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    result = go_binary_result(store, KEY_BIN["amd64"], "amd64")
    spec = sbom_spec("agent", "binary", KEY_BIN["amd64"], [], "0.1.0")
    later = _new_action(
        SbomBuilder.name, SbomBuilder.version, "sbom", spec, EPOCH + 86400, {}, "agent"
    )
    out = run_action(later, store, results({KEY_BIN["amd64"]: result})).outputs[0]
    doc = json.loads(store.read_blob(out.digest))
    assert doc["creationInfo"]["created"] == "2025-12-02T00:00:00Z"


# -- the release set -------------------------------------------------------------------------------
def with_sboms(store: Store) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The release set sample of test_releaseset with real-shaped build info and an sbom action
    per distinct artifact action, named in the spec as the planner does."""
    spec, artifacts = sample(store)
    for key, arch in ((k, a) for a, k in KEY_BIN.items()):
        assert artifacts[key]["builder"] == "go-binary"
        artifacts[key]["outputs"] = [
            o if o["role"] != "buildinfo" else go_binary_result(store, key, arch)["outputs"][1]
            for o in artifacts[key]["outputs"]
        ]
        artifacts[key]["metadata"].update(goos="linux", goarch=arch)
    sbom_keys: dict[str, str] = {}
    for entry in spec["artifacts"]:
        key = entry["actionKey"]
        if key not in sbom_keys:
            action, result, _, _ = run_sbom(store, entry["name"], entry["kind"], key, artifacts)
            artifacts[action.key] = result
            sbom_keys[key] = action.key
        entry["sbomActionKey"] = sbom_keys[key]
    return spec, artifacts


def test_the_release_set_attaches_one_sbom_per_artifact(tmp_path: Path, validator: Any) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = with_sboms(store)
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results(artifacts), store)
    layout = releaseset.materialize(result, store, tmp_path / "dist")
    reader = LayoutReader(layout)
    reader.walk()  # every blob reachable, every digest right
    meta = releaseset.read_metadata(layout)
    assert all("sbom" in art for art in meta["artifacts"])
    index = reader.read_json(reader.index["manifests"][0])
    listed = {m["digest"] for m in index["manifests"]}
    sboms = {}
    for art in meta["artifacts"]:
        subject = art.get("manifest") or art["index"]
        assert art["sbom"]["digest"] in listed
        manifest = reader.read_json(art["sbom"])
        assert manifest["artifactType"] == SPDX_MEDIA_TYPE
        assert manifest["subject"] == subject
        assert manifest["annotations"][mt.ANN_NVKR_ARTIFACT] == art["name"]
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == SPDX_MEDIA_TYPE
        doc = json.loads(reader.read_blob(layer))
        check_spdx(doc, validator)
        described = art["primary"]["digest"] if "primary" in art else art["index"]["digest"]
        (root,) = (b for a, b in _rels(doc, "DESCRIBES"))
        assert _by_id(doc)[root]["checksums"][-1]["checksumValue"] == described[7:]
        sboms[art["sbom"]["digest"]] = subject["digest"]
    # one per distinct action: 2 binaries, 2 image indexes (hopper, blackwell), 1 chart
    assert len(sboms) == 5 == len(set(sboms.values()))
    sbom_entries = [
        m for m in index["manifests"] if reader.read_json(m).get("artifactType") == SPDX_MEDIA_TYPE
    ]
    assert index["manifests"][-len(sbom_entries) :] == sbom_entries, "SBOMs come last"


def test_the_release_set_with_sboms_is_the_same_from_two_stores(tmp_path: Path) -> None:
    digests = []
    for name in ("a", "b"):
        store = Store(tmp_path / name)
        spec, artifacts = with_sboms(store)
        digests.append(
            releaseset.assemble(
                ReleaseSetSpec.from_params(spec), results(artifacts), store
            ).metadata["releaseSetDigest"]
        )
    assert digests[0] == digests[1]


def test_an_sbom_of_another_artifact_is_refused(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = with_sboms(store)
    swapped = copy.deepcopy(spec)
    amd64 = next(a for a in swapped["artifacts"] if a["actionKey"] == KEY_BIN["amd64"])
    arm64 = next(a for a in swapped["artifacts"] if a["actionKey"] == KEY_BIN["arm64"])
    for a in swapped["artifacts"]:
        if a["actionKey"] == KEY_BIN["amd64"]:
            a["sbomActionKey"] = arm64["sbomActionKey"]
    assert amd64["sbomActionKey"] == arm64["sbomActionKey"]
    with pytest.raises(BuildError, match="its SBOM describes"):
        releaseset.assemble(ReleaseSetSpec.from_params(swapped), results(artifacts), store)


def test_a_missing_sbom_result_is_a_build_error(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = with_sboms(store)
    chart = next(a for a in spec["artifacts"] if a["kind"] == "chart")
    del artifacts[chart["sbomActionKey"]]
    with pytest.raises(BuildError, match="no result for its sbom action"):
        releaseset.assemble(ReleaseSetSpec.from_params(spec), results(artifacts), store)


def test_a_spec_without_sbom_keys_holds_no_sboms(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    spec, artifacts = sample(store)
    result = releaseset.assemble(ReleaseSetSpec.from_params(spec), results(artifacts), store)
    layout = releaseset.materialize(result, store, tmp_path / "dist")
    assert not any("sbom" in a for a in releaseset.read_metadata(layout)["artifacts"])


# -- the plan ------------------------------------------------------------------------------------
def test_the_default_plan_has_an_sbom_per_released_action(tmp_path: Path) -> None:
    res = run_nvkr("plan", "--offline", "--json", cwd=REPO, store=tmp_path / "store")
    assert res.code == 0, res.stderr
    plan = json.loads(res.stdout)
    actions = {a["key"]: a for a in plan["actions"]}
    (release,) = (a for a in plan["actions"] if a["builder"] == "release-set")
    sboms = {a["key"]: a for a in plan["actions"] if a["builder"] == "sbom"}
    released = {e["actionKey"]: e for e in release["params"]["artifacts"]}
    assert {e["sbomActionKey"] for e in released.values()} == set(sboms)
    assert set(release["deps"]) == set(released) | set(sboms)
    for key, entry in released.items():
        sbom = sboms[entry["sbomActionKey"]]
        assert sbom["params"]["subject"] == key and key in sbom["deps"]
        assert sbom["params"]["kind"] == entry["kind"]
        assert sbom["params"]["artifact"] == entry["name"]
    (image_sbom,) = (s for s in sboms.values() if s["params"]["kind"] == "image")
    go = {k for k, a in actions.items() if a["builder"] == "go-binary"}
    assert len(go) == 2 and set(image_sbom["params"]["binaries"]) == go
    assert set(image_sbom["deps"]) == go | {image_sbom["params"]["subject"]}
    (chart_sbom,) = (s for s in sboms.values() if s["params"]["kind"] == "chart")
    assert chart_sbom["params"]["images"] == [image_sbom["key"]]
    assert set(chart_sbom["deps"]) == {chart_sbom["params"]["subject"], image_sbom["key"]}
    # the plan lists an sbom after every action it reads
    order = list(actions)
    assert all(order.index(d) < order.index(k) for k, s in sboms.items() for d in s["deps"])


def test_machine_image_sbom_is_valid_spdx_with_debs_and_staged_files(
    tmp_path: Path, validator: jsonschema.Draft201909Validator
) -> None:
    """A node-image result as the builder writes it: the QCOW2 as the root package, one package
    per .deb (purl, sha256, licence mapped to SPDX or left NOASSERTION with the Debian names),
    the staged binaries as files; valid against the official schema."""
    import hashlib

    from nvkr.sbom.debian import describe_machine_image
    from nvkr.sbom.spdx import SpdxDocument
    from nvkr.store import Store

    store = Store(tmp_path / "store")
    disk = store.add_bytes(b"QFI\xfb" + b"\0" * 4096)
    agent = b"\x7fELF fake agent"
    result = {
        "outputs": [
            {"name": "node.qcow2", "digest": disk.digest, "size": disk.size, "role": "primary",
             "mediaType": "application/vnd.nvkr.disk.qcow2"},
        ],
        "metadata": {
            "arch": "amd64",
            "packages": [
                {"name": "containerd", "version": "1.6.20~ds1-1+deb12u3", "arch": "amd64",
                 "sha256": "sha256:" + "1" * 64, "licenses": ["Apache-2.0", "Go"],
                 "url": "http://deb.debian.org/debian/pool/main/c/containerd/containerd_1.6.20%7eds1-1%2bdeb12u3_amd64.deb"},
                {"name": "nvidia-driver-570", "version": "570.172.08-0ubuntu1", "arch": "all",
                 "sha256": "sha256:" + "2" * 64, "licenses": ["NVIDIA-Proprietary"],
                 "url": "http://127.0.0.1/pool/n/nvidia-driver-570_570.172.08-0ubuntu1_all.deb"},
                {"name": "bsdutils", "version": "1:2.38.1-5+deb12u3", "arch": "amd64",
                 "sha256": "sha256:" + "3" * 64, "url": "http://deb.debian.org/x.deb"},
            ],
            "staged": [
                {"path": "/usr/bin/node-agent", "sha1": hashlib.sha1(agent).hexdigest(),
                 "sha256": hashlib.sha256(agent).hexdigest(), "size": len(agent), "elf": True,
                 "mode": "0755", "binary": True},
                {"path": "/etc/nvkr/manifest.json", "sha1": hashlib.sha1(b"{}").hexdigest(),
                 "sha256": hashlib.sha256(b"{}").hexdigest(), "size": 2, "elf": False,
                 "mode": "0644", "binary": False},
            ],
        },
    }  # fmt: skip
    doc = SpdxDocument("node-image (linux/amd64)", "node-image")
    assert describe_machine_image(doc, store, read_record(result), "node-image") == disk.digest
    spdx = doc.to_json(created="2025-12-01T00:00:00Z", creators=["Tool: nvkr-test"])
    check_spdx(spdx, validator)
    packages = {p["name"]: p for p in spdx["packages"]}
    assert packages["node-image"]["primaryPackagePurpose"] == "OPERATING_SYSTEM"
    assert packages["containerd"]["licenseDeclared"] == "Apache-2.0 AND BSD-3-Clause"
    assert packages["nvidia-driver-570"]["licenseDeclared"] == "NOASSERTION"
    assert "NVIDIA-Proprietary" in packages["nvidia-driver-570"]["licenseComments"]
    assert packages["bsdutils"]["externalRefs"][0]["referenceLocator"] == (
        "pkg:deb/debian/bsdutils@1%3A2.38.1-5%2Bdeb12u3?arch=amd64"
    )
    files = {f["fileName"]: f for f in spdx["files"]}
    assert sorted(files) == ["./etc/nvkr/manifest.json", "./usr/bin/node-agent"]
    # the mode, which SPDX 2.3's file element has no field for, as an annotation (clause 12)
    assert files["./usr/bin/node-agent"]["annotations"] == [
        {"annotationDate": "2025-12-01T00:00:00Z", "annotationType": "OTHER",
         "annotator": "Tool: nvkr-test", "comment": "mode: 0755"},
    ]  # fmt: skip
    assert files["./usr/bin/node-agent"]["fileTypes"] == ["BINARY"]
    assert "fileTypes" not in files["./etc/nvkr/manifest.json"]
