"""``nvkr plan --fan-out``: units that cover the plan exactly, with exact needs and stable
DNS-1123 ids; run in needs order against one store they build every action once and leave
nothing for the final assembly to build."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from nvkr.fanout import MAX_ID, dns_label
from tests.helpers.cli import invoke
from tests.helpers.fanout import write_fan_project

RECIPE = "recipes/fan.yaml"
DNS_1123 = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.fixture
def fan(tmp_path):
    project = write_fan_project(tmp_path / "proj")
    store = tmp_path / "store"
    locked = invoke("lock", RECIPE, cwd=project, store=store)
    assert locked.code == 0, locked.stderr
    return project, store


def _fan_out(project, store, by):
    res = invoke("plan", RECIPE, "--fan-out", "--by", by, "--json", cwd=project, store=store)
    assert res.code == 0, res.stderr
    return json.loads(res.stdout)


def _plan(project, store):
    res = invoke("plan", RECIPE, "--json", cwd=project, store=store)
    assert res.code == 0, res.stderr
    return {a["ref"]: a for a in json.loads(res.stdout)["actions"]}


def _topological(units):
    seen: set[str] = set()
    for unit in units:
        assert set(unit["needs"]) <= seen, f"{unit['id']} needs a unit that comes later"
        seen.add(unit["id"])


def test_by_action_covers_every_action_once_with_exact_needs(fan):
    project, store = fan
    doc = _fan_out(project, store, "action")
    actions = _plan(project, store)
    units = doc["units"]
    assert doc["by"] == "action" and units[-1]["id"] == "final" and units[-1]["final"]
    owner = {ref: u["id"] for u in units for ref in u["actions"]}
    assert sorted(owner) == sorted(actions), "every action in exactly one unit"
    assert sum(len(u["actions"]) for u in units) == len(actions)
    key_to_ref = {a["key"]: ref for ref, a in actions.items()}
    for unit in units[:-1]:
        wanted = {
            owner[key_to_ref[dep]]
            for ref in unit["actions"]
            for dep in actions[ref]["deps"]
            if owner[key_to_ref[dep]] != unit["id"]
        }
        assert set(unit["needs"]) == wanted, unit["id"]
        assert unit["argv"][:4] == ["nvkr", "build", RECIPE, "--locked"]
        assert unit["argv"][4:] == [a for ref in unit["actions"] for a in ("--action", ref)]
        # an sbom rides with the artifact it describes
        assert not all(ref.startswith("sbom/") for ref in unit["actions"])
    assert units[-1]["needs"] == ["set-fan-k8s1-36"]
    assert units[-1]["argv"] == ["nvkr", "build", RECIPE, "--locked", "--cached-only"]
    _topological(units)
    ids = [u["id"] for u in units]
    assert len(set(ids)) == len(ids) and all(DNS_1123.match(i) for i in ids), ids
    assert {"tool-image-amd64", "tool-image-index", "gpu-image-hopper-arm64"} <= set(ids)
    assert "sha256" not in json.dumps([u["argv"] for u in units])


def test_ids_and_argv_do_not_change_with_the_inputs(fan):
    project, store = fan
    before = _fan_out(project, store, "action")
    (project / "files" / "tool.conf").write_text("greeting = bonjour\n")
    after = _fan_out(project, store, "action")
    assert before == after, "new digests, same structure: the same units"


@pytest.mark.slow
def test_units_run_in_needs_order_on_one_store_build_each_action_once(fan, tmp_path):
    project, store = fan
    actions = _plan(project, store)
    doc = _fan_out(project, store, "action")
    built_by: dict[str, str] = {}
    for unit in doc["units"][:-1]:
        argv = unit["argv"]
        assert argv[:2] == ["nvkr", "build"]
        res = invoke(*argv[1:], "--json", cwd=project, store=store)
        assert res.code == 0, f"{unit['id']}: {res.stderr}"
        result = res.json_events()[-1]
        assert sorted(result["built"]) == sorted(actions[r]["key"] for r in unit["actions"])
        for key in result["built"]:
            assert key not in built_by, f"{key} built twice"
            built_by[key] = unit["id"]
    assert len(built_by) == len(actions)
    # what the final unit assembles is all cached: a full build runs no builder and writes the
    # release set a single-machine build writes
    full = invoke("build", RECIPE, "--locked", "--json", cwd=project, store=store)
    assert full.code == 0, full.stderr
    assert full.json_events()[-1]["built"] == []
    single = invoke(
        "build", RECIPE, "--locked", "--out", "single", cwd=project, store=tmp_path / "single"
    )
    assert single.code == 0, single.stderr
    index = "fan-k8s1.36/index.json"
    assert (project / "dist" / index).read_bytes() == (project / "single" / index).read_bytes()


@pytest.mark.slow
def test_by_variant_units_then_join_build_the_rest(fan):
    project, store = fan
    doc = _fan_out(project, store, "variant")
    actions = _plan(project, store)
    units = {u["id"]: u for u in doc["units"]}
    assert list(units) == [
        "hopper-amd64", "hopper-arm64", "blackwell-amd64", "blackwell-arm64", "join", "final",
    ]  # fmt: skip
    assert units["hopper-arm64"]["argv"][4:] == [
        "--variant",
        "gpu=hopper,kubernetes=1.36,arch=arm64",
    ]
    assert units["hopper-arm64"]["arch"] == "arm64" and units["join"]["arch"] is None
    assert units["join"]["needs"] == list(units)[:4] and units["final"]["needs"] == ["join"]
    assert units["join"]["argv"] == ["nvkr", "build", RECIPE, "--locked"]
    # what only the join builds: what spans variants (an image's index over the arches, its
    # SBOM, the chart pinning it, the release set); the variants build the per-arch images
    assert sorted(units["join"]["actions"]) == sorted(
        ref for ref in actions if not ref.startswith("container-image/")
    )
    for uid in list(units)[:4]:
        res = invoke(*units[uid]["argv"][1:], "--out", f"out-{uid}", cwd=project, store=store)
        assert res.code == 0, res.stderr
    join = invoke(*units["join"]["argv"][1:], "--json", cwd=project, store=store)
    assert join.code == 0, join.stderr
    built = sorted(join.json_events()[-1]["built"])
    assert built == sorted(actions[r]["key"] for r in units["join"]["actions"])


def test_estimates_come_from_the_run_times_in_the_store(fan):
    project, store = fan
    assert all(u["estimate"] is None for u in _fan_out(project, store, "action")["units"])
    res = invoke("build", RECIPE, "--locked", cwd=project, store=store)
    assert res.code == 0, res.stderr
    units = _fan_out(project, store, "action")["units"]
    for unit in units[:-1]:
        est = unit["estimate"]
        assert est["timed"] == est["actions"] == len(unit["actions"]), unit
        assert isinstance(est["milliseconds"], int) and est["milliseconds"] >= 0
        assert "seconds" not in est
    text = invoke("plan", RECIPE, "--fan-out", "--by", "action", cwd=project, store=store)
    assert text.code == 0, text.stderr
    assert "tool-image-index" in text.stdout
    argv = shlex.split(text.stdout.splitlines()[2].strip())
    assert argv[:3] == ["nvkr", "build", RECIPE]


def test_fan_out_refuses_a_variant_selection_and_by_action_needs_the_lock(tmp_path):
    project = write_fan_project(tmp_path / "proj")
    store = tmp_path / "store"
    res = invoke("plan", RECIPE, "--fan-out", "--variant", "gpu=hopper", cwd=project, store=store)
    assert res.code == 2 and "--fan-out cuts the whole recipe" in res.stderr, res.stderr
    res = invoke("plan", RECIPE, "--fan-out", "--by", "action", cwd=project, store=store)
    assert res.code == 2, res.stderr
    assert "NVKR-E-LOCK" in res.stderr and "there is no lockfile" in res.stderr
    assert "--by variant" in res.stderr
    by_variant = invoke("plan", RECIPE, "--fan-out", "--json", cwd=project, store=store)
    assert by_variant.code == 0, by_variant.stderr
    assert [u["actions"] for u in json.loads(by_variant.stdout)["units"]] == [[]] * 6


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("node-image-hopper-amd64", "node-image-hopper-amd64"),
        ("set-nvkr-default-k8s1.36", "set-nvkr-default-k8s1-36"),
        ("Agent_Image--x", "agent-image-x"),
        ("7zip", "u-7zip"),
        ("-x-", "x"),
    ],
)
def test_dns_label(text, want):
    assert dns_label(text) == want


def test_a_long_label_is_cut_and_keeps_a_hash_of_the_whole_name():
    a, b = dns_label("a" * 80 + "-one"), dns_label("a" * 80 + "-two")
    assert len(a) == len(b) == MAX_ID and a != b
    assert DNS_1123.match(a) and DNS_1123.match(b)


def _variant_units(monkeypatch, tmp_path, prefers, seconds=None):
    """by_variant over one arm64 variant whose actions' builders prefer ``prefers`` (name ->
    arch or None), with run times ``seconds`` (name -> s) in a store when given."""
    from types import SimpleNamespace

    from nvkr import fanout
    from nvkr.action import ActionResult
    from nvkr.store import Store

    actions = {
        f"sha256:{i:064x}": SimpleNamespace(ref=f"b/{name}@arm64", builder=name, deps=(), name=name)
        for i, name in enumerate(prefers)
    }
    monkeypatch.setattr(fanout, "host_arch", lambda action: prefers[action.name])
    store = Store(tmp_path / "store")
    for key, action in actions.items():
        if seconds and action.name in seconds:
            run = {"startedOn": "2026-01-01T00:00:00+00:00"}
            run["finishedOn"] = f"2026-01-01T00:{seconds[action.name] // 60:02d}:00+00:00"
            store.put_action(
                key,
                ActionResult(
                    key=key, builder=action.name, name=action.name, outputs=(), metadata={}, run=run
                ),
            )
    plan = SimpleNamespace(actions=actions)
    axes = {"gpu": "hopper", "kubernetes": "1.36", "arch": "arm64"}
    variant = SimpleNamespace(id="arch=arm64", arch="arm64", axes=axes)
    doc = fanout.by_variant(
        [variant], "r.yaml", "r", partial_plan=lambda vs: plan, full_plan=plan, store=store
    )
    return doc.units[0].arch


def test_a_variant_unit_runs_where_its_builders_prefer(monkeypatch, tmp_path):
    # a Go build with an x86_64 toolchain wheel for an arm64 target: amd64 (was: arm64)
    assert _variant_units(monkeypatch, tmp_path, {"go": "amd64", "image": None}) == "amd64"
    # no preference: the variant's arch
    assert _variant_units(monkeypatch, tmp_path, {"image": None}) == "arm64"
    # they disagree and nothing was timed: the variant's arch
    assert _variant_units(monkeypatch, tmp_path, {"go": "amd64", "rootfs": "arm64"}) == "arm64"
    # they disagree: the arch of the longer work
    timed = {"go": 600, "rootfs": 120}
    assert _variant_units(monkeypatch, tmp_path, {"go": "amd64", "rootfs": "arm64"}, timed) == (
        "amd64"
    )
