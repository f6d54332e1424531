"""Build records: the executor's action times, the record beside a release set, and its checks.

A small release set is built in-process by the real executor and release-set builder: an
``agent`` binary per arch (test_execute's echo builder) for three variants, as test_releaseset's
sample has them. The CLI tests at the end build test_cli's small recipe in a subprocess.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from nvkr.action import Action, action_key
from nvkr.builders import api
from nvkr.builders.release_set.builder import ReleaseSetBuilder
from nvkr.canonical import canonical_json
from nvkr.delivery.publish import publish_layout
from nvkr.delivery.pull import pull_release_set
from nvkr.errors import IntegrityError
from nvkr.execute import BuildReport, execute
from nvkr.fetch.context import FetchContext
from nvkr.oci import mediatypes as mt
from nvkr.oci.registry import RegistryClient, fallback_tag
from nvkr.plan import Plan
from nvkr.provenance import SLSA_PROVENANCE_V1, STATEMENT_TYPE, parse_timestamp, validate_statement
from nvkr.releaseset import materialize, read_metadata
from nvkr.releaseset.record import (
    build_record,
    plan_build_record,
    record_paths,
    record_subjects,
    write_build_record,
)
from nvkr.releaseset.recordcheck import check_build_record
from nvkr.releaseset.signing import ANN_ATTACHMENT, DSSE_ENVELOPE, sign_release_set
from nvkr.releasespec import ReleaseSetSpec
from nvkr.sign import generate_key, load_private_key, load_public_key, sign_envelope
from nvkr.store import Store
from nvkr.verify import verify_release_set
from tests.helpers.nvkr import Result, run_nvkr
from tests.helpers.recorder import Recorder
from tests.helpers.registry import Registry
from tests.helpers.results import result as read_record
from tests.helpers.sample_set import DEPS, EPOCH, NAME, VARIANTS

HOPPER = "agent (gpu=hopper,kubernetes=1.36,arch=amd64)"


# -- an in-process build -------------------------------------------------------------------------
@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    api.get_builder("release-set")  # fill the registry before adding the echo builder
    rec = Recorder()
    monkeypatch.setitem(api.REGISTRY, "test-echo", rec)
    return rec


def _action(name: str, params: dict[str, Any], builder: str = "test-echo", deps=()) -> Action:
    version = ReleaseSetBuilder.version if builder == "release-set" else "1"
    return Action(
        key=action_key(builder, version, params, {}, {}, EPOCH, tuple(deps)),
        builder=builder,
        builder_version=version,
        name=name,
        params=params,
        inputs={},
        tools={},
        epoch=EPOCH,
        deps=tuple(sorted(deps)),
    )


def small_plan(name: str = NAME, epoch: int = EPOCH) -> Plan:
    """agent [amd64] (shared by two variants) and agent [arm64], and their release set."""
    agents = {
        a: _action(f"agent [{a}]", {"n": f"agent-{a}", "epoch": epoch}) for a in ("amd64", "arm64")
    }
    spec = {
        "name": name,
        "epoch": epoch,
        "recipe": {"path": "recipes/small.yaml", "digest": "sha256:" + "4" * 64},
        "lockfile": {"path": "lockfiles/small.lock.json", "digest": "sha256:" + "5" * 64},
        "nvkrVersion": "0.1.0",
        "variants": VARIANTS,
        "artifacts": [
            {
                "name": "agent",
                "kind": "binary",
                "actionKey": agents[v["arch"]].key,
                "builder": "test-echo",
                "builderVersion": "1",
                "variant": v,
                "platform": {"os": "linux", "architecture": v["arch"]},
                "artifactType": mt.NVKR_BINARY,
                "dependencies": DEPS,
            }
            for v in VARIANTS
        ],
        "machineImages": [],
        "clusterRelease": None,
        "nodePoolReleases": [],
    }
    root = _action(f"release set {name}", spec, "release-set", [a.key for a in agents.values()])
    actions = {a.key: a for a in [*agents.values(), root]}
    return Plan(
        recipe=None,  # type: ignore[arg-type]
        variants=[],
        epoch=epoch,
        actions=actions,
        roots=[root.key],
        release_sets={name: root.key},
    )


@dataclass
class Built:
    plan: Plan
    store: Store
    report: BuildReport
    layout: Path
    record: Path
    envelope: Path | None


def build(root: Path, plan: Plan | None = None, key: Any = None) -> Built:
    """Execute ``plan`` in ``root/store``, materialize into ``root/dist``, write the record."""
    plan = plan or small_plan()
    store = Store(root / "store")
    report = execute(plan, store, FetchContext(store=store), jobs=2)
    (set_name, set_key), *_ = plan.release_sets.items()
    layout = materialize(report.results[set_key], store, root / "dist")
    if key is not None:
        sign_release_set(layout, key)
    statement = plan_build_record(plan, report, set_name, layout, store)
    record, envelope = write_build_record(layout, statement, key)
    return Built(plan, store, report, layout, record, envelope)


@pytest.fixture
def built(tmp_path: Path, recorder: Recorder) -> Built:
    return build(tmp_path)


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_bytes())
    return doc


def _rewrite(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    doc = _load(path)
    edit(doc)
    path.write_bytes(canonical_json(doc))


def _untimed(doc: dict[str, Any]) -> dict[str, Any]:
    """The record without invocation ids, times and cached flags."""
    doc = json.loads(json.dumps(doc))
    run = doc["predicate"]["runDetails"]
    run["metadata"] = {}
    for b in run["byproducts"]:
        for k in ("invocationId", "startedOn", "finishedOn", "cached"):
            b["annotations"].pop(k, None)
    return doc


# -- the executor --------------------------------------------------------------------------------
def test_every_action_run_records_its_times(built: Built) -> None:
    for key in built.plan.actions:
        record = built.store.get_action(key)
        assert record is not None
        run = record.to_json()["run"]
        assert run["invocationId"] == built.report.invocation_id
        assert parse_timestamp(run["startedOn"]) <= parse_timestamp(run["finishedOn"])
        assert run["startedOn"].endswith("Z") and len(run["startedOn"]) == 20


def test_times_do_not_go_backwards_within_a_build_when_the_clock_steps_back(
    tmp_path: Path, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every reading of the wall clock is an hour before the last (NTP stepping it back): each
    action still finishes after it starts, and starts after what it needs finished."""
    import time as real_time
    import types

    import nvkr.execute

    now = [real_time.time()]

    def stepping_back() -> float:
        now[0] -= 3600
        return now[0]

    fake = types.SimpleNamespace(time=stepping_back, monotonic=real_time.monotonic)
    monkeypatch.setattr(nvkr.execute, "time", fake)
    b = build(tmp_path)
    runs = {k: b.store.get_action(k).to_json()["run"] for k in b.plan.actions}  # type: ignore[union-attr]
    for key, action in b.plan.actions.items():
        start, end = (parse_timestamp(runs[key][f]) for f in ("startedOn", "finishedOn"))
        assert start <= end, runs[key]
        for dep in action.deps:
            assert parse_timestamp(runs[dep]["finishedOn"]) <= start, (runs[dep], runs[key])
    assert check_build_record(b.layout, read_metadata(b.layout), _set_digest(b)).problems == []


def _set_digest(b: Built) -> str:
    (set_key,) = b.plan.release_sets.values()
    return str(b.report.results[set_key].metadata["releaseSetDigest"])


def test_a_cached_action_keeps_the_times_of_the_run_that_built_it(
    built: Built, recorder: Recorder
) -> None:
    before = {k: built.store.action_path(k).read_bytes() for k in built.plan.actions}
    recorder.calls.clear()
    again = execute(built.plan, built.store, FetchContext(store=built.store))
    assert recorder.calls == [] and again.up_to_date
    assert again.invocation_id != built.report.invocation_id
    assert {k: built.store.action_path(k).read_bytes() for k in built.plan.actions} == before


def test_the_set_is_byte_identical_across_stores_while_the_records_differ_in_time_only(
    tmp_path: Path, recorder: Recorder
) -> None:
    one, two = build(tmp_path / "one"), build(tmp_path / "two")
    assert (one.layout / "index.json").read_bytes() == (two.layout / "index.json").read_bytes()
    files = sorted(p.relative_to(one.layout) for p in one.layout.rglob("*") if p.is_file())
    for rel in files:
        assert (one.layout / rel).read_bytes() == (two.layout / rel).read_bytes(), rel
    assert not any("build-record" in str(p) for p in files), "the record is never in the layout"
    a, b = _load(one.record), _load(two.record)
    assert a != b and _untimed(a) == _untimed(b)
    assert a["predicate"]["runDetails"]["metadata"]["invocationId"] == one.report.invocation_id


# -- the record ----------------------------------------------------------------------------------
def test_record_shape(built: Built) -> None:
    assert built.record == built.layout.parent / f"{NAME}.build-record.json"
    assert built.envelope is None
    data = built.record.read_bytes()
    doc = json.loads(data)
    assert data == canonical_json(doc)
    validate_statement(doc)
    assert doc["_type"] == STATEMENT_TYPE and doc["predicateType"] == SLSA_PROVENANCE_V1
    meta = read_metadata(built.layout)
    set_key = built.plan.release_sets[NAME]
    digest = built.report.results[set_key].metadata["releaseSetDigest"]
    assert doc["subject"] == record_subjects(meta, digest)
    names = [s["name"] for s in doc["subject"]]
    assert names == [
        NAME,
        HOPPER,
        "agent (gpu=blackwell,kubernetes=1.36,arch=amd64)",
        "agent (gpu=blackwell,kubernetes=1.36,arch=arm64)",
    ]
    # the artifacts' digests are their manifests in the set, as the metadata lists them
    assert [s["digest"]["sha256"] for s in doc["subject"][1:]] == [
        a["manifest"]["digest"].split(":")[1] for a in meta["artifacts"]
    ]
    bd = doc["predicate"]["buildDefinition"]
    assert bd["externalParameters"] == {
        "recipe": meta["recipe"],
        "lockfile": meta["lockfile"],
        "releaseSet": NAME,
        "variants": VARIANTS,
    }
    assert bd["internalParameters"] == {
        "epoch": EPOCH,
        "builder": "release-set",
        "builderVersion": ReleaseSetBuilder.version,
        "actionKey": set_key,
    }
    assert bd["resolvedDependencies"] == sorted(DEPS, key=lambda d: d["name"])
    run = doc["predicate"]["runDetails"]
    assert run["builder"] == {"id": "https://nvkr.dev/builders/nvkr", "version": {"nvkr": "0.1.0"}}
    byproducts = {b["annotations"]["actionKey"]: b for b in run["byproducts"]}
    assert set(byproducts) == set(built.plan.actions)
    for key, b in byproducts.items():
        record = built.store.get_action(key)
        assert record is not None
        ann = b["annotations"]
        assert b["name"] == built.plan.actions[key].name
        assert ann["cached"] is False and ann["invocationId"] == built.report.invocation_id
        assert (ann["startedOn"], ann["finishedOn"]) == (
            record.to_json()["run"]["startedOn"],
            record.to_json()["run"]["finishedOn"],
        )
    index_json = hashlib.sha256((built.layout / "index.json").read_bytes()).hexdigest()
    assert byproducts[set_key]["digest"] == {"sha256": index_json}
    meta_run = run["metadata"]
    assert meta_run["startedOn"] == min(b["annotations"]["startedOn"] for b in byproducts.values())
    assert meta_run["finishedOn"] == max(
        b["annotations"]["finishedOn"] for b in byproducts.values()
    )


def test_a_no_op_rebuild_leaves_the_record_untouched(built: Built) -> None:
    data, inode = built.record.read_bytes(), built.record.stat().st_ino
    again = build(built.layout.parent.parent, built.plan)
    assert again.report.up_to_date
    assert again.record.read_bytes() == data and again.record.stat().st_ino == inode


def test_a_partial_rebuild_marks_what_came_from_the_cache(built: Built) -> None:
    by_name = {a.name: a.key for a in built.plan.actions.values()}
    for name in ("agent [arm64]", f"release set {NAME}"):
        built.store.action_path(by_name[name]).unlink()
    again = build(built.layout.parent.parent, built.plan)
    assert sorted(again.report.built) == sorted(
        [by_name["agent [arm64]"], by_name[f"release set {NAME}"]]
    )
    doc = _load(again.record)
    assert doc["predicate"]["runDetails"]["metadata"]["invocationId"] == again.report.invocation_id
    ann = {b["name"]: b["annotations"] for b in doc["predicate"]["runDetails"]["byproducts"]}
    assert ann["agent [amd64]"]["cached"] is True
    assert ann["agent [amd64]"]["invocationId"] == built.report.invocation_id
    assert ann["agent [arm64]"]["cached"] is False
    assert ann[f"release set {NAME}"]["invocationId"] == again.report.invocation_id
    assert verify_release_set(again.layout).ok


def test_records_from_before_times_were_kept_still_work(built: Built) -> None:
    for key in built.plan.actions:
        path = built.store.action_path(key)
        record = json.loads(path.read_bytes())
        del record["run"]
        path.write_bytes(canonical_json(record))
    again = build(built.layout.parent.parent, built.plan)
    assert again.report.up_to_date
    doc = _load(again.record)
    run = doc["predicate"]["runDetails"]
    assert run["metadata"] == {}
    assert all(
        set(b["annotations"]) == {"actionKey", "builder", "cached"} and b["annotations"]["cached"]
        for b in run["byproducts"]
    )
    report = verify_release_set(again.layout)
    assert report.ok and report.build_record is not None and report.build_record["checked"]


def test_bad_times_in_an_action_record_are_refused(built: Built) -> None:
    set_key = built.plan.release_sets[NAME]
    path = built.store.action_path(set_key)
    record = json.loads(path.read_bytes())
    record["run"]["startedOn"] = "yesterday"
    path.write_bytes(canonical_json(record))
    with pytest.raises(IntegrityError, match="yesterday"):
        plan_build_record(
            built.plan,
            execute(built.plan, built.store, FetchContext(store=built.store)),
            NAME,
            built.layout,
            built.store,
        )


def test_build_record_is_a_function_of_its_inputs() -> None:
    plan = small_plan()
    spec = ReleaseSetSpec.from_params(plan.actions[plan.release_sets[NAME]].params)
    meta = {"name": NAME, "artifacts": []}
    records = [
        {
            "key": "sha256:" + "a" * 64,
            "builder": "release-set",
            "name": "release set x",
            "outputs": [
                {
                    "name": "index.json",
                    "digest": "sha256:" + "b" * 64,
                    "size": 2,
                    "mediaType": mt.OCI_INDEX,
                    "role": "index",
                }
            ],
            "run": {
                "invocationId": "i-1",
                "startedOn": "2026-11-30T03:52:04Z",
                "finishedOn": "2026-11-30T03:52:05Z",
            },
        }
    ]
    set_action = {"key": "sha256:" + "a" * 64, "builder": "release-set", "builderVersion": "3"}
    typed = [read_record(r) for r in records]
    one = build_record(spec, set_action, meta, "sha256:" + "c" * 64, typed)
    assert canonical_json(one) == canonical_json(
        build_record(spec, set_action, meta, "sha256:" + "c" * 64, list(reversed(typed)))
    )
    assert one["predicate"]["runDetails"]["metadata"] == {
        "invocationId": "i-1",
        "startedOn": "2026-11-30T03:52:04Z",
        "finishedOn": "2026-11-30T03:52:05Z",
    }


# -- verify --------------------------------------------------------------------------------------
def _problems(report_json: str) -> list[dict[str, Any]]:
    return [p for p in json.loads(report_json)["problems"] if p["check"] == "build-record"]


def test_verify_checks_the_record_and_reports_it(built: Built, nvkr: Callable[..., Result]) -> None:
    res = nvkr("verify", built.layout, "--json")
    assert res.code == 0, res.stderr
    rec = json.loads(res.stdout)["buildRecord"]
    assert rec["present"] and rec["checked"] and not rec["signed"]
    assert rec["invocationId"] == built.report.invocation_id and rec["actions"] == 3
    human = nvkr("verify", built.layout)
    assert human.code == 0 and "build record" in human.stdout and "3 actions" in human.stdout


def test_verify_without_a_record_passes_and_says_so(
    built: Built, nvkr: Callable[..., Result]
) -> None:
    built.record.unlink()
    res = nvkr("verify", built.layout, "--json")
    assert res.code == 0, res.stderr
    rec = json.loads(res.stdout)["buildRecord"]
    assert rec["present"] is False and rec["checked"] is False
    assert "none beside the set, not checked" in nvkr("verify", built.layout).stdout


def test_a_tampered_subject_digest_exits_3_naming_the_artifact(
    built: Built, nvkr: Callable[..., Result]
) -> None:
    def edit(doc: dict[str, Any]) -> None:
        (subject,) = [s for s in doc["subject"] if s["name"] == HOPPER]
        subject["digest"]["sha256"] = "f" * 64

    _rewrite(built.record, edit)
    res = nvkr("verify", built.layout, "--json")
    assert res.code == 3
    (problem,) = _problems(res.stdout)
    assert HOPPER in problem["message"] and "sha256:" + "f" * 64 in problem["message"]
    assert HOPPER in res.stderr and "Traceback" not in res.stderr


def test_a_record_of_another_set_exits_3(
    tmp_path: Path, built: Built, recorder: Recorder, nvkr: Callable[..., Result]
) -> None:
    other = build(tmp_path / "other", small_plan(epoch=EPOCH + 1))
    shutil.copyfile(other.record, built.record)
    res = nvkr("verify", built.layout, "--json")
    assert res.code == 3
    messages = " ".join(p["message"] for p in _problems(res.stdout))
    assert NAME in messages and HOPPER in messages


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda run: run["metadata"].update(startedOn="2026-13-01T00:00:00Z"), "2026-13-01"),
        (lambda run: run["metadata"].update(finishedOn="yesterday"), "yesterday"),
        (
            lambda run: run["metadata"].update(
                startedOn="2025-01-01T00:00:00Z", finishedOn="2024-01-01T00:00:00Z"
            ),
            "is after finishedOn",
        ),
        (
            lambda run: run["byproducts"][0]["annotations"].update(
                finishedOn="2000-01-01T00:00:00Z"
            ),
            "is after finishedOn",
        ),
        (
            lambda run: run["byproducts"][0]["annotations"].update(
                startedOn="1999-01-01T00:00:00Z", finishedOn="1999-01-01T00:00:01Z"
            ),
            "outside",
        ),
        (
            lambda run: run["metadata"].update(startedOn="2026-01-01T02:00:00+02:00"),
            "is not UTC",
        ),
        (
            lambda run: run["byproducts"][0]["annotations"].update(
                startedOn="2026-01-01T00:00:00-05:00"
            ),
            "is not UTC",
        ),
        (
            lambda run: (
                run["metadata"].update(finishedOn="2999-01-01T00:00:00Z"),
                run["byproducts"][0]["annotations"].update(finishedOn="2999-01-01T00:00:00Z"),
            ),
            "is in the future",
        ),
    ],
)
def test_bad_times_exit_3(
    built: Built, nvkr: Callable[..., Result], edit: Callable[[dict[str, Any]], None], needle: str
) -> None:
    _rewrite(built.record, lambda doc: edit(doc["predicate"]["runDetails"]))
    res = nvkr("verify", built.layout, "--json")
    assert res.code == 3, res.stdout
    (problem,) = _problems(res.stdout)
    assert needle in problem["message"]


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Any]:
    out = {}
    for name in ("a", "b"):
        generate_key("ecdsa-p256", tmp_path / name)
        out[name] = load_private_key(tmp_path / f"{name}.key")
        out[f"{name}.pub"] = tmp_path / f"{name}.pub"
    return out


def test_a_signed_record_verifies_with_its_key_only(
    tmp_path: Path, recorder: Recorder, keys: dict[str, Any], nvkr: Callable[..., Result]
) -> None:
    signed = build(tmp_path / "signed", key=keys["a"])
    assert signed.envelope == signed.layout.parent / f"{NAME}.build-record.dsse.json"
    envelope = json.loads(signed.envelope.read_bytes())
    assert base64.b64decode(envelope["payload"]) == signed.record.read_bytes()
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    ok = nvkr("verify", signed.layout, "--key", keys["a.pub"], "--json")
    assert ok.code == 0, ok.stdout
    rec = json.loads(ok.stdout)["buildRecord"]
    assert rec["signed"] and len(rec["verifiedBy"]) == 1
    # the set signed by a, the record by b: --key a accepts the set and refuses the record
    signed.envelope.write_bytes(
        canonical_json(sign_envelope(signed.record.read_bytes(), mt.IN_TOTO_JSON, keys["b"]))
    )
    wrong = nvkr("verify", signed.layout, "--key", keys["a.pub"], "--json")
    assert wrong.code == 3
    (problem,) = _problems(wrong.stdout)
    assert "not signed by any given key" in problem["message"]
    # an envelope over other bytes is refused even without a key
    _rewrite(
        signed.record, lambda doc: doc["predicate"]["runDetails"]["metadata"].pop("invocationId")
    )
    stale = nvkr("verify", signed.layout, "--json")
    assert (
        stale.code == 3
        and "does not sign the build record" in _problems(stale.stdout)[0]["message"]
    )


def test_an_unsigned_rebuild_drops_a_stale_envelope_only(
    tmp_path: Path, recorder: Recorder, keys: dict[str, Any]
) -> None:
    signed = build(tmp_path, key=keys["a"])
    assert signed.envelope is not None
    again = build(tmp_path, signed.plan)  # no-op, unsigned: the envelope still signs the record
    assert again.envelope == signed.envelope and signed.envelope.is_file()
    _, envelope_path = record_paths(signed.layout)
    signed.store.action_path(signed.plan.release_sets[NAME]).unlink()
    rebuilt = build(tmp_path, signed.plan)  # a new invocation: the old envelope is stale
    assert rebuilt.envelope is None and not envelope_path.exists()


def test_check_build_record_sees_the_layout_through_any_path_spelling(
    built: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    meta = read_metadata(built.layout)
    digest = built.report.results[built.plan.release_sets[NAME]].metadata["releaseSetDigest"]
    monkeypatch.chdir(built.layout)
    check = check_build_record(Path("."), meta, digest)
    assert check.checked and not check.problems
    monkeypatch.chdir(built.layout.parent)
    assert check_build_record(Path(f"{NAME}/"), meta, digest).checked


# -- nvkr build ----------------------------------------------------------------------------------
def test_nvkr_build_writes_the_record_beside_the_set(tmp_path: Path, http_dir: Any) -> None:
    from tests.helpers.recipes import write_small_recipe

    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    (http_dir.root / "README").write_bytes(b"readme\n")
    for arch in ("amd64", "arm64"):
        d = http_dir.root / "release" / "v1.0.0" / "bin" / "linux" / arch
        d.mkdir(parents=True)
        (d / "tool").write_bytes(f"tool for {arch}\n".encode())
        (d / "tool.sha256").write_text(hashlib.sha256(f"tool for {arch}\n".encode()).hexdigest())
    write_small_recipe(proj, http_dir.url)
    store = tmp_path / "store"
    generate_key("ed25519", tmp_path / "k")
    first = run_nvkr(
        "build",
        "recipes/small.yaml",
        "--json",
        "--sign",
        str(tmp_path / "k.key"),
        cwd=proj,
        store=store,
    )
    assert first.code == 0, first.stderr
    (result,) = first.json_events()[-1]["releaseSets"]
    record = proj / "dist" / "small-1.36.build-record.json"
    assert Path(result["buildRecord"]).resolve() == record.resolve()
    envelope = record.with_name("small-1.36.build-record.dsse.json")
    data, signed = record.read_bytes(), envelope.read_bytes()
    doc = json.loads(data)
    assert doc["subject"][0]["name"] == "small-1.36"
    assert doc["subject"][0]["digest"]["sha256"] == result["digest"].split(":")[1]
    assert not list((proj / "dist" / "small-1.36").rglob("*build-record*"))
    again = run_nvkr(
        "build", "recipes/small.yaml", "--sign", str(tmp_path / "k.key"), cwd=proj, store=store
    )
    assert again.code == 0 and "up to date" in again.stderr
    assert record.read_bytes() == data and envelope.read_bytes() == signed
    ok = run_nvkr(
        "verify",
        "dist/small-1.36",
        "--key",
        str(tmp_path / "k.pub"),
        "--json",
        cwd=proj,
        store=store,
    )
    assert ok.code == 0, ok.stderr + ok.stdout
    rec = json.loads(ok.stdout)["buildRecord"]
    assert rec["checked"] and rec["signed"] and rec["verifiedBy"]


# -- publish and pull ----------------------------------------------------------------------------
def test_publish_attaches_the_record_and_pull_brings_it_back(
    tmp_path: Path, recorder: Recorder, keys: dict[str, Any], registry: Registry
) -> None:
    signed = build(tmp_path / "b", key=keys["a"])
    assert signed.envelope is not None
    client = RegistryClient(registry.host)
    repo = "record/set"
    report = publish_layout(signed.layout, f"{registry.host}/{repo}", client)
    assert report.tag_moved and len(report.build_record) == 2
    listed = json.loads(client.get_manifest(repo, fallback_tag(report.digest))[0])["manifests"]
    attached = {m["digest"]: m for m in listed if m.get("annotations", {}).get(ANN_ATTACHMENT)}
    assert set(report.build_record) <= set(attached)
    assert sorted(attached[d]["artifactType"] for d in report.build_record) == sorted(
        [mt.IN_TOTO_JSON, DSSE_ENVELOPE]
    )
    for d in report.build_record:
        doc = json.loads(client.get_manifest(repo, d)[0])
        assert doc["subject"]["digest"] == report.digest
        assert doc["annotations"][ANN_ATTACHMENT] == "build-record"
    # the fallback tag that lists the record is in the report
    assert fallback_tag(report.digest) in report.referrers_tags
    assert report.referrers == "fallback-tag"
    events: list[tuple[str, dict[str, Any]]] = []
    again = publish_layout(
        signed.layout,
        f"{registry.host}/{repo}",
        client,
        on_event=lambda k, f: events.append((k, f)),
    )
    assert again.build_record == report.build_record and again.bytes_uploaded == 0
    # a re-publish says the record was there already, and the tag came before it
    kinds = [k for k, _ in events]
    assert kinds.index("tagged") < kinds.index("build-record")
    assert dict(events)["build-record"]["pushed"] is False

    target = tmp_path / "pulled" / "set"
    pub = load_public_key(keys["a.pub"])
    pulled = pull_release_set(f"{registry.host}/{repo}@{report.digest}", target, client, keys=[pub])
    record, envelope = record_paths(target)
    assert pulled.build_record == str(record)
    assert record.read_bytes() == signed.record.read_bytes()
    assert envelope.read_bytes() == signed.envelope.read_bytes()
    signatures = len(json.loads((signed.layout / "index.json").read_bytes())["manifests"]) - 1
    assert pulled.signatures == signatures, "the record's envelope is no signature of the set"
    checked = verify_release_set(target, keys=[pub])
    assert checked.ok and checked.build_record is not None and checked.build_record["verifiedBy"]

    # a set published without a record: a pull over the earlier one leaves none beside it
    bare = build(tmp_path / "bare", small_plan(epoch=EPOCH + 5))
    bare.record.unlink()
    none = publish_layout(bare.layout, f"{registry.host}/{repo}:bare", client)
    assert none.build_record == []
    again_pulled = pull_release_set(f"{registry.host}/{repo}@{none.digest}", target, client)
    assert again_pulled.build_record is None and not record.exists() and not envelope.exists()


def test_a_foreign_record_fails_the_publish_after_the_set(
    tmp_path: Path, recorder: Recorder, registry: Registry
) -> None:
    one = build(tmp_path / "one")
    other = build(tmp_path / "other", small_plan(epoch=EPOCH + 9))
    shutil.copyfile(other.record, one.record)
    client = RegistryClient(registry.host)
    with pytest.raises(IntegrityError, match="is published and tagged") as e:
        publish_layout(one.layout, f"{registry.host}/record/foreign", client)
    assert f"names release set {NAME} with digest" in e.value.message
    digest = json.loads((one.layout / "index.json").read_bytes())["manifests"][0]["digest"]
    assert client.manifest_digest("record/foreign", NAME) == digest, "the set is published"


def test_pull_refuses_a_record_that_does_not_verify(
    tmp_path: Path, recorder: Recorder, keys: dict[str, Any], registry: Registry
) -> None:
    signed = build(tmp_path / "s", key=keys["a"])
    assert signed.envelope is not None
    signed.envelope.write_bytes(
        canonical_json(sign_envelope(signed.record.read_bytes(), mt.IN_TOTO_JSON, keys["b"]))
    )
    client = RegistryClient(registry.host)
    report = publish_layout(signed.layout, f"{registry.host}/record/wrong", client)
    target = tmp_path / "pulled"
    with pytest.raises(IntegrityError, match="not signed by any given key"):
        pull_release_set(
            f"{registry.host}/record/wrong@{report.digest}",
            target,
            client,
            keys=[load_public_key(keys["a.pub"])],
        )
    assert not target.exists() and not record_paths(target)[0].exists()


# -- build warnings ------------------------------------------------------------------------------
def test_build_warnings_are_kept_in_the_record_and_shown_by_verify_and_show(
    tmp_path: Path, recorder: Recorder, nvkr: Callable[..., Result]
) -> None:
    pin = "chart agent: image repo@sha256:abc is pinned but no rendered manifest holds it"
    recorder.hooks["agent [amd64]"] = lambda ctx: ctx.warn(pin, hint="the chart ignores the pin")
    recorder.hooks["agent [arm64]"] = lambda ctx: ctx.warn("dynamic binary on scratch")
    b = build(tmp_path)
    annotated = {
        p["name"]: p["annotations"].get("warnings")
        for p in _load(b.record)["predicate"]["runDetails"]["byproducts"]
    }
    assert annotated["agent [amd64]"] == [{"message": pin, "hint": "the chart ignores the pin"}]
    assert annotated["agent [arm64]"] == [{"message": "dynamic binary on scratch"}]
    assert annotated[f"release set {NAME}"] is None
    res = nvkr("verify", b.layout, "--json")
    assert res.code == 0, res.stderr
    assert json.loads(res.stdout)["buildRecord"]["warnings"] == [
        {"action": "agent [amd64]", "message": pin, "hint": "the chart ignores the pin"},
        {"action": "agent [arm64]", "message": "dynamic binary on scratch"},
    ]
    human = nvkr("verify", b.layout)
    assert human.code == 0 and f"warning: agent [amd64]: {pin}" in human.stdout
    assert "hint: the chart ignores the pin" in human.stdout
    shown = nvkr("release-set", "show", b.layout)
    assert shown.code == 0, shown.stderr
    assert "2 build warnings" in shown.stdout and "dynamic binary on scratch" in shown.stdout
    doc = json.loads(nvkr("release-set", "show", b.layout, "--json").stdout)
    assert [w["action"] for w in doc["buildWarnings"]] == ["agent [amd64]", "agent [arm64]"]


def test_a_record_without_warnings_shows_none(built: Built, nvkr: Callable[..., Result]) -> None:
    assert (
        json.loads(nvkr("verify", built.layout, "--json").stdout)["buildRecord"]["warnings"] == []
    )
    assert "build warning" not in nvkr("release-set", "show", built.layout).stdout
