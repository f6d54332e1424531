"""The test harness: the in-process CLI runner, the subprocess ``nvkr`` starter, the isolation of
every test from the developer's home, config and store, and the loopback servers the tests drive
(a CNCF distribution registry, apt repositories, dl.k8s.io's layout, podman's Docker API).

Modules with fixtures are registered as pytest plugins in ``tests/conftest.py``, so a test asks
for a fixture by naming its parameter and never imports it."""

from pathlib import Path
from typing import Any

from nvkr.fetch.entries import LockEntry
from nvkr.fetch.table import read_entry

REPO = Path(__file__).resolve().parents[2]


def lock_entry(data: dict[str, Any]) -> LockEntry:
    """The typed lock entry ``data`` holds, as a lockfile's is read (:mod:`nvkr.fetch.entries`)."""
    return read_entry(data, where="a test's lock entry")
