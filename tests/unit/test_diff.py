"""``nvkr diff``: recipes (pins per field), lockfiles (.deb closures, Debian ordering), release
sets (built by ``nvkr build`` from tiny recipes; SBOM packages and files; first differences),
the JSON document, exit codes and errors."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path
from typing import Any

import pytest

from nvkr.cli.diff import describe_variants, render_text
from nvkr.diff.compare import diff
from nvkr.diff.lockfiles import version_change
from nvkr.diff.releasesets import _Details, _ReleaseSet, _split_purl
from nvkr.diff.report import SECTIONS, Report
from nvkr.oci.layout import LayoutReader
from nvkr.releasespec import ReleaseSetSpec
from tests.helpers.cli import invoke
from tests.helpers.results import result as read_record
from tests.helpers.results import results

HOPPER_AMD = "gpu=hopper,kubernetes=1.36,arch=amd64"
HOPPER_ARM = "gpu=hopper,kubernetes=1.36,arch=arm64"
BW_AMD = "gpu=blackwell,kubernetes=1.36,arch=amd64"
SHA_A = "a" * 64
SHA_B = "b" * 64

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: small}}
matrix:
  gpu: [{gpus}]
  kubernetes: ["1.36"]
  arch: [amd64, arm64]
sources:
  kubelet:
    url: "https://dl.example/release/v{patch}/bin/linux/{{{{ arch }}}}/kubelet"
    sha256: "{sha}"
  node-packages:
    apt: {{debian: {{url: "http://deb.debian.org/debian", suite: bookworm}}}}
    arch: "{{{{ arch }}}}"
    packages: {{containerd: "{containerd}", socat: "1.7.4.4-2"}}
artifacts:
  rootfs: {{builder: rootfs, packages: node-packages}}
releaseSet:
  name: "small-k8s{{{{ kubernetes }}}}"
"""


# -- recipes ----------------------------------------------------------------------------------
def test_recipes_report_pins_per_field_and_variants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(RECIPE.format(gpus="hopper", patch="1.36.3", sha=SHA_A, containerd="1.7.24~ds1-1"))
    b.write_text(
        RECIPE.format(gpus="hopper, blackwell", patch="1.36.4", sha=SHA_B, containerd="2.1.4~ds1-1")
    )
    doc = diff(a, b)
    assert not doc["identical"]
    assert doc["variants"] == {
        "added": [BW_AMD, "gpu=blackwell,kubernetes=1.36,arch=arm64"],
        "removed": [],
    }
    assert doc["commonVariants"] == [HOPPER_AMD, HOPPER_ARM]
    kubelet = [r for r in doc["sources"] if r["name"] == "kubelet"]
    # the URL differs per arch: one record per arch, each naming its variant
    assert [(r["variants"], r["differences"]) for r in kubelet] == [
        (
            [HOPPER_AMD],
            [
                "kubelet.sha256: '" + SHA_A + "' -> '" + SHA_B + "'",
                "kubelet.url: 'https://dl.example/release/v1.36.3/bin/linux/amd64/kubelet' -> "
                "'https://dl.example/release/v1.36.4/bin/linux/amd64/kubelet'",
            ],
        ),
        (
            [HOPPER_ARM],
            [
                "kubelet.sha256: '" + SHA_A + "' -> '" + SHA_B + "'",
                "kubelet.url: 'https://dl.example/release/v1.36.3/bin/linux/arm64/kubelet' -> "
                "'https://dl.example/release/v1.36.4/bin/linux/arm64/kubelet'",
            ],
        ),
    ]
    lines = render_text(doc)
    # the same package pin change in both variants: one record, "all variants"
    i = lines.index("  ~ node-packages (all variants):")
    assert (
        lines[i + 1] == "      node-packages.packages.containerd: '1.7.24~ds1-1' -> '2.1.4~ds1-1'"
    )
    assert f"  ~ kubelet ({HOPPER_ARM}):" in lines
    assert lines[lines.index("variants:") + 1] == "  + " + BW_AMD
    assert doc["artifacts"] == [] and doc["release"] == []
    assert [d.split(":")[0] for d in doc["header"][0]["differences"]] == ["recipe.digest"]

    code, out, _ = invoke("diff", str(a), str(a))
    assert (code, out) == (0, "identical\n")


# -- lockfiles --------------------------------------------------------------------------------
def _deb(name: str, version: str, sha: str = SHA_A) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "arch": "amd64",
        "repository": "debian",
        "url": f"http://deb.debian.org/debian/pool/main/{name}_{version}_amd64.deb",
        "filename": f"{name}_{version}_amd64.deb",
        "size": 1000,
        "sha256": f"sha256:{sha}",
    }


def _lock(debs: list[dict[str, Any]], kubelet: str, go: str) -> dict[str, Any]:
    variants = [BW_AMD, HOPPER_AMD]
    url = f"https://dl.example/release/v{kubelet}/bin/linux/amd64/kubelet"
    digest = "sha256:" + hashlib.sha256(kubelet.encode()).hexdigest()
    return {
        "lockVersion": 1,
        "recipe": {"name": "small", "path": "../recipes/small.yaml", "digest": "sha256:" + SHA_A},
        "sources": [
            {
                "name": "kubelet",
                "spec": {"url": url, "checksumUrl": url + ".sha256"},
                "variants": variants,
                "resolved": {
                    "kind": "url",
                    "url": url,
                    "size": 5,
                    "digest": digest,
                    "sha256": digest,
                },
            },
            {
                "name": "node-packages",
                "spec": {
                    "apt": {"debian": {"url": "http://deb.debian.org/debian", "suite": "bookworm"}},
                    "arch": "amd64",
                    "base": "minbase",
                    "packages": {"containerd": "x"},
                },
                "variants": variants,
                "resolved": {
                    "kind": "apt",
                    "arch": "amd64",
                    "digest": "sha256:" + hashlib.sha256(repr(debs).encode()).hexdigest(),
                    "keyrings": {},
                    "packages": debs,
                },
            },
        ],
        "tools": {"go": {"source": "go", "version": go, "digest": "sha256:" + SHA_A}},
    }


def test_lockfiles_list_deb_changes_in_debian_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = [
        _deb("containerd", "1.6.20~ds1-1+deb12u3"),
        _deb("libfoo1", "2.0-1"),
        _deb("socat", "1.7.4.4-2"),
        _deb("tzdata", "2025b-0+deb12u1"),
        _deb("zlib1g", "1:1.2.13.dfsg-1"),
    ]
    new = [
        _deb("containerd", "1.7.24~ds1-1"),
        _deb("runc", "1.1.5+ds1-1"),
        _deb("socat", "1.7.4.4-2", SHA_B),
        _deb("tzdata", "2024a-0+deb12u1"),
        _deb("zlib1g", "1:1.2.13.dfsg-1"),
    ]
    a, b = tmp_path / "a.lock.json", tmp_path / "b.lock.json"
    a.write_text(json.dumps(_lock(old, "1.36.3", "1.27.3")))
    b.write_text(json.dumps(_lock(new, "1.36.4", "1.27.4")))
    code, out, err = invoke("diff", str(a), str(b))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:2] == [f"--- {a} (lockfile)", f"+++ {b} (lockfile)"]
    i = lines.index("packages:")
    assert lines[i : i + 7] == [
        "packages:",
        "  node-packages (all variants):",
        "    ~ containerd 1.6.20~ds1-1+deb12u3 -> 1.7.24~ds1-1 (upgrade)",
        "    - libfoo1 2.0-1",
        "    + runc 1.1.5+ds1-1",
        "    ~ socat 1.7.4.4-2 -> 1.7.4.4-2 (same version, other sha256)",
        "    ~ tzdata 2025b-0+deb12u1 -> 2024a-0+deb12u1 (downgrade)",
    ]
    i = lines.index("tools:")
    assert lines[i : i + 3] == ["tools:", "  ~ go:", "      go.version: '1.27.3' -> '1.27.4'"]
    i = lines.index("  ~ kubelet (all variants):")
    # the resolved URL repeats the spec's: only the spec's is shown, then the new digest
    assert lines[i + 2 : i + 4] == [
        "      kubelet.url: 'https://dl.example/release/v1.36.3/bin/linux/amd64/kubelet' -> "
        "'https://dl.example/release/v1.36.4/bin/linux/amd64/kubelet'",
        "      kubelet.resolved.digest: 'sha256:"
        + hashlib.sha256(b"1.36.3").hexdigest()
        + "' -> 'sha256:"
        + hashlib.sha256(b"1.36.4").hexdigest()
        + "'",
    ]
    assert not any(".resolved.url" in line for line in lines)

    code, out, _ = invoke("diff", str(a), str(b), "--json")
    doc = json.loads(out)
    by_name = {p["package"]: p for p in doc["packages"]}
    assert by_name["containerd"] == {
        "in": "node-packages",
        "package": "containerd",
        "change": "upgraded",
        "old": "1.6.20~ds1-1+deb12u3",
        "new": "1.7.24~ds1-1",
        "variants": [BW_AMD, HOPPER_AMD],
    }
    assert {k: v["change"] for k, v in by_name.items()} == {
        "containerd": "upgraded",
        "libfoo1": "removed",
        "runc": "added",
        "socat": "rebuilt",
        "tzdata": "downgraded",
    }
    assert set(doc) == {
        "diffVersion",
        "identical",
        "a",
        "b",
        "commonVariants",
        "variants",
        *SECTIONS,
    }
    assert doc["a"] == {"path": str(a), "kind": "lockfile"} and doc["diffVersion"] == 1

    assert invoke("diff", str(a), str(b), "--exit-code")[0] == 1
    assert invoke("diff", str(a), str(a), "--exit-code")[:2] == (0, "identical\n")


def test_version_change_orders_debian_versions_only() -> None:
    assert version_change("1.0~rc1-1", "1.0-1", debian=True) == "upgraded"
    assert version_change("1:0.9-1", "2.0-1", debian=True) == "downgraded"
    assert version_change("1.0", "1.0-0", debian=True) == "changed"  # equal, spelled otherwise
    assert version_change("v1.2.0", "v1.10.0", debian=False) == "changed"
    assert version_change("1.0", "not a version!", debian=True) == "changed"


# -- release sets -----------------------------------------------------------------------------
SET_RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: r}
epoch: "1700000000"
matrix:
  gpu: [hopper]
  kubernetes: ["1.36"]
  arch: [amd64]
sources:
  files: {path: ../files}
artifacts:
  img:
    builder: container-image
    files:
      /etc/a.txt: {source: files, path: a.txt}
      /etc/b.txt: {source: files, path: b.txt}
FILES_EXTRA
releaseSet:
  name: "r-k8s{{ kubernetes }}"
  clusterRelease: {kubernetes: "1.36.3", images: [img]}
"""


@pytest.fixture(scope="module")
def release_sets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two release sets of one image, built by ``nvkr build``: the second's image has another
    /etc/a.txt and one more file."""
    root = tmp_path_factory.mktemp("sets")
    out = []
    for n, (text, extra) in enumerate(
        [("v1\n", ""), ("v2\n", "      /etc/c.txt: {source: files, path: c.txt}")]
    ):
        proj = root / f"p{n}"
        (proj / "recipes").mkdir(parents=True)
        (proj / "files").mkdir()
        (proj / "files" / "a.txt").write_text(text)
        (proj / "files" / "b.txt").write_text("same\n")
        (proj / "files" / "c.txt").write_text("new\n")
        recipe = proj / "recipes" / "r.yaml"
        recipe.write_text(SET_RECIPE.replace("FILES_EXTRA\n", extra + "\n" if extra else ""))
        built = invoke("build", recipe, "--out", proj / "dist", store=root / "store")
        assert built.code == 0, built.stderr
        out.append(proj / "dist" / "r-k8s1.36")
    return out[0], out[1]


def test_release_sets_name_the_changed_artifact_and_its_files(
    release_sets: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = release_sets
    doc = diff(a, b)
    digests = [json.loads((p / "index.json").read_text())["manifests"][0]["digest"] for p in (a, b)]
    art = doc["artifacts"]
    assert [(r["name"], r["change"], r["variants"]) for r in art] == [
        ("img", "changed", [HOPPER_AMD])
    ]
    assert [d.split(":")[0] for d in art[0]["differences"]] == ["digest"]
    assert doc["files"] == [
        {"in": "img", "path": "./etc/a.txt", "change": "changed", "variants": [HOPPER_AMD]},
        {"in": "img", "path": "./etc/c.txt", "change": "added", "variants": [HOPPER_AMD]},
    ]
    assert doc["packages"] == [] and doc["variants"] == {"added": [], "removed": []}
    header = doc["header"][0]["differences"]
    assert f"digest: '{digests[0]}' -> '{digests[1]}'" in header
    [cluster] = doc["release"]
    assert cluster["name"] == "clusterRelease"
    assert cluster["differences"][0].startswith("clusterRelease.images.img: 'sha256:")

    code, out, _ = invoke("diff", str(a), str(b / "index.json"))
    lines = out.splitlines()
    i = lines.index("files:")
    assert code == 0 and lines[i : i + 4] == [
        "files:",
        f"  img ({HOPPER_AMD}):",
        "    ~ ./etc/a.txt",
        "    + ./etc/c.txt",
    ]
    assert f"  ~ img ({HOPPER_AMD}):" in lines
    code, out, _ = invoke("diff", str(b), str(b / "index.json"), "--exit-code")
    assert (code, out) == (0, "identical\n")


# A hand-made layout for what tiny builds do not make: machine-image SBOMs and chart blobs.
def _put(layout: Path, data: bytes, media_type: str) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _side(layout: Path) -> _ReleaseSet:
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (layout / "index.json").write_text('{"schemaVersion":2,"manifests":[]}')
    return _ReleaseSet(layout, LayoutReader(layout), {}, "")


def _sbom(layout: Path, debs: dict[str, str], files: dict[str, str]) -> dict[str, Any]:
    packages: list[dict[str, Any]] = [
        {"name": "node-image", "SPDXID": "SPDXRef-Package-artifact-node-image"}
    ]
    for name, version in debs.items():
        purl = f"pkg:deb/debian/{name}@{version.replace(':', '%3A')}?arch=amd64"
        packages.append(
            {
                "name": name,
                "versionInfo": version,
                "externalRefs": [
                    {
                        "referenceCategory": "PACKAGE-MANAGER",
                        "referenceType": "purl",
                        "referenceLocator": purl,
                    }
                ],
                "checksums": [{"algorithm": "SHA256", "checksumValue": SHA_A}],
            }
        )
    doc = {
        "spdxVersion": "SPDX-2.3",
        "packages": packages,
        "files": [
            {"fileName": path, "checksums": [{"algorithm": "SHA256", "checksumValue": sha}]}
            for path, sha in files.items()
        ],
    }
    layer = _put(layout, json.dumps(doc).encode(), "application/spdx+json")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/spdx+json",
        "layers": [layer],
    }
    return _put(layout, json.dumps(manifest).encode(), manifest["mediaType"])


def _tar(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_sbom_packages_and_first_difference(tmp_path: Path) -> None:
    sa, sb = _side(tmp_path / "a"), _side(tmp_path / "b")
    da = _sbom(
        sa.path,
        {"containerd": "1.6.20~ds1-1+deb12u3", "libfoo1": "2.0-1", "zlib1g": "1:1.2.13.dfsg-1"},
        {"./usr/bin/node-agent": SHA_A},
    )
    db = _sbom(
        sb.path,
        {"containerd": "1.7.24~ds1-1", "runc": "1.1.5+ds1-1", "zlib1g": "1:1.2.13.dfsg-1"},
        {"./usr/bin/node-agent": SHA_B},
    )
    report = Report({"path": "a", "kind": "release-set"}, {"path": "b", "kind": "release-set"})
    report.variants([HOPPER_AMD], [HOPPER_AMD])
    details = _Details(sa, sb)
    details.sbom(report, "node-image", da, db, HOPPER_AMD)
    doc = report.document()
    assert [(p["package"], p["change"], p["old"], p["new"]) for p in doc["packages"]] == [
        ("containerd", "upgraded", "1.6.20~ds1-1+deb12u3", "1.7.24~ds1-1"),
        ("libfoo1", "removed", "2.0-1", None),
        ("runc", "added", None, "1.1.5+ds1-1"),
    ]
    assert doc["files"] == [
        {
            "in": "node-image",
            "path": "./usr/bin/node-agent",
            "change": "changed",
            "variants": [HOPPER_AMD],
        }
    ]

    # a chart's .tgz: the first member that differs, the sides named A and B
    chart = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    pa = _put(sa.path, _tar({"c/Chart.yaml": b"v1", "c/values.yaml": b"x"}), chart)
    pb = _put(sb.path, _tar({"c/Chart.yaml": b"v2", "c/values.yaml": b"x"}), chart)
    assert details.content({"primary": pa}, {"primary": pb}) == [
        "content: member c/Chart.yaml: content differs"
    ]
    pc = _put(sb.path, _tar({"c/Chart.yaml": b"v1", "c/values.yaml": b"x", "c/x": b""}), chart)
    assert details.content({"primary": pa}, {"primary": pc}) == ["content: member c/x: only in B"]
    qcow = {**pa, "mediaType": "application/vnd.nvkr.disk.qcow2"}
    assert details.content({"primary": qcow}, {"primary": pb}) == []


def test_purls_and_variant_names() -> None:
    assert _split_purl("pkg:deb/debian/zlib1g@1%3A1.2.13.dfsg-1?arch=amd64") == (
        "pkg:deb/debian/zlib1g?arch=amd64",
        "1:1.2.13.dfsg-1",
    )
    assert _split_purl("pkg:golang/nvkr.dev/node-agent") == ("pkg:golang/nvkr.dev/node-agent", None)
    universe = [HOPPER_AMD, HOPPER_ARM, BW_AMD]
    assert describe_variants(universe, universe) == "all variants"
    assert describe_variants([HOPPER_AMD, BW_AMD], universe) == "arch=amd64"
    assert describe_variants([HOPPER_AMD, HOPPER_ARM], universe) == "gpu=hopper"
    assert describe_variants([HOPPER_ARM, BW_AMD], universe) == f"{HOPPER_ARM}; {BW_AMD}"
    assert describe_variants([], universe) == ""


# -- errors -----------------------------------------------------------------------------------
def test_errors_exit_2_or_3_with_a_message(
    tmp_path: Path, release_sets: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "a.yaml"
    recipe.write_text(RECIPE.format(gpus="hopper", patch="1", sha=SHA_A, containerd="1"))
    lock = tmp_path / "a.lock.json"
    lock.write_text(json.dumps(_lock([], "1", "1")))

    code, _, err = invoke("diff", str(tmp_path / "nope.yaml"), str(recipe))
    assert code == 2 and "nope.yaml: no such file or directory" in err

    code, _, err = invoke("diff", str(recipe), str(lock))
    assert code == 2 and "is a recipe and" in err and "not comparable" in err
    assert "nvkr build RECIPE --locked" in err

    bad = tmp_path / "bad.lock.json"
    bad.write_text("{not json")
    code, _, err = invoke("diff", str(lock), str(bad))
    assert code == 2 and err.startswith("error[NVKR-E-LOCK]:") and "not valid JSON" in err
    bad.write_text('{"lockVersion": 1, "sources": [{"name": "x"}]}')
    code, _, err = invoke("diff", str(lock), str(bad))
    assert code == 2 and "sources[0] is not a lock entry" in err
    bad.write_text('{"hello": 1}')
    code, _, err = invoke("diff", str(bad), str(lock))
    assert code == 2 and "not an nvkr lockfile" in err

    code, _, err = invoke("diff", str(tmp_path), str(release_sets[0]))
    assert code == 2 and "not a release set" in err

    empty = tmp_path / "layout"
    _side(empty)
    code, _, err = invoke("diff", str(empty), str(release_sets[0]))
    assert code == 2 and "holds no release set" in err

    # a damaged release set (a metadata blob flipped) is an integrity failure
    damaged = tmp_path / "damaged"
    shutil.copytree(release_sets[0], damaged)
    index = json.loads((damaged / "index.json").read_text())
    top = json.loads(
        (damaged / "blobs" / "sha256" / index["manifests"][0]["digest"][7:]).read_text()
    )
    meta = damaged / "blobs" / "sha256" / top["manifests"][0]["digest"][7:]
    data = bytearray(meta.read_bytes())
    data[-2] ^= 1
    meta.unlink()
    meta.write_bytes(bytes(data))
    code, _, err = invoke("diff", str(release_sets[0]), str(damaged))
    assert code == 3 and err.startswith("error[NVKR-E-INTEGRITY]:")


def _staged_set(
    tmp_path: Path, name: str, files: dict[str, bytes], mode: str | None = None
) -> Path:
    """A release set (assembled as the release-set action does) of one node image whose tree
    got the agent and ``files`` (a source each) from the node-image builder's own staging, with
    the SBOM the sbom builder's describer makes of that result; its layout dir."""
    from types import SimpleNamespace

    from nvkr import releaseset
    from nvkr.builders.node_image.artifact import KubeletSettings
    from nvkr.builders.node_image.params import NodeImageParams, SourceFile
    from nvkr.builders.node_image.staging import stage
    from nvkr.canonical import canonical_json
    from nvkr.oci import mediatypes as mt
    from nvkr.sbom.debian import describe_machine_image
    from nvkr.sbom.spdx import SpdxDocument
    from nvkr.store import Store

    store = Store(tmp_path / f"{name}-store")
    agent = store.add_bytes(b"\x7fELF the agent")
    blobs = {f"file:{path}": store.add_bytes(data) for path, data in files.items()}
    params = NodeImageParams(
        arch="amd64", gpu="hopper", kubernetes="1.36", kubernetesVersion="1.36.3",
        nvidiaRuntime=None, kubelet=KubeletSettings().model_dump(), sizeBytes=1 << 30,
        kernelArgs=[], format="qcow2", backend="nvkr", bootTest=False,
        deps={"agent": "sha256:" + "a" * 64},
        files=[SourceFile(path=p, mode=mode, input=f"file:{p}", member=None) for p in files],
        sandboxImage="registry.k8s.io/pause:3.10",
    )  # fmt: skip
    ctx = SimpleNamespace(
        action=SimpleNamespace(params=params.to_json()),
        store=store,
        deps={
            "sha256:" + "a" * 64: read_record(
                {
                    "outputs": [
                        {
                            "name": "agent",
                            "role": "primary",
                            "digest": agent.digest,
                            "size": agent.size,
                            "mediaType": mt.OCTET_STREAM,
                        }
                    ]
                }
            )
        },
        input_path=lambda role: store.blob_path(blobs[role].digest),
    )
    tree = tmp_path / f"{name}-tree"
    tree.mkdir()
    staged = stage(ctx, tree, read_record({"builder": "rootfs", "outputs": []}))
    disk = store.add_bytes(b"QFI\xfb" + name.encode())
    image_key, sbom_key = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    result = {
        "outputs": [{"name": "node.qcow2", "digest": disk.digest, "size": disk.size,
                     "role": "primary", "mediaType": mt.NVKR_QCOW2}],
        "metadata": {"arch": "amd64", "packages": [], "staged": staged},
    }  # fmt: skip
    doc = SpdxDocument("node-image (linux/amd64)", "node-image")
    describes = describe_machine_image(doc, store, read_record(result), "node-image")
    spdx = store.add_bytes(
        canonical_json(doc.to_json(created="2025-12-01T00:00:00Z", creators=["Tool: nvkr-test"]))
    )
    sbom = {
        "outputs": [{"name": "node-image.spdx.json", "digest": spdx.digest, "size": spdx.size,
                     "role": "sbom", "mediaType": "application/spdx+json"}],
        "metadata": {"describes": describes},
    }  # fmt: skip
    variant = {"gpu": "hopper", "kubernetes": "1.36", "arch": "amd64"}
    spec = {
        "name": "staged-k8s1.36",
        "epoch": 1764547200,
        "recipe": {"path": "recipes/r.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/r.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0",
        "variants": [variant],
        "artifacts": [
            {"name": "node-image", "kind": "machine-image", "actionKey": image_key,
             "builder": "node-image", "builderVersion": "2", "variant": variant,
             "platform": {"os": "linux", "architecture": "amd64"},
             "artifactType": mt.NVKR_MACHINE_IMAGE, "sbomActionKey": sbom_key,
             "dependencies": [{"name": "rootfs", "digest": {"sha256": "9" * 64}}]}
        ],
        "machineImages": ["node-image"],
        "clusterRelease": {"kubernetes": "1.36.3", "charts": [], "images": []},
        "nodePoolReleases": [],
    }  # fmt: skip
    assembled = releaseset.assemble(
        ReleaseSetSpec.from_params(spec), results({image_key: result, sbom_key: sbom}), store
    )
    return releaseset.materialize(assembled, store, tmp_path / f"{name}-dist")


def test_a_file_staged_into_a_node_image_shows_in_the_diff(tmp_path: Path) -> None:
    """Issue 15 item 5: a configuration file (mode 0644, no binary) the builder stages into
    one image and not the other is an added file in nvkr diff of the two release sets; a mode
    change alone is a change; the SBOM lists every staged file with its mode,
    /etc/nvkr/manifest.json and the rendered units included."""
    a = _staged_set(tmp_path, "a", {})
    b = _staged_set(tmp_path, "b", {"/etc/nvkr/extra.conf": b"extra = 1\n"})
    c = _staged_set(tmp_path, "c", {"/etc/nvkr/extra.conf": b"extra = 1\n"}, "0600")
    code, out, err = invoke("diff", a, b)
    assert code == 0, err
    lines = out.splitlines()
    i = lines.index("files:")
    assert lines[i : i + 3] == [
        "files:",
        f"  node-image ({HOPPER_AMD}):",
        "    + ./etc/nvkr/extra.conf",
    ]
    doc = diff(b, c)
    assert [(f["path"], f["change"]) for f in doc["files"]] == [
        ("./etc/nvkr/extra.conf", "changed")
    ]
    from nvkr.releaseset import read_metadata

    reader = LayoutReader(b)
    (art,) = read_metadata(b)["artifacts"]
    (layer,) = reader.read_json(art["sbom"])["layers"]
    files = {f["fileName"]: f for f in json.loads(reader.read_blob(layer))["files"]}
    assert sorted(files) == [
        "./etc/nvkr/extra.conf",
        "./etc/nvkr/manifest.json",
        "./etc/systemd/system/nvkr-node-agent.service",
        "./usr/bin/node-agent",
    ]
    modes = {name: [a["comment"] for a in f.get("annotations", [])] for name, f in files.items()}
    assert modes["./usr/bin/node-agent"] == ["mode: 0755"]
    assert modes["./etc/nvkr/extra.conf"] == ["mode: 0644"]
    sha = hashlib.sha256(b"extra = 1\n").hexdigest()
    assert {"algorithm": "SHA256", "checksumValue": sha} in files["./etc/nvkr/extra.conf"][
        "checksums"
    ]
