"""Fixtures of the boot tests that run fake QEMUs (:mod:`tests.helpers.fake_qemu`): a stand-in
disk image and a host whose KVM looks usable."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvkr.machine import boot
from tests.helpers.fake_qemu import STALL, new_kvm_host


@pytest.fixture
def image(tmp_path: Path) -> Path:
    """A file with a QCOW2 header's magic: what boot-test checks before it starts QEMU."""
    path = tmp_path / "node.qcow2"
    path.write_bytes(b"QFI\xfb" + bytes(508))
    return path


@pytest.fixture
def kvm_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A host whose KVM passes the boot-sector probe; no stall seen yet on it (its verdicts
    kept under a runtime directory of the test's own)."""
    monkeypatch.setattr(boot, "kvm_works", lambda arch="amd64": True)
    monkeypatch.setattr(boot, "KVM_STALL_SECONDS", STALL)
    new_kvm_host(monkeypatch, tmp_path)
    monkeypatch.delenv(boot.ACCEL_ENV, raising=False)
