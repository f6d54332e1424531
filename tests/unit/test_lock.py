"""Lock drift messages name the field that changed, down to a map key."""

from __future__ import annotations

from nvkr.lock import _differences


def test_differences_walk_maps() -> None:
    old = {"arch": "arm64", "packages": {"socat": "1.7.4.4-2", "kmod": "30"}, "base": "minbase"}
    new = {"arch": "arm64", "packages": {"socat": "1.7.4.4-3", "zstd": "1.5"}, "base": "minbase"}
    assert _differences(old, new) == [
        "packages.kmod: removed (was '30')",
        "packages.socat: '1.7.4.4-2' -> '1.7.4.4-3'",
        "packages.zstd: added '1.5'",
    ]
    assert _differences({"url": "a"}, {"url": "b"}) == ["url: 'a' -> 'b'"]
