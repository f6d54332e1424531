"""End to end: a catalog leaf (recipes/catalog/hopper-k8s1.36.yaml: base + kernel/full +
gpu/hopper + kubernetes/1.36 + network/ovn-kubernetes layers) locked and built against loopback
stand-ins of every upstream it names, so the code paths are the real ones: NVIDIA's flat CUDA
repository and Docker's repository (signed Release files, keys fetched by URL and pinned by
fingerprint), dl.k8s.io's binaries, cri-tools' and SPIRE's GitHub releases with their published
checksum files, OVN-Kubernetes' git repository (:mod:`tests.helpers.ovnkubernetes`), Debian's
real mirror for the rest. Then the Debian-driver leaf (recipes/catalog/hopper-debian-k8s1.36.yaml:
NVIDIA's 550 driver from Debian 13's own archive, the real packages, built by DKMS) in the same
store. The ovnkube image (with its root filesystem and Go builds) is built again in a second
clone from a store holding only the sources and the session's standard-library Go cache,
offline, and compared byte for byte (:func:`_second_clone`; DKMS's reproducibility is
tests/integration/test_dkms_rootfs.py's, on a small module: a second build of NVIDIA's is about
350 CPU-seconds). Two Cluster API boots:
a join of the NVIDIA leaf's image, an init of the Debian-driver leaf's (which also loads its
module). All of it starts at the session's first test and runs in the background (see "the
module's work, in the background"); the tests here collect it.

The leaves here extend the real ones and change only what a test cannot have: the repository
keys' fingerprints (NVIDIA's and Docker's private keys are not ours), OVN-Kubernetes' commit (the
stand-in's), the matrix (amd64 only) and the disk size.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import spire as spire_standin
from tests.helpers.aptrepo import AptRepo, DebSpec, build_apt_repo, gpu_stack_packages
from tests.helpers.disk import read_root_file
from tests.helpers.k8smirror import K8sMirror, serve_k8s_mirror
from tests.helpers.nvkr import (
    Result,
    in_background,
    link_go_cache,
    machine_image,
    make_clone,
    run_nvkr,
    seed,
)
from tests.helpers.ovnkubernetes import COMMANDS as OVNK_COMMANDS
from tests.helpers.ovnkubernetes import LINKED_CRDS, Upstream, make_upstream
from tests.helpers.ovnkubernetes import NEWER_NB as OVNK_NEWER_NB
from tests.helpers.ovnkubernetes import SCHEMAS as OVNK_SCHEMAS
from tests.helpers.ovnkubernetes import UPSTREAM as OVNK_UPSTREAM
from tests.helpers.results import record_of
from tests.helpers.secureboot import make_owner

pytestmark = pytest.mark.slow


DRIVER = "580.105.08-1"
CONTAINERD = "2.2.1-1~debian.13~trixie"  # Docker's naming, for the OS layer's Debian 13
#: seconds: cloud-init's stages and the bootstrap under TCG on two loaded cores
BOOT_TIMEOUT = 1800.0
KERNEL = "6.12.118-1"  # recipes/os/debian-13.yaml: vars.debianKernelVersion
NVIDIA_UPSTREAM = "https://developer.download.nvidia.com/compute/cuda/repos/debian13/x86_64/"
DOCKER_UPSTREAM = "https://download.docker.com/linux/debian"

#: The leaf's node image's kubelet.maxPods (not kubelet's default, 110): the boot tests check it
#: survives kubeadm, which writes its own KubeletConfiguration.
LEAF_MAX_PODS = 250
LEAF = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: hopper-k8s1.36-loopback}
extends: [hopper-k8s1.36.yaml]
matrix:
  exclude: [{arch: arm64}]
sources:
  node-packages:
    apt:
      nvidia-cuda: {keyring: {fingerprint: @NVIDIA_FPR@}}
      docker: {keyring: {fingerprint: @DOCKER_FPR@}}
  ovn-kubernetes: {commit: @OVNK_COMMIT@}
  ovn-kubernetes-repo: {commit: @OVNK_COMMIT@}
artifacts:
  node-image: {size: 3GiB, kubelet: {maxPods: @MAX_PODS@}}
""".replace("@MAX_PODS@", str(LEAF_MAX_PODS))


def _nvidia_packages() -> list[DebSpec]:
    """The packages gpu/hopper.yaml pins, in miniature (the toolkit and its libraries from
    :func:`tests.helpers.aptrepo.gpu_stack_packages`)."""
    stack = [d for d in gpu_stack_packages("amd64") if "container" in d.name]
    return [
        *stack,
        DebSpec(
            "nvidia-driver-cuda",
            DRIVER,
            "amd64",
            files={"/usr/bin/nvidia-smi": b'#!/bin/sh\necho "NVIDIA-SMI 580.105.08"\n'},
            license="NVIDIA-Proprietary",
        ),
        DebSpec(
            "nvidia-kernel-open-dkms",
            DRIVER,
            "amd64",
            files={"/usr/src/nvidia-580.105.08/dkms.conf": b'PACKAGE_NAME="nvidia"\n'},
            license="MIT",
        ),
        DebSpec(
            "nvidia-fabricmanager-580",
            DRIVER,
            "amd64",
            files={"/usr/bin/nv-fabricmanager": b"#!/bin/sh\necho fabricmanager\n"},
            license="NVIDIA-Proprietary",
        ),
    ]


def _fingerprint(repo: AptRepo) -> str:
    assert repo._gpg is not None
    return repo._gpg.fingerprint


@dataclass
class Leaf:
    """The loopback leaf locked and built once per module: ``project`` (the clone holding the
    leaf recipe and its lockfile), ``store``, ``rel`` (the leaf's path in ``project``),
    ``mirrors`` (the ``--mirror`` arguments), ``layout`` (the release set), ``built`` (the
    build's result), ``raw`` (its machine image as a raw disk, once built, for
    :func:`tests.helpers.disk.read_root_file`) and the stand-ins (``k8s``, ``nvidia``, ``docker``
    served, ``ovnk`` the OVN-Kubernetes repository)."""

    project: Path
    store: Path
    rel: str
    mirrors: list[str]
    layout: Path
    locked: Result
    built: Result
    k8s: K8sMirror
    nvidia: AptRepo
    docker: AptRepo
    ovnk: Upstream
    raw: Path

    def image(self) -> Path:
        """The release set's machine image (QCOW2)."""
        return machine_image(self.layout)

    def close(self) -> None:
        """Stop serving the stand-ins."""
        for served in (self.k8s, self.nvidia, self.docker):
            served.close()


def _make_leaf(tmp: Path, go_toolchain: tuple[Path, str]) -> Leaf:
    """The stand-ins served, the loopback leaf written into a clone, locked and built (its
    image converted to raw); the stand-ins stay served until :meth:`Leaf.close`."""
    k8s = serve_k8s_mirror(
        tmp / "k8s",
        releases=("1.36.4",),
        arches=("amd64",),
        recording_kubeadm=True,
        recording_kubelet=True,
    )
    spire_standin.write_release(k8s.root)  # served under https://github.com/ like crictl
    nvidia = build_apt_repo(tmp / "nvidia", suite="/", components=(), packages=_nvidia_packages())
    containerd = DebSpec(
        "containerd.io",
        CONTAINERD,
        "amd64",
        component="stable",
        files={"/usr/bin/containerd": b"#!/bin/sh\necho containerd 2.2.1\n"},
        fields={"Provides": "containerd, runc", "Conflicts": "containerd, runc"},
    )
    docker = build_apt_repo(
        tmp / "docker", suite="trixie", components=("stable",), packages=[containerd]
    )
    ovnk = make_upstream(tmp / "ovn-kubernetes")
    try:
        for repo in (nvidia, docker):
            repo.serve()
        (nvidia.root / "3bf863cc.pub").write_bytes(nvidia.keyring.read_bytes())
        (docker.root / "gpg").write_bytes(docker.keyring.read_bytes())
        project = make_clone(tmp / "project")
        (project / "recipes" / "catalog" / "loopback.yaml").write_text(
            LEAF.replace("@NVIDIA_FPR@", _fingerprint(nvidia))
            .replace("@DOCKER_FPR@", _fingerprint(docker))
            .replace("@OVNK_COMMIT@", ovnk.good)
        )
        mirrors = [
            *k8s.mirror_args(),
            *("--mirror", f"{NVIDIA_UPSTREAM}={nvidia.url}/"),
            *("--mirror", f"{DOCKER_UPSTREAM}={docker.url}"),
            *("--mirror", f"{OVNK_UPSTREAM}={ovnk.repo.as_uri()}"),
        ]
        # Debian's .debs and the Go toolchain, fetched before
        store = seed(tmp / "store", go_toolchain)
        rel = "recipes/catalog/loopback.yaml"
        locked = run_nvkr("lock", rel, *mirrors, cwd=project, store=store)
        built = (
            run_nvkr("build", rel, "--locked", *mirrors, "--json", cwd=project, store=store)
            if locked.code == 0
            else locked
        )
        layout = project / "dist" / "nvkr-hopper-k8s1.36"
        raw = tmp / "disk.raw"
        if built.code == 0:
            subprocess.run(
                ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(machine_image(layout)),
                 str(raw)],
                check=True,
            )  # fmt: skip
        return Leaf(
            project, store, rel, mirrors, layout, locked, built, k8s, nvidia, docker, ovnk, raw
        )
    except BaseException:
        for served in (k8s, nvidia, docker):
            served.close()
        raise


def test_catalog_leaf_locks_and_builds_against_loopback_upstreams(
    leaf: Leaf, tmp_path: Path
) -> None:
    project, store, rel = leaf.project, leaf.store, leaf.rel
    k8s, nvidia = leaf.k8s, leaf.nvidia

    validated = run_nvkr("validate", rel, cwd=project, store=store)
    assert validated.code == 0, validated.stderr
    assert "containerd.kubernetes" in validated.stdout

    locked = leaf.locked
    assert locked.code == 0, locked.stderr
    lock = json.loads((project / "lockfiles" / "catalog" / "loopback.lock.json").read_text())
    entries = {e["name"]: e["resolved"] for e in lock["sources"]}
    debs = {p["name"]: p for p in entries["node-packages"]["packages"]}
    # every URL in the lock is the upstream's, never the loopback mirror's
    assert debs["nvidia-driver-cuda"]["version"] == DRIVER
    assert debs["nvidia-driver-cuda"]["url"].startswith(NVIDIA_UPSTREAM)
    assert debs["containerd.io"]["url"].startswith(DOCKER_UPSTREAM + "/pool/")
    assert "containerd" not in debs and "runc" not in debs  # containerd.io replaces Debian's
    # the kernel layer: Debian's full kernel (bare metal), not the cloud one
    # the OS layer's kernel (Debian 13's 6.12), the kernel layer's flavour
    assert debs["linux-image-amd64"]["version"] == KERNEL
    assert debs["linux-headers-amd64"]["version"] == KERNEL
    assert not [n for n in debs if re.match(r"linux-(image|headers)-.*cloud", n)], "cloud kernel"
    keyrings = entries["node-packages"]["keyrings"]
    key = "sha256:" + __import__("hashlib").sha256(nvidia.keyring.read_bytes()).hexdigest()
    assert keyrings["nvidia-cuda"] == key
    assert entries["kubelet"]["url"] == "https://dl.k8s.io/release/v1.36.4/bin/linux/amd64/kubelet"
    assert entries["kubelet"]["digest"] == "sha256:" + k8s.kube("kubelet", "amd64").sha256
    # the SPIRE release archive, pinned from its published _sha256sum.txt
    archive = spire_standin.archive_name(spire_standin.VERSION, "amd64")
    spire_data = k8s.root / spire_standin.release_path(spire_standin.VERSION, archive)[1:]
    assert entries["spire"]["url"] == (
        f"https://github.com/spiffe/spire/releases/download/v{spire_standin.VERSION}/{archive}"
    )
    assert entries["spire"]["digest"] == (
        "sha256:" + hashlib.sha256(spire_data.read_bytes()).hexdigest()
    )

    # OVN-Kubernetes: its git repository pinned by commit (the Go module and the whole tree,
    # for the chart and the image's scripts), the URL the upstream's; the node runs Open
    # vSwitch and no ovn-controller (it runs in the pods)
    for name in ("ovn-kubernetes", "ovn-kubernetes-repo"):
        ovnk = entries[name]
        assert (ovnk["url"], ovnk["commit"]) == (OVNK_UPSTREAM, leaf.ovnk.good), name
    assert debs["openvswitch-switch"]["version"] == "3.5.0-1+b1"  # Debian 13's
    assert "ovn-host" not in debs
    image_debs = {p["name"]: p for p in entries["ovnkube-packages"]["packages"]}
    assert image_debs["ovn-central"]["version"] == "25.03.0-1"
    assert image_debs["ovn-host"]["version"] == "25.03.0-1"
    # rule ovn-kubernetes.ovn-schema read both sides from the bytes and recorded them: the
    # models of the pinned tree (the stand-in's, upstream's versions at 51b98b91) and the
    # schemas of Debian 13's own ovn-central .deb
    records = {e["name"]: e.get("ovsdbSchemas") for e in lock["sources"]}
    assert records["ovnkube-packages"] == [
        {"package": "ovn-central", "file": f"/usr/share/ovn/ovn-{db}.ovsschema", "name": name,
         "version": version}
        for db, (name, version) in (("nb", OVNK_SCHEMAS["nbdb"]), ("sb", OVNK_SCHEMAS["sbdb"]))
    ]  # fmt: skip
    for name in ("ovn-kubernetes", "ovn-kubernetes-repo"):
        assert records[name] == [
            {"file": f"go-controller/pkg/{pkg}/model.go", "name": db, "version": version}
            for pkg, (db, version) in sorted(OVNK_SCHEMAS.items())
        ], name
    assert records["node-packages"] is None  # no ovn-central on the node

    built = leaf.built
    assert built.code == 0, built.stderr
    layout = leaf.layout
    from nvkr.releaseset import read_metadata

    meta = read_metadata(layout)
    assert meta["clusterRelease"]["kubernetes"] == "1.36.4"
    # the OpenTelemetry collector chart of the base layer, its upstream image pinned by digest
    assert [c["name"] for c in meta["clusterRelease"]["charts"]] == [
        "agent-chart",
        "collector-chart",
        "ovnkube-chart",
    ]
    assert [i["name"] for i in meta["clusterRelease"]["images"]] == ["agent-image", "ovnkube-image"]
    (collector,) = [a for a in meta["artifacts"] if a["name"] == "collector-chart"]
    tgz = layout / "blobs" / "sha256" / collector["primary"]["digest"][7:]
    with tarfile.open(tgz) as tf:
        member = tf.extractfile("otel-collector/values.yaml")
        assert member is not None
        values = yaml.safe_load(member.read())
    assert values["image"]["repository"] == "otel/opentelemetry-collector-contrib"
    assert values["image"]["digest"] == (
        "sha256:213886eb6407af91b87fa47551c3632be1a6419ff3a5114ef1e6fc364628496f"
    )
    assert values["otlp"]["endpoint"] == "otel-gateway.observability.svc:4317"
    (image,) = [a for a in meta["artifacts"] if a["kind"] == "machine-image"]
    raw = leaf.raw
    sources = read_root_file(raw, "/etc/apt/sources.list")
    assert f"{NVIDIA_UPSTREAM} /\n" in sources
    assert "signed-by=/etc/apt/keyrings/nvkr-nvidia-cuda.gpg" in sources
    assert f"{DOCKER_UPSTREAM} trixie stable" in sources
    containerd_config = read_root_file(raw, "/etc/containerd/config.toml")
    assert 'default_runtime_name = "nvidia"' in containerd_config
    # containerd's nvidia handler runs the toolkit's runtime, which is the stand-in's
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in containerd_config
    runtime = "/usr/bin/nvidia-container-runtime"
    (toolkit,) = [d for d in _nvidia_packages() if d.name == "nvidia-container-toolkit"]
    assert read_root_file(raw, runtime) == toolkit.files[runtime].decode()
    extra_args = read_root_file(raw, "/usr/lib/nvkr/kubelet-extra-args")
    # the recipe's kubelet.extraLabels (gpu/hopper.yaml's), as the script's own labels
    assert "image='nvidia.com/mig.config=all-disabled'" in extra_args
    # kubelet's unit runs the staged kubelet; its drop-in reads kubeadm's flags
    unit = read_root_file(raw, "/etc/systemd/system/kubelet.service")
    assert "ExecStart=/usr/bin/kubelet" in unit
    dropin = read_root_file(raw, "/etc/systemd/system/kubelet.service.d/20-nvkr.conf")
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in dropin
    assert "iommu=pt" in read_root_file(raw, "/boot/grub/grub.cfg")
    # Open vSwitch runs on the node, from Debian (the network layer); OVN runs in the pods
    status = read_root_file(raw, "/var/lib/dpkg/status")
    assert "Package: openvswitch-switch\n" in status
    assert "Package: ovn-host\n" not in status
    # the full kernel's modules: bare-metal NICs and disks, the AMD IOMMU is built in
    (kernel,) = [n for n in debs if re.fullmatch(r"linux-image-[0-9].*-amd64", n)]
    release = kernel.removeprefix("linux-image-")
    modules = read_root_file(raw, f"/lib/modules/{release}/modules.dep")
    for driver in ("e1000e", "igb", "ixgbe", "i40e", "ice", "ahci", "ipmi_si", "drm"):
        assert f"/{driver}.ko" in modules, driver
    assert "CONFIG_AMD_IOMMU=y" in read_root_file(raw, f"/boot/config-{release}")
    staged = {
        f["path"]: f["sha256"]
        for f in json.loads(read_root_file(raw, "/etc/nvkr/manifest.json"))["files"]
    }
    assert staged["/usr/bin/kubelet"] == k8s.kube("kubelet", "amd64").sha256
    standin_agent = spire_standin.agent_standin(spire_standin.VERSION, "amd64")
    assert staged["/usr/bin/spire-agent"] == hashlib.sha256(standin_agent).hexdigest()
    # the SPIRE agent's unit is enabled; its configuration holds nothing of any node
    wants = "/etc/systemd/system/multi-user.target.wants/spire-agent.service"
    assert "ExecStart=/usr/bin/spire-agent run" in read_root_file(raw, wants)
    agent_conf = read_root_file(raw, "/etc/spire/agent/agent.conf")
    assert 'join_token = "${SPIRE_JOIN_TOKEN}"' in agent_conf
    assert 'server_address = "${SPIRE_SERVER_ADDRESS}"' in agent_conf
    # the manifest lists every staged binary, and only those
    assert set(staged) == {
        "/usr/bin/node-agent",
        "/usr/bin/kubelet",
        "/usr/bin/kubeadm",
        "/usr/bin/kubectl",
        "/usr/bin/crictl",
        "/usr/bin/spire-agent",
    }
    # the image's SBOM shows what kubeadm needs, so a Cluster API export does not warn
    from nvkr.delivery.export import missing_for_kubeadm
    from nvkr.oci.layout import LayoutReader

    reader = LayoutReader(layout)
    sbom = reader.read_json(image["sbom"])
    assert missing_for_kubeadm(json.loads(reader.read_blob(sbom["layers"][0]))) == []
    capi = run_nvkr(
        "release-set", "export", str(layout), "--format", "capi", cwd=project, store=store
    )
    assert capi.code == 0 and "KubeadmControlPlane" in capi.stdout, capi.stderr
    assert "kubeadm" not in capi.stderr, capi.stderr


@pytest.mark.parametrize("api_version", ["v1beta1", "v1beta2"])
def test_cluster_api_export_of_the_leaf_passes_the_field_rules(
    leaf: Leaf, api_version: str
) -> None:
    """``release-set export --format capi --infrastructure metal3`` of the built leaf, for
    Cluster API v1beta1 and v1beta2: every document passes the field rules read from the
    published Go types (nvkr/delivery/export/capi/fieldrules.py), and the export holds the
    Cluster, the Metal3Cluster and the cluster release's chart as add-ons (a ClusterResourceSet
    and the ConfigMap of the chart's rendered manifests, which pin the agent image by digest)."""
    from nvkr.delivery.export.capi.fieldrules import check_documents

    assert leaf.built.code == 0, leaf.built.stderr
    res = run_nvkr(
        "release-set", "export", str(leaf.layout), "--format", "capi",
        "--api-version", api_version, "--infrastructure", "metal3",
        "--control-plane-endpoint", "192.0.2.10:6443",
        "--image-base-url", "https://images.example/nvkr",
        cwd=leaf.project, store=leaf.store,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr  # kubeadm, kubelet and cloud-init are there
    docs = [d for d in yaml.safe_load_all(res.stdout) if d]
    assert check_documents(docs) == []
    kinds = {d["kind"] for d in docs}
    assert {
        "Cluster", "Metal3Cluster", "KubeadmControlPlane", "KubeadmConfigTemplate",
        "MachineDeployment", "MachineHealthCheck", "ClusterResourceSet", "ConfigMap",
        "Metal3MachineTemplate", "Metal3DataTemplate",
    } <= kinds  # fmt: skip
    (cluster,) = [d for d in docs if d["kind"] == "Cluster"]
    assert cluster["apiVersion"] == f"cluster.x-k8s.io/{api_version}"
    addons = "\n".join(
        str(v) for d in docs if d["kind"] == "ConfigMap" for v in d.get("data", {}).values()
    )
    assert "@sha256:" in addons, "the rendered chart pins the agent image by digest"
    assert "otel/opentelemetry-collector-contrib@sha256:213886eb" in addons, "the collector's"


# -- NVIDIA's driver from Debian's own archive, built by DKMS ---------------------------------
#: The Debian-driver leaf with Secure Boot on (recipes/secureboot/debian-13.yaml) and a test
#: owner's certificate (recipes/owner/owner.crt; its key stays outside the project): the UKI
#: carries the GPU layer's kernelArgs, and the modules DKMS builds (NVIDIA's and v4l2loopback, a
#: small module that loads without a device) are signed with the owner's key.
LEAF_DEBIAN = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: hopper-debian-k8s1.36-loopback}
extends: [hopper-debian-k8s1.36.yaml, ../secureboot/debian-13.yaml]
sources:
  node-packages:
    apt:
      docker: {keyring: {fingerprint: @DOCKER_FPR@}}
    packages:
      v4l2loopback-dkms: "@V4L2LOOPBACK@"
  ovn-kubernetes: {commit: @OVNK_COMMIT@}
  ovn-kubernetes-repo: {commit: @OVNK_COMMIT@}
  secure-boot-owner: {path: ../owner}
artifacts:
  uki: {kernelArgs: ["iommu=pt"]}
  signed-modules:
    builder: signed-modules
    rootfs: rootfs
    certificate: {source: secure-boot-owner, path: owner.crt}
  node-image:
    size: 4GiB
    kubelet: {maxPods: @MAX_PODS@}
    secureBoot: {modules: signed-modules}
""".replace("@MAX_PODS@", str(LEAF_MAX_PODS)).replace("@V4L2LOOPBACK@", "0.15.0-2")
#: The owner's certificate's common name (the modules' signer, as modinfo reads it).
OWNER_CN = "nvkr test owner"
DEBIAN_DRIVER = "550.163.01-2"  # recipes/os/debian-13.yaml: vars.debianNvidiaDriverVersion
#: Debian 13's kernels are built with CONFIG_MODULE_COMPRESS_XZ: their modules, and those DKMS
#: installs for them, are xz-compressed.
KO = ".ko.xz"
#: What nvidia-kernel-dkms 550 installs for a kernel (Debian renames NVIDIA's nvidia*.ko).
DEBIAN_MODULES = tuple(
    f"nvidia-current{part}{KO}" for part in ("", "-modeset", "-drm", "-uvm", "-peermem")
)
#: The small DKMS module beside them (trixie main's v4l2loopback-dkms): it loads in QEMU.
SMALL_MODULE = f"v4l2loopback{KO}"
#: Left in the guest by the boot test's runcmd (see test_the_debian_driver_image_boots...).
MODPROBE_RESOLVES = "/run/nvkr-test/nvidia-current.modprobe-n"
#: The init boot's runcmd lines after the bootstrap's: what ``modprobe -n`` says of
#: nvidia-current (its load by ``modprobe`` is the module probe's, which boot-test runs under
#: Secure Boot: a second load of NVIDIA's 60 MB module here only cost TCG guest time)
MODPROBE_RUNCMD = [
    ["mkdir", "-p", "/run/nvkr-test"],
    ["sh", "-c", f"modprobe -n -v nvidia-current > {MODPROBE_RESOLVES} 2>&1"
                 f" || rm -f {MODPROBE_RESOLVES}"],
]  # fmt: skip


@dataclass
class DebianLeaf:
    """The Debian-driver leaf (recipes/catalog/hopper-debian-k8s1.36.yaml) locked and built once
    per module, in the NVIDIA leaf's project and store (its agent, Kubernetes binaries and
    charts are cached there): ``rel``, ``layout``, the ``locked`` and ``built`` results and the
    lock's packages by name (``debs``)."""

    rel: str
    layout: Path
    locked: Result
    built: Result
    debs: dict[str, dict[str, str]]
    owner: Path  # the owner's certificate (PEM), enrolled as a MOK in the boot

    def image(self) -> Path:
        """The release set's machine image (QCOW2)."""
        return machine_image(self.layout)

    @property
    def kernel(self) -> str:
        """The image's kernel release (``6.12.x+deb13-amd64``), from the locked image package."""
        (name,) = [n for n in self.debs if re.fullmatch(r"linux-image-[0-9].*-amd64", n)]
        return name.removeprefix("linux-image-")


# -- the module's work, in the background ----------------------------------------------------
# The module's work takes about ten minutes of the machine and needs nothing of the session's
# default build: it starts at the session's first test (tests/conftest.py, which orders this
# module last) and runs beside everything else. Within it, each boot (a TCG guest that leaves
# much of the machine idle: timers, cloud-init's waits) overlaps a build: the NVIDIA leaf's join
# boot, the second clone's build and the Debian-driver leaf's lock and build run side by side;
# the Debian-driver image's init boot comes last.


class Pipeline:
    """The module's work: :func:`_make_leaf`, then :func:`_join_boot`, :func:`_second_clone`
    and :func:`_make_debian_leaf` side by side, then :func:`_init_boot`; each a
    Future (``leaf``, ``join``, ``debian``, ``init``, ``second``) that the module's fixtures and
    tests wait for (``result()`` raises what the step raised)."""

    def __init__(self, tmp: Path, go_toolchain: tuple[Path, str], env: dict[str, str]) -> None:
        self.leaf: Future[Leaf] = Future()
        self.join: Future[JoinBoot] = Future()
        self.debian: Future[DebianLeaf] = Future()
        self.init: Future[InitBoot] = Future()
        self.second: Future[SecondClone] = Future()
        self._tmp, self._go, self._env = tmp, go_toolchain, env
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="catalog", initializer=in_background, initargs=(env,)
        )
        self._main = self._pool.submit(self._run)

    def _run(self) -> None:
        tmp = self._tmp
        leaf = _step(self.leaf, _make_leaf, _mkdir(tmp / "leaf"), self._go)
        if leaf is None:
            for future in (self.join, self.debian, self.init, self.second):
                future.set_exception(RuntimeError("the catalog leaf's stand-ins did not start"))
            return
        # the boots in one thread, the second clone in another, the Debian-driver leaf here: the
        # chain to the last step (the init boot) is the NVIDIA leaf, the Debian-driver leaf's
        # build and its boot
        boots, beside = (
            ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"catalog-{name}", initializer=in_background,
                initargs=(self._env,),
            )
            for name in ("boot", "second")
        )  # fmt: skip
        try:
            boots.submit(_step, self.join, _join_boot, leaf, _mkdir(tmp / "join-boot"))
            beside.submit(
                _step, self.second, _second_clone, leaf, _mkdir(tmp / "second-clone"), self._go
            )
            debian = _step(self.debian, _make_debian_leaf, leaf)
            if debian is None:
                self.init.set_exception(RuntimeError("the Debian-driver leaf's step failed"))
                return
            boots.submit(_step, self.init, _init_boot, leaf, debian, _mkdir(tmp / "init-boot"))
        finally:
            beside.shutdown(wait=True)
            boots.shutdown(wait=True)

    def close(self) -> None:
        """Wait for the work (a test that stopped early leaves it running), then stop the
        stand-ins."""
        self._main.result()
        self._pool.shutdown(wait=True)
        if self.leaf.done() and self.leaf.exception() is None:
            self.leaf.result().close()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _step(future: Future[Any], fn: Any, *args: Any) -> Any:
    """``fn(*args)``'s result or exception into ``future``; returns the result (None when it
    raised)."""
    try:
        result = fn(*args)
    except BaseException as e:  # a step's failure is its tests', not the thread's
        future.set_exception(e)
        return None
    future.set_result(result)
    return result


def start_in_background(request: pytest.FixtureRequest) -> Pipeline:
    """The module's work, started (see tests/conftest.py's ``_started_in_background``)."""
    go_toolchain = request.getfixturevalue("go_toolchain")
    tmp = request.getfixturevalue("tmp_path_factory").mktemp("catalog")
    return Pipeline(tmp, go_toolchain, dict(os.environ))


@pytest.fixture(scope="module")
def pipeline(_started_in_background: dict[str, Pipeline]) -> Pipeline:
    return _started_in_background[__name__]


@pytest.fixture(scope="module")
def leaf(pipeline: Pipeline) -> Leaf:
    return pipeline.leaf.result()


@pytest.fixture(scope="module")
def debian_leaf(pipeline: Pipeline) -> DebianLeaf:
    return pipeline.debian.result()


@pytest.fixture(scope="module")
def second_clone(pipeline: Pipeline) -> SecondClone:
    return pipeline.second.result()


@pytest.fixture(scope="module")
def join_boot(pipeline: Pipeline) -> Future[JoinBoot]:
    return pipeline.join


@pytest.fixture(scope="module")
def init_boot(pipeline: Pipeline) -> Future[InitBoot]:
    return pipeline.init


def _make_debian_leaf(leaf: Leaf) -> DebianLeaf:
    """The Debian-driver leaf locked and built in the NVIDIA leaf's project and store."""
    project, store = leaf.project, leaf.store
    rel = "recipes/catalog/loopback-debian.yaml"
    (project / rel).write_text(
        LEAF_DEBIAN.replace("@DOCKER_FPR@", _fingerprint(leaf.docker)).replace(
            "@OVNK_COMMIT@", leaf.ovnk.good
        )
    )
    owner = project / "recipes/owner/owner.crt"
    owner.parent.mkdir(parents=True)
    key = project.parent / "owner.key"  # outside the project, as an owner keeps it
    make_owner(key, owner, OWNER_CN)
    locked = run_nvkr("lock", rel, *leaf.mirrors, cwd=project, store=store)
    built = (
        run_nvkr(
            "build",
            rel,
            "--locked",
            *leaf.mirrors,
            "--secure-boot-key",
            str(key),
            "--json",
            cwd=project,
            store=store,
        )
        if locked.code == 0
        else locked
    )
    debs: dict[str, dict[str, str]] = {}
    if locked.code == 0:
        lock = json.loads((project / "lockfiles/catalog/loopback-debian.lock.json").read_text())
        (packages,) = [e for e in lock["sources"] if e["name"] == "node-packages"]
        debs = {p["name"]: p for p in packages["resolved"]["packages"]}
    layout = project / "dist" / "nvkr-hopper-debian-k8s1.36"
    return DebianLeaf(rel, layout, locked, built, debs, owner)


def test_the_debian_driver_image_holds_dkms_modules_built_for_its_kernel(
    debian_leaf: DebianLeaf, tmp_path: Path
) -> None:
    """NVIDIA's 550 driver from Debian 13's non-free, built by DKMS inside the rootfs action
    for the image's own kernel: each module exists under updates/dkms, modinfo reads it, its
    vermagic names the kernel, it is signed by the owner's certificate (the signed-modules
    action's, laid over DKMS's unsigned one), depmod resolves every symbol against the kernel's
    exports (Module.symvers: Debian's System.map is a stub) and the other modules, with
    matching CRCs; no DKMS signing key, no DKMS build tree or log is left in the image."""
    from tests.helpers.disk import debugfs_rdump

    assert debian_leaf.locked.code == 0, debian_leaf.locked.stderr
    assert debian_leaf.built.code == 0, debian_leaf.built.stderr
    debs = debian_leaf.debs
    # trixie's own suite: non-free for the modules' source, non-free-firmware for GSP's
    for name, area in (
        ("nvidia-kernel-dkms", "non-free"),
        ("firmware-nvidia-gsp", "non-free-firmware"),
    ):
        assert debs[name]["version"] == DEBIAN_DRIVER
        assert debs[name]["url"].startswith(f"http://deb.debian.org/debian/pool/{area}/"), debs[
            name
        ]
    assert "dkms" in debs and "linux-headers-amd64" in debs
    assert "nvidia-container-toolkit" not in debs, "Debian ships none: driver only"
    kernel = debian_leaf.kernel
    raw = tmp_path / "disk.raw"
    subprocess.run(
        ["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(debian_leaf.image()), str(raw)],
        check=True,
    )
    base = tmp_path / "root"
    modules = debugfs_rdump(raw, f"/lib/modules/{kernel}", base / "lib" / "modules")
    # Debian's /boot/System.map-* is a stub pointing at the -dbg package: the kernel's exports
    # (with their CRCs) are its headers' Module.symvers
    symvers = debugfs_rdump(raw, f"/usr/src/linux-headers-{kernel}/Module.symvers", base / "h")
    dkms_dir = debugfs_rdump(raw, "/var/lib/dkms", base / "var" / "lib")
    conf = read_root_file(raw, "/etc/dkms/framework.conf.d/nvkr-no-module-signing.conf")
    raw.unlink()
    assert "sign_file=/nonexistent/" in conf

    built = sorted(p.name for p in (modules / "updates" / "dkms").iterdir())
    assert built == sorted([*DEBIAN_MODULES, SMALL_MODULE]), built
    for name in (*DEBIAN_MODULES, SMALL_MODULE):
        ko = modules / "updates" / "dkms" / name
        info = subprocess.run(["modinfo", str(ko)], capture_output=True, text=True, check=True)
        fields = dict(line.split(":", 1) for line in info.stdout.splitlines() if ":" in line)
        assert fields["vermagic"].split()[0] == kernel, (name, fields["vermagic"])
        if name != SMALL_MODULE:
            assert fields["version"].strip() == DEBIAN_DRIVER.split("-")[0], name
        assert fields.get("signer", "").strip() == OWNER_CN, (name, fields.get("signer"))
    depmod = subprocess.run(
        ["depmod", "-n", "-e", "-b", str(base), "-E", str(symvers), kernel],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "unknown symbol" not in depmod.stderr.lower(), depmod.stderr
    assert "disagrees about version" not in depmod.stderr, depmod.stderr
    dep = {
        line.split(":", 1)[0]: line.split(":", 1)[1].split()
        for line in depmod.stdout.splitlines()
        if f"{KO}:" in line
    }
    drm = dep[f"updates/dkms/nvidia-current-drm{KO}"]
    assert (
        f"updates/dkms/nvidia-current-modeset{KO}" in drm
        and f"kernel/drivers/gpu/drm/drm{KO}" in drm
    )
    # nothing of the build: no key (dkms would have generated /var/lib/dkms/mok.key), no log
    left = sorted(str(p.relative_to(dkms_dir)) for p in dkms_dir.rglob("*"))
    assert not [p for p in left if p.endswith(("mok.key", "mok.pub", "make.log"))], left
    assert not [p for p in left if "/log" in p or p.endswith("/build")], left
    assert any(p.endswith(f"{kernel}/x86_64/module/nvidia-current{KO}") for p in left), left


# -- the ovnkube image, from a second clone -------------------------------------------------
#: What the second clone builds again (:func:`_second_clone`), by action name in the NVIDIA
#: leaf's plan: the ovnkube image with what it is made of (its own root filesystem, the eight Go
#: builds) and upstream's chart pinned to it.
REBUILT_OVNKUBE = (
    "ovnkube-rootfs [amd64]",
    *(f"{name} [amd64]" for name in OVNK_COMMANDS),
    "ovnkube-image [amd64]",
    "ovnkube-image",
    "ovnkube-chart",
)


@dataclass
class SecondClone:
    """:func:`_second_clone`'s build: its ``store``, its ``--json`` result (``built``) and the
    action keys of its plan by action name (``keys``)."""

    store: Path
    built: Result
    keys: dict[str, str]

    def differs(self, first: Path, names: tuple[str, ...]) -> dict[str, tuple[object, object]]:
        """Each of ``names`` whose record's outputs differ between ``first`` (a store) and this
        one: the two output lists (None where a store has no record of the key)."""
        from nvkr.store import Store

        a, b = Store(first), Store(self.store)
        out: dict[str, tuple[object, object]] = {}
        for name in names:
            ra, rb = (record_of(s.get_action(self.keys[name])) for s in (a, b))
            pair = tuple(None if r is None else r["outputs"] for r in (ra, rb))
            if pair[0] is None or pair[0] != pair[1]:
                out[name] = pair
        return out


def _second_clone(leaf: Leaf, tmp_path: Path, go_toolchain: tuple[Path, str]) -> SecondClone:
    """:data:`REBUILT_OVNKUBE` built again (``--action``) in a second clone holding the loopback
    leaf and its lockfile, offline, with a store holding only the first store's blobs (no action
    record: every selected builder runs) and, as the first store had, the session's Go build
    cache of the standard library (:func:`tests.helpers.nvkr.seed`; not the first store's
    cache: ovn-kubernetes' own packages are compiled again), umask 002 and another TZ. (Without
    it, the two Go builds that run first each compiled the standard library, about a minute of
    a core each; the twin and ``verify --rebuild`` prove the standard library's build from
    nothing.)"""
    from nvkr.store import Store

    assert leaf.built.code == 0, leaf.built.stderr
    first, second = leaf.project, make_clone(tmp_path / "second")
    for path in (
        *(first / "recipes/catalog").glob("loopback*.yaml"),
        *(first / "lockfiles/catalog").glob("loopback*.lock.json"),
    ):
        (second / path.relative_to(first)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, second / path.relative_to(first))
    store = Store(tmp_path / "store")
    for blob in Store(leaf.store).blobs_dir.iterdir():
        os.link(blob, store.blob_path("sha256:" + blob.name))
    link_go_cache(Store(go_toolchain[0]).cache_dir / "go-build", store.cache_dir / "go-build")
    env = {"TZ": "Asia/Kolkata"}
    plan = run_nvkr(
        "plan", leaf.rel, "--offline", "--json",
        cwd=second, store=store.root, umask=0o002, env=env,
    )  # fmt: skip
    assert plan.code == 0, plan.stderr
    actions = json.loads(plan.stdout)["actions"]
    keys = {a["name"]: a["key"] for a in actions}
    refs = {a["name"]: a["ref"] for a in actions}
    selected = [arg for name in REBUILT_OVNKUBE for arg in ("--action", refs[name])]
    built = run_nvkr(
        "build", leaf.rel, "--locked", "--offline", "--json", *selected,
        cwd=second, store=store.root, umask=0o002, env=env,
    )  # fmt: skip
    return SecondClone(store.root, built, keys)


def _image_root(layout: Path, name: str, dest: Path) -> tuple[dict, Path]:
    """The amd64 image ``name`` of the release set at ``layout``: its config, and its layers
    unpacked in order at ``dest``."""
    import zstandard

    from nvkr.releaseset import read_metadata

    (art,) = [a for a in read_metadata(layout)["artifacts"] if a["name"] == name]
    blobs = layout / "blobs" / "sha256"
    (entry,) = json.loads((blobs / art["index"]["digest"][7:]).read_bytes())["manifests"]
    manifest = json.loads((blobs / entry["digest"][7:]).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())
    dest.mkdir()
    for layer in manifest["layers"]:
        with (
            zstandard.open(blobs / layer["digest"][7:], "rb") as f,
            tarfile.open(fileobj=f, mode="r|") as tar,
        ):
            tar.extractall(dest, filter="tar")
    return config, dest


def test_the_ovnkube_image_is_the_same_from_a_second_clone_and_holds_the_ovn_tools(
    leaf: Leaf, second_clone: SecondClone, tmp_path: Path
) -> None:
    """ovnkube's image (recipes/network/ovn-kubernetes.yaml) in upstream's layout: the eight
    commands of upstream's Makefile, compiled from the pinned commit's vendored module, the CNI
    plugin in /usr/libexec/cni/ and the entrypoint /root/ovnkube.sh from dist/images/, on a
    base of locked Debian 13 packages. The second clone (:func:`_second_clone`: offline, a store
    holding only the sources and the standard library's Go cache, every selected builder runs
    again: the root filesystem, the Go builds, the image, its index and upstream's chart) gives
    each the same outputs byte for byte under the same action keys as the leaf's build; inside
    the leaf's image, ovnkube carries the pin's commit and date, and the OVS and OVN tools are there (OVN 25.03, OVS 3.5)."""
    from nvkr.releaseset import read_metadata
    from nvkr.store import Store

    built = second_clone.built
    assert built.code == 0, built.stderr
    done = {e["name"] for e in built.json_events() if e["event"] == "action-done"}
    assert set(REBUILT_OVNKUBE) <= done, done
    assert second_clone.differs(leaf.store, REBUILT_OVNKUBE) == {}
    (image,) = [x for x in read_metadata(leaf.layout)["artifacts"] if x["name"] == "ovnkube-image"]
    record = record_of(Store(leaf.store).get_action(second_clone.keys["ovnkube-image"]))
    assert record is not None and record["outputs"][0]["digest"] == image["index"]["digest"], (
        "the leaf's own ovnkube image"
    )

    config, root = _image_root(leaf.layout, "ovnkube-image", tmp_path / "root")
    assert config["config"]["Entrypoint"] == ["/root/ovnkube.sh"]

    def inside(*argv: str) -> str:
        proc = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True)
        assert proc.returncode == 0, f"{argv}: {proc.stderr}"
        return proc.stdout

    assert inside("/usr/bin/ovnkube", "--version").splitlines() == [
        "Version: stand-in",
        f"Git commit: {leaf.ovnk.good}",
        "Build date: 2026-05-28T20:26:40Z",
    ]
    for name in OVNK_COMMANDS:
        if name in ("ovnkube", "ovn-k8s-cni-overlay"):
            continue
        assert inside(f"/usr/bin/{name}").strip() == f"{name} stand-in"
    assert inside("/usr/libexec/cni/ovn-k8s-cni-overlay").strip() == "ovn-k8s-cni-overlay stand-in"
    assert inside("/root/ovnkube.sh", "ovn-controller").strip() == "ovnkube.sh: ovn-controller"
    assert (root / "root/ovndb-raft-functions.sh").is_file()
    assert "25.03.0" in inside("ovn-nbctl", "--version")
    assert "25.03.0" in inside("ovn-northd", "--version")
    assert "25.03.0" in inside("ovn-controller", "--version")
    assert "3.5.0" in inside("ovs-vsctl", "--version")
    for tool in ("ovn-sbctl", "ovsdb-tool", "ovsdb-client", "ip", "nft", "iptables"):
        inside("sh", "-c", f"command -v {tool}")
    assert (root / "usr/share/ovn/scripts/ovn-ctl").is_file()
    assert (root / "usr/share/ovn/ovn-nb.ovsschema").is_file()


def test_a_newer_ovn_kubernetes_pin_is_refused_at_plan_naming_both_schemas(leaf: Leaf) -> None:
    """A leaf moving OVN-Kubernetes to a commit whose Northbound models are generated from a
    newer schema than Debian 13's ovn-central ships: `nvkr plan` with the good leaf's lockfile
    (only the two git sources resolve now) reads the new tree's models, takes ovn-central's
    schemas from the lockfile's record, and refuses before planning, naming both versions,
    files and pins."""
    bad = "recipes/catalog/loopback-newer-ovnk.yaml"
    (leaf.project / bad).write_text(
        "apiVersion: nvkr.dev/v1alpha1\nkind: Recipe\nmetadata: {name: loopback-newer-ovnk}\n"
        "extends: [loopback.yaml]\n"
        f"sources:\n  ovn-kubernetes: {{commit: {leaf.ovnk.newer}}}\n"
        f"  ovn-kubernetes-repo: {{commit: {leaf.ovnk.newer}}}\n"
    )
    lockfile = leaf.project / "lockfiles" / "catalog" / "loopback.lock.json"
    planned = run_nvkr(
        "plan", bad, "--lockfile", str(lockfile), *leaf.mirrors, cwd=leaf.project, store=leaf.store
    )
    assert planned.code == 2, planned.stderr
    err = " ".join(planned.stderr.split())
    assert (
        f"{bad}: variant gpu=hopper,kubernetes=1.36,arch=amd64: rule ovn-kubernetes.ovn-schema: "
        f"the OVN_Northbound models are generated from schema {OVNK_NEWER_NB} "
        f"(go-controller/pkg/nbdb/model.go of {OVNK_UPSTREAM} at commit {leaf.ovnk.newer[:12]}, "
        f"{bad}:6: sources.ovn-kubernetes.commit), newer than the OVN_Northbound 7.11.0 that "
        "ovn-central ships (/usr/share/ovn/ovn-nb.ovsschema of ovn-central 25.03.0-1, "
        "recipes/network/ovn-kubernetes.yaml:"
    ) in err, err
    assert "OVN_Southbound" not in err, err  # the Southbound models are unchanged
    assert "actions" not in planned.stdout, planned.stdout


def test_upstreams_chart_is_packaged_pinned_to_the_image_and_offline(leaf: Leaf) -> None:
    """The network layer's chart is upstream's helm/ovn-kubernetes of the pin (the stand-in's
    shape: local subcharts, no values.yaml, CRDs linked from dist/templates/): its
    values-single-node-zone.yaml ships as values.yaml with the image pinned by digest in
    global.image.tag, OVS off, the lookups off, the layer's networks; the linked CRDs are in
    the archive as the files they point to, the monitoring CRD as upstream wrote it."""
    from nvkr.releaseset import read_metadata

    meta = read_metadata(leaf.layout)
    (image,) = [x for x in meta["artifacts"] if x["name"] == "ovnkube-image"]
    (chart,) = [x for x in meta["artifacts"] if x["name"] == "ovnkube-chart"]
    tgz = leaf.layout / "blobs" / "sha256" / chart["primary"]["digest"][7:]
    with tarfile.open(tgz) as tf:
        names = set(tf.getnames())
        values = yaml.safe_load(tf.extractfile("ovn-kubernetes/values.yaml").read())  # type: ignore[union-attr]
        crd = tf.extractfile(f"ovn-kubernetes/crds/{LINKED_CRDS[0]}")
        assert crd is not None and b"kind: CustomResourceDefinition" in crd.read()
        assert tf.getmember(f"ovn-kubernetes/crds/{LINKED_CRDS[0]}").isfile()
    assert "ovn-kubernetes/crds/monitoring.coreos.com_servicemonitors.yaml" in names
    assert "ovn-kubernetes/charts/ovs-node/Chart.yaml" in names
    assert values["global"]["image"] == {
        "repository": "ghcr.io/nvkr/ovnkube",
        "tag": f"1.2.0@{image['index']['digest']}",
    }
    assert values["tags"]["ovs-node"] is False
    assert values["skipCallToK8s"] is True and values["global"]["skipCallToK8s"] is True
    assert (values["podNetwork"], values["serviceNetwork"]) == ("10.244.0.0/16/24", "10.96.0.0/12")
    assert values["mtu"] == 1400


# -- the Cluster API boots -------------------------------------------------------------------
#: The Cluster API boot tests' export: Metal3's (every node labelled with its host's uuid,
#: ``metal3.io/uuid={{ ds.meta_data.uuid }}``, which cloud-init renders from the meta-data).
METAL3_EXPORT = (
    "--infrastructure", "metal3", "--control-plane-endpoint", "192.0.2.10:6443",
    "--image-base-url", "http://192.0.2.1/images",
)  # fmt: skip
METAL3_UUID_VALUE = "{{ ds.meta_data.uuid }}"
#: The BareMetalHost's uuid in the boot tests' meta-data (Ironic's metadata carries ``uuid``).
HOST_UUID = "4f1c2a3e-7b5d-4e6f-9a8b-0c1d2e3f4a5b"


def _ironic_meta_data(tmp_path: Path) -> Path:
    """A NoCloud meta-data file as Ironic's config drive gives a Metal3 host: its ``uuid``
    (the BareMetalHost's), the instance-id and the hostname."""
    from nvkr.machine.seed import DEFAULT_HOSTNAME

    path = tmp_path / "meta-data"
    path.write_text(
        f"instance-id: {HOST_UUID}\nlocal-hostname: {DEFAULT_HOSTNAME}\nuuid: {HOST_UUID}\n"
    )
    return path


def _rendered(labels: str) -> str:
    """The node labels as cloud-init renders them from :func:`_ironic_meta_data`'s meta-data."""
    assert METAL3_UUID_VALUE in labels, labels
    return labels.replace(METAL3_UUID_VALUE, HOST_UUID)


#: What the boot tests read back from the guest: kubeadm's files for the kubelet (as the stand-in
#: kubeadm wrote them) and what the stand-in kubelet recorded when systemd started it.
KUBELET_FILES = [
    "/var/lib/kubelet/config.yaml",
    "/var/lib/kubelet/kubeadm-flags.env",
    "/run/nvkr/kubelet-extra-args.env",
    "/var/lib/nvkr-test/kubelet.args",
    "/var/lib/nvkr-test/kubelet-config.yaml",
    "/var/lib/nvkr-test/kubelet.labels",
]


def _assert_kubelet_got(contents: dict[str, bytes], want_labels: str, *, phase: str) -> None:
    """kubeadm's kubelet contract, as the stand-in kubelet saw it: kubeadm's kubeconfigs and
    ``--config=/var/lib/kubelet/config.yaml`` (the file kubeadm wrote, with a staticPodPath,
    is the one it loaded, and kubeadm applied the image's kubelet patch to it: the recipe's
    maxPods), then kubeadm-flags.env's KUBELET_KUBEADM_ARGS (the CRI socket and the
    node-pool release's ``--node-labels``), then the image's KUBELET_EXTRA_ARGS (the node
    agent's and the recipe's labels); its merged node labels hold the pool's, the agent's and
    the recipe's."""
    from tests.helpers.k8smirror import KUBELET_ARGS, KUBELET_CONFIG, KUBELET_LABELS

    missing = [p for p in KUBELET_FILES if p not in contents]
    assert not missing, f"{phase}: the guest did not show {missing}"
    config = yaml.safe_load(contents["/var/lib/kubelet/config.yaml"])
    assert config["staticPodPath"] == "/etc/kubernetes/manifests", config
    # the image's kubelet settings, through the kubeadm patch the export's patches.directory
    # names: the recipe's maxPods, serverTLSBootstrap, the containerd socket
    assert config["maxPods"] == LEAF_MAX_PODS, f"{phase}: the recipe's maxPods: {config}"
    assert config["serverTLSBootstrap"] is True, config
    assert config["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    assert contents[KUBELET_CONFIG] == contents["/var/lib/kubelet/config.yaml"], (
        "the kubelet loaded kubeadm's config.yaml"
    )
    flags = contents["/var/lib/kubelet/kubeadm-flags.env"].decode()
    (kubeadm_args,) = re.findall(r'^KUBELET_KUBEADM_ARGS="(.*)"$', flags, re.M)
    assert f"--node-labels={want_labels}" in kubeadm_args.split(), flags
    assert "--container-runtime-endpoint=unix:///run/containerd/containerd.sock" in kubeadm_args
    extra = contents["/run/nvkr/kubelet-extra-args.env"].decode()
    (extra_args,) = re.findall(r"^KUBELET_EXTRA_ARGS=(.*)$", extra, re.M)
    argv = contents[KUBELET_ARGS].decode().splitlines()
    assert argv == [
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--config=/var/lib/kubelet/config.yaml",
        *kubeadm_args.split(),
        *extra_args.split(),
    ], f"{phase}: the kubelet's argv"
    labels = dict(
        line.split("=", 1) for line in contents[KUBELET_LABELS].decode().splitlines() if line
    )
    for label in [*want_labels.split(","), "nvidia.com/mig.config=all-disabled"]:
        key, value = label.split("=", 1)
        assert labels.get(key) == value, f"{phase}: {label} not in the kubelet's {labels}"
    assert "nvidia.com/gpu.present" in labels, f"{phase}: the node agent's labels: {labels}"
    assert labels.get("metal3.io/uuid") == HOST_UUID, f"{phase}: the host's uuid: {labels}"


def _trust_bundle_pem() -> str:
    """A SPIRE server's trust bundle for tests: a self-signed CA certificate (PEM)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpu.example SPIRE CA")])
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass
class JoinBoot:
    """The join boot of :func:`_join_boot`: what the test compares the guest's report with (the
    pool's node labels, the image's kubelet drop-in, agent.conf and staged files, the SPIRE
    settings given) and the boot's ``result``."""

    want_labels: str
    dropin: str
    agent_conf: str
    staged: list[dict[str, str]]
    spire_env: dict[str, str]
    result: Any


#: The image's kubelet drop-in, which kubeadm's files must leave in place
DROPIN_PATH = "/etc/systemd/system/kubelet.service.d/20-nvkr.conf"


def _join_boot(leaf: Leaf, tmp_path: Path) -> JoinBoot:
    """The leaf's node image booted with the user-data of a node of its pool, as
    ``release-set export --format capi --infrastructure metal3 --bootstrap-data`` writes it,
    the node's SPIRE settings added (see
    test_cluster_api_bootstrap_data_joins_with_the_exports_kubeadm_configuration)."""
    from nvkr.builders.node_image.spire import (
        SPIRE_AGENT_CONF,
        SPIRE_AGENT_ENV,
        SPIRE_TRUST_BUNDLE,
    )
    from nvkr.delivery.export.cabpk import JOIN_CONFIG_PATH, SENTINEL
    from tests.helpers.boot_child import boot_with_user_data
    from tests.helpers.k8smirror import KUBEADM_ARGS, KUBEADM_CONFIG

    assert leaf.built.code == 0, leaf.built.stderr
    user_data = tmp_path / "user-data"
    capi = run_nvkr(
        "release-set", "export", str(leaf.layout), "--format", "capi", *METAL3_EXPORT,
        "--bootstrap-data", "hopper-amd64", str(user_data),
        cwd=leaf.project, store=leaf.store,
    )  # fmt: skip
    assert capi.code == 0, capi.stderr
    assert "cloud-init" not in capi.stderr, "the leaf's image has cloud-init: no warning"
    text = user_data.read_text()
    assert text.startswith("## template: jinja\n#cloud-config\n"), text[:80]
    written = {f["path"]: f for f in yaml.safe_load(text)["write_files"]}
    join = yaml.safe_load(written[JOIN_CONFIG_PATH]["content"])
    assert join["kind"] == "JoinConfiguration"
    docs = [d for d in yaml.safe_load_all(capi.stdout) if d]
    (template,) = [d for d in docs if d["kind"] == "KubeadmConfigTemplate"]
    want_args = template["spec"]["template"]["spec"]["joinConfiguration"]["nodeRegistration"][
        "kubeletExtraArgs"
    ]
    want_labels = (
        want_args["node-labels"]
        if isinstance(want_args, dict)
        else next(a["value"] for a in want_args if a["name"] == "node-labels")
    )
    got_args = join["nodeRegistration"]["kubeletExtraArgs"]
    got = {a["name"]: a["value"] for a in got_args} if isinstance(got_args, list) else got_args
    assert got["node-labels"] == want_labels

    # the node's SPIRE settings, as a management system adds them to the bootstrap data
    # (KubeadmConfigTemplate files): the agent's environment and the server's trust bundle
    spire_env = {
        "SPIRE_SERVER_ADDRESS": "spire-server.example",
        "SPIRE_SERVER_PORT": "8081",
        "SPIRE_JOIN_TOKEN": "5d3b1a7e-9f64-4c2e-8a1d-0c7b2e6f4a90",
        "SPIRE_TRUST_DOMAIN": "gpu.example",
    }
    data = yaml.safe_load(text)
    data["write_files"] += [
        {
            "path": SPIRE_AGENT_ENV,
            "permissions": "0600",
            "owner": "root:root",
            "content": "".join(f"{k}={v}\n" for k, v in spire_env.items()),
        },
        {"path": SPIRE_TRUST_BUNDLE, "permissions": "0644", "content": _trust_bundle_pem()},
    ]
    header = "".join(text.splitlines(keepends=True)[:2])
    user_data.write_text(header + yaml.safe_dump(data, sort_keys=False, width=1 << 16))

    raw = leaf.raw
    result = boot_with_user_data(
        leaf.image(),
        user_data=user_data,
        meta_data_file=_ironic_meta_data(tmp_path),
        expect_files=[SENTINEL, KUBEADM_ARGS, KUBEADM_CONFIG, DROPIN_PATH, spire_standin.EXPANDED,
                      *KUBELET_FILES],
        show_files=KUBELET_FILES,
        timeout=BOOT_TIMEOUT,
        report_timeout=BOOT_TIMEOUT,
        log_file=tmp_path / "console.log",
    )  # fmt: skip
    return JoinBoot(
        want_labels=want_labels,
        dropin=read_root_file(raw, DROPIN_PATH),
        agent_conf=read_root_file(raw, SPIRE_AGENT_CONF),
        staged=json.loads(read_root_file(raw, "/etc/nvkr/manifest.json"))["files"],
        spire_env=spire_env,
        result=result,
    )


def test_cluster_api_bootstrap_data_joins_with_the_exports_kubeadm_configuration(
    join_boot: Future[JoinBoot],
) -> None:
    """The leaf's node image boots with the user-data Cluster API's kubeadm bootstrap provider
    writes for a node of its pool, made by ``release-set export --format capi --infrastructure
    metal3 --bootstrap-data`` from the export's own KubeadmConfigTemplate, on a NoCloud seed
    (``nvkr boot-test --user-data``'s machinery) whose meta-data carries the host's ``uuid`` as
    Ironic's does (:func:`_join_boot`). Its kubeadm and kubelet are the mirror's recording
    stand-ins.

    What this proves: the image's cloud-init takes NoCloud bootstrap data in CABPK's form (the
    ``## template: jinja`` header rendered from the meta-data, write_files, runcmd) and runs the
    bootstrap as Cluster API writes it: ``kubeadm join --config
    /run/kubeadm/kubeadm-join-config.yaml`` with exactly the join configuration the export
    produced (the pool's node labels in it, among them ``metal3.io/uuid``, which cloud-init
    rendered from the meta-data's uuid), then the bootstrap contract's sentinel; the kubelet
    starts with kubeadm's config and flags and those labels (:func:`_assert_kubelet_got`); the
    image's kubelet drop-in (the pool's kubelet arguments and labels) and the agent's readiness
    stay in place beside it; the agent verifies every binary the image's manifest lists; the
    SPIRE agent's unit starts with the settings the user-data gives it (agent.env and the trust
    bundle, added to the bootstrap data's write_files) and its stand-in reads them through the
    image's agent.conf. What it cannot prove: that a real kubeadm accepts that configuration
    and joins a control plane (kubeadm and a cluster are not reachable from here), nor the
    placeholder token and CA hash a real CABPK fills in, nor that a real spire-agent attests
    (no SPIRE server or binary is reachable here).
    """
    from nvkr.delivery.export.cabpk import JOIN_CONFIG_PATH, SENTINEL
    from nvkr.machine.cloudinit import parse_report
    from tests.helpers.k8smirror import KUBEADM_ARGS, KUBEADM_CONFIG

    boot = join_boot.result()
    result = boot.result
    assert "nvkr.dev/gpu-generation=hopper" in boot.want_labels.split(",")
    assert f"metal3.io/uuid={METAL3_UUID_VALUE}" in boot.want_labels.split(","), boot.want_labels
    assert all(c.ok for c in result.checks), result.checks
    parsed = parse_report(result.boot.lines)
    report = parsed["files"]
    _assert_kubelet_got(parsed["contents"], _rendered(boot.want_labels), phase="join")
    args = f"join\n--config\n{JOIN_CONFIG_PATH}\n".encode()
    assert report[KUBEADM_ARGS]["sha256"] == hashlib.sha256(args).hexdigest(), "kubeadm's argv"
    # kubeadm was given the file cloud-init wrote, which is the user-data's (checked by
    # boot_with_user_data): the export's join configuration
    assert report[KUBEADM_CONFIG]["sha256"] == report[JOIN_CONFIG_PATH]["sha256"]
    assert report[SENTINEL] is not None, "the bootstrap contract's sentinel"
    assert report[DROPIN_PATH]["sha256"] == hashlib.sha256(boot.dropin.encode()).hexdigest()
    assert "nvkr-node-agent: ready" in result.boot.matched
    # the agent verified every binary the image's manifest lists
    assert f"manifest=ok({len(boot.staged)} files)" in result.boot.matched, result.boot.matched
    # spire-agent.service started after cloud-init wrote its environment, and the agent read
    # the image's agent.conf with the node's values in it (the stand-in wrote what -expandEnv
    # made of it after checking the server, the token and the trust bundle)
    expanded = spire_standin.expand_env(boot.agent_conf, boot.spire_env)
    assert report[spire_standin.EXPANDED] is not None, "spire-agent.service did not start"
    assert report[spire_standin.EXPANDED]["sha256"] == hashlib.sha256(expanded.encode()).hexdigest()


@dataclass
class InitBoot:
    """The init boot of :func:`_init_boot`: the first control-plane node's node labels and the
    boot's ``result``."""

    want_labels: str
    result: Any


def _init_boot(leaf: Leaf, debian: DebianLeaf, tmp_path: Path) -> InitBoot:
    """The Debian-driver leaf's node image booted as the first control-plane node under
    enforcing Secure Boot (:func:`nvkr.machine.measured.boot_secure`: OVMF with Microsoft's
    keys, the owner's certificate as a MOK; its module probe tries every DKMS module): the
    user-data CABPK writes for a KubeadmControlPlane's first machine
    (:func:`nvkr.delivery.export.cabpk.init_user_data` of the Metal3 export's own
    KubeadmControlPlane) on a seed whose meta-data carries the host's ``uuid``, with two more
    runcmd lines that leave what ``modprobe`` says of nvidia-current (see
    test_the_debian_driver_image_boots_and_its_kernel_resolves_the_module)."""
    from nvkr.delivery.export.cabpk import SENTINEL, init_user_data
    from tests.helpers.boot_child import boot_secure
    from tests.helpers.k8smirror import KUBEADM_ARGS, KUBEADM_CONFIG, STATIC_PODS

    assert debian.built.code == 0, debian.built.stderr
    capi = run_nvkr(
        "release-set", "export", str(debian.layout), "--format", "capi", *METAL3_EXPORT,
        cwd=leaf.project, store=leaf.store,
    )  # fmt: skip
    assert capi.code == 0, capi.stderr
    docs = [d for d in yaml.safe_load_all(capi.stdout) if d]
    (kcp,) = [d for d in docs if d["kind"] == "KubeadmControlPlane"]
    registration = kcp["spec"]["kubeadmConfigSpec"]["initConfiguration"]["nodeRegistration"]
    args = registration["kubeletExtraArgs"]
    want_labels = (
        args["node-labels"]
        if isinstance(args, dict)
        else next(a["value"] for a in args if a["name"] == "node-labels")
    )
    text = init_user_data(kcp, str(kcp["spec"]["version"]), "192.0.2.10:6443")
    header = "".join(text.splitlines(keepends=True)[:2])
    assert header == "## template: jinja\n#cloud-config\n", header
    data = yaml.safe_load(text)
    data["runcmd"] += MODPROBE_RUNCMD
    user_data = tmp_path / "user-data"
    user_data.write_text(header + yaml.safe_dump(data, sort_keys=False, width=1 << 16))
    manifests = [f"/etc/kubernetes/manifests/{name}.yaml" for name in STATIC_PODS]
    result = boot_secure(
        debian.image(),
        moks=[debian.owner],
        user_data=user_data,
        meta_data_file=_ironic_meta_data(tmp_path),
        expect_files=[SENTINEL, KUBEADM_ARGS, KUBEADM_CONFIG, "/etc/kubernetes/kubelet.conf",
                      *manifests, *KUBELET_FILES, MODPROBE_RESOLVES],
        show_files=[*KUBELET_FILES, KUBEADM_ARGS],
        timeout=BOOT_TIMEOUT,
        report_timeout=BOOT_TIMEOUT,
        log_file=tmp_path / "console.log",
    )  # fmt: skip
    return InitBoot(want_labels, result)


def test_cluster_api_control_plane_init_starts_the_kubelet_with_kubeadms_configuration(
    init_boot: Future[InitBoot],
) -> None:
    """The first control-plane node: the Debian-driver leaf's node image boots with the
    user-data CABPK writes for a KubeadmControlPlane's first machine
    (:func:`nvkr.delivery.export.cabpk.init_user_data` of the Metal3 export's own
    KubeadmControlPlane: ``kubeadm init --config /run/kubeadm/kubeadm.yaml``), on a seed whose
    meta-data carries the host's ``uuid`` (:func:`_init_boot`). The stand-in kubeadm writes
    what ``kubeadm init`` writes for the kubelet (config.yaml with its staticPodPath,
    kubeadm-flags.env, kubelet.conf) and the control plane's static pod manifests, then
    restarts the kubelet, which systemd starts through the image's drop-in. (The join boot
    runs the NVIDIA leaf's image: both leaves' images are booted through the Cluster API
    contract, one per phase.)

    What this proves: the image's kubelet unit follows kubeadm's contract after an init: the
    kubelet loads the config.yaml kubeadm wrote (so it would run the static pods in
    /etc/kubernetes/manifests), gets kubeadm-flags.env's flags (the init configuration's CRI
    socket and node labels, ``metal3.io/uuid`` rendered from the meta-data) and the image's
    labels beside them. What only a real kubeadm and
    kubelet would show: that the control plane's static pods come up (images, certificates,
    etcd), the real kubelet's flag parsing (the stand-in merges --node-labels as kubelet's
    MapStringString does), and the exact config.yaml and flags a given kubeadm release writes.
    """
    from nvkr.delivery.export.cabpk import INIT_CONFIG_PATH
    from nvkr.machine.cloudinit import parse_report
    from tests.helpers.k8smirror import KUBEADM_ARGS, KUBEADM_CONFIG

    boot = init_boot.result()
    assert f"metal3.io/uuid={METAL3_UUID_VALUE}" in boot.want_labels.split(","), boot.want_labels
    result = boot.result
    assert all(c.ok for c in result.checks), result.checks
    parsed = parse_report(result.boot.lines)
    assert parsed["contents"][KUBEADM_ARGS] == f"init\n--config\n{INIT_CONFIG_PATH}\n".encode()
    assert parsed["files"][KUBEADM_CONFIG]["sha256"] == parsed["files"][INIT_CONFIG_PATH]["sha256"]
    _assert_kubelet_got(parsed["contents"], _rendered(boot.want_labels), phase="init")


def test_the_debian_driver_image_boots_and_its_kernel_resolves_the_module(
    init_boot: Future[InitBoot],
) -> None:
    """The Debian-driver image boots under Secure Boot (the init boot, :func:`_init_boot`) to
    the agent's readiness line with the modules installed, and its running kernel finds
    nvidia-current with its dependencies (``modprobe -n``) and links it: loading it by
    ``modprobe`` (the module probe's last try) fails only in the driver's probe, with "No such
    device" (there is no GPU in QEMU). What this cannot show: that the driver drives a GPU."""
    result = init_boot.result().result
    checks = {c.what: c for c in result.checks}
    assert checks[f"file {MODPROBE_RESOLVES}"].ok, checks[f"file {MODPROBE_RESOLVES}"]
    loaded = {c.what: c.detail for c in result.module_checks}
    name = f"module updates/dkms/{DEBIAN_MODULES[0]} signed by {OWNER_CN}"
    assert loaded[name] == "failed only for lack of its device (No such device)", loaded
    assert "nvkr-node-agent: ready" in result.boot.matched


def test_under_secure_boot_only_the_owners_signed_modules_load(
    init_boot: Future[InitBoot],
) -> None:
    """The init boot ran under enforcing Secure Boot (shim, the owner's signed UKI, the kernel
    locked down) and nvkr's module probe tried each DKMS module there (nvkr boot-test's
    --module-checks, :mod:`nvkr.machine.moduleprobe`), each after those it needs: v4l2loopback,
    signed with the owner's key, loads; nvidia-current fails only for lack of a GPU ("No such
    device"), once; nvidia-current-modeset, -drm and -uvm, which need it, are insmodded alone
    after it, their signatures accepted and their links to it unresolved ("Unknown symbol in
    module"); nvidia-peermem fails in its init, which needs the MLNX_OFED peer-memory API that
    Debian's kernel lacks (it says so in the kernel's log), after its signature was accepted;
    for each, a copy without its signature is refused (Debian enforces module signatures under
    Secure Boot: "Key was rejected by service", the kernel logging "Loading of unsigned module
    is rejected") and so is a copy with one byte changed. What this cannot show: the NVIDIA
    driver's probe of a GPU."""
    from nvkr.machine.moduleprobe import PREFIX

    result = init_boot.result().result
    sb = result.secure_boot
    assert sb["enforcing"] and [m["subject"] for m in sb["moks"]] == [f"CN={OWNER_CN}"], sb
    assert "[integrity]" in sb["modules"]["lockdown"], sb["modules"]
    checks = {c.what: c for c in result.module_checks}
    assert all(c.ok for c in checks.values()), result.module_checks
    rejected = "refused: Key was rejected by service"
    gpu = f"updates/dkms/{DEBIAN_MODULES[0]}"
    needs = {m["path"]: m["needs"] for m in sb["modules"]["modules"]}
    for name in (SMALL_MODULE, *DEBIAN_MODULES):
        path = f"updates/dkms/{name}"
        loaded = checks[f"module {path} signed by {OWNER_CN}"].detail
        if name == SMALL_MODULE:
            assert loaded == "loaded", loaded
        elif "peermem" in name:
            assert loaded.startswith("signature accepted, then it failed: Invalid argument "
                                     "(kernel: nvidia-peermem"), loaded  # fmt: skip
            assert "without IB peer memory symbols" in loaded, loaded
        elif path == gpu:
            assert loaded == "failed only for lack of its device (No such device)", (name, loaded)
        else:
            assert gpu in needs[path], (name, needs)
            assert loaded.startswith("signature accepted; it links against "), (name, loaded)
            assert f"{gpu}, which did not load (No such device)" in loaded, (name, loaded)
        unsigned = checks[f"module {path}: its unsigned copy"].detail
        assert unsigned == f"{rejected} (kernel: Loading of unsigned module is rejected)", (
            name, unsigned
        )  # fmt: skip
        changed = checks[f"module {path}: its copy with a byte changed"].detail
        assert changed.startswith(rejected), (name, changed)
    # the kernel's line for nvidia-current's one load (the probe's klog lines repeat it; a line
    # the serial console garbled would be missed, hence at most one)
    no_gpu = [line for line in result.boot.lines
              if "NVRM: No NVIDIA GPU found" in line and PREFIX not in line]  # fmt: skip
    assert len(no_gpu) <= 1, no_gpu
