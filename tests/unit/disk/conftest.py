"""The disk tests' ``tree`` fixture: :func:`tests.helpers.disk.make_tree` under the test's
tmp dir (no real kernel, the host's GRUB modules linked in, every kind of file mkfs.ext4 -d
must carry over)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.disk import make_tree


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path / "tree")
