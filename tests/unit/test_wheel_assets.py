"""The wheel built from the tree carries the builders' assets, and asset_dir finds them.

The assets (``builders/<name>/``) are hashed into the rootfs and node-image action keys, so an
install from the wheel must hold every file with the same bytes and the executable bits.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from nvkr.builders.assets import asset_dir

ROOT = Path(__file__).resolve().parents[2]


def _tree_assets() -> dict[str, Path]:
    root = ROOT / "builders"
    return {
        p.relative_to(root).as_posix(): p
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_asset_dir_in_a_checkout_is_the_top_level_builders_dir() -> None:
    assert asset_dir("node-image") == ROOT / "builders" / "node-image"
    assert asset_dir("rootfs") == ROOT / "builders" / "rootfs"
    assert (asset_dir("rootfs") / "defer-initramfs.essential-hook").is_file()


def test_the_wheel_holds_every_asset_with_its_bytes_and_mode(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("nvkr-*.whl")
    tree = _tree_assets()
    assert "rootfs/defer-initramfs.essential-hook" in tree
    with zipfile.ZipFile(wheel) as zf:
        held = {
            i.filename.removeprefix("nvkr/_assets/"): i
            for i in zf.infolist()
            if i.filename.startswith("nvkr/_assets/")
        }
        assert sorted(held) == sorted(tree)
        for rel, path in tree.items():
            assert zf.read(held[rel]) == path.read_bytes(), rel
            wheel_mode = (held[rel].external_attr >> 16) & 0o111
            assert bool(wheel_mode) == bool(path.stat().st_mode & 0o111), rel
