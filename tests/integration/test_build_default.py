"""End to end: the default recipe from a fresh clone, as the README's set-up runs it.

These build the real node agent with the pinned Go toolchain (fetched once per session from the
package index), write the release set and read it back with skopeo, umoci and the agent itself.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nvkr.action import ActionResult
from nvkr.canonical import canonical_json
from nvkr.oci.layout import LayoutReader
from nvkr.releaseset import read_metadata
from tests.helpers import REPO
from tests.helpers.golden import GOLDEN, WHY
from tests.helpers.nvkr import run_nvkr

pytestmark = pytest.mark.slow

SET = "nvkr-default-k8s1.36"

#: the containerd the default recipe pins (its node image's SBOM must list it)
DEFAULT_CONTAINERD = re.search(
    r'^      containerd: "([^"]+)"$', (REPO / "recipes" / "default.yaml").read_text(), re.M
)[1]  # type: ignore[index]


@pytest.fixture(scope="module")
def built(default_build):
    """The session's default build: (clone dir, store dir, first result, second result)."""
    clone, store = default_build.clone, default_build.store
    second = run_nvkr("build", cwd=clone, store=store)
    return clone, store, default_build.result, second


def test_first_build_writes_the_release_set_and_second_is_a_noop(built):
    clone, _store, first, second = built
    result = first.json_events()[-1]
    assert result["event"] == "result" and result["built"], "the first build runs the builders"
    assert [rs["name"] for rs in result["releaseSets"]] == [SET]
    # a cold build's bytes: a refactor that changes an output without changing its action key
    # would serve wrong bytes from every cache (tests/golden/plan.json, tests.helpers.golden)
    want = json.loads(GOLDEN.read_text())["releaseSetDigest"]
    assert result["releaseSets"][0]["digest"] == want, WHY
    layout = clone / "dist" / SET
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == SET
    assert second.code == 0, second.stderr
    assert "up to date" in second.stderr and "building" not in second.stderr


def test_noop_rebuild_json_reports_no_builder(built):
    clone, store, _, _ = built
    again = run_nvkr("build", "--json", "--locked", cwd=clone, store=store)
    assert again.code == 0, again.stderr
    events = again.json_events()
    assert not [e for e in events if e["event"] == "action-start"]
    assert events[-1]["upToDate"] is True and events[-1]["built"] == []


def _agent_blob(layout: Path, arch: str) -> Path:
    from nvkr.releaseset import read_metadata

    for art in read_metadata(layout)["artifacts"]:
        if art["name"] == "agent" and art["platform"]["architecture"] == arch:
            return layout / "blobs" / "sha256" / art["primary"]["digest"].split(":")[1]
    raise AssertionError(f"no {arch} binary in the release set")


def test_the_built_agent_runs_and_labels_a_fake_hopper_node(built, tmp_path):
    clone, _, _, _ = built
    binary = tmp_path / "node-agent"
    shutil.copyfile(_agent_blob(clone / "dist" / SET, "amd64"), binary)
    binary.chmod(0o755)
    dev = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:17:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x10de\n")
    (dev / "device").write_text("0x2330\n")
    (dev / "class").write_text("0x030200\n")
    labels = tmp_path / "labels.env"
    proc = subprocess.run(
        [binary, "--sysfs", tmp_path / "sys", "--labels-file", labels, "--manifest", ""],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("nvkr-node-agent: ready") and "generation=hopper" in proc.stdout
    assert "nvkr.dev/gpu-generation=hopper" in labels.read_text()
    arm = _agent_blob(clone / "dist" / SET, "arm64").read_bytes()
    assert arm[:4] == b"\x7fELF" and arm[18] == 0xB7, "the arm64 binary is an aarch64 ELF"


def test_skopeo_and_umoci_read_the_layout(built, tmp_path):
    clone, _, _, _ = built
    layout = clone / "dist" / SET
    for tool in ("skopeo", "umoci"):
        assert shutil.which(tool), f"{tool} is not installed: run ./install.sh"
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{layout}:{SET}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert raw.returncode == 0, raw.stderr
    assert json.loads(raw.stdout)["artifactType"] == "application/vnd.nvkr.release-set.v1+json"
    ls = subprocess.run(
        ["umoci", "ls", "--layout", str(layout)], capture_output=True, text=True, check=False
    )
    assert ls.returncode == 0, ls.stderr
    assert SET in ls.stdout.split()


def _per_arch(layout: Path) -> dict[tuple[str, str], str]:
    """What a build of some variants shares with a build of all, by (artifact, variant or arch):
    the manifest of each binary and machine image, and each platform's manifest in an image
    index (the index itself, and the chart pinned to it, join the arches the build made)."""
    reader = LayoutReader(layout)
    out = {}
    for a in read_metadata(layout)["artifacts"]:
        if a["kind"] in ("binary", "machine-image"):
            out[(a["name"], json.dumps(a["variant"], sort_keys=True))] = a["manifest"]["digest"]
        elif "index" in a:
            for m in reader.read_json(a["index"])["manifests"]:
                out[(a["name"], m["platform"]["architecture"])] = m["digest"]
    return out


def test_two_clones_two_stores_umask_tz_locale_give_identical_bytes(default_build):
    """The session's build (umask 022, UTC, C.UTF-8, default --jobs) against its twin, built
    from scratch in another directory and store with umask 002, Pacific/Chatham, the C locale
    and one job, for the hopper arm64 variant (conftest's TWIN_VARIANTS): every binary, machine
    image (the QCOW2 bytes are the manifest's layer) and per-platform image manifest the twin
    made, the root filesystem built under qemu-user with the host's tools bound in, is the first
    build's. amd64's second build in that environment is the session's ``verify --rebuild``
    (test_verify_default.test_rebuild_reports_every_artifact_identical)."""
    built = {e["builder"] for e in default_build.twin_result.json_events() if "builder" in e}
    assert {"rootfs", "node-image", "go-binary", "container-image"} <= built, "every builder"
    a = _per_arch(default_build.clone / "dist" / SET)
    b = _per_arch(default_build.twin / "dist" / SET)
    hopper_arm64 = {k for k in a if '"hopper"' in k[1] and '"arm64"' in k[1]}
    assert {k[0] for k in hopper_arm64} >= {"agent", "node-image"}, hopper_arm64
    assert set(b) == hopper_arm64 | {("agent-image", "arm64")}, b
    different = [key for key, digest in b.items() if a.get(key) != digest]
    assert different == []


def test_agent_go_tests_pass_with_the_pinned_toolchain(
    go_toolchain, default_build, repo_root, tmp_path
):
    """The agent's own Go tests and ``go vet``, run once in the session, with the pinned
    toolchain. Their build cache starts as a copy of the default build's (the Go builder's
    GOCACHE, ``-trimpath`` and ``CGO_ENABLED=0`` as here): the standard library the tests need
    is compiled already."""
    from nvkr.builders.go_binary.builder import toolchain_root
    from nvkr.run import pinned_env, run
    from nvkr.store import Store

    store_root, digest = go_toolchain
    goroot = toolchain_root(Store(store_root), digest)
    gocache = tmp_path / "gocache"
    subprocess.run(
        ["cp", "-a", str(Store(default_build.store).cache_dir / "go-build"), str(gocache)],
        check=True,
    )
    env = pinned_env(
        {
            "GOTOOLCHAIN": "local",
            "GOPROXY": "off",
            "GOFLAGS": "-trimpath",
            "CGO_ENABLED": "0",
            "GOCACHE": str(gocache),
        },
        home=tmp_path,
    )
    proc = run(
        [goroot / "bin" / "go", "test", "-count=1", "./..."],
        env=env,
        cwd=repo_root / "agents" / "node-agent",
        check=False,
    )
    out = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 0, out
    assert "ok" in out and "FAIL" not in out
    vet = run(
        [goroot / "bin" / "go", "vet", "./..."],
        env=env,
        cwd=repo_root / "agents" / "node-agent",
        check=False,
    )
    assert vet.returncode == 0, vet.stdout.decode() + vet.stderr.decode()


def _metadata(layout: Path) -> dict:
    from nvkr.releaseset import read_metadata

    return read_metadata(layout)


def _view(layout: Path, tmp: Path, digest: str, media_type: str, size: int) -> Path:
    """A layout naming one manifest or index of ``layout`` (blobs shared by symlink)."""
    view = tmp / "view"
    view.mkdir()
    (view / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    (view / "blobs").symlink_to(layout / "blobs")
    ref = "sha256-" + digest.split(":")[1]
    desc = {
        "mediaType": media_type,
        "digest": digest,
        "size": size,
        "annotations": {"org.opencontainers.image.ref.name": ref},
    }
    (view / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    return view


def test_the_agent_image_is_multi_arch_and_unpacks(built, tmp_path):
    clone, _, _, _ = built
    layout = clone / "dist" / SET
    images = [a for a in _metadata(layout)["artifacts"] if a.get("kind") == "image"]
    assert images, "the release set holds the agent image"
    index_desc = images[0]["index"]
    index = json.loads((layout / "blobs" / "sha256" / index_desc["digest"][7:]).read_text())
    archs = sorted(m["platform"]["architecture"] for m in index["manifests"])
    assert archs == ["amd64", "arm64"]
    amd64 = next(m for m in index["manifests"] if m["platform"]["architecture"] == "amd64")
    view = _view(layout, tmp_path, amd64["digest"], amd64["mediaType"], amd64["size"])
    ref = "sha256-" + amd64["digest"][7:]
    inspect = subprocess.run(
        ["skopeo", "inspect", f"oci:{view}:{ref}"], capture_output=True, text=True, check=False
    )
    assert inspect.returncode == 0, inspect.stderr
    assert json.loads(inspect.stdout)["Architecture"] == "amd64"
    bundle = tmp_path / "bundle"
    unpack = subprocess.run(
        ["umoci", "unpack", "--rootless", "--image", f"{view}:{ref}", str(bundle)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unpack.returncode == 0, unpack.stderr
    agent = bundle / "rootfs" / "usr" / "bin" / "node-agent"
    version = subprocess.run([agent, "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0 and "0.1.0" in version.stdout


def test_the_chart_pins_the_image_index_and_passes_helm(built, tmp_path):
    import helm_python as helm

    clone, _, _, _ = built
    layout = clone / "dist" / SET
    meta = _metadata(layout)
    charts = [a for a in meta["artifacts"] if a.get("kind") == "chart"]
    images = [a for a in meta["artifacts"] if a.get("kind") == "image"]
    assert charts and images
    index_digest = images[0]["index"]["digest"]
    cluster = meta["clusterRelease"]
    assert cluster["kubernetes"] == "1.36.4"
    assert {c["name"] for c in cluster["charts"]} == {"agent-chart"}
    assert {i["digest"] for i in cluster["images"]} == {index_digest}
    tgz = tmp_path / charts[0]["primary"]["name"]
    shutil.copyfile(layout / "blobs" / "sha256" / charts[0]["primary"]["digest"][7:], tgz)
    lint = helm.lint(str(tgz), {}, strict=True)
    assert not lint["errors"] and not [m for m in lint["messages"] if m["severity"] >= 2], lint
    with helm.Chart.load(str(tgz)) as chart:
        rendered = chart.render({}, name="nvkr", namespace="kube-system")
    daemonset = next(text for path, text in rendered.items() if path.endswith("daemonset.yaml"))
    assert f"ghcr.io/nvkr/node-agent@{index_digest}" in daemonset
    assert "nvidia.com/gpu.present" in daemonset


def test_every_artifact_has_an_spdx_sbom_naming_the_agent_module_and_go_version(built, repo_root):
    """Each artifact's SBOM is an OCI referrer in the release set, valid against the official
    SPDX 2.3 schema; the binaries' and the image's name the agent's Go module and the pinned
    Go version themselves, the chart's through the image SBOM it refers to (by namespace and
    the SHA1 of its bytes)."""
    import hashlib

    import jsonschema

    from nvkr.oci.layout import LayoutReader
    from nvkr.recipe.loader import load_recipe
    from nvkr.sbom import SPDX_MEDIA_TYPE
    from tests.helpers.spdx import SCHEMA_PATH, check_spdx

    clone, _, _, _ = built
    layout = clone / "dist" / SET
    go_mod = (repo_root / "agents" / "node-agent" / "go.mod").read_text()
    module = next(line.split()[1] for line in go_mod.splitlines() if line.startswith("module "))
    go_version = (
        "go" + load_recipe(repo_root / "recipes" / "default.yaml").recipe.sources["go"].version
    )
    validator = jsonschema.Draft201909Validator(json.loads(SCHEMA_PATH.read_text()))
    reader = LayoutReader(layout)
    listed = {m["digest"] for m in reader.read_json(reader.index["manifests"][0])["manifests"]}
    meta = _metadata(layout)
    assert {a["kind"] for a in meta["artifacts"]} == {"binary", "image", "chart", "machine-image"}
    docs: dict[str, tuple[dict, bytes]] = {}
    by_artifact = []
    for art in meta["artifacts"]:
        assert "sbom" in art, f"{art['name']} has no SBOM"
        assert art["sbom"]["digest"] in listed
        manifest = reader.read_json(art["sbom"])
        assert manifest["artifactType"] == SPDX_MEDIA_TYPE
        assert manifest["subject"] == (art.get("manifest") or art["index"])
        (layer,) = manifest["layers"]
        assert layer["mediaType"] == SPDX_MEDIA_TYPE
        data = reader.read_blob(layer)
        doc = json.loads(data)
        check_spdx(doc, validator)
        docs[doc["documentNamespace"]] = (doc, data)
        by_artifact.append((art, doc))

    def named(doc: dict) -> set[tuple[str, str | None]]:
        found = {(p["name"], p.get("versionInfo")) for p in doc["packages"]}
        for ref in doc.get("externalDocumentRefs", []):
            other, data = docs[ref["spdxDocument"]]
            assert ref["checksum"]["checksumValue"] == hashlib.sha1(data).hexdigest()
            found |= named(other)
        return found

    for art, doc in by_artifact:
        packages = named(doc)
        assert (module, "(devel)") in packages, f"{art['name']}: no {module} in its SBOM"
        assert ("stdlib", go_version) in packages, f"{art['name']}: no {go_version} in its SBOM"
        files = {
            c["checksumValue"]: f["fileName"]
            for f in doc["files"]
            for c in f["checksums"]
            if c["algorithm"] == "SHA256"
        }
        if art["kind"] == "binary":
            assert files == {art["primary"]["digest"][7:]: "./node-agent"}
        if art["kind"] == "image":
            agents = {
                a["primary"]["digest"][7:] for a in meta["artifacts"] if a["kind"] == "binary"
            }
            assert {files[d] for d in agents} == {"./usr/bin/node-agent"}
        if art["kind"] == "chart":
            assert "./node-agent/Chart.yaml" in files.values()
        if art["kind"] == "machine-image":
            arch = art["platform"]["architecture"]
            agent = next(
                a["primary"]["digest"][7:]
                for a in meta["artifacts"]
                if a["kind"] == "binary" and a["platform"]["architecture"] == arch
            )
            assert files[agent] == "./usr/bin/node-agent"
            assert "./usr/bin/kubectl" in files.values()
            assert ("containerd", DEFAULT_CONTAINERD) in packages
            debs = [p for p in doc["packages"] if p["name"] == "containerd"]
            assert debs[0]["externalRefs"][0]["referenceLocator"].startswith(
                "pkg:deb/debian/containerd@"
            )
            assert "Apache-2.0" in debs[0]["licenseDeclared"].split(" AND ")


def check_image_ls_lists_etc(layout: Path, cwd: Path, store: Path) -> None:
    """``nvkr image ls`` lists /etc of the release set's hopper/amd64 node image (what nvkr
    staged there among it), and every file its SBOM says nvkr staged is in the image with that
    mode and sha256, as ``nvkr image ls --json`` and ``cat`` read them. A function of the layout,
    so it also runs against a layout built by hand (issue 15 item 5)."""
    from nvkr.oci.layout import LayoutReader

    variant = ("--variant", "gpu=hopper,arch=amd64")
    done = run_nvkr("image", "ls", str(layout), "node-image", "/etc", "-l", *variant,
                    cwd=cwd, store=store)  # fmt: skip
    assert done.code == 0, done.stderr
    lines = done.stdout.splitlines()
    paths = {line.split()[-1] for line in lines if " -> " not in line}
    assert {"/etc/fstab", "/etc/nvkr", "/etc/containerd", "/etc/systemd", "/etc/passwd"} <= paths
    assert any(line.startswith("drwxr-xr-x 0:0") and line.endswith(" /etc/nvkr") for line in lines)
    meta = _metadata(layout)
    (art,) = [
        a for a in meta["artifacts"]
        if a["kind"] == "machine-image" and a["variant"]["gpu"] == "hopper"
        and a["variant"]["arch"] == "amd64"
    ]  # fmt: skip
    reader = LayoutReader(layout)
    (layer,) = reader.read_json(art["sbom"])["layers"]
    spdx = json.loads(reader.read_blob(layer))
    staged = {f["fileName"][1:]: f for f in spdx["files"]}
    assert {"/etc/nvkr/manifest.json", "/usr/bin/node-agent",
            "/etc/systemd/system/nvkr-node-agent.service"} <= staged.keys()  # fmt: skip
    done = run_nvkr("image", "ls", str(layout), "node-image", "/", "-R", "--json", *variant,
                    cwd=cwd, store=store)  # fmt: skip
    assert done.code == 0, done.stderr
    listed = {e["path"]: e for e in json.loads(done.stdout)["entries"]}
    # nothing the rootfs builder's hooks put in the tree while it was built is left in it
    # (builders/rootfs/: the programs diverted to recorders, the recorded byte-compilations)
    left = [p for p in listed if p.endswith(".nvkr") or "nvkr-py3compile" in p]
    assert left == [], left
    assert "/usr/bin/python3.13" in listed and "/usr/bin/py3compile" in listed
    for path, f in staged.items():
        mode = [a["comment"] for a in f["annotations"]]
        assert mode == [f"mode: {listed[path]['mode']}"], path
        if listed[path]["size"] < 1 << 20:
            done = run_nvkr("image", "cat", str(layout), "node-image", path, *variant,
                            cwd=cwd, store=store)  # fmt: skip
            sha = next(c["checksumValue"] for c in f["checksums"] if c["algorithm"] == "SHA256")
            assert hashlib.sha256(done.stdout.encode()).hexdigest() == sha, path


def test_image_ls_lists_etc_of_the_hopper_amd64_image(built):
    clone, store, _, _ = built
    check_image_ls_lists_etc(clone / "dist" / SET, clone, store)


def test_every_action_record_reads_and_writes_back_byte_for_byte(built):
    """Every record of the default build's store, read as an ActionResult and written again:
    the same bytes (nvkr.action.ActionResult.from_json, to_json)."""
    _, store, _, _ = built
    paths = sorted((Path(store) / "actions").glob("*.json"))
    assert len(paths) > 20
    for path in paths:
        data = path.read_bytes()
        result = ActionResult.from_json(json.loads(data), f"action record {path.name}")
        assert canonical_json(result.to_json()) == data, path.name
