"""URL prefix mirrors (nvkr.fetch.mirrors)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvkr.errors import UsageError
from nvkr.fetch.mirrors import Mirrors, default_config_path


def test_parse_and_rewrite_longest_prefix_wins() -> None:
    m = Mirrors.parse(
        ["https://dl.k8s.io/=http://mirror/k8s/", "https://dl.k8s.io/release/=http://fast/r/"]
    )
    assert m.rewrite("https://dl.k8s.io/release/v1.36.0/kubelet") == "http://fast/r/v1.36.0/kubelet"
    assert m.rewrite("https://dl.k8s.io/other") == "http://mirror/k8s/other"
    assert m.rewrite("https://github.com/x") == "https://github.com/x"
    assert Mirrors().rewrite("https://a/b") == "https://a/b"


def test_parse_splits_at_first_equals() -> None:
    m = Mirrors.parse(["https://a/?x=1=http://b/?y=2"])
    assert m.entries == (("https://a/?x", "1=http://b/?y=2"),)


@pytest.mark.parametrize("spec", ["https://a/", "=http://b/", "https://a/=", ""])
def test_parse_rejects_malformed(spec: str) -> None:
    with pytest.raises(UsageError) as exc:
        Mirrors.parse([spec])
    assert "PREFIX=REPLACEMENT" in exc.value.message
    assert exc.value.exit_code == 2


def test_merged_cli_first_wins_on_equal_prefix() -> None:
    cli = Mirrors.parse(["https://a/=http://cli/"])
    config = Mirrors.parse(["https://a/=http://config/", "https://b/=http://config-b/"])
    merged = cli.merged(config)
    assert merged.rewrite("https://a/x") == "http://cli/x"
    assert merged.rewrite("https://b/x") == "http://config-b/x"


def test_from_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        "store: /elsewhere\nmirrors:\n  - prefix: https://a/\n    replacement: http://m/a/\n"
        "  - {prefix: 'https://b/', replacement: 'file:///srv/b/'}\n"
    )
    m = Mirrors.from_config(cfg)
    assert m.entries == (("https://a/", "http://m/a/"), ("https://b/", "file:///srv/b/"))


@pytest.mark.parametrize("text", ["", "other: 1\n", "mirrors: []\n", "mirrors:\n"])
def test_from_config_without_mirrors(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    assert Mirrors.from_config(cfg) == Mirrors()


def test_from_config_missing_file(tmp_path: Path) -> None:
    assert Mirrors.from_config(tmp_path / "nope.yaml") == Mirrors()


@pytest.mark.parametrize(
    "text",
    [
        "mirrors: [\n",
        "- a\n",
        "mirrors: {prefix: a, replacement: b}\n",
        "mirrors:\n  - {prefix: a}\n",
        "mirrors:\n  - {prefix: a, replacement: b, extra: c}\n",
        "mirrors:\n  - {prefix: a, replacement: 3}\n",
        "mirrors:\n  - 'a=b'\n",
    ],
)
def test_from_config_rejects_malformed(tmp_path: Path, text: str) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text)
    with pytest.raises(UsageError) as exc:
        Mirrors.from_config(cfg)
    assert str(cfg) in exc.value.message


def test_default_config_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("NVKR_CONFIG", str(tmp_path / "c.yaml"))
    assert default_config_path() == tmp_path / "c.yaml"
    (tmp_path / "c.yaml").write_text("mirrors: [{prefix: 'x://', replacement: 'y://'}]\n")
    assert Mirrors.from_config().rewrite("x://z") == "y://z"
    monkeypatch.delenv("NVKR_CONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_config_path() == tmp_path / ".config" / "nvkr" / "config.yaml"
