"""The rootfs builder with dkms among the locked packages (NVIDIA's driver from Debian): the
params and inputs say so, so the hooks that keep DKMS from signing with a key it generates and
that check and clean its builds run; every other tree keeps the key it had."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from nvkr.builders.api import ResolvedSource
from nvkr.builders.rootfs import builder as rootfs
from nvkr.builders.rootfs.artifact import RootfsArtifact
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import AptSource
from tests.helpers import lock_entry

SPEC = AptSource.model_validate(
    {
        "apt": {"debian": {"url": "http://deb.debian.org/debian", "suite": "bookworm"}},
        "arch": "amd64",
        "packages": {"nvidia-kernel-dkms": "535.309.01-0+deb12u1"},
    }
)


def deb(name: str, version: str) -> dict[str, object]:
    """A locked .deb of ``name`` at ``version``, as an apt lock entry lists it."""
    return {
        "name": name,
        "version": version,
        "arch": "amd64",
        "repository": "debian",
        "url": f"http://deb.debian.org/debian/{name}.deb",
        "filename": f"{name}.deb",
        "size": 1,
        "sha256": "sha256:" + "5" * 64,
    }


def _plan(locked: list[str]) -> Any:
    entry = lock_entry(
        {
            "kind": "apt",
            "arch": "amd64",
            "digest": "sha256:" + "3" * 64,
            "keyrings": {"debian": "sha256:" + "4" * 64},
            "packages": [deb(n, "1") for n in locked],
        }
    )
    src = ResolvedSource(name="pkgs", spec=SPEC, entry=entry, base_dir=Path("."))
    refs = SimpleNamespace(source=lambda name: src)
    art = RootfsArtifact.model_validate({"builder": "rootfs", "packages": "pkgs"})
    variant = cast(Variant, SimpleNamespace(arch="amd64"))
    return rootfs.RootfsBuilder().plan("rootfs", art, variant, refs)  # type: ignore[arg-type]


def test_dkms_enters_the_key_only_when_the_lock_holds_it() -> None:
    without = _plan(["systemd", "nvidia-kernel-dkms"])
    assert "dkms" not in without.params and "dkms-assets" not in without.inputs
    with_dkms = _plan(["systemd", "nvidia-kernel-dkms", "dkms"])
    assert with_dkms.params == {**without.params, "dkms": True}
    assert set(with_dkms.inputs) == set(without.inputs) | {"dkms-assets"}


def test_the_dkms_hooks_are_posix_shell_and_executable() -> None:
    for hook in sorted(rootfs.DKMS_ASSETS.iterdir()):
        assert os.access(hook, os.X_OK), hook
        subprocess.run(["sh", "-n", str(hook)], check=True)


def test_the_signing_hook_names_a_sign_file_that_does_not_exist(tmp_path: Path) -> None:
    """dkms (3.0.10, prepare_signing) signs only when its sign_file is an executable file, and
    generates /var/lib/dkms/mok.key first only then: the hook's sign_file must not exist."""
    hook = rootfs.DKMS_ASSETS / "no-module-signing.essential-hook"
    subprocess.run([str(hook), str(tmp_path)], check=True)
    conf = tmp_path / "etc/dkms/framework.conf.d/nvkr-no-module-signing.conf"
    assert conf.stat().st_mode & 0o777 == 0o644
    (line,) = [ln for ln in conf.read_text().splitlines() if ln.startswith("sign_file=")]
    assert not Path(line.split("=", 1)[1]).exists()
