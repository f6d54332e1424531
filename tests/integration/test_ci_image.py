"""nvkr's own CI image (ci/image/nvkr-ci.yaml): built daemonlessly from a root filesystem of
locked Debian packages, nvkr's pinned wheels and the tree itself, byte-identical from two clones;
and it works: nvkr runs in it, finds its builder assets, has the tools the recipe pins.

Cost: the amd64 variant only (the arm64 tree is ~5 minutes of qemu-user on top). The second
clone, a checkout without compiled modules, builds with a store holding every action record of
the first: it must run no builder at all, which holds only if every action key is the same from
both checkouts (the path sources' digests leave ``__pycache__`` out), and it writes the same
release set. The builders' reproducibility across machines is tested where they run twice: the
default build's twin and ``verify --rebuild`` (the root filesystem, a container image on it),
the catalog leaf's second clone (the ovnkube image on a root filesystem).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml
import zstandard

from tests.helpers import REPO
from tests.helpers.background import BackgroundTest
from tests.helpers.nvkr import run_nvkr

pytestmark = pytest.mark.slow

RECIPE = "ci/image/nvkr-ci.yaml"


def _checkout(dest: Path, pycache: bool) -> Path:
    """What a clone holds of the image's sources; ``pycache``: as a checkout where Python ran
    (install.sh compiles nvkr/), with ``__pycache__`` directories in the tree."""
    ignore = None if pycache else shutil.ignore_patterns("__pycache__", "*.pyc")
    for part in ("nvkr", "builders", "ci/image"):
        shutil.copytree(REPO / part, dest / part, ignore=ignore, symlinks=True)
    if pycache:
        assert any((dest / "nvkr").rglob("*.pyc")), "the first clone has compiled modules"
    return dest


def _blobs(layout: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (layout / "blobs" / "sha256").iterdir()}


def _image_layers(layout: Path) -> tuple[dict, list[Path]]:
    """The amd64 image's config and its layer files, from the release set's metadata."""
    from nvkr.releaseset import read_metadata

    (image,) = {a["index"]["digest"]: a for a in read_metadata(layout)["artifacts"]}.values()
    blobs = layout / "blobs" / "sha256"
    index = json.loads((blobs / image["index"]["digest"][7:]).read_bytes())
    (entry,) = index["manifests"]
    assert entry["platform"]["architecture"] == "amd64"
    manifest = json.loads((blobs / entry["digest"][7:]).read_bytes())
    config = json.loads((blobs / manifest["config"]["digest"][7:]).read_bytes())
    return config, [blobs / layer["digest"][7:] for layer in manifest["layers"]]


def _ci_image(tmp_path: Path) -> None:
    """The test's body, run in the background (:func:`start_in_background`)."""
    first = _checkout(tmp_path / "a", pycache=True)
    second = _checkout(tmp_path / "b", pycache=False)
    store_a, store_b = tmp_path / "store-a", tmp_path / "store-b"
    args = ("build", RECIPE, "--locked", "--variant", "arch=amd64", "--json")
    built = run_nvkr(*args, cwd=first, store=store_a)
    assert built.code == 0, built.stderr
    result = built.json_events()[-1]
    # the second store: every blob and action record of the first
    (store_b / "blobs" / "sha256").mkdir(parents=True)
    (store_b / "actions").mkdir()
    for blob in (store_a / "blobs" / "sha256").iterdir():
        os.link(blob, store_b / "blobs" / "sha256" / blob.name)
    for record in (store_a / "actions").iterdir():
        shutil.copyfile(record, store_b / "actions" / record.name)
    again = run_nvkr(*args, cwd=second, store=store_b, umask=0o002, env={"TZ": "Asia/Kolkata"})
    assert again.code == 0, again.stderr
    rebuilt = again.json_events()[-1]
    ran = [e["name"] for e in again.json_events() if e["event"] in ("action-start", "action-done")]
    assert ran == [], f"the second checkout's action keys differ from the first's: {ran}"
    assert rebuilt["releaseSets"][0]["digest"] == result["releaseSets"][0]["digest"]
    a, b = first / "dist" / "nvkr-ci", second / "dist" / "nvkr-ci"
    assert (a / "index.json").read_bytes() == (b / "index.json").read_bytes()
    assert _blobs(a) == _blobs(b)

    config, layers = _image_layers(a)
    assert config["config"]["Env"] == [
        "LANG=C.UTF-8",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ]
    assert len(layers) == 2, "the root filesystem, then nvkr and its wheels"
    skopeo = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci:{a}:nvkr-ci"], capture_output=True, text=True
    )
    assert skopeo.returncode == 0, skopeo.stderr
    root = tmp_path / "image-root"
    root.mkdir()
    for layer in layers:
        with zstandard.open(layer, "rb") as f, tarfile.open(fileobj=f, mode="r|") as tar:
            tar.extractall(root, filter="tar")

    assert not list((root / "opt" / "nvkr").rglob("__pycache__")), "no compiled module came in"

    def inside(*argv: str) -> str:
        proc = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True)
        assert proc.returncode == 0, f"{argv}: {proc.stderr}"
        return proc.stdout

    assert inside("nvkr", "--version").strip() == "nvkr, version 0.1.0"
    # the builders' assets, found where asset_dir looks (the checkout or the installed wheel)
    probe = (
        "from nvkr.builders.assets import asset_dir\n"
        "assert asset_dir('rootfs').is_dir() and asset_dir('node-image').is_dir()\n"
        "assert (asset_dir('rootfs') / 'defer-initramfs.essential-hook').is_file()\n"
        "import cryptography.hazmat.primitives.asymmetric.ed25519, pydantic_core, yaml, zstandard\n"
        "import helm_python, debian.deb822, docker, ruamel.yaml, rich, jinja2, semver\n"
        "from nvkr.hosttools import package_version as v\n"
        "print(v('mmdebstrap', purpose='t'), v('qemu-user', purpose='t'), "
        "v('qemu-utils', purpose='t'), v('e2fsprogs', purpose='t'))\n"
    )
    pins = yaml.safe_load((REPO / RECIPE).read_text())["sources"]["ci-packages"]["packages"]
    assert inside("python3", "-c", probe).split() == [
        pins[p] for p in ("mmdebstrap", "qemu-user", "qemu-utils", "e2fsprogs")
    ]
    assert pins["python3"].startswith("3.13.")  # the wheels' CPython (python: "3.13")
    # a job registers qemu-user from the image's binfmt.d lines (nvkr/ci/script.py): Debian 13's
    # qemu-user-binfmt has no binfmt-support entries, so update-binfmts cannot
    line = (root / "usr/lib/binfmt.d/qemu-aarch64.conf").read_text()  # a relative link
    assert line.startswith(":qemu-aarch64:M::") and line.rstrip().endswith(":OPF"), line
    _job_registers_binfmt(root)
    for tool in ("mmdebstrap", "arch-test", "mkfs.ext4", "sfdisk", "qemu-img", "git", "skopeo"):
        inside("sh", "-c", f"command -v {tool}")


def _job_registers_binfmt(root: Path) -> None:
    """A pipeline job's binfmt lines, run in the image, register qemu-aarch64 from the image's
    own files: here in a binfmt_misc instance of a user namespace of its own (Linux 6.7 and
    later), so the host's registrations are neither used nor touched."""
    from nvkr.ci.script import binfmt_lines

    release = tuple(int(p) for p in os.uname().release.split(".")[:2])
    if release < (6, 7):
        pytest.skip(f"kernel {os.uname().release}: binfmt_misc has no user-namespace instances")
    script = "\n".join([*binfmt_lines(), "cat /proc/sys/fs/binfmt_misc/qemu-aarch64"])
    proc = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "sh", "-c",
         'mount -t proc proc "$0/proc" && exec chroot "$0" sh -c "$1"', str(root), script],
        capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("enabled\n"), proc.stdout
    assert "interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P" in proc.stdout, proc.stdout
    # F: the interpreter is opened now, so it serves chroots and containers without it
    (flags,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("flags: ")]
    assert "F" in flags.removeprefix("flags: "), proc.stdout


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """The test's body, from the session's first test on, beside the other tests (five minutes of
    builds that need nothing of the default build: tests/helpers/background.py)."""
    return BackgroundTest.start(request, "ci-image", _ci_image, nice=5)


def test_the_ci_image_is_the_same_from_two_clones_and_runs_nvkr(
    _started_in_background: dict[str, BackgroundTest],
) -> None:
    _started_in_background[__name__].check()
