"""The lockfile's amd64 .debs a foreign tree runs its perl and python from (nvkr.nativedebs),
on the default recipe and its real lockfile (both arches locked): the planner gives the arm64
tree exactly those of its own versions as a source and an input, the amd64 tree none; the lock
lacking them, or holding another version, gives none; ``nvkr mirror export``'s selection of
the arm64 variant alone holds them. Nothing is fetched: planning reads the lockfile."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nvkr.airgap.export import select_sources
from nvkr.builders.rootfs import native
from nvkr.canonical import sha256_bytes
from nvkr.fetch.entries import AptEntry, apt_manifest_bytes
from nvkr.nativedebs import LOCK_ARCH, wanted_debs
from nvkr.session import make_session_plan, open_session
from nvkr.store import Store
from tests.helpers import REPO

pytestmark = pytest.mark.skipif(not native.supported(), reason="an x86-64 host only")

RECIPE = REPO / "recipes" / "default.yaml"
LOCK = REPO / "lockfiles" / "default.lock.json"
ARM64 = "gpu=hopper,kubernetes=1.36,arch=arm64"


def _node_packages(lock: dict[str, Any], arch: str) -> dict[str, Any]:
    (entry,) = [
        e["resolved"]
        for e in lock["sources"]
        if e["name"] == "node-packages" and e["resolved"]["arch"] == arch
    ]
    return entry


def _rootfs(tmp_path: Path, lockfile: Path = LOCK) -> dict[str, Any]:
    """The rootfs actions of the default recipe's plan, by arch."""
    session = open_session(RECIPE, store=Store(tmp_path / "store"), lockfile=lockfile)
    plan = make_session_plan(session)
    return {
        a.params["arch"]: a
        for a in plan.actions.values()
        if a.builder == "rootfs" and a.name.startswith("rootfs [")
    }


def test_the_arm64_tree_takes_the_locks_amd64_debs_of_its_own_versions(tmp_path: Path) -> None:
    lock = json.loads(LOCK.read_text())
    arm64, amd64 = _node_packages(lock, "arm64"), _node_packages(lock, LOCK_ARCH)
    wanted = wanted_debs(arm64["packages"])
    assert {"perl-base", "libc6", "libcrypt1", "python3.13-minimal"} <= set(wanted)
    expected = sorted(
        (p for p in amd64["packages"] if wanted.get(p["name"]) == p["version"]),
        key=lambda p: (p["name"], p["arch"]),
    )
    assert [p["name"] for p in expected] == sorted(wanted)

    rootfs = _rootfs(tmp_path)
    src = rootfs["arm64"].sources["native-packages"]
    assert isinstance(src.entry, AptEntry)
    assert [p.to_json() for p in src.entry.packages] == expected
    assert src.digest == sha256_bytes(apt_manifest_bytes(LOCK_ARCH, expected))
    assert rootfs["arm64"].inputs["native-packages"] == src.digest
    assert "native-libc6" not in rootfs["arm64"].tools
    assert "native-packages" not in rootfs["amd64"].sources
    assert "native-packages" not in rootfs["amd64"].inputs


@pytest.mark.parametrize("change", ["drop", "other-version"])
def test_a_lock_without_those_debs_gives_the_tree_none(tmp_path: Path, change: str) -> None:
    """One wanted .deb missing from the amd64 entry, or at another version: the arm64 tree
    gets no .debs (all or none) and names the host's libc6 in its key, as before."""
    lock = json.loads(LOCK.read_text())
    edited = copy.deepcopy(lock)
    amd64 = _node_packages(edited, LOCK_ARCH)
    if change == "drop":
        amd64["packages"] = [p for p in amd64["packages"] if p["name"] != "libcrypt1"]
    else:
        for p in amd64["packages"]:
            if p["name"] == "perl-base":
                p["version"] += "+other"
    amd64["digest"] = sha256_bytes(apt_manifest_bytes(LOCK_ARCH, amd64["packages"]))
    path = tmp_path / "lockfiles" / "default.lock.json"
    path.parent.mkdir()
    path.write_text(json.dumps(edited))
    arm64 = _rootfs(tmp_path, path)["arm64"]
    assert "native-packages" not in arm64.sources
    assert "native-libc6" in arm64.tools


def test_mirror_export_of_the_arm64_variant_alone_holds_them(tmp_path: Path) -> None:
    """An air-gapped x86-64 build of the arm64 variant reads the .debs too: the export's
    selection binds them beside the arm64 tree's own packages."""
    session = open_session(RECIPE, (ARM64,), store=Store(tmp_path / "store"), locked=True)
    selection = select_sources(session.loaded, session.variants, session.resolver)
    apt = [b for b in selection.bindings.values() if b[0] == "node-packages"]
    assert sorted(b[2].arch for b in apt) == ["amd64", "arm64"]
    (native_debs,) = [b for b in apt if b[2].arch == LOCK_ARCH]
    planned = _rootfs(tmp_path)["arm64"].sources["native-packages"]
    assert native_debs[2].digest == planned.digest
