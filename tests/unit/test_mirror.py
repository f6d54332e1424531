"""``nvkr mirror``: export a recipe's locked sources, import them into a fresh store, build
``--offline`` to the same release set; a tampered blob exits 3 and stores nothing; ``serve``
answers the upstream layout (GET, HEAD, 404, checksum files) well enough for ``lock`` and
``build`` through ``--mirror``; an export that cannot fetch a missing source names it.

The recipe's url sources keep their real upstream URLs (dl.k8s.io, github.com); a loopback
stand-in (:mod:`tests.helpers.k8smirror`) serves them to the connected machine. Builders: kube-packages
and a scratch container image (no tool, no network of their own).

The verbs run in this process (:func:`tests.helpers.cli.invoke`), where a retry does not sleep;
``serve`` runs as a user starts it, in a process of its own that Ctrl-C stops."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from nvkr.airgap.serve import serving
from tests.helpers.cli import invoke
from tests.helpers.k8smirror import serve_k8s_mirror
from tests.helpers.nvkr import Result

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: kube}
epoch: "1764547200"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
vars: {kubernetesPatch: "1.36.3", crictl: "1.36.0"}
sources:
  kubelet:
    url: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubelet"
    checksumUrl: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/kubelet.sha512"
  crictl:
    url: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictl }}/crictl-v{{ vars.crictl }}-linux-{{ arch }}.tar.gz"
    checksumUrl: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictl }}/crictl-v{{ vars.crictl }}-linux-{{ arch }}.tar.gz.sha256"
  here: {path: ../files}
artifacts:
  kube:
    builder: kube-packages
    binaries: {kubelet: kubelet, crictl: {source: crictl, member: crictl}}
  kube-image:
    builder: container-image
    files:
      /opt/nvkr/kube-packages.tar: kube
      /etc/hello: {source: here, path: hello}
releaseSet:
  name: "kube-k8s{{ kubernetes }}"
  artifacts: [kube-image]
  clusterRelease: {kubernetes: "{{ vars.kubernetesPatch }}", images: [kube-image]}
"""
SET = "kube-k8s1.36"


def write_project(root: Path) -> Path:
    (root / "recipes").mkdir(parents=True)
    (root / "recipes" / "kube.yaml").write_text(RECIPE)
    (root / "files").mkdir()
    (root / "files" / "hello").write_text("hello\n")
    return root


def result_sets(res: Result) -> dict[str, str]:
    (result,) = [e for e in res.json_events() if e["event"] == "result"]
    return {s["name"]: s["digest"] for s in result["releaseSets"]}


def blob_names(store: Path) -> set[str]:
    return set(os.listdir(store / "blobs" / "sha256"))


@pytest.fixture
def connected(tmp_path: Path) -> Any:
    """A project locked and built on the "connected" machine: (project, store, mirror, the
    build's release set digests, its index.json bytes). The loopback upstream keeps running."""
    with serve_k8s_mirror(tmp_path / "upstream") as mirror:
        proj = write_project(tmp_path / "proj")
        store = tmp_path / "store"
        res = invoke("lock", "recipes/kube.yaml", *mirror.mirror_args(), cwd=proj, store=store)
        assert res.code == 0, res.stderr
        res = invoke("build", "recipes/kube.yaml", "--locked", "--json", cwd=proj, store=store)
        assert res.code == 0, res.stderr
        index = (proj / "dist" / SET / "index.json").read_bytes()
        yield proj, store, mirror, result_sets(res), index


def export(proj: Path, store: Path, out: Path, *extra: str) -> Result:
    return invoke("mirror", "export", "recipes/kube.yaml", str(out), *extra, cwd=proj, store=store)


def test_export_import_offline_build_gives_the_same_release_set(connected, tmp_path) -> None:
    proj, store, mirror, digests, index = connected
    out = tmp_path / "export"
    res = export(proj, store, out)
    assert res.code == 0, res.stderr
    assert "skipped path sources" in res.stdout and "kube/here" in res.stdout
    doc = json.loads((out / "index.json").read_text())
    assert doc["nvkrMirror"] == 1
    (recipe,) = doc["recipes"]
    lock = proj / "lockfiles" / "kube.lock.json"
    assert recipe["lockfile"]["digest"] == "sha256:" + hashlib.sha256(lock.read_bytes()).hexdigest()
    assert recipe["variants"] == [
        "gpu=hopper,kubernetes=1.36,arch=amd64",
        "gpu=hopper,kubernetes=1.36,arch=arm64",
    ]
    by_url = {s["upstream"]: s for s in doc["sources"]}
    for arch in ("amd64", "arm64"):
        f = mirror.kube("kubelet", arch)
        entry = by_url[f"https://dl.k8s.io{f.path}"]
        assert entry["kind"] == "url" and entry["variants"] == [
            f"gpu=hopper,kubernetes=1.36,arch={arch}"
        ]
        (blob,) = entry["blobs"]
        assert blob == {
            "digest": f"sha256:{f.sha256}",
            "size": f.size,
            "urls": [f"https://dl.k8s.io{f.path}"],
        }
        assert (out / "blobs" / "sha256" / f.sha256).read_bytes() == f.data
        assert entry["checksum"]["text"] == f"{f.sha512}  kubelet\n"
    assert sorted(s["name"] for s in doc["skipped"]) == ["here"]
    assert doc["blobs"]["count"] == 4 == len(os.listdir(out / "blobs" / "sha256"))
    assert "written 4 blobs" in res.stdout and "4 hard-linked" in res.stdout

    # exporting again reuses everything
    again = export(proj, store, out, "--verify")
    assert again.code == 0, again.stderr
    assert "written 0 blobs" in again.stdout and "reused 4 blobs" in again.stdout
    assert json.loads((out / "index.json").read_text()) == doc

    fresh = tmp_path / "fresh"
    res = invoke("mirror", "import", str(out), cwd=proj, store=fresh)
    assert res.code == 0, res.stderr
    assert "imported 4 blobs" in res.stdout
    assert blob_names(fresh) == set(os.listdir(out / "blobs" / "sha256"))
    again = invoke("mirror", "import", str(out), cwd=proj, store=fresh)
    assert (
        again.code == 0 and "imported 0 blobs" in again.stdout and "4 already there" in again.stdout
    )

    seen = len(mirror.requests)
    res = invoke(
        "build", "recipes/kube.yaml", "--locked", "--offline", "--json", "--out", "dist-offline",
        cwd=proj, store=fresh,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert len(mirror.requests) == seen, "the offline build touched the network"
    assert any(e["event"] == "action-done" for e in res.json_events()), "it really built"
    assert result_sets(res) == digests
    assert (proj / "dist-offline" / SET / "index.json").read_bytes() == index


def _flip(path: Path) -> None:
    """Flip the first byte of ``path`` without touching other hard links to it."""
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.unlink()
    path.write_bytes(bytes(data))


def test_tampered_blob_exits_3_naming_it_and_stores_nothing(connected, tmp_path) -> None:
    proj, store, mirror, _, _ = connected
    out = tmp_path / "export"
    assert export(proj, store, out).code == 0
    f = mirror.kube("kubelet", "arm64")
    _flip(out / "blobs" / "sha256" / f.sha256)
    fresh = tmp_path / "fresh"
    res = invoke("mirror", "import", str(out), cwd=proj, store=fresh)
    assert res.code == 3, res.stderr
    assert "NVKR-E-CHECKSUM" in res.stderr and f"sha256:{f.sha256}" in res.stderr
    assert "source 'kubelet'" in res.stderr and f"https://dl.k8s.io{f.path}" in res.stderr
    assert "Traceback" not in res.stderr
    assert f.sha256 not in blob_names(fresh)
    assert os.listdir(fresh / "tmp") == []
    # a truncated blob: the size check
    g = mirror.crictl("amd64")
    path = out / "blobs" / "sha256" / g.sha256
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data[:-1])
    res = invoke("mirror", "import", str(out), cwd=proj, store=tmp_path / "fresh2")
    assert res.code == 3 and f"expected {g.size} bytes" in res.stderr, res.stderr


def test_import_of_a_directory_without_index_is_a_usage_error(tmp_path) -> None:
    (tmp_path / "half" / "blobs" / "sha256").mkdir(parents=True)
    res = invoke("mirror", "import", str(tmp_path / "half"), cwd=tmp_path, store=tmp_path / "s")
    assert res.code == 2 and "no index.json" in res.stderr, res.stderr


def _get(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_serve_answers_the_upstream_layout_and_lock_and_build_work_through_it(
    connected, tmp_path
) -> None:
    proj, store, mirror, digests, index = connected
    out = tmp_path / "export"
    assert export(proj, store, out).code == 0
    lock_before = (proj / "lockfiles" / "kube.lock.json").read_bytes()
    f = mirror.kube("kubelet", "amd64")
    with serving(out) as base:
        status, headers, body = _get(f"{base}/dl.k8s.io{f.path}")
        assert (status, body) == (200, f.data)
        assert headers["Content-Length"] == str(f.size)
        status, headers, body = _get(f"{base}/dl.k8s.io{f.path}", "HEAD")
        assert (status, body, headers["Content-Length"]) == (200, b"", str(f.size))
        status, _, body = _get(f"{base}/dl.k8s.io{f.path}.sha512")
        assert (status, body) == (200, f"{f.sha512}  kubelet\n".encode())
        for missing in ("/", "/dl.k8s.io/", "/dl.k8s.io/release/", f"/dl.k8s.io{f.path}x"):
            assert _get(base + missing)[0] == 404, missing
        assert _get(f"{base}/blobs/sha256/{f.sha256}")[0] == 404, "no access by digest"

        mirrors = ["--mirror", f"https://dl.k8s.io/={base}/dl.k8s.io/"]
        mirrors += ["--mirror", f"https://github.com/={base}/github.com/"]
        seen = len(mirror.requests)
        # lock reads the checksum files and the payloads from the served export alone
        res = invoke("lock", "recipes/kube.yaml", *mirrors, cwd=proj, store=tmp_path / "s1")
        assert res.code == 0, res.stderr
        assert (proj / "lockfiles" / "kube.lock.json").read_bytes() == lock_before
        res = invoke(
            "build", "recipes/kube.yaml", "--locked", "--json", "--out", "dist-served", *mirrors,
            cwd=proj, store=tmp_path / "s2",
        )  # fmt: skip
        assert res.code == 0, res.stderr
        assert len(mirror.requests) == seen, "the upstream was not asked"
    assert result_sets(res) == digests
    assert (proj / "dist-served" / SET / "index.json").read_bytes() == index


def test_serve_command_prints_mirror_flags_and_stops_on_ctrl_c(connected, tmp_path) -> None:
    proj, store, mirror, _, _ = connected
    out = tmp_path / "export"
    assert export(proj, store, out).code == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "nvkr", "mirror", "serve", str(out), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("serving "), first
        base = first.split(" at ", 1)[1].split("/ ", 1)[0]
        assert proc.stdout.readline().strip() == "build with:"
        flags = proc.stdout.readline().split()
        assert flags == [
            "--mirror",
            f"https://dl.k8s.io/={base}/dl.k8s.io/",
            "--mirror",
            f"https://github.com/={base}/github.com/",
        ]
        g = mirror.crictl("arm64")
        assert _get(f"{base}/github.com{g.path}")[2] == g.data
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "Traceback" not in err


def test_export_of_a_source_missing_from_the_store_without_network_names_it(
    tmp_path: Path, connected
) -> None:
    proj, _, mirror, _, _ = connected
    empty = tmp_path / "empty"
    out = tmp_path / "export"
    res = export(proj, empty, out, "--offline")
    assert res.code == 1, res.stderr
    assert "NVKR-E-OFFLINE" in res.stderr and "source 'crictl'" in res.stderr
    assert "recipes/kube.yaml" in res.stderr
    assert not (out / "index.json").exists()
    # online, but the upstream (the real github.com, unreachable here) is not mirrored
    dead = ["--mirror", "https://github.com/=http://127.0.0.1:9/", "--mirror", "https://dl.k8s.io/=http://127.0.0.1:9/"]  # fmt: skip
    res = export(proj, empty, out, *dead)
    assert res.code == 1 and "NVKR-E-FETCH" in res.stderr and "cannot export source" in res.stderr
    assert not (out / "index.json").exists()
    # with the upstream mirrored, the missing sources are fetched first
    res = export(proj, empty, out, *mirror.mirror_args(), "--variant", "arch=arm64")
    assert res.code == 0, res.stderr
    assert "fetched first: crictl, kubelet" in res.stdout
    doc = json.loads((out / "index.json").read_text())
    assert {s["variants"][0] for s in doc["sources"]} == {"gpu=hopper,kubernetes=1.36,arch=arm64"}
    assert doc["blobs"]["count"] == 2


def test_export_without_lockfile_is_refused(tmp_path: Path) -> None:
    proj = write_project(tmp_path / "proj")
    res = export(proj, tmp_path / "s", tmp_path / "out")
    assert res.code == 2 and "NVKR-E-LOCK" in res.stderr and "nvkr lock" in res.stderr


def test_serve_table_covers_oci_registry_paths(tmp_path: Path) -> None:
    """An oci source's documents and blobs are served under /<registry>/v2/<repo>/..."""
    from nvkr.airgap.serve import serve_table

    d = "sha256:" + "a" * 64
    layer = "sha256:" + "b" * 64
    index: dict[str, Any] = {
        "sources": [
            {
                "name": "base",
                "kind": "oci",
                "blobs": [
                    {
                        "digest": d,
                        "size": 10,
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "urls": [f"https://registry.example/v2/team/base/manifests/{d}"],
                    },
                    {
                        "digest": layer,
                        "size": 5,
                        "urls": [f"https://registry.example/v2/team/base/blobs/{layer}"],
                    },
                ],
            }
        ]
    }
    table, prefixes = serve_table(tmp_path, index)
    assert prefixes == ["https://registry.example/"]
    manifest = table[f"/registry.example/v2/team/base/manifests/{d}"]
    assert manifest.content_type == "application/vnd.oci.image.manifest.v1+json"
    assert table[f"/registry.example/v2/team/base/blobs/{layer}"].size == 5
    assert table["/registry.example/v2/"].data == b"{}"


def test_oci_closure_round_trip_through_export_import_and_serve(registry, tmp_path) -> None:
    """An oci source pulled from a loopback registry: export lists its whole closure with the
    registry's URL layout, import restores it, and a fresh store pulls it through ``serve``."""
    from nvkr.airgap.export import RecipeSelection, export_mirror
    from nvkr.airgap.importing import import_mirror
    from nvkr.fetch.api import ensure, resolve
    from nvkr.fetch.context import FetchContext
    from nvkr.fetch.mirrors import Mirrors
    from nvkr.recipe.sources import OciSource
    from nvkr.store import Store
    from tests.helpers.oci_images import make_layout, push

    image = make_layout(tmp_path / "layout", salt="mirror")
    push(image, registry, "mirror/base")
    # the recipe names a registry nothing listens on; the connected machine reaches it through
    # a mirror, so the fresh store below can only have been filled by `serve`
    dead = "127.0.0.1:9"
    src = OciSource(oci=f"{dead}/mirror/base", digest=image.digest)
    upstream = Mirrors.parse([f"http://{dead}/=http://{registry.host}/"])
    connected = FetchContext(store=Store(tmp_path / "a"), mirrors=upstream)
    entry = resolve("base", src, connected, base_dir=tmp_path)
    selection = RecipeSelection(
        name="r", path="r.yaml", digest="sha256:" + "0" * 64, variants=["v"],
        lockfile_path="r.lock.json", lockfile_digest="sha256:" + "1" * 64,
        bindings={b"base": ("base", src, entry, tmp_path, ["v"])}, skipped=[],
    )  # fmt: skip
    out = tmp_path / "export"
    report = export_mirror([selection], connected, out)
    assert report.written == 7 and report.linked == 7
    (item,) = json.loads((out / "index.json").read_text())["sources"]
    blobs = {b["digest"]: b for b in item["blobs"]}
    assert sorted(blobs) == image.blobs
    top = blobs[image.digest]
    assert top["mediaType"] == "application/vnd.oci.image.index.v1+json"
    assert top["urls"] == [f"http://{dead}/v2/mirror/base/manifests/{image.digest}"]
    assert sum("/blobs/" in b["urls"][0] for b in blobs.values()) == 4  # configs and layers

    imported = Store(tmp_path / "b")
    assert import_mirror(out, imported).added == 7
    assert sorted(f"sha256:{p.name}" for p in imported.blobs_dir.iterdir()) == image.blobs

    with serving(out) as base:
        fresh = Store(tmp_path / "c")
        mirrors = Mirrors.parse([f"http://{dead}/={base}/{dead}/"])
        ctx = FetchContext(store=fresh, mirrors=mirrors)
        assert ensure("base", src, entry, ctx, base_dir=tmp_path) == image.digest
    assert sorted(f"sha256:{p.name}" for p in fresh.blobs_dir.iterdir()) == image.blobs
