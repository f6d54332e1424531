"""A small in-process builder for the executor, cache and build record tests: :class:`Recorder`
(the ``test-echo`` builder: writes its params as output, hooks block or fail it), the
``recorder`` fixture that registers it, and hand-made actions and plans of it."""

from __future__ import annotations

import threading

import pytest

from nvkr.action import Action, action_key
from nvkr.builders import api
from nvkr.plan import Plan


class Recorder:
    """A builder that writes its params as output; hooks let tests block or fail it."""

    name = "test-echo"
    version = "1"

    def __init__(self):
        self.calls: list[str] = []
        self.hooks: dict[str, object] = {}
        self.lock = threading.Lock()

    def plan(self, *a):  # pragma: no cover - not used: actions are made by hand
        raise AssertionError

    def run(self, ctx):
        with self.lock:
            self.calls.append(ctx.action.name)
        hook = self.hooks.get(ctx.action.name)
        if callable(hook):
            hook(ctx)
        out = ctx.workdir / "out.txt"
        deps = ",".join(sorted(r.outputs[0].digest for r in ctx.deps.values()))
        out.write_text(f"{ctx.action.name}:{deps}")
        ctx.add_output(out, name="out.txt", media_type="text/plain")


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """The :class:`Recorder` registered as the ``test-echo`` builder for the test."""
    rec = Recorder()
    monkeypatch.setitem(api.REGISTRY, "test-echo", rec)
    monkeypatch.setitem(api.REGISTRY, "go-binary", rec)  # keep the registry non-empty
    return rec


def echo_action(name: str, deps: tuple[str, ...] | list[str] = ()) -> Action:
    """An action of the ``test-echo`` builder named ``name``, on the actions keyed ``deps``."""
    key = action_key("test-echo", "1", {"n": name}, {}, {}, 0, tuple(deps))
    return Action(
        key=key,
        builder="test-echo",
        builder_version="1",
        name=name,
        params={"n": name},
        inputs={},
        tools={},
        epoch=0,
        deps=tuple(deps),
    )


def make_plan(*actions: Action, roots: list[Action]) -> Plan:
    """A plan of ``actions`` (no recipe, no variants) that builds ``roots``."""
    return Plan(
        recipe=None,
        variants=[],
        epoch=0,
        actions={a.key: a for a in actions},
        roots=[r.key for r in roots],
        release_sets={},
    )  # type: ignore[arg-type]
