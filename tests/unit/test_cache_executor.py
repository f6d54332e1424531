"""The executor with a remote cache, in process: demand-driven lookups down a deeper chain, the
lookup pool's bound, results that are not shared, and where the settings come from. Builders are
the small in-process ones of test_execute.py; the registry is real."""

from __future__ import annotations

import threading
import time

import pytest

from nvkr.cache.entry import entry_tag
from nvkr.cache.push import CacheWriter
from nvkr.cache.remote import CacheReader
from nvkr.cache.settings import CacheSettings, resolve_settings
from nvkr.errors import UsageError
from nvkr.execute import execute
from nvkr.fetch.context import FetchContext
from nvkr.oci.reference import Reference
from nvkr.oci.registry import RegistryClient
from nvkr.sign import generate_key, load_private_key, load_public_key
from nvkr.store import Store
from nvkr.walk import LOOKUP_JOBS
from tests.helpers.recorder import echo_action, make_plan


@pytest.fixture
def key(tmp_path):
    return generate_key("ed25519", tmp_path / "cache")


def _settings(registry, repo, key, **over) -> CacheSettings:
    ref = Reference.parse(f"{registry.host}/{repo}")
    private = load_private_key(key.private_path)
    values = {
        "sources": (ref,),
        "target": ref,
        "mode": "max",
        "sign_key": private,
        "trust": (load_public_key(key.public_path),),
        **over,
    }
    return CacheSettings(**values)  # type: ignore[arg-type]


class Events:
    def __init__(self):
        self.seen: list[tuple[str, dict]] = []
        self.lock = threading.Lock()

    def __call__(self, kind, **fields):
        with self.lock:
            self.seen.append((kind, fields))

    def names(self, kind):
        return sorted(f["action"].name for k, f in self.seen if k == kind and "action" in f)


def _push_all(plan, store, settings, events=None):
    events = events or Events()
    with RegistryClient(settings.target.registry) as client:
        writer = CacheWriter(settings, store, plan, client, events)
        report = execute(plan, store, FetchContext(store=store), jobs=2, on_result=writer.offer)
        writer.finish(report)
    return report, events


def _pull(plan, store, settings, **kw):
    events = Events()
    with CacheReader(settings, store, RegistryClient, events) as reader:
        report = execute(plan, store, FetchContext(store=store), jobs=2, remote=reader, **kw)
    return report, events


def test_a_hit_deep_in_the_graph_stops_the_descent(recorder, tmp_path, registry, key):
    """top <- mid <- low: with top's entry gone, a fresh store takes mid from the cache and
    runs top; low (the root filesystem beneath a node image, say) is never looked at."""
    low = echo_action("low")
    mid = echo_action("mid", [low.key])
    top = echo_action("top", [mid.key])
    plan = make_plan(low, mid, top, roots=[top])
    settings = _settings(registry, "deep", key)
    _push_all(plan, Store(tmp_path / "a"), settings)
    client = RegistryClient(registry.host)
    assert client.delete_manifest("deep", client.manifest_digest("deep", entry_tag(top.key)))
    recorder.calls.clear()
    report, events = _pull(plan, Store(tmp_path / "b"), settings)
    assert recorder.calls == ["top"]
    assert report.built == [top.key] and report.remote == {mid.key: f"{registry.host}/deep"}
    assert events.names("cache-hit") == ["mid"]
    assert events.names("cache-miss") == ["top"]
    assert not (tmp_path / "b" / "actions" / (low.key[7:] + ".json")).exists()


def test_lookups_run_in_a_bounded_pool(recorder, tmp_path, registry, key):
    leaves = [echo_action(f"leaf-{i}") for i in range(3 * LOOKUP_JOBS)]
    top = echo_action("top", [a.key for a in leaves])
    plan = make_plan(*leaves, top, roots=[top])
    settings = _settings(registry, "wide", key, target=None)
    store = Store(tmp_path / "b")
    inflight, peak, lock = [0], [0], threading.Lock()

    class Counting(CacheReader):
        def lookup(self, action):
            with lock:
                inflight[0] += 1
                peak[0] = max(peak[0], inflight[0])
            try:
                time.sleep(0.02)  # long enough for the pool to fill
                return super().lookup(action)
            finally:
                with lock:
                    inflight[0] -= 1

    with Counting(settings, store, RegistryClient, Events()) as reader:
        report = execute(plan, store, FetchContext(store=store), jobs=2, remote=reader)
    assert len(report.built) == len(leaves) + 1
    assert peak[0] == LOOKUP_JOBS


def test_a_result_whose_key_misses_a_tool_is_neither_pushed_nor_looked_up(
    recorder, tmp_path, registry, key
):
    """An action not ``hermetic`` (cgo with host C tools, a docker daemon) stays local: a note,
    no entry, and a reader never asks for it either."""
    low = echo_action("low")
    top = echo_action("top", [low.key])
    object.__setattr__(low, "hermetic", False)
    plan = make_plan(low, top, roots=[top])
    settings = _settings(registry, "local", key)
    _, events = _push_all(plan, Store(tmp_path / "a"), settings)
    notes = [f for k, f in events.seen if k == "cache-warning"]
    assert [(f["action"].name, f["level"]) for f in notes] == [("low", "note")]
    assert events.names("cache-push") == ["top"]
    client = RegistryClient(registry.host)
    assert client.manifest_digest("local", entry_tag(low.key)) is None
    client.delete_manifest("local", client.manifest_digest("local", entry_tag(top.key)))
    recorder.calls.clear()
    _report, events = _pull(plan, Store(tmp_path / "b"), settings)
    assert sorted(recorder.calls) == ["low", "top"]
    assert events.names("cache-miss") == ["top"], "low is not even asked for"


def test_cached_only_runs_no_builder(recorder, tmp_path, registry, key):
    low = echo_action("low")
    top = echo_action("top", [low.key])
    plan = make_plan(low, top, roots=[top])
    settings = _settings(registry, "only", key, target=None)
    from nvkr.errors import BuildError

    with pytest.raises(BuildError) as err:
        _pull(plan, Store(tmp_path / "b"), settings, cached_only=True)
    assert recorder.calls == []
    assert "top (builder test-echo, variant every variant, key " + top.key in err.value.message
    assert "low (builder test-echo" in err.value.message


# -- settings ------------------------------------------------------------------------------------
def test_the_command_line_beats_the_environment_which_beats_the_config(tmp_path, key):
    other = generate_key("ed25519", tmp_path / "other")
    config = tmp_path / "conf" / "config.yaml"
    config.parent.mkdir()
    (tmp_path / "conf" / "keys").mkdir()
    (tmp_path / "conf" / "keys" / "k.pub").write_bytes(other.public_path.read_bytes())
    config.write_text(
        "mirrors: []\n"
        "cache:\n"
        "  from: [reg.example/config-a, reg.example/config-b]\n"
        "  to: reg.example/config-to\n"
        "  salt: config-salt\n"
        "  mode: max\n"
        "  trust: keys/k.pub\n"  # relative to the config file
        f"  signKey: {key.private_path}\n"
    )
    from_config = resolve_settings(env={}, config=config)
    assert [f"{r.registry}/{r.repository}" for r in from_config.sources] == [
        "reg.example/config-a",
        "reg.example/config-b",
    ]
    assert str(from_config.target) == "reg.example/config-to"
    assert (from_config.mode, from_config.salt) == ("max", "config-salt")
    assert len(from_config.trust) == 2  # the config's key and the signing key's own
    env = {
        "NVKR_CACHE_FROM": "reg.example/env-a, reg.example/env-b reg.example/env-c",
        "NVKR_CACHE_SALT": "env-salt",
        "NVKR_CACHE_MODE": "min",
    }
    from_env = resolve_settings(env=env, config=config)
    assert [r.repository for r in from_env.sources] == ["env-a", "env-b", "env-c"]
    assert (from_env.mode, from_env.salt) == ("min", "env-salt")
    assert str(from_env.target) == "reg.example/config-to"
    from_cli = resolve_settings(
        cache_from=["reg.example/cli"], salt="cli-salt", mode="max", env=env, config=config
    )
    assert [r.repository for r in from_cli.sources] == ["cli"]
    assert (from_cli.mode, from_cli.salt) == ("max", "cli-salt")


@pytest.mark.parametrize(
    ("kwargs", "config", "message"),
    [
        ({"cache_to": "reg.example/c"}, None, "no signing key is given"),
        ({"cache_from": ["reg.example/c"]}, None, "no key to check its entries with"),
        ({"cache_from": ["reg.example/c:tag"]}, None, "without :tag or @digest"),
        ({"mode": "all"}, None, "--cache-mode 'all': expected min or max"),
        ({}, "cache: {form: [reg.example/c]}\n", "cache.form is not a cache setting"),
        ({}, "cache: {from: 3}\n", "cache.from must be a string or a list of strings"),
        ({}, "cache: [reg.example/c]\n", "'cache' must be a map"),
    ],
)
def test_bad_settings_are_usage_errors(tmp_path, kwargs, config, message):
    path = None
    if config is not None:
        path = tmp_path / "config.yaml"
        path.write_text(config)
    with pytest.raises(UsageError) as err:
        resolve_settings(env={}, config=path, **kwargs)
    assert message in err.value.message, err.value.message


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(b'cache:\n  salt: "\xff"\n', id="in-the-cache-section"),
        pytest.param(b"# Konfiguration f\xfcr nvkr (Latin-1)\nmirrors: []\n", id="a-comment"),
    ],
)
def test_a_config_that_is_not_utf8_is_a_usage_error_for_build(tmp_path, config):
    """A config file in another encoding stopped nvkr build with NVKR-E-INTERNAL (the cache
    settings' own reader of the config file let UnicodeDecodeError through); every reader of
    the config is now the one that says so (``nvkr.fetch.mirrors.read_config``)."""
    from tests.helpers.cli import invoke

    path = tmp_path / "config.yaml"
    path.write_bytes(config)
    with pytest.raises(UsageError, match="is not UTF-8"):
        resolve_settings(env={}, config=path)
    res = invoke("--config", path, "build", "--offline", cwd=tmp_path, store=tmp_path / "s")
    assert res.code == 2, res.stderr
    assert f"nvkr config {path} is not UTF-8" in res.stderr and "INTERNAL" not in res.stderr


def test_trust_unsigned_needs_no_key(tmp_path):
    settings = resolve_settings(cache_from=["reg.example/c"], trust_unsigned=True, env={})
    assert settings.trust == () and settings.trust_unsigned
