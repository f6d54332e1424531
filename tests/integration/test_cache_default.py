"""End to end: the default recipe's build shared through a remote cache on a real CNCF
distribution registry (the "CI at scale" issue's first done-when item).

The session's ``default_build`` store holds every action, so the ``--cache-to`` build here is a
no-op that only pushes (the CI cost is the upload, not a build); another clone with an empty store
and only ``--cache-from`` then runs no builder and writes the same release set. The entries pushed
from the fixture's two independent builds (two clones, stores, umasks, time zones) are compared
byte for byte.
"""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from nvkr.cache.entry import TAG_PREFIX, entry_tag, make_entry
from nvkr.oci.registry import RegistryClient
from nvkr.sign import generate_key
from nvkr.store import Store
from tests.helpers.nvkr import make_clone, run_nvkr

pytestmark = pytest.mark.slow


SET = "nvkr-default-k8s1.36"


@pytest.fixture(scope="module")
def key(tmp_path_factory):
    return generate_key("ed25519", tmp_path_factory.mktemp("cache-key") / "ci")


def _events(result):
    return [json.loads(x) for x in result.stdout.splitlines() if x.startswith("{")]


@pytest.fixture(scope="module")
def pushed(default_build, registry, key, tmp_path_factory):
    """The ``--cache-to`` events of a no-op build of the default recipe from the session's
    store into ``nvkr/cache`` (min mode)."""
    pusher = make_clone(tmp_path_factory.mktemp("cache-pusher") / "clone")
    res = run_nvkr(
        "build", "--json", "--locked", "--cache-to", f"{registry.host}/nvkr/cache",
        "--cache-sign-key", str(key.private_path), cwd=pusher, store=default_build.store,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    return _events(res)


def test_a_fresh_clone_takes_the_default_release_set_from_the_cache_and_runs_no_builder(
    default_build, registry, key, pushed, tmp_path
):
    cache = f"{registry.host}/nvkr/cache"
    events = pushed
    assert events[-1]["built"] == [], "the session's store holds every action"
    states = {e["name"]: e["state"] for e in events if e["event"] == "cache-push"}
    assert f"release set {SET}" in states and set(states.values()) == {"pushed"}
    # min: what the release set references (node images, binaries, images, chart, SBOMs) and
    # the slow root filesystems; not the staged package tars nobody references
    assert any(name.startswith("node-image") for name in states), states
    assert not any(name.startswith("kube-packages") for name in states), states

    fresh = make_clone(tmp_path / "fresh")
    empty = tmp_path / "empty-store"
    res = run_nvkr(
        "build", "--json", "--locked", "--cache-from", cache,
        "--cache-trust", str(key.public_path), cwd=fresh, store=empty,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    events = _events(res)
    result = events[-1]
    assert result["built"] == [] and result["cached"] == []
    assert [r["name"] for r in result["remote"]] == [f"release set {SET}"]
    assert result["remote"][0]["cache"] == cache
    assert not [e for e in events if e["event"] == "source-fetch"], "nothing is fetched"
    first = default_build.result.json_events()[-1]["releaseSets"][0]
    assert result["releaseSets"][0]["digest"] == first["digest"]
    layout = fresh / "dist" / SET
    assert (layout / "index.json").read_bytes() == (
        default_build.clone / "dist" / SET / "index.json"
    ).read_bytes()
    for blob in (layout / "blobs" / "sha256").iterdir():
        h = hashlib.sha256()
        with open(blob, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        assert h.hexdigest() == blob.name
    # what was downloaded is the release set (its layers), not the root filesystems beneath
    hits = [e for e in events if e["event"] == "cache-hit"]
    assert [e["name"] for e in hits] == [f"release set {SET}"]
    # (the release-set action's outputs are its layout: the blobs, index.json and oci-layout)
    set_bytes = sum(p.stat().st_size for p in layout.rglob("*") if p.is_file())
    assert hits[0]["bytes"] <= set_bytes


def test_the_entries_of_two_independent_builds_are_byte_identical(
    default_build, registry, key, pushed
):
    """The fixture's two builds (two clones, two stores, umask 022/002, TZ UTC/Chatham, --jobs
    N/1) push the same manifests and configs, for every action both push. The twin built the
    hopper arm64 variant itself and takes what the full recipe needs beyond it from the first cache
    here, pushing only what it holds of its own, the full release set included; its push mounts
    its blobs from the first cache (the same registry), so it uploads little."""
    from nvkr.session import make_session_plan, open_session

    recipe = default_build.clone / "recipes" / "default.yaml"
    plan = make_session_plan(open_session(recipe, store=Store(default_build.store)))
    names = {entry_tag(k): a.name for k, a in plan.actions.items()}
    client = RegistryClient(registry.host)
    res = run_nvkr(
        "build", "--json", "--locked", "--cache-to", f"{registry.host}/nvkr/twin",
        "--cache-sign-key", str(key.private_path), "--cache-from", f"{registry.host}/nvkr/cache",
        "--cache-trust", str(key.public_path), cwd=default_build.twin,
        store=default_build.twin_store,
    )  # fmt: skip
    assert res.code == 0, res.stderr
    twin_events = _events(res)
    assert not [e for e in twin_events if e["event"] == "cache-warning"], "no conflict"
    tags = sorted(t for t in client.tags("nvkr/cache") if t.startswith(TAG_PREFIX))
    assert len(tags) == len([e for e in pushed if e["event"] == "cache-push"])
    twin_tags = sorted(t for t in client.tags("nvkr/twin") if t.startswith(TAG_PREFIX))
    assert set(twin_tags) <= set(tags)
    not_in_twin = sorted(names[t] for t in set(tags) - set(twin_tags))
    # what it took from the cache and so did not push: the amd64 and blackwell actions, and
    # the image index, the chart pinned to it and their SBOMs, which join the arches
    joined = {"agent-image", "agent-chart", "sbom agent-image", "sbom agent-chart"}

    def elsewhere(name: str) -> bool:
        return "amd64" in name or "blackwell" in name or name in joined

    assert not_in_twin and all(elsewhere(name) for name in not_in_twin), not_in_twin
    assert {"rootfs [arm64]", "node-image [hopper arm64]", f"release set {SET}"} <= {
        names[t] for t in twin_tags
    }
    for tag in twin_tags:
        a, _, _ = client.get_manifest("nvkr/cache", tag)
        b, _, _ = client.get_manifest("nvkr/twin", tag)
        assert a == b, tag
        config = json.loads(a)["config"]["digest"]
        ca, cb = io.BytesIO(), io.BytesIO()
        client.get_blob("nvkr/cache", config, ca)
        client.get_blob("nvkr/twin", config, cb)
        assert ca.getvalue() == cb.getvalue()
    # and every other action (what --cache-mode max would push): the same entry bytes
    a_store, b_store = Store(default_build.store), Store(default_build.twin_store)
    compared = []
    for action_key, action in plan.actions.items():
        ra, rb = a_store.get_action(action_key), b_store.get_action(action_key)
        assert ra is not None, action.name
        if rb is None:  # one the twin did not build (above)
            assert elsewhere(action.name), action.name
            continue
        ea, eb = make_entry(action, ra), make_entry(action, rb)
        assert (ea.manifest, ea.config) == (eb.manifest, eb.config), action.name
        compared.append(action.name)
    assert {"rootfs [arm64]", "agent [arm64]", "node-image [hopper arm64]"} <= set(compared)
