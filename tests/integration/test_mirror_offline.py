"""End to end: the default recipe's amd64 hopper variant (with Secure Boot on: the session's
Secure Boot set, tests/helpers/secureboot.py) carried to a store that never saw the network:
``nvkr mirror export --variant ... --offline`` from the store of the session's connected build,
and ``nvkr mirror import`` into an empty store (both made by the ``default_build`` fixture). The
offline build from that store is the session's ``verify --rebuild --offline``
(tests/integration/test_verify_default.py: every artifact identical to the connected build's);
here, the export itself: exactly that variant's sources, every .deb with its upstream URL, the
repository's own directories (the agent, the owner's certificate) left to travel with it, and
the import takes every blob.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import MIRROR_VARIANT

pytestmark = pytest.mark.slow


def test_the_export_of_one_variant_holds_its_sources_and_the_import_takes_them_all(
    default_build,
) -> None:
    res = default_build.mirror_export
    assert "skipped path sources" in res.stdout, res.stdout
    assert "default-secureboot/node-agent" in res.stdout
    assert "default-secureboot/secure-boot-owner" in res.stdout
    out = default_build.mirror
    doc = json.loads((out / "index.json").read_text())
    kinds = {s["name"]: s["kind"] for s in doc["sources"]}
    assert kinds == {"go": "pypi", "kubectl": "pypi", "node-packages": "apt"}
    assert all(s["variants"] == [MIRROR_VARIANT] for s in doc["sources"])
    (apt,) = [s for s in doc["sources"] if s["kind"] == "apt"]
    debs = [b for b in apt["blobs"] if b.get("package")]
    assert debs and all(b["urls"][0].startswith("http") for b in debs)
    assert not [b for b in debs if "arm64" in b["urls"][0]], "the amd64 variant's packages only"
    assert doc["blobs"]["count"] == len(os.listdir(out / "blobs" / "sha256")) == len(debs) + 3
    assert f"imported {doc['blobs']['count']} blobs" in default_build.mirror_import.stdout
    imported = set(os.listdir(default_build.mirror_store / "blobs" / "sha256"))
    assert set(os.listdir(out / "blobs" / "sha256")) <= imported
