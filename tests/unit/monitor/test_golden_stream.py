"""The ``nvkr build --json`` event stream of a small recipe against a golden transcript.

Consumers (CI scripts, dashboards) parse this stream, so its events and keys are a contract:
``golden/build-json.jsonl`` holds the stream of a cold build and of the no-op rebuild that follows,
and of a build that fails, with what varies from run to run (action keys and digests, which hold
the loopback port; times; temp paths) replaced by placeholders. Regenerate it with
``NVKR_UPDATE_GOLDEN=1 pytest tests/unit/monitor/test_golden_stream.py`` and review the diff: a
key removed or renamed breaks its readers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from tests.helpers.nvkr import run_nvkr
from tests.helpers.streams import RECIPE, TOOL

GOLDEN = Path(__file__).parent / "golden" / "build-json.jsonl"


_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_PORT = re.compile(r"127\.0\.0\.1:[0-9]+")
_TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_VOLATILE_NUMBERS = {"milliseconds", "ts"}


def _normalise(value: Any, names: dict[str, str], tmp: str) -> Any:
    """``value`` with digests numbered in order of appearance (the same digest keeps its
    number), times zeroed, ``tmp`` replaced by ``<tmp>`` and the loopback port by ``<port>``."""
    if isinstance(value, dict):
        return {
            k: 0 if k in _VOLATILE_NUMBERS else _normalise(v, names, tmp) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_normalise(v, names, tmp) for v in value]
    if isinstance(value, str):
        value = _PORT.sub("127.0.0.1:<port>", value.replace(tmp, "<tmp>"))
        return _DIGEST.sub(lambda m: names.setdefault(m[0], f"<digest-{len(names) + 1}>"), value)
    return value


def _stream(proj: Path, store: Path, names: dict[str, str], tmp: str, *args: str) -> list[str]:
    res = run_nvkr(
        "build", "recipes/small.yaml", "--json", "--jobs", "1", *args, cwd=proj, store=store
    )
    assert all(line.startswith("{") for line in res.stdout.splitlines()), res.stdout
    lines = [f"# exit {res.code}"]
    events = res.json_events()
    for event in events:  # the envelope of stream version 1 (README, --json)
        assert event["v"] == 1 and _TS.fullmatch(event["ts"]), event
    assert events[-1]["event"] in ("result", "error") and events[-1]["exitCode"] == res.code
    for event in events:
        lines.append(json.dumps(_normalise(event, names, tmp), sort_keys=True))
    return lines


def test_build_json_stream_matches_the_golden_transcript(tmp_path, http_dir):
    (http_dir.root / "tool").write_bytes(TOOL)
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    recipe = RECIPE.format(base=http_dir.url, sha=hashlib.sha256(TOOL).hexdigest())
    (proj / "recipes" / "small.yaml").write_text(recipe)
    locked = run_nvkr("lock", "recipes/small.yaml", cwd=proj, store=tmp_path / "lock-store")
    assert locked.code == 0, locked.stderr
    store, names, tmp = tmp_path / "store", {}, str(tmp_path)
    lines = ["# cold build", *_stream(proj, store, names, tmp)]
    lines += ["# no-op rebuild", *_stream(proj, store, names, tmp)]
    # a source whose bytes changed upstream: the build fails with an integrity error (exit 3)
    (http_dir.root / "tool").write_bytes(TOOL + b"changed\n")
    lines += ["# failed build", *_stream(proj, tmp_path / "store2", names, tmp)]
    got = "\n".join(lines) + "\n"
    if os.environ.get("NVKR_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), "the --json stream changed: regenerate and review"


def test_the_json_stream_and_the_text_agree_on_the_number_of_actions(tmp_path, http_dir):
    """A no-op rebuild's walk stops at the cached release set, and a rebuild of the release set
    alone at its cached dependencies: the stream still counts every action of the build, as the
    text does."""
    (http_dir.root / "tool").write_bytes(TOOL)
    proj = tmp_path / "proj"
    (proj / "recipes").mkdir(parents=True)
    recipe = RECIPE.format(base=http_dir.url, sha=hashlib.sha256(TOOL).hexdigest())
    (proj / "recipes" / "small.yaml").write_text(recipe)
    store = tmp_path / "store"
    cold = run_nvkr("build", "recipes/small.yaml", "--json", cwd=proj, store=store)
    assert cold.code == 0, cold.stderr
    (result,) = [e for e in cold.json_events() if e["event"] == "result"]
    set_key = result["built"][-1]

    record = store / "actions" / f"{set_key.split(':')[1]}.json"

    def counts(*args: str) -> dict[str, Any]:
        res = run_nvkr("build", "recipes/small.yaml", "--json", *args, cwd=proj, store=store)
        assert res.code == 0, res.stderr
        return {e["event"]: e.get("actions") for e in res.json_events()}

    def text() -> str:
        res = run_nvkr("build", "recipes/small.yaml", cwd=proj, store=store)
        assert res.code == 0, res.stderr
        return res.stderr

    assert "up to date — 5 actions" in text()
    assert counts() == {"actions-planned": 5, "action-cached": None, "result": 5}
    record.unlink()  # the release set's record gone: it alone is built again
    assert "built 1 of 5 actions" in text()
    record.unlink()
    got = counts()
    assert got["actions-planned"] == 5 and got["result"] == 5, got
