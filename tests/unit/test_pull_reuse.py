"""``nvkr pull`` reuses blobs it already has: those of an earlier pull's DIR and those of the store
(``--store``/NVKR_CACHE), each hashed before it is trusted (a corrupt copy is downloaded again),
and reports the bytes downloaded beside the bytes reused. The registry is CNCF distribution 2.8
behind the counting proxy of :mod:`tests.helpers.registry`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nvkr.oci.layout import LayoutReader
from nvkr.store import Store
from tests.helpers.cli import invoke, invoke_output
from tests.helpers.registry import run_proxy
from tests.helpers.releasesets import blobs, payload


def pull(store: Path, ref: str, out: Path, *extra: str) -> dict[str, Any]:
    res = invoke("--store", str(store), "pull", ref, str(out), "--json", *extra)
    assert res.code == 0, res.output
    result = json.loads(res.stdout.splitlines()[-1])  # stderr has the warnings, as for a user
    assert result["event"] == "result"
    return result


def blob_gets(proxy: Any) -> list[str]:
    """Digests of the blobs and manifests fetched by digest through ``proxy``."""
    return [
        e.path.rsplit("/", 1)[-1]
        for e in proxy.requests("GET", r"/(blobs|manifests)/sha256:")
        if e.status == 200
    ]


def test_a_second_pull_into_the_same_dir_downloads_no_payload(registry, published, tmp_path):
    out = tmp_path / "pulled"
    with run_proxy(registry.host) as proxy:
        ref = f"{proxy.host}/{published['repo']}@{published['digest']}"
        first = pull(tmp_path / "store", ref, out)
        assert first["reusedBlobs"] == 0 and first["downloadedBytes"] == first["bytes"]
        proxy.clear()
        second = pull(tmp_path / "store", ref, out)
        big = payload(published["layout"]).digest
        assert big not in blob_gets(proxy)
        assert second["reusedBlobs"] == second["blobs"] == first["blobs"]
        assert second["reusedBytes"] == second["bytes"] and second["downloadedBytes"] == 0
    assert blobs(out) == blobs(published["layout"])


def test_blobs_in_the_store_are_not_downloaded(registry, published, tmp_path):
    store = Store(tmp_path / "store")
    big = payload(published["layout"])
    store.add_bytes((published["layout"] / "blobs" / "sha256" / big.digest[7:]).read_bytes())
    with run_proxy(registry.host) as proxy:
        ref = f"{proxy.host}/{published['repo']}@{published['digest']}"
        result = pull(store.root, ref, tmp_path / "pulled")
        assert big.digest not in blob_gets(proxy)
    assert result["reusedBlobs"] == 1 and result["reusedBytes"] == big.size
    assert result["downloadedBytes"] == result["bytes"] - big.size
    assert blobs(tmp_path / "pulled") == blobs(published["layout"])


def test_a_corrupt_local_copy_is_downloaded_again(registry, published, tmp_path):
    big = payload(published["layout"])
    good = (published["layout"] / "blobs" / "sha256" / big.digest[7:]).read_bytes()
    store = Store(tmp_path / "store")
    corrupt = store.blob_path(big.digest)
    corrupt.write_bytes(bytes([good[0] ^ 1]) + good[1:])  # same size, other bytes
    out = tmp_path / "pulled"
    with run_proxy(registry.host) as proxy:
        ref = f"{proxy.host}/{published['repo']}@{published['digest']}"
        result = pull(store.root, ref, out)
        assert big.digest in blob_gets(proxy)
        assert result["reusedBlobs"] == 0
        # an earlier pull's DIR with a damaged blob: that one is fetched again, the rest reused
        damaged = out / "blobs" / "sha256" / big.digest[7:]
        os.chmod(damaged, 0o644)
        damaged.write_bytes(bytes([good[0] ^ 2]) + good[1:])
        corrupt.unlink()
        proxy.clear()
        again = pull(store.root, ref, out)
        assert blob_gets(proxy).count(big.digest) == 1
        assert again["reusedBlobs"] == again["blobs"] - 1
        assert again["downloadedBytes"] == big.size
    assert (out / "blobs" / "sha256" / big.digest[7:]).read_bytes() == good
    assert LayoutReader(out).index["manifests"][0]["digest"] == published["digest"]


def test_the_summary_says_what_was_reused(registry, published, tmp_path):
    ref = f"{published['ref']}@{published['digest']}"
    out = tmp_path / "pulled"
    assert invoke_output("--store", str(tmp_path / "store"), "pull", ref, str(out))[0] == 0
    code, text = invoke_output("--store", str(tmp_path / "store"), "pull", ref, str(out))
    assert code == 0
    assert "0 bytes downloaded" in text and "reused" in text, text
