"""The typed action result (nvkr.action.ActionResult): read from a record and written back byte
for byte, its outputs by role, and the errors a record that is not one gives."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from nvkr.action import ActionOutput, ActionResult, ResultWarning
from nvkr.canonical import canonical_json
from nvkr.errors import BuildError, IntegrityError
from nvkr.execute import execute
from nvkr.fetch.context import FetchContext
from nvkr.store import Store
from tests.helpers.recorder import echo_action, make_plan

KEY = "sha256:" + "a" * 64
BLOB = "sha256:" + "b" * 64
LOG = "sha256:" + "c" * 64


def _output(name: str = "out.txt", role: str = "primary", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "digest": BLOB,
        "size": 3,
        "mediaType": "text/plain",
        "role": role,
        **extra,
    }


def _record(**fields: Any) -> dict[str, Any]:
    return {
        "key": KEY,
        "builder": "test-echo",
        "name": "a",
        "outputs": [_output()],
        "metadata": {},
        **fields,
    }


RUN = {
    "invocationId": "i-1",
    "startedOn": "2026-11-30T03:52:04Z",
    "finishedOn": "2026-11-30T03:52:05Z",
}

EDGES = {
    "minimal: no hermetic, warnings, log or run (an old nvkr's)": _record(),
    "no outputs": _record(outputs=[], hermetic=True, run=RUN),
    "no warnings, no log": _record(hermetic=True, run=RUN),
    "warnings with and without a hint, a log": _record(
        hermetic=False,
        warnings=[{"message": "m1"}, {"message": "m2", "hint": "h"}, {"message": "m3", "hint": ""}],
        log=LOG,
        run=RUN,
    ),
    "extra run keys (run_metadata)": _record(
        hermetic=True, run={**RUN, "timings": {"rootfs": 12, "disk": 3}, "other": [1, "x", None]}
    ),
    "taken from a remote cache": _record(
        hermetic=True,
        remote={"cache": "r.example/c", "manifest": BLOB, "fetchedOn": "2026-11-30T03:52:06Z"},
        run=RUN,
    ),
    "fields nvkr does not write, kept": _record(
        outputs=[_output(annotations={"a": "b"}), _output("x", "extra", platform={"os": "linux"})],
        metadata={"packages": [{"name": "p", "version": "1"}], "n": 3, "b": True, "z": None},
        future={"anything": [1, 2]},
        warnings=[{"message": "m", "code": "W1"}],
    ),
    "an empty warnings list, as read": _record(warnings=[]),
    "non-ASCII": _record(name="agent ü", metadata={"description": "für ☃"}),
}


@pytest.mark.parametrize("doc", EDGES.values(), ids=EDGES.keys())
def test_a_record_reads_and_writes_back_byte_for_byte(doc: dict[str, Any]) -> None:
    original = copy.deepcopy(doc)
    result = ActionResult.from_json(doc, "action record x")
    assert result.to_json() == original
    assert canonical_json(result.to_json()) == canonical_json(original)
    assert doc == original, "reading a record leaves it as it was"


def test_the_typed_fields() -> None:
    result = ActionResult.from_json(EDGES["warnings with and without a hint, a log"], "r")
    assert (result.key, result.builder, result.name) == (KEY, "test-echo", "a")
    assert result.outputs == (ActionOutput("out.txt", BLOB, 3, "text/plain", "primary"),)
    assert result.warnings == (
        ResultWarning("m1"),
        ResultWarning("m2", "h"),
        ResultWarning("m3", ""),
    )
    assert result.hermetic is False and result.log == LOG and result.run == RUN
    assert result.remote is None and result.extra == {}
    assert result.outputs[0].descriptor() == {"mediaType": "text/plain", "digest": BLOB, "size": 3}


def test_outputs_by_role() -> None:
    doc = _record(outputs=[_output("a", "layer"), _output("b"), _output("c", "layer")])
    result = ActionResult.from_json(doc, "r")
    assert result.output("primary", "artifact x").name == "b"
    assert [o.name for o in result.outputs_with("layer")] == ["a", "c"]
    assert result.outputs_with("sbom") == ()
    with pytest.raises(BuildError, match=r"^artifact x: expected exactly one output with role "):
        result.output("layer", "artifact x")
    with pytest.raises(BuildError) as e:
        result.output("sbom", "artifact x")
    assert e.value.message == "artifact x: expected exactly one output with role 'sbom', found 0"


BAD = {
    "not an object": ([], "action record K: the record is a list, expected an object"),
    "no key": (
        {k: v for k, v in _record().items() if k != "key"},
        "action record K: key is null, expected a string",
    ),
    "outputs not a list": (_record(outputs={}), "outputs is an object, expected a list"),
    "an output's size is a string": (
        _record(outputs=[_output(), _output(size="3")]),
        "action record K: outputs[1]: size is a string, expected an integer",
    ),
    "an output's size is a boolean": (
        _record(outputs=[_output(size=True)]),
        "outputs[0]: size is a boolean, expected an integer",
    ),
    "an output without a digest": (
        _record(outputs=[{k: v for k, v in _output().items() if k != "digest"}]),
        "outputs[0]: digest is null, expected a string",
    ),
    "an output that is no object": (
        _record(outputs=["sha256:x"]),
        "outputs[0]: the output is a string, expected an object",
    ),
    "metadata a list": (_record(metadata=[]), "metadata is a list, expected an object"),
    "hermetic a string": (_record(hermetic="yes"), "hermetic is a string, expected a boolean"),
    "a warning without a message": (
        _record(warnings=[{"hint": "h"}]),
        "warnings[0]: message is null, expected a string",
    ),
    "warnings an object": (_record(warnings={}), "warnings is an object, expected a list"),
    "a log that is no digest": (_record(log=1), "log is a number, expected a digest (a string)"),
    "run a list": (_record(run=[]), "run is a list, expected an object"),
}


@pytest.mark.parametrize(("doc", "message"), BAD.values(), ids=BAD.keys())
def test_a_record_that_is_not_one_is_refused_naming_the_field(doc: Any, message: str) -> None:
    with pytest.raises(IntegrityError) as e:
        ActionResult.from_json(doc, "action record K")
    assert message in e.value.message
    assert e.value.message.startswith("action record K: ")


def test_the_store_takes_a_record_that_is_not_one_for_a_miss(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.action_path(KEY).write_bytes(canonical_json(_record(outputs=[{"digest": BLOB}])))
    assert store.get_action(KEY) is None


def test_every_record_of_a_store_reads_and_writes_back_byte_for_byte(
    recorder: Any, tmp_path: Path
) -> None:
    """Records as the executor writes them (outputs, a log, warnings, run), then each read and
    written again: the same bytes, and the same result as the build's."""
    store = Store(tmp_path / "store")
    recorder.hooks = {"b": lambda ctx: ctx.warn("careful", hint="look")}
    a, b = echo_action("a"), echo_action("b")
    top = echo_action("top", deps=[a.key, b.key])
    report = execute(make_plan(a, b, top, roots=[top]), store, FetchContext(store=store))
    paths = sorted(store.actions_dir.glob("*.json"))
    assert len(paths) == 3
    for path in paths:
        data = path.read_bytes()
        result = ActionResult.from_json(json.loads(data), f"action record {path.name}")
        assert canonical_json(result.to_json()) == data
        assert report.results[result.key] == result
        assert store.get_action(result.key) == result
    assert report.results[b.key].warnings == (ResultWarning("careful", "look"),)
    assert report.results[b.key].log is not None


def test_a_remote_config_whose_warnings_are_not_nvkrs_is_a_miss_with_its_reason() -> None:
    """check_config checks an entry's outputs and metadata; the warnings it carries are checked
    when the local record is made of it: a miss (EntryProblem), never a record nvkr cannot read
    back."""
    from nvkr.action import Action
    from nvkr.cache.entry import EntryProblem, local_record

    action = Action(KEY, "test-echo", "1", "a", {}, {}, {}, 0)
    config = {"outputs": [_output()], "metadata": {}, "warnings": [{"message": 1}]}
    origin = {"cache": "r.example/c", "manifest": BLOB, "fetchedOn": "2026-11-30T03:52:06Z"}
    with pytest.raises(EntryProblem, match=r"^its config: warnings\[0\]: message is a number"):
        local_record(action, config, origin)
    config["warnings"] = [{"message": "m", "hint": "h"}]
    record = local_record(action, config, origin, RUN)
    assert record.warnings == (ResultWarning("m", "h"),) and record.run == RUN
    assert record.remote == origin and record.hermetic is True
