"""backend: diskimage-builder — used only when installed; where it cannot partition (no
device-mapper, as on this kind of machine) it fails saying so, never with a bare tool error."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from nvkr.builders.node_image import dib
from nvkr.errors import DiskError, ToolError


def _ctx(tmp_path: Path) -> SimpleNamespace:
    work = tmp_path / "work"
    work.mkdir()
    return SimpleNamespace(
        workdir=work, log_file=work / "build.log", action=SimpleNamespace(epoch=1764547200)
    )


def _tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "etc").mkdir(parents=True)
    (tree / "etc" / "hostname").write_text("n\n")
    return tree


def _fake_dib(tmp_path: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "disk-image-create"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(0o755)
    monkeypatch.setattr(dib, "find_disk_image_create", lambda: exe)
    return exe


def test_not_installed_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dib, "find_disk_image_create", lambda: None)
    with pytest.raises(ToolError) as err:
        dib.build(
            _ctx(tmp_path), _tree(tmp_path), tmp_path / "o.qcow2", arch="amd64", size_bytes=1 << 30
        )  # type: ignore[arg-type]
    assert "disk-image-create is not installed" in err.value.message
    assert "backend: native" in (err.value.hint or "")


def test_no_device_mapper_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_dib(
        tmp_path,
        'echo "INFO diskimage_builder.block_device.level1.partitioning: kpartx -uvs /dev/loop0"\n'
        'echo "device-mapper: reload ioctl on loop0p1 failed: No such device or address" >&2\n'
        "exit 1\n",
        monkeypatch,
    )
    with pytest.raises(DiskError) as err:
        dib.build(
            _ctx(tmp_path), _tree(tmp_path), tmp_path / "o.qcow2", arch="amd64", size_bytes=1 << 30
        )  # type: ignore[arg-type]
    assert "could not partition the disk" in err.value.message
    assert not (tmp_path / "o.qcow2").exists()


def test_elements_and_staged_tree_reach_disk_image_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = tmp_path / "seen"
    _fake_dib(
        tmp_path,
        f'echo "$@" > {seen}; echo "$ELEMENTS_PATH" >> {seen}; tar -tf "$NVKR_ROOTFS_TAR" >> {seen}\n'
        'out=""; while [ $# -gt 0 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
        'printf QFI > "$out.qcow2"\n',
        monkeypatch,
    )
    out = tmp_path / "o.qcow2"
    dib.build(_ctx(tmp_path), _tree(tmp_path), out, arch="arm64", size_bytes=3 << 30)  # type: ignore[arg-type]
    text = seen.read_text()
    assert "-a arm64 -t qcow2 --image-size 3072M" in text
    assert "nvkr-rootfs vm block-device-gpt" in text
    assert str(dib.ELEMENTS) in text and "./etc/hostname" in text
    assert out.read_bytes() == b"QFI"
    assert os.access(dib.ELEMENTS / "nvkr-rootfs" / "root.d" / "10-nvkr-rootfs", os.X_OK)
