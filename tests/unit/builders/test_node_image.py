"""The node-image builder's pieces that need no root filesystem: sizes, the builder's templates
(rendered, and named with file and line when broken), staged paths staying in the tree, and
the machine-image SBOM's Debian licence handling (mtime clamping: tests/unit/test_repro.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import jinja2
import pytest
import yaml

from nvkr.action import Action
from nvkr.builders.node_image import builder as node_image
from nvkr.builders.node_image import staging
from nvkr.builders.node_image.artifact import NodeImageArtifact
from nvkr.builders.node_image.staging import _inside, render_template
from nvkr.errors import BootTestError, BuildError, RecipeError
from nvkr.recipe.fieldchecks import size_bytes
from nvkr.recipe.matrix import Variant
from nvkr.sbom.debian import copyright_licenses, deb_purl, spdx_license

VALUES = {
    "arch": "amd64",
    "gpu": "hopper",
    "kubernetes": "1.36",
    "kubernetesVersion": "1.36.3",
    "nvidiaRuntime": True,
    "kubelet": {"maxPods": 110, "extraLabels": {"b": "2", "a": "1"}, "extraArgs": ["--v=2"]},
    "sandboxImage": "registry.k8s.io/pause:3.10",
    "present": {"agent": True, "kubelet": True, "containerd": True},
}


def test_size_bytes() -> None:
    assert size_bytes("4GiB") == 4 << 30
    assert size_bytes("2048MiB") == 2 << 30


def test_templates_render() -> None:
    env = staging._template_env()
    toml = render_template(env, "containerd-config.toml.j2", VALUES)
    assert 'default_runtime_name = "nvidia"' in toml
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in toml
    assert toml.count("SystemdCgroup = true") == 2
    plain = render_template(env, "containerd-config.toml.j2", {**VALUES, "nvidiaRuntime": False})
    assert "nvidia" not in plain.replace("NVIDIA", "")
    unit = render_template(env, "nvkr-node-agent.service.j2", VALUES)
    assert "Before=kubelet.service" in unit and "StandardOutput=journal+console" in unit
    config = render_template(env, "kubelet-config.yaml.j2", VALUES)
    assert "cgroupDriver: systemd" in config and "maxPods: 110" in config


#: kubeadm's kubelet drop-in, as its packages ship it (kubernetes/release,
#: cmd/krel/templates/latest/kubeadm/10-kubeadm.conf): the [Service] lines nvkr's must hold.
KUBEADM_CONTRACT = [
    'Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/'
    'bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"',
    'Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"',
    "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env",
    "EnvironmentFile=-/etc/default/kubelet",
    "ExecStart=",
    "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS "
    "$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS",
]


def _service_lines(unit: str) -> list[str]:
    section, lines = "", []
    for line in unit.splitlines():
        if line.startswith("["):
            section = line
        elif section == "[Service]" and line and not line.startswith("#"):
            lines.append(line)
    return lines


def _env_file(path: Path) -> dict[str, str]:
    """A systemd EnvironmentFile's assignments (one quoting level removed), missing file: none."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip('"')
    return out


def _kubelet_argv(service: list[str], root: Path) -> list[str]:
    """What systemd would run: the drop-in's Environment= and EnvironmentFile= (later ones
    winning, ``root`` standing for /), ExecStartPre run first, $VAR split on white space."""
    env: dict[str, str] = {}
    for line in service:
        key, value = line.split("=", 1)
        if key == "ExecStartPre":
            argv = [str(root) + a if a.startswith("/") else a for a in value.split()]
            subprocess.run(argv, check=True)
    for line in service:
        key, value = line.split("=", 1)
        if key == "Environment":
            name, val = value.strip('"').split("=", 1)
            env[name] = val
        elif key == "EnvironmentFile":
            env.update(_env_file(root / value.lstrip("-").lstrip("/")))
    exec_start = [line.split("=", 1)[1] for line in service if line.startswith("ExecStart=")]
    argv = []
    for word in exec_start[-1].split():
        argv += env.get(word[1:], "").split() if word.startswith("$") else [word]
    return argv


def _merged_labels(argv: list[str]) -> dict[str, str]:
    """kubelet's --node-labels (a MapStringString): every occurrence adds, later keys win."""
    labels: dict[str, str] = {}
    for arg in argv:
        if arg.startswith("--node-labels="):
            for item in filter(None, arg.split("=", 1)[1].split(",")):
                key, value = item.split("=", 1)
                labels[key] = value
    return labels


def test_the_kubelet_drop_in_follows_kubeadms_contract(tmp_path: Path) -> None:
    """The staged drop-in holds kubeadm's own lines in kubeadm's order; the image's default
    /var/lib/kubelet/config.yaml has a staticPodPath; run as systemd would, kubelet gets
    kubeadm's config and flags, the node agent's labels, the recipe's labels and arguments, and
    a user's /etc/default/kubelet has the last word."""
    env = staging._template_env()
    units = {dest: template for template, dest, _ in staging._units(VALUES["present"])}
    assert units["etc/systemd/system/kubelet.service.d/20-nvkr.conf"] == "20-nvkr-kubelet.conf.j2"
    assert units["var/lib/kubelet/config.yaml"] == "kubelet-config.yaml.j2"
    assert "etc/kubernetes/kubelet-config.yaml" not in units
    config = yaml.safe_load(render_template(env, "kubelet-config.yaml.j2", VALUES))
    assert config["staticPodPath"] == "/etc/kubernetes/manifests"
    assert config["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"

    service = _service_lines(render_template(env, "20-nvkr-kubelet.conf.j2", VALUES))
    kubeadms = [line for line in service if line in KUBEADM_CONTRACT]
    assert kubeadms == KUBEADM_CONTRACT, "kubeadm's lines, in kubeadm's order"
    assert service[-2:] == KUBEADM_CONTRACT[-2:], "ExecStart is kubeadm's"
    files = [line for line in service if line.startswith("EnvironmentFile=")]
    assert files[0].endswith("kubeadm-flags.env") and files[-1].endswith("/etc/default/kubelet")

    # the machine: the agent's label file, kubeadm's files, the script the drop-in runs
    root = tmp_path / "root"
    script = root / "usr/lib/nvkr/kubelet-extra-args"
    script.parent.mkdir(parents=True)
    script.write_text(render_template(env, "kubelet-extra-args.j2", VALUES))
    script.chmod(0o755)
    (root / "etc/nvkr").mkdir(parents=True)
    (root / "etc/nvkr/node-labels.env").write_text(
        "NVKR_NODE_LABELS=nvidia.com/gpu.count=0,nvidia.com/gpu.present=false\n"
    )
    (root / "var/lib/kubelet").mkdir(parents=True)
    (root / "var/lib/kubelet/kubeadm-flags.env").write_text(
        'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/'
        'containerd.sock --node-labels=nvkr.dev/node-pool=hopper-amd64,a=0"\n'
    )
    argv = _kubelet_argv(service, root)
    assert argv == [
        "/usr/bin/kubelet",
        "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
        "--kubeconfig=/etc/kubernetes/kubelet.conf",
        "--config=/var/lib/kubelet/config.yaml",
        "--container-runtime-endpoint=unix:///run/containerd/containerd.sock",
        "--node-labels=nvkr.dev/node-pool=hopper-amd64,a=0",
        "--node-labels=nvidia.com/gpu.count=0,nvidia.com/gpu.present=false,a=1,b=2",
        "--v=2",
    ]
    assert _merged_labels(argv) == {
        "nvkr.dev/node-pool": "hopper-amd64",
        "nvidia.com/gpu.count": "0",
        "nvidia.com/gpu.present": "false",
        "a": "1",
        "b": "2",
    }
    # without the agent's file: the recipe's labels alone; a user's KUBELET_EXTRA_ARGS wins
    (root / "etc/nvkr/node-labels.env").unlink()
    assert _kubelet_argv(service, root)[-2:] == ["--node-labels=a=1,b=2", "--v=2"]
    (root / "etc/default").mkdir(parents=True)
    (root / "etc/default/kubelet").write_text("KUBELET_EXTRA_ARGS=--v=4\n")
    assert _kubelet_argv(service, root)[-1:] == ["--v=4"]
    bare = {**VALUES, "kubelet": {"maxPods": 110, "extraLabels": {}, "extraArgs": []}}
    script.write_text(render_template(env, "kubelet-extra-args.j2", bare))
    subprocess.run([str(script), "/nonexistent", str(tmp_path / "out.env")], check=True)
    assert (tmp_path / "out.env").read_text() == "KUBELET_EXTRA_ARGS=\n"


def test_broken_template_names_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assets = tmp_path / "node-image"
    shutil.copytree(staging.ASSETS, assets)
    (assets / "kubelet-config.yaml.j2").write_text("a: 1\nb: {{ kubelet.nosuchfield }}\n")
    (assets / "kubelet.service.j2").write_text("ok\n{% if %}\n")
    monkeypatch.setattr(staging, "ASSETS", assets)
    env = staging._template_env()
    with pytest.raises(BuildError) as err:
        render_template(env, "kubelet-config.yaml.j2", VALUES)
    assert f"{assets}/kubelet-config.yaml.j2:2: template error" in err.value.message
    assert "nosuchfield" in err.value.message
    with pytest.raises(BuildError, match=r"kubelet.service.j2:2: template syntax error"):
        render_template(env, "kubelet.service.j2", VALUES)
    assert isinstance(env, jinja2.sandbox.SandboxedEnvironment)


def test_staged_paths_stay_in_the_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "usr" / "lib").mkdir(parents=True)
    os.symlink("usr/lib", tree / "lib")  # merged-/usr style relative link
    os.symlink("/usr/lib", tree / "lib64")  # an absolute link resolves inside the tree
    assert _inside(tree, "lib/x.conf") == tree / "usr/lib/x.conf"
    assert _inside(tree, "lib64/y.conf") == tree / "usr/lib/y.conf"
    with pytest.raises(BuildError, match="leaves the root filesystem"):
        _inside(tree, "etc/../../outside")
    os.symlink("../../..", tree / "usr" / "up")
    with pytest.raises(BuildError, match="leads out of the root filesystem"):
        _inside(tree, "usr/up/etc/passwd")


COPYRIGHT = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: containerd

Files: *
Copyright: 2015 Docker
License: Apache-2.0

Files: vendor/golang.org/*
License: Go
 Redistribution and use in source and binary forms ...

Files: docs/*
License: GPL-2+ or LGPL-2.1+
"""


def test_copyright_licenses_and_spdx_mapping() -> None:
    names = copyright_licenses(COPYRIGHT)
    assert names == ["Apache-2.0", "GPL-2+", "Go", "LGPL-2.1+"]
    assert spdx_license(names) == (
        "Apache-2.0 AND BSD-3-Clause AND GPL-2.0-or-later AND LGPL-2.1-or-later"
    )
    assert spdx_license(["Apache-2.0", "Some-Vendor-License"]) is None
    assert spdx_license([]) is None
    assert copyright_licenses("not a DEP-5 file\nLicense: MIT\n") == []


def test_deb_purl() -> None:
    assert deb_purl("bsdutils", "1:2.38.1-5+deb12u3", "amd64") == (
        "pkg:deb/debian/bsdutils@1%3A2.38.1-5%2Bdeb12u3?arch=amd64"
    )


def test_staged_directories_are_0755_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o002)
    try:
        staging._mkdirs(tmp_path / "etc" / "kubernetes" / "kubelet.service.d")
    finally:
        os.umask(old)
    for d in ("etc", "etc/kubernetes", "etc/kubernetes/kubelet.service.d"):
        assert (tmp_path / d).stat().st_mode & 0o777 == 0o755, d


def test_kubelet_settings_without_a_kubelet_are_refused(tmp_path: Path) -> None:
    """The default recipe stages kubectl only: kubelet settings on its node image would be
    dropped silently, so planning refuses them, naming the artifact."""
    from tests.helpers.nvkr import make_clone, run_nvkr

    clone = make_clone(tmp_path / "clone")
    recipe = clone / "recipes" / "default.yaml"
    text = recipe.read_text()
    assert "    size: 4GiB\n" in text
    recipe.write_text(
        text.replace("    size: 4GiB\n", "    size: 4GiB\n    kubelet: {maxPods: 50}\n")
    )
    res = run_nvkr("plan", "--offline", cwd=clone, store=tmp_path / "store")
    assert res.code == 2, res.stderr
    assert (
        f"recipes/default.yaml:{_node_image_line(text)}: artifacts.node-image.kubelet: kubelet settings are given but "
        "the image stages no kubelet"
    ) in res.stderr


def _node_image_line(recipe_text: str) -> int:
    """The line of the field these tests insert after the default recipe's node image's
    ``size`` (the error names it)."""
    return recipe_text.splitlines().index("    size: 4GiB") + 2


def test_every_staging_template_is_known_and_renders() -> None:
    """Each staging template in builders/node-image/ (the disk's own, grub.cfg and fstab, are
    rendered by nvkr.disk) is in TEMPLATES, which the builder renders on every build."""
    env = staging._template_env()
    disk_templates = {"grub.cfg.j2", "fstab.j2"}
    on_disk = {p.name for p in staging.ASSETS.glob("*.j2")} - disk_templates
    assert on_disk == set(staging.TEMPLATES)
    for name in staging.TEMPLATES:
        render_template(env, name, VALUES)


def test_the_builders_boot_test_falls_back_to_tcg_and_keeps_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bootTest: true`` boots through nvkr.machine.boot like ``nvkr boot-test``: a KVM guest silent
    after GRUB is booted again under TCG, the build log says so and names the console log kept
    under the store, the action's progress says booting, the stall and its retry, ready; under
    ``NVKR_BOOT_ACCEL=kvm`` the stall fails, naming that log."""
    from nvkr.machine import boot, qemu
    from tests.helpers.fake_qemu import STALL, accels, fake_qemu, new_kvm_host

    grub = [("say", "nvkr: loading /boot/vmlinuz-6.1.0-test-amd64\r\n")]
    fake = fake_qemu(tmp_path / "q", {"kvm": grub, "tcg": [*grub, ("say", "node login: ")]})
    monkeypatch.setitem(qemu.QEMU, "amd64", (str(fake), "qemu-system-x86"))
    monkeypatch.setattr(boot, "kvm_works", lambda arch="amd64": True)
    monkeypatch.setattr(boot, "KVM_STALL_SECONDS", STALL)
    new_kvm_host(monkeypatch, tmp_path)
    monkeypatch.delenv(boot.ACCEL_ENV, raising=False)
    image = tmp_path / "disk.qcow2"
    image.write_bytes(b"QFI\xfb" + bytes(508))
    build_log, store = tmp_path / "build.log", tmp_path / "store"

    reports: list[tuple[float, float | None, str, str]] = []
    booted = node_image.boot_check(
        image, arch="amd64", agent=False, build_log=build_log, store_root=store, name="ni",
        progress=lambda *report: reports.append(report),
    )  # fmt: skip
    assert booted.accel == "tcg" and booted.matched == "node login:"
    assert reports == [
        (1, 2, "steps", "boot test: booting under kvm"),
        (1, 2, "steps", "boot test: KVM made no progress; booting again under tcg"),
        (1, 2, "steps", "boot test: booting under tcg"),
        (2, 2, "steps", "boot test: ready under tcg"),
    ]
    assert accels(fake) == ["kvm", "tcg"]
    (console,) = (store / "logs" / "boot-test").iterdir()
    text = build_log.read_text()
    assert (
        f"boot test: booting {image} (amd64) under kvm, timeout 300 s, console log {console}"
        in text
    )
    assert "boot test: warning: " in text and "booting it again under tcg" in text
    assert "console: nvkr: loading /boot/vmlinuz" in console.read_text()

    monkeypatch.setenv(boot.ACCEL_ENV, "kvm")
    with pytest.raises(BootTestError, match=r"\(bios, kvm\) made no progress") as e:
        node_image.boot_check(
            image, arch="amd64", agent=False, build_log=build_log, store_root=store, name="ni"
        )
    (second,) = set((store / "logs" / "boot-test").iterdir()) - {console}
    assert f"full console in {second}" in (e.value.hint or "")
    assert accels(fake) == ["kvm", "tcg", "kvm"]


class _Refs:
    """PlanRefs holding one rootfs action."""

    def __init__(self, arch: str) -> None:
        self.rootfs = Action(
            key="sha256:" + "1" * 64,
            builder="rootfs",
            builder_version="1",
            name="rootfs",
            params={"arch": arch, "include": []},
            inputs={},
            tools={},
            epoch=0,
        )

    def artifact(self, name: str) -> Action:
        assert name == "rootfs"
        return self.rootfs

    def source(self, name: str) -> Any:  # pragma: no cover - the artifact names no source
        raise AssertionError(name)

    def image_index(self, name: str) -> Any:  # pragma: no cover
        raise AssertionError(name)


def _variant(arch: str) -> Variant:
    return cast(Variant, SimpleNamespace(gpu="hopper", kubernetes="1.36", arch=arch))


def _node_image(**fields: Any) -> NodeImageArtifact:
    return NodeImageArtifact.model_validate(
        {"builder": "node-image", "rootfs": "rootfs", "kubernetesVersion": "1.36.3", **fields}
    )


def test_diskimage_builder_images_are_not_hermetic() -> None:
    """diskimage-builder stamps times and random ids, and its version is in no key: its image
    may not be shared under the key; the native backend's may."""
    builder = node_image.NodeImageBuilder()
    native = builder.plan("img", _node_image(), _variant("amd64"), _Refs("amd64"))
    dib = builder.plan(
        "img", _node_image(backend="diskimage-builder"), _variant("amd64"), _Refs("amd64")
    )
    assert native.hermetic is True
    assert dib.hermetic is False


def test_the_rootfs_must_be_for_the_variants_arch() -> None:
    with pytest.raises(RecipeError) as err:
        node_image.NodeImageBuilder().plan("img", _node_image(), _variant("arm64"), _Refs("amd64"))
    assert "rootfs 'rootfs' is built from an apt source for amd64, the variant is arm64" in str(
        err.value
    )


def test_compression_enters_the_key_only_when_the_image_is_compressed() -> None:
    """No ``compression`` (or ``none``): the params and tools every image had before the field,
    so the default recipe's action keys stay; zlib or zstd: the value and the version of the
    library qemu-img compresses with (its output is the compressed clusters)."""
    from nvkr.action import action_key
    from nvkr.hosttools import package_version

    builder = node_image.NodeImageBuilder()

    def plan(**fields: Any) -> Any:
        return builder.plan("img", _node_image(**fields), _variant("amd64"), _Refs("amd64"))

    absent, none, zlib, zstd = (
        plan(),
        plan(compression="none"),
        plan(compression="zlib"),
        plan(compression="zstd"),
    )
    assert "compression" not in absent.params and none.params == absent.params
    assert none.tools == absent.tools
    assert not {"zlib1g", "libzstd1"} & set(absent.tools)
    assert zlib.params == {**absent.params, "compression": "zlib"}
    assert zlib.tools == {**absent.tools, "zlib1g": package_version("zlib1g", purpose="t")}
    assert zstd.tools == {**absent.tools, "libzstd1": package_version("libzstd1", purpose="t")}

    def key(spec: Any) -> str:
        return action_key(
            builder="node-image", version=builder.version, params=spec.params,
            inputs=spec.inputs, tools=spec.tools, epoch=0,
        )  # fmt: skip

    assert len({key(absent), key(zlib), key(zstd)}) == 3 and key(none) == key(absent)


def test_compression_with_diskimage_builder_is_refused_naming_the_field() -> None:
    variant = cast(
        Variant,
        SimpleNamespace(
            gpu="hopper", kubernetes="1.36", arch="amd64",
            recipe=SimpleNamespace(artifacts={}, sources={}),
        ),
    )  # fmt: skip
    builder = node_image.NodeImageBuilder()
    art = _node_image(backend="diskimage-builder", compression="zlib")
    ((path, message, hint),) = builder.check("img", art, variant)
    assert path == ("artifacts", "img", "compression")
    assert "compression 'zlib' needs the native backend" in message and hint
    assert builder.check("img", _node_image(compression="zstd"), variant) == []


def test_an_unknown_compression_is_a_recipe_error_naming_the_field(tmp_path: Path) -> None:
    from tests.helpers.nvkr import make_clone, run_nvkr

    clone = make_clone(tmp_path / "clone")
    recipe = clone / "recipes" / "default.yaml"
    text = recipe.read_text()
    assert "    size: 4GiB\n" in text
    recipe.write_text(text.replace("    size: 4GiB\n", "    size: 4GiB\n    compression: gzip\n"))
    res = run_nvkr("plan", "--offline", cwd=clone, store=tmp_path / "store")
    assert res.code == 2, res.stderr
    assert (
        f"recipes/default.yaml:{_node_image_line(text)}: artifacts.node-image.compression: expected 'none', 'zlib' or "
        "'zstd' (got 'gzip')"
    ) in res.stderr
    assert "Traceback" not in res.stderr


def test_the_compression_record_names_every_option() -> None:
    from nvkr.disk import DiskResult

    result = DiskResult(
        qcow2=Path("/x.qcow2"), raw_size=4 << 30, qcow2_size=1 << 28, fs_uuid="u",
        root_partuuid="p", root_partition=2, phases={}, compression="zstd",
        compressed_clusters=10088, raw_digest="sha256:" + "c" * 64,
    )  # fmt: skip
    tools = {"qemu-utils": "1:7.2+dfsg-7+deb12u18+b3", "libzstd1": "1.5.4+dfsg2-5"}
    assert node_image._compression_record(tools, result) == {
        "compression": "zstd",
        "level": "ZSTD_CLEVEL_DEFAULT",
        "coroutines": 1,
        "qemuImg": "1:7.2+dfsg-7+deb12u18+b3",
        "library": {"libzstd1": "1.5.4+dfsg2-5"},
        "compressedClusters": 10088,
        "rawDigest": "sha256:" + "c" * 64,
        "rawSize": 4 << 30,
        "options": "compat=1.1,cluster_size=65536,refcount_bits=16,lazy_refcounts=off,"
        "extended_l2=off,preallocation=off,compression_type=zstd",
    }


def test_an_uncompressed_image_records_qemu_img_its_options_and_the_raw_disk() -> None:
    """As a compressed image's record does (its provenance's diskImage): what made the QCOW2
    and which raw disk it holds."""
    from nvkr.disk import DiskResult

    result = DiskResult(
        qcow2=Path("/x.qcow2"), raw_size=4 << 30, qcow2_size=1 << 30, fs_uuid="u",
        root_partuuid="p", root_partition=2, phases={}, compression="none",
        compressed_clusters=0, raw_digest="sha256:" + "d" * 64,
    )  # fmt: skip
    tools = {"qemu-utils": "1:7.2+dfsg-7+deb12u18+b3"}
    assert node_image._compression_record(tools, result) == {
        "compression": "none",
        "qemuImg": "1:7.2+dfsg-7+deb12u18+b3",
        "options": "compat=1.1,cluster_size=65536,refcount_bits=16,lazy_refcounts=off,"
        "extended_l2=off,preallocation=off,compression_type=zlib",
        "rawDigest": "sha256:" + "d" * 64,
        "rawSize": 4 << 30,
    }


def test_a_compressed_image_holds_the_raw_disk_of_the_uncompressed_one() -> None:
    """The disk's UUIDs and GUIDs derive from the key of the image without compression, so the
    raw disk is the same whatever the container (only the QCOW2 around it differs)."""
    from nvkr.action import action_key

    builder = node_image.NodeImageBuilder()

    def action(**fields: Any) -> Action:
        spec = builder.plan("img", _node_image(**fields), _variant("amd64"), _Refs("amd64"))
        key = action_key("node-image", builder.version, spec.params, spec.inputs, spec.tools, 0,
                         spec.deps)  # fmt: skip
        return Action(key=key, builder="node-image", builder_version=builder.version, name="img",
                      params=spec.params, inputs=spec.inputs, tools=spec.tools, epoch=0,
                      deps=spec.deps)  # fmt: skip

    plain, zlib, zstd = action(), action(compression="zlib"), action(compression="zstd")
    assert len({plain.key, zlib.key, zstd.key}) == 3
    assert node_image.disk_seed(plain) == plain.key.split(":", 1)[1]
    assert node_image.disk_seed(zlib) == node_image.disk_seed(zstd) == node_image.disk_seed(plain)


def test_nothing_of_a_first_run_stays_in_the_image(tmp_path: Path) -> None:
    """Every node made from an image starts its own first boot: machine-id(5)'s first-boot
    marker (an empty file would be no first boot), no cloud-init instance state, no SSH host
    keys, and systemd-firstboot (which would prompt on the console) masked."""
    tree = tmp_path / "tree"
    (tree / "usr" / "lib" / "systemd" / "system").mkdir(parents=True)
    os.symlink("usr/lib", tree / "lib")
    (tree / "usr/lib/systemd/system/systemd-firstboot.service").write_text("[Unit]\n")
    (tree / "etc" / "ssh").mkdir(parents=True)
    (tree / "etc/machine-id").write_text("")
    (tree / "etc/ssh/ssh_host_ed25519_key").write_text("secret")
    (tree / "etc/ssh/ssh_host_ed25519_key.pub").write_text("public")
    (tree / "etc/ssh/sshd_config").write_text("kept")
    (tree / "var/lib/cloud/instances/i-1").mkdir(parents=True)
    os.symlink("instances/i-1", tree / "var/lib/cloud/instance")
    (tree / "var/lib/cloud/data").mkdir()
    (tree / "var/lib/dbus").mkdir(parents=True)
    (tree / "var/lib/dbus/machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    staging.clear_first_run(tree)
    assert (tree / "etc/machine-id").read_bytes() == b"uninitialized\n"
    assert sorted(p.name for p in (tree / "etc/ssh").iterdir()) == ["sshd_config"]
    assert list((tree / "var/lib/cloud").iterdir()) == []
    assert not (tree / "var/lib/dbus/machine-id").exists()
    mask = tree / "etc/systemd/system/systemd-firstboot.service"
    assert os.readlink(mask) == "/dev/null"


def test_the_cloud_init_configuration_names_the_datasources_on_one_line() -> None:
    """ds-identify reads datasource_list only as a one-line list; cloud-init reads YAML."""
    import yaml

    text = (staging.ASSETS / "cloud-init-nvkr.cfg").read_text()
    lines = [line for line in text.splitlines() if line.startswith("datasource_list:")]
    assert lines == ["datasource_list: [ NoCloud, ConfigDrive, None ]"]
    assert yaml.safe_load(text)["datasource_list"] == ["NoCloud", "ConfigDrive", "None"]


def test_the_image_ships_its_kubelet_settings_as_a_kubeadm_patch() -> None:
    """kubeadm init and join replace /var/lib/kubelet/config.yaml: the image's kubelet settings
    (the recipe's maxPods, serverTLSBootstrap, the containerd socket) are also staged as the
    strategic-merge patch kubeadm applies from the export's ``patches.directory``, rendered
    from the same values as the image's default config.yaml."""
    from nvkr.delivery.export.capi.kubeadm import KUBEADM_PATCHES

    units = {dest: template for template, dest, _ in staging._units(VALUES["present"])}
    patch_path = "etc/nvkr/kubeadm-patches/kubeletconfiguration+strategic.yaml"
    assert units[patch_path] == "kubeadm-kubelet-patch.yaml.j2"
    assert "/" + staging.KUBEADM_PATCHES_DIR == KUBEADM_PATCHES, "the export names the image's"
    env = staging._template_env()
    values = {**VALUES, "kubelet": {**VALUES["kubelet"], "maxPods": 250}}
    patch = yaml.safe_load(render_template(env, "kubeadm-kubelet-patch.yaml.j2", values))
    config = yaml.safe_load(render_template(env, "kubelet-config.yaml.j2", values))
    assert patch == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "maxPods": 250,
        "serverTLSBootstrap": True,
    }
    assert {k: config[k] for k in patch} == patch, "the default config.yaml holds the same"
    # not staged without a kubelet
    bare = {**VALUES["present"], "kubelet": False}
    assert patch_path not in {dest for _, dest, _ in staging._units(bare)}
