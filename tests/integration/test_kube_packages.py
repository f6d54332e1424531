"""End to end: Kubernetes node binaries from a loopback mirror of dl.k8s.io and GitHub releases.

A recipe in a temp dir keeps the real upstream URLs with ``checksumUrl`` (kubelet, kubeadm and
kubectl: the ``.sha512`` files; crictl: its ``.sha256``); ``nvkr lock --mirror ...`` reads them
and pins the digests, ``nvkr build`` makes the kube-packages tar of each arch. A kube-packages
tar is an intermediate artifact (release kind ``internal``): a release set holds what is built
from it. Until the node-image builder exists, a scratch container image carrying the tar as one
file is that consumer here. A payload or checksum file that disagrees on the mirror exits 3.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

from nvkr.store import Store
from tests.helpers.k8smirror import K8sMirror, serve_k8s_mirror
from tests.helpers.nvkr import run_nvkr
from tests.helpers.results import record_of

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: kube}
epoch: "1764547200"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
overlays:
  - when: {kubernetes: "1.36"}
    vars: {kubernetesPatch: "1.36.3", crictl: "1.36.0"}
sources:
@SOURCES@
  crictl:
    url: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictl }}/crictl-v{{ vars.crictl }}-linux-{{ arch }}.tar.gz"
    checksumUrl: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictl }}/crictl-v{{ vars.crictl }}-linux-{{ arch }}.tar.gz.sha256"
artifacts:
  kube:
    builder: kube-packages
    binaries:
      kubelet: kubelet
      kubeadm: kubeadm
      kubectl: kubectl
      crictl: {source: crictl, member: crictl}
  kube-image:
    builder: container-image
    files: {/opt/nvkr/kube-packages.tar: kube}
releaseSet:
  name: "kube-k8s{{ kubernetes }}"
  artifacts: [kube-image]
  clusterRelease: {kubernetes: "{{ vars.kubernetesPatch }}", images: [kube-image]}
"""
K8S_SOURCE = """\
  @NAME@:
    url: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/@NAME@"
    checksumUrl: "https://dl.k8s.io/release/v{{ vars.kubernetesPatch }}/bin/linux/{{ arch }}/@NAME@.sha512"
"""
ARCHES = ("amd64", "arm64")


def write_recipe(root: Path) -> Path:
    sources = "".join(K8S_SOURCE.replace("@NAME@", n) for n in ("kubelet", "kubeadm", "kubectl"))
    path = root / "recipes" / "kube.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(RECIPE.replace("@SOURCES@", sources.rstrip("\n")))
    return path


def mirror_args(mirror: K8sMirror) -> list[str]:
    """dl.k8s.io straight to the mirror; GitHub through its ``/redirect/`` (302) path."""
    return [
        "--mirror",
        f"https://dl.k8s.io/={mirror.url}/",
        "--mirror",
        f"https://github.com/={mirror.url}/redirect/",
    ]


def locked_sources(root: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(source name, URL) → resolved entry, from the lockfile ``nvkr lock`` wrote."""
    lock = json.loads((root / "lockfiles" / "kube.lock.json").read_text())
    return {(s["name"], s["resolved"]["url"]): s["resolved"] for s in lock["sources"]}


def test_lock_then_build_from_the_mirror_and_tampering_exits_3(tmp_path: Path) -> None:
    with serve_k8s_mirror(tmp_path / "mirror") as mirror:
        work = tmp_path / "work"
        write_recipe(work)
        store = tmp_path / "store"

        # lock: every checksum file read, every payload fetched and verified
        res = run_nvkr("lock", "recipes/kube.yaml", *mirror_args(mirror), cwd=work, store=store)
        assert res.code == 0, res.stderr
        locked = locked_sources(work)
        for arch in ARCHES:
            for name in ("kubelet", "kubeadm", "kubectl"):
                f = mirror.kube(name, arch)
                entry = locked[(name, f"https://dl.k8s.io{f.path}")]
                assert entry["sha512"] == f"sha512:{f.sha512}"
                assert (entry["digest"], entry["size"]) == (f"sha256:{f.sha256}", f.size)
            f = mirror.crictl(arch)
            entry = locked[("crictl", f"https://github.com{f.path}")]
            assert (entry["digest"], entry["size"]) == (f"sha256:{f.sha256}", f.size)
        assert any(r.startswith("/redirect/kubernetes-sigs/") for r in mirror.requests)

        # build: one kube-packages tar per arch, from the store only
        fetched = len(mirror.requests)
        res = run_nvkr("build", "recipes/kube.yaml", "--locked", "--json", cwd=work, store=store)
        assert res.code == 0, res.stderr
        assert len(mirror.requests) == fetched, "lock left every source in the store"
        done = [
            e
            for e in res.json_events()
            if e["event"] == "action-done" and e["builder"] == "kube-packages"
        ]
        assert sorted(e["name"] for e in done) == ["kube [amd64]", "kube [arm64]"]
        for event in done:
            arch = event["name"][len("kube [") : -1]
            result = record_of(Store(store).get_action(event["key"]))
            assert result is not None
            (out,) = result["outputs"]
            assert out["mediaType"] == "application/vnd.nvkr.kube-packages.v1.tar"
            data = Store(store).read_blob(out["digest"])
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                members = {m.name: m for m in tar.getmembers()}
                assert list(members) == [
                    "usr",
                    "usr/bin",
                    "usr/bin/crictl",
                    "usr/bin/kubeadm",
                    "usr/bin/kubectl",
                    "usr/bin/kubelet",
                ]
                kubelet = tar.extractfile(members["usr/bin/kubelet"])
                assert kubelet is not None and kubelet.read() == mirror.kube("kubelet", arch).data
            files = {f["path"]: f for f in result["metadata"]["files"]}
            assert files["/usr/bin/kubectl"]["digest"] == (
                f"sha256:{mirror.kube('kubectl', arch).sha256}"
            )
            crictl_file = files["/usr/bin/crictl"]
            with tarfile.open(fileobj=io.BytesIO(mirror.crictl(arch).data)) as archive:
                crictl_bytes = archive.extractfile("crictl")
                assert crictl_bytes is not None
                crictl_digest = "sha256:" + hashlib.sha256(crictl_bytes.read()).hexdigest()
            assert crictl_file["digest"] == crictl_digest
        assert (work / "dist" / "kube-k8s1.36" / "index.json").is_file()
        again = run_nvkr("build", "recipes/kube.yaml", "--locked", "--json", cwd=work, store=store)
        assert again.code == 0 and again.json_events()[-1]["upToDate"] is True

        # a payload that no longer matches the lockfile: the build in a fresh store exits 3
        kubelet = mirror.kube("kubelet", "arm64")
        mirror.tamper(kubelet.path)
        res = run_nvkr(
            "build",
            "recipes/kube.yaml",
            "--locked",
            *mirror_args(mirror),
            cwd=work,
            store=tmp_path / "fresh-store",
        )
        assert res.code == 3, res.stderr
        assert "NVKR-E-CHECKSUM" in res.stderr and "'kubelet'" in res.stderr
        assert "Traceback" not in res.stderr

        # a wrong checksum file on the mirror: nvkr lock exits 3 and leaves the lockfile alone
        mirror.tamper(kubelet.path, kubelet.data)  # the payload as published again
        wrong = hashlib.sha512(b"another kubelet").hexdigest()
        mirror.write_checksum(kubelet.path, "sha512", wrong)
        before = (work / "lockfiles" / "kube.lock.json").read_bytes()
        res = run_nvkr(
            "lock",
            "recipes/kube.yaml",
            *mirror_args(mirror),
            cwd=work,
            store=tmp_path / "fresh-store-2",
        )
        assert res.code == 3, res.stderr
        assert "NVKR-E-CHECKSUM" in res.stderr and wrong[:16] in res.stderr
        assert (work / "lockfiles" / "kube.lock.json").read_bytes() == before
