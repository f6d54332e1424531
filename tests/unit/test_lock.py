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


def test_the_committed_lockfiles_match_their_recipes(repo_root, tmp_path) -> None:
    """Every shipped lockfile pins what its recipe says, as the models read it now: a field
    added to a source model must not show up in existing specs (an ``exclude: []`` did, and
    every --locked build of the default recipe stopped with 'source node-agent changed')."""
    from nvkr.fetch.context import FetchContext
    from nvkr.lock import Resolver, default_lock_path, read_lock
    from nvkr.recipe.loader import load_recipe
    from nvkr.recipe.matrix import expand
    from nvkr.store import Store

    for recipe in (repo_root / "recipes" / "default.yaml", repo_root / "ci/image/nvkr-ci.yaml"):
        loaded = load_recipe(recipe)
        lock_path = default_lock_path(recipe)
        resolver = Resolver(
            loaded=loaded,
            lock_path=lock_path,
            lock=read_lock(lock_path),
            ctx=FetchContext(store=Store(tmp_path / "store"), offline=True),
            locked=True,
        )
        assert resolver.drift(expand(loaded, None)) == [], recipe
