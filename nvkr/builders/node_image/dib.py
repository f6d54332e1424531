"""``backend: diskimage-builder`` for the node-image builder.

The tree nvkr staged (rootfs + agent + configuration) is packed into a tar that the
``nvkr-rootfs`` root element (``builders/node-image/dib-elements/``) unpacks as the image's
root; diskimage-builder's ``vm`` and ``block-device-gpt`` elements then partition the disk and
install the bootloader, and ``-t qcow2`` writes the QCOW2. Used only when a recipe asks for it
and ``disk-image-create`` is installed (``pip install diskimage-builder``, plus the Debian
packages ``debootstrap kpartx sudo qemu-utils``). diskimage-builder partitions through loop
devices and device-mapper (``kpartx``); where the machine has no device-mapper it cannot run,
and the build fails saying so. Its images are not bit-reproducible (it stamps times and random
ids); the native backend is the default for that reason.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from nvkr.builders.api import ActionContext
from nvkr.builders.assets import asset_dir
from nvkr.errors import DiskError, ToolError
from nvkr.run import FIXED_PATH, pinned_env, run, tail

ELEMENTS = asset_dir("node-image") / "dib-elements"
_NO_DEVICE_MAPPER = re.compile(
    r"kpartx|device-mapper|/dev/mapper|losetup|failed to setup loop device|No such device",
    re.I,
)


def find_disk_image_create() -> Path | None:
    """``disk-image-create`` on the PATH or beside this Python (a venv's ``bin``), else None."""
    found = shutil.which("disk-image-create") or shutil.which(
        "disk-image-create", path=str(Path(sys.executable).parent)
    )
    return Path(found) if found else None


def build(ctx: ActionContext, tree: Path, out: Path, *, arch: str, size_bytes: int) -> None:
    """Make ``out`` (QCOW2) from ``tree`` with diskimage-builder.

    Raises:
        ToolError: ``disk-image-create`` is not installed, or failed for another reason (the
            tail of its log).
        DiskError: it could not partition the disk (no device-mapper / loop partitions here).
    """
    exe = find_disk_image_create()
    if exe is None:
        raise ToolError(
            "backend diskimage-builder: disk-image-create is not installed",
            hint="pip install diskimage-builder and apt-get install debootstrap kpartx sudo "
            "qemu-utils, or use the default backend: native",
        )
    staged = ctx.workdir / "dib-rootfs.tar"
    run(
        [
            "tar",
            "--xattrs",
            "--xattrs-include=*",
            "--numeric-owner",
            "-cpf",
            staged,
            "-C",
            tree,
            ".",
        ],
        log_file=ctx.log_file,
    )
    env = pinned_env(
        {
            "PATH": f"{exe.parent}:{FIXED_PATH}",
            "ELEMENTS_PATH": str(ELEMENTS),
            "NVKR_ROOTFS_TAR": str(staged),
            "DIB_BLOCK_DEVICE": "gpt",
            "TMPDIR": str(ctx.workdir),
            "SOURCE_DATE_EPOCH": str(ctx.action.epoch),
        },
        home=ctx.workdir,
    )
    base = ctx.workdir / "dib-out"
    argv: list[str | os.PathLike[str]] = [
        exe,
        "-a",
        arch,
        "-t",
        "qcow2",
        "--image-size",
        f"{size_bytes // (1 << 20)}M",
        "-o",
        base,
        "nvkr-rootfs",
        "vm",
        "block-device-gpt",
    ]
    # disk-image-create mounts the image and binds /dev, /proc and /sys into it: in namespaces
    # of its own (nvkr.run.isolated). Its loop devices are not namespaced; what a killed build
    # left attached is detached by the next build's clean-up (nvkr.scratch).
    proc = run(argv, env=env, log_file=ctx.log_file, check=False, isolate=True)
    if proc.returncode != 0:
        text = ctx.log_file.read_text(errors="replace")
        if _NO_DEVICE_MAPPER.search(text):
            raise DiskError(
                "backend diskimage-builder could not partition the disk: this machine has no "
                "device-mapper or loop partition devices (kpartx/losetup failed)\n" + tail(text, 8),
                hint="use backend: native (the default), which needs no loop devices or mounts",
            )
        raise ToolError(f"disk-image-create exited with {proc.returncode}\n{tail(text)}")
    made = base.with_suffix(".qcow2")
    if not made.is_file():
        raise ToolError(f"disk-image-create reported success but wrote no {made.name}")
    os.replace(made, out)
