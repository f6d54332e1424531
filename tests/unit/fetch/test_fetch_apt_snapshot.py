"""Snapshot archives behind the lock (issue 31, item 1): ``nvkr lock`` records each apt
repository's snapshot archive and the lock's time; a build whose mirror no longer serves a
locked .deb (404/410) fetches it from the archive, the first import at or after the lock's time
first, the lock's sha256 the check. Against a loopback signed repository
(tests/helpers/aptrepo.py) and a loopback archive laid out and answering as
snapshot.debian.org (tests/helpers/snapshotarchive.py)."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from nvkr.errors import FetchError, IntegrityError, LockError, UsageError
from nvkr.fetch.apt import ensure, resolve
from nvkr.fetch.context import FetchContext
from nvkr.fetch.entries import AptEntry
from nvkr.fetch.snapshots import SnapshotArchives, debian_archive, first_at_or_after
from nvkr.recipe.sources import AptSource
from nvkr.store import Store
from tests.helpers import lock_entry
from tests.helpers.aptrepo import AptRepo, DebSpec
from tests.helpers.snapshotarchive import SnapshotArchive, seconds_of, stamp_of

HOUR = 3600
#: two tiny packages, one depending on the other
PACKAGES = [
    DebSpec(name="snap-tool", version="1.0-1", arch="amd64", depends="libsnap1 (>= 1.0)",
            files={"/usr/bin/snap-tool": b"#!/bin/sh\necho snap\n"}),
    DebSpec(name="libsnap1", version="1.0-1", arch="amd64",
            files={"/usr/lib/x86_64-linux-gnu/libsnap.so.1": b"\x7fELF not really\n"}),
]  # fmt: skip


@pytest.fixture
def mirror(apt_repos: Any) -> AptRepo:
    repo: AptRepo = apt_repos("mirror", suite="stable", arches=("amd64",), packages=PACKAGES)
    return repo


def _source(repo: AptRepo, snapshot: str | None) -> AptSource:
    assert repo.url is not None
    spec: dict[str, Any] = {
        "url": repo.url,
        "suite": repo.suite,
        "components": list(repo.components),
        "keyring": str(repo.keyring),
    }
    if snapshot is not None:
        spec["snapshot"] = snapshot
    return AptSource.model_validate(
        {
            "apt": {"main": spec},
            "arch": "amd64",
            "base": "none",
            "packages": {"snap-tool": "1.0-1"},
        },
        strict=False,
    )


def _lock(
    repo: AptRepo, archive: SnapshotArchive | None, tmp_path: Path
) -> tuple[AptSource, dict[str, Any]]:
    src = _source(repo, archive.archive_url("mirror") if archive else None)
    entry = resolve(
        "pkgs", src, FetchContext(store=Store(tmp_path / "lock-store")), base_dir=tmp_path
    )
    return src, entry


def _pool(repo: AptRepo) -> dict[str, bytes | Path]:
    return {d.path: repo.root / d.path for d in repo.debs}


def _drop(repo: AptRepo) -> None:
    """The mirror drops the locked versions (a point release removed them)."""
    for d in repo.debs:
        (repo.root / d.path).unlink()


def _build(
    src: AptSource, entry: dict[str, Any], tmp_path: Path, notes: list[str], name: str = "fresh"
) -> tuple[str, Store]:
    fresh = Store(tmp_path / name)
    ctx = FetchContext(store=fresh, note=notes.append)
    return ensure("pkgs", src, entry, ctx, base_dir=tmp_path), fresh


def test_lock_records_the_snapshot_archive_and_time_outside_the_manifest(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path
) -> None:
    entry = _lock(mirror, snapshot_archive, tmp_path)[1]
    snap = entry["snapshot"]
    assert snap["archives"] == {"main": snapshot_archive.archive_url("mirror")}
    assert abs(seconds_of(snap["time"]) - time.time()) < 600
    # where and when, not what: the manifest (whose digest action keys see) is the same bytes
    # without it, and the typed entry writes it back as read
    bare = _lock(mirror, None, tmp_path)[1]
    assert bare["digest"] == entry["digest"] and bare["packages"] == entry["packages"]
    assert bare["snapshot"]["archives"] == {}  # a loopback repository: no default archive
    typed = lock_entry(entry)
    assert isinstance(typed, AptEntry) and typed.to_json() == entry


def test_a_fresh_store_gets_the_same_bytes_from_the_snapshot_once_the_mirror_drops_them(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path
) -> None:
    """The Done-when test: lock against the mirror, the mirror drops the locked versions, a
    fresh store fetches the same bytes through the snapshot archive, preferring the first
    import after the lock (the import before it lacks the files: they were published shortly
    before the lock, after that import) and saying so once."""
    src, entry = _lock(mirror, snapshot_archive, tmp_path)
    locked = {p["sha256"]: (mirror.root / mirror.deb(p["name"]).path).read_bytes()
              for p in entry["packages"]}  # fmt: skip
    t = seconds_of(entry["snapshot"]["time"])
    before, after = stamp_of(t - 2 * HOUR), stamp_of(t + 3 * HOUR)
    snapshot_archive.add_import("mirror", before, {"dists/stable/Release": b"older\n"})
    snapshot_archive.add_import("mirror", after, _pool(mirror))
    _drop(mirror)
    notes: list[str] = []
    digest, fresh = _build(src, entry, tmp_path, notes)
    assert digest == entry["digest"]
    for sha, data in locked.items():
        assert fresh.read_blob(sha) == data
    debs = [r for r in snapshot_archive.requests if r.endswith(".deb")]
    assert sorted(debs) == sorted(f"/archive/mirror/{after}/{d.path}" for d in mirror.debs)
    assert sum("?year=" in r for r in snapshot_archive.requests) == 1  # listed once
    assert notes == [
        f"fetched 2 .debs of source 'pkgs' from the snapshot archive "
        f"{snapshot_archive.archive_url('mirror')} (lock time {entry['snapshot']['time']}) "
        "because the mirror no longer serves them"
    ]
    # the store holds them now: a second build asks nobody
    asked = len(snapshot_archive.requests)
    assert _build(src, entry, tmp_path, notes, "fresh")[0] == digest
    assert len(snapshot_archive.requests) == asked and len(notes) == 1


def test_the_import_the_lock_time_resolves_to_is_tried_when_the_first_after_lacks_it(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path
) -> None:
    """A .deb removed from the archive before the next import is only in the one before the
    lock: the archive redirects the lock's time to it."""
    src, entry = _lock(mirror, snapshot_archive, tmp_path)
    t = seconds_of(entry["snapshot"]["time"])
    before, after = stamp_of(t - HOUR), stamp_of(t + HOUR)
    snapshot_archive.add_import("mirror", before, _pool(mirror))
    snapshot_archive.add_import("mirror", after, {"dists/stable/Release": b"newer\n"})
    _drop(mirror)
    notes: list[str] = []
    assert _build(src, entry, tmp_path, notes)[0] == entry["digest"]
    stamp = entry["snapshot"]["time"]
    deb = mirror.debs[0].path
    asked = snapshot_archive.requests
    assert asked.index(f"/archive/mirror/{after}/{deb}") < asked.index(
        f"/archive/mirror/{stamp}/{deb}"
    )
    assert f"/archive/mirror/{before}/{deb}" in asked  # where the redirect led
    assert len(notes) == 1


def test_first_import_at_or_after_the_lock() -> None:
    imports = ["20251201T034212Z", "20251201T151833Z", "20251202T032904Z"]
    assert first_at_or_after(imports, "20251201T120000Z") == "20251201T151833Z"
    assert first_at_or_after(imports, "20251201T151833Z") == "20251201T151833Z"
    assert first_at_or_after(imports, "20251203T000000Z") is None


@pytest.mark.parametrize("change", ["same size", "truncated"])
def test_a_snapshot_answering_other_bytes_is_an_integrity_failure(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path, change: str
) -> None:
    src, entry = _lock(mirror, snapshot_archive, tmp_path)
    after = stamp_of(seconds_of(entry["snapshot"]["time"]) + HOUR)
    files = _pool(mirror)
    tool = mirror.deb("snap-tool")
    data = (mirror.root / tool.path).read_bytes()
    other = data[:-1] + bytes([data[-1] ^ 1]) if change == "same size" else data[:100]
    files[tool.path] = other
    snapshot_archive.add_import("mirror", after, files)
    _drop(mirror)
    fresh = Store(tmp_path / "fresh")
    with pytest.raises(IntegrityError) as err:
        ensure("pkgs", src, entry, FetchContext(store=fresh), base_dir=tmp_path)
    msg = err.value.message
    assert err.value.exit_code == 3
    assert f"{snapshot_archive.url}/archive/mirror/{after}/{tool.path}" in msg
    assert f"{mirror.url}/{tool.path}" in msg  # the mirror's URL too
    assert "sha256:" + tool.sha256 in msg
    assert "sha256:" + hashlib.sha256(other).hexdigest() in msg
    assert not fresh.has_blob("sha256:" + tool.sha256)


def test_every_url_tried_is_named_when_no_import_holds_the_deb(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path
) -> None:
    src, entry = _lock(mirror, snapshot_archive, tmp_path)
    stamp = entry["snapshot"]["time"]
    after = stamp_of(seconds_of(stamp) + HOUR)
    snapshot_archive.add_import("mirror", stamp_of(seconds_of(stamp) - HOUR), {})
    snapshot_archive.add_import("mirror", after, {})
    _drop(mirror)
    with pytest.raises(FetchError) as err:
        _build(src, entry, tmp_path, [])
    msg = err.value.message
    deb = mirror.deb("libsnap1").path  # the first in the lock's order
    assert "package libsnap1 1.0-1 (amd64)" in msg
    assert f"(HTTP 404 File not found from {mirror.url}/{deb})" in msg
    assert f"/archive/mirror/{after}/{deb} (HTTP 404" in msg
    assert f"/archive/mirror/{stamp}/{deb} (HTTP 404" in msg


def test_an_unreadable_listing_still_tries_the_lock_time_and_is_named(
    mirror: AptRepo, tmp_path: Path
) -> None:
    """A second input of the all-miss class: the archive's listing is not there (404)."""
    assert mirror.url is not None
    archive = mirror.url + "/no-such-archive"
    src = _source(mirror, archive)
    entry = resolve("pkgs", src, FetchContext(store=Store(tmp_path / "s1")), base_dir=tmp_path)
    _drop(mirror)
    with pytest.raises(FetchError) as err:
        _build(src, entry, tmp_path, [])
    msg = err.value.message
    stamp = entry["snapshot"]["time"]
    assert f"the listing {archive}/?year={stamp[:4]}&month={stamp[4:6]} (HTTP 404" in msg
    assert f"{archive}/{stamp}/{mirror.deb('libsnap1').path} (HTTP 404" in msg


def test_a_repository_without_a_snapshot_archive_fails_as_before(
    mirror: AptRepo, tmp_path: Path
) -> None:
    src, entry = _lock(mirror, None, tmp_path)
    _drop(mirror)
    with pytest.raises(FetchError) as err:
        _build(src, entry, tmp_path, [])
    assert "package libsnap1 1.0-1 (amd64) is not in the store and the mirror does not serve" in (
        err.value.message
    )
    assert "HTTP 404" in err.value.message
    assert err.value.hint is not None and "snapshot: URL" in err.value.hint
    assert "'main' has no snapshot archive" in err.value.hint


def test_a_config_entry_names_the_archive_at_build_time(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path
) -> None:
    """A second input of the no-archive class, then its cure: a config entry for another
    repository does not apply; one for this repository does, with the lock's time."""
    assert mirror.url is not None
    src, entry = _lock(mirror, None, tmp_path)
    t = seconds_of(entry["snapshot"]["time"])
    snapshot_archive.add_import("mirror", stamp_of(t + HOUR), _pool(mirror))
    _drop(mirror)
    other = SnapshotArchives((("http://elsewhere.invalid/debian", snapshot_archive.url),))
    ctx = FetchContext(store=Store(tmp_path / "f1"), snapshots=other)
    with pytest.raises(FetchError) as err:
        ensure("pkgs", src, entry, ctx, base_dir=tmp_path)
    assert err.value.hint is not None and "no snapshot archive to fall back on" in err.value.hint
    mine = SnapshotArchives(((mirror.url + "/", snapshot_archive.archive_url("mirror")),))
    notes: list[str] = []
    ctx = FetchContext(store=Store(tmp_path / "f2"), snapshots=mine, note=notes.append)
    assert ensure("pkgs", src, entry, ctx, base_dir=tmp_path) == entry["digest"]
    assert len(notes) == 1


@pytest.mark.parametrize("old", ["no snapshot member", "read and written as a lockfile"])
def test_an_entry_locked_before_snapshots_builds_and_names_the_missing_lock_time(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path, old: str
) -> None:
    src, entry = _lock(mirror, snapshot_archive, tmp_path)
    del entry["snapshot"]
    if old == "read and written as a lockfile":
        entry = lock_entry(json.loads(json.dumps(entry))).to_json()
        assert "snapshot" not in entry
    # it still builds from the mirror
    assert _build(src, entry, tmp_path, [], "f1")[0] == entry["digest"]
    _drop(mirror)
    with pytest.raises(FetchError) as err:
        _build(src, entry, tmp_path, [], "f2")
    assert err.value.hint is not None and "records no lock time" in err.value.hint
    assert not any(r.endswith(".deb") for r in snapshot_archive.requests)


@pytest.mark.parametrize("bad", ["2025-12-01T09:15:12Z", "20251301T000000Z"])
def test_a_malformed_lock_time_is_named(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path, bad: str
) -> None:
    src, entry = _lock(mirror, snapshot_archive, tmp_path)
    entry["snapshot"]["time"] = bad
    _drop(mirror)
    with pytest.raises(LockError) as err:
        _build(src, entry, tmp_path, [])
    assert f"lock entry for source 'pkgs': snapshot.time is {bad!r}" in err.value.message
    assert "YYYYMMDDTHHMMSSZ" in err.value.message


def test_the_snapshot_archives_credentials_reach_it_and_no_lock_entry(
    mirror: AptRepo, snapshot_archive: SnapshotArchive, tmp_path: Path
) -> None:
    auth: list[str | None] = []
    real = snapshot_archive.answer

    def answer(h: Any) -> None:
        auth.append(h.headers.get("Authorization"))
        real(h)

    snapshot_archive.answer = answer  # type: ignore[method-assign]
    base = snapshot_archive.archive_url("mirror")
    src = _source(mirror, base.replace("http://", "http://reader:s3cret@"))
    entry = resolve("pkgs", src, FetchContext(store=Store(tmp_path / "s1")), base_dir=tmp_path)
    assert entry["snapshot"]["archives"] == {"main": base}
    assert "s3cret" not in json.dumps(entry)
    snapshot_archive.add_import(
        "mirror", stamp_of(seconds_of(entry["snapshot"]["time"]) + HOUR), _pool(mirror)
    )
    _drop(mirror)
    notes: list[str] = []
    assert _build(src, entry, tmp_path, notes)[0] == entry["digest"]
    token = "Basic " + base64.b64encode(b"reader:s3cret").decode()
    assert auth and all(a == token for a in auth)
    assert "s3cret" not in notes[0]


@pytest.mark.parametrize(
    ("url", "archive"),
    [
        ("http://deb.debian.org/debian", "https://snapshot.debian.org/archive/debian"),
        ("https://deb.debian.org/debian/", "https://snapshot.debian.org/archive/debian"),
        ("http://ftp.de.debian.org/debian", "https://snapshot.debian.org/archive/debian"),
        (
            "http://security.debian.org/debian-security",
            "https://snapshot.debian.org/archive/debian-security",
        ),
        (
            "https://deb.debian.org/debian-security",
            "https://snapshot.debian.org/archive/debian-security",
        ),
        ("https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/", None),
        ("http://deb.debian.org/debian-ports", None),
        ("http://deb.debian.org.evil.example/debian", None),
    ],
)
def test_debians_archives_default_to_snapshot_debian_org(url: str, archive: str | None) -> None:
    assert debian_archive(url) == archive


def test_the_config_names_snapshot_archives(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "mirrors: []\n"
        "snapshots:\n"
        "  - {repository: 'https://cuda.example/repos/debian12/x86_64/',\n"
        "     archive: 'https://u:p@snap.example/archive/cuda/'}\n"
    )
    got = SnapshotArchives.from_config(config)
    assert got.lookup("https://cuda.example/repos/debian12/x86_64") == (
        "https://u:p@snap.example/archive/cuda"
    )
    assert got.lookup("https://other.example/") is None
    assert SnapshotArchives.from_config(tmp_path / "none.yaml") == SnapshotArchives()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("snapshots: {a: b}\n", "'snapshots' must be a list of {repository, archive}"),
        (
            "snapshots:\n  - {repository: 'https://x.example/', url: 'https://s.example/'}\n",
            "snapshots[0] must be a map with exactly the non-empty strings",
        ),
        (
            "snapshots:\n  - {repository: 'https://x.example/', archive: 'snap.example/a'}\n",
            "snapshots[0].archive: 'snap.example/a' is not an http://, https:// or file:// URL",
        ),
    ],
)
def test_a_bad_snapshots_config_is_named(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    with pytest.raises(UsageError) as err:
        SnapshotArchives.from_config(config)
    assert f"nvkr config {config}" in err.value.message and message in err.value.message


RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: snap}
matrix: {gpu: [hopper], kubernetes: ["1.36"], arch: [amd64]}
sources:
  pkgs:
    apt:
      main: {url: "@URL@", suite: stable, keyring: "@KEYRING@"}
    arch: "{{ arch }}"
    base: none
    packages: {snap-tool: "1.0-1"}
artifacts: {}
releaseSet:
  name: "snap-k8s{{ kubernetes }}"
  clusterRelease: {kubernetes: "1.36.3"}
"""


def test_nvkr_lock_records_the_configs_archive_and_keeps_its_time_when_nothing_changed(
    mirror: AptRepo,
    snapshot_archive: SnapshotArchive,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the CLI: the config's ``snapshots:`` entry is what the lock records, and a second
    ``nvkr lock`` that resolves the same set leaves the lockfile's bytes (its time) as they were;
    then ``nvkr mirror export`` from a fresh store, after the mirror dropped the .debs, gets them
    from the snapshot archive at the recorded time."""
    from tests.helpers.cli import invoke

    recipe = tmp_path / "recipes" / "snap.yaml"
    recipe.parent.mkdir()
    recipe.write_text(
        RECIPE.replace("@URL@", str(mirror.url)).replace("@KEYRING@", str(mirror.keyring))
    )
    config = tmp_path / "config.yaml"
    archive = snapshot_archive.archive_url("mirror")
    config.write_text(f"snapshots:\n  - {{repository: '{mirror.url}/', archive: '{archive}'}}\n")
    res = invoke("--config", config, "lock", recipe, store=tmp_path / "s1")
    assert res.code == 0, res.output
    lockfile = tmp_path / "lockfiles" / "snap.lock.json"
    first = lockfile.read_bytes()
    (entry,) = json.loads(first)["sources"]
    snap = entry["resolved"]["snapshot"]
    assert snap["archives"] == {"main": archive}
    monkeypatch.setattr("nvkr.fetch.apt.lock_stamp", lambda: "20990101T000000Z")
    res = invoke("--config", config, "lock", recipe, store=tmp_path / "s1")
    assert res.code == 0, res.output
    assert lockfile.read_bytes() == first
    snapshot_archive.add_import("mirror", stamp_of(seconds_of(snap["time"]) + HOUR), _pool(mirror))
    _drop(mirror)
    res = invoke(
        "--config", config, "mirror", "export", recipe, tmp_path / "export", store=tmp_path / "s2"
    )
    assert res.code == 0, res.output
    assert any(r.endswith(".deb") for r in snapshot_archive.requests)
    assert "note: fetched 2 .debs of source 'pkgs' from the snapshot archive" in res.output


def test_a_relock_keeps_the_time_only_of_the_same_set() -> None:
    from nvkr.fetch.snapshots import keep_lock_times

    def source(digest: str, time: str, archives: dict[str, str]) -> dict[str, Any]:
        snap = {"time": time, "archives": archives}
        return {"name": "p", "spec": {"arch": "amd64"}, "resolved": {"kind": "apt",
                "digest": digest, "snapshot": snap}}  # fmt: skip

    old = [source("sha256:a", "20250101T000000Z", {"d": "https://s/archive/debian"})]
    same = [source("sha256:a", "20260101T000000Z", {"d": "https://s/archive/debian"})]
    keep_lock_times(same, old)
    assert same[0]["resolved"]["snapshot"]["time"] == "20250101T000000Z"
    for new in (
        [source("sha256:b", "20260101T000000Z", {"d": "https://s/archive/debian"})],
        [source("sha256:a", "20260101T000000Z", {"d": "https://other/archive/debian"})],
    ):
        keep_lock_times(new, old)
        assert new[0]["resolved"]["snapshot"]["time"] == "20260101T000000Z"


@pytest.mark.parametrize("bad", ["snapshot.example/archive/debian", "ftp://snap.example/a"])
def test_a_recipe_snapshot_that_is_no_url_is_named_with_its_line(tmp_path: Path, bad: str) -> None:
    from tests.helpers.cli import invoke

    recipe = tmp_path / "snap.yaml"
    text = RECIPE.replace("@URL@", "http://deb.debian.org/debian").replace(
        'keyring: "@KEYRING@"', f'snapshot: "{bad}"'
    )
    recipe.write_text(text)
    res = invoke("validate", recipe)
    assert res.code == 2
    assert f"{recipe}:8: sources.pkgs.apt.main.snapshot: expected a string matching" in res.output
    assert repr(bad) in res.output


def test_a_plan_that_resolves_an_apt_source_itself_names_the_same_lock_on_every_run(
    mirror: AptRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a lockfile (or with one the recipe drifted from), plan and build resolve the
    source themselves and provenance names that in-memory lock by digest: it must not carry
    the resolution's time, or every run would plan another release set. `nvkr lock` records
    it."""
    from tests.helpers.cli import invoke

    recipe = tmp_path / "recipes" / "snap.yaml"
    recipe.parent.mkdir()
    recipe.write_text(
        RECIPE.replace("@URL@", str(mirror.url)).replace("@KEYRING@", str(mirror.keyring))
    )
    digests = []
    for stamp in ("20250101T000000Z", "20260606T060606Z"):
        monkeypatch.setattr("nvkr.fetch.apt.lock_stamp", lambda stamp=stamp: stamp)
        res = invoke("plan", recipe, "--json", store=tmp_path / "s")
        assert res.code == 0, res.output
        digests.append(json.loads(res.stdout)["buildDigest"])
    assert digests[0] == digests[1], "the resolution's time moved the plan"
    res = invoke("lock", recipe, store=tmp_path / "s")
    assert res.code == 0, res.output
    (entry,) = json.loads((tmp_path / "lockfiles" / "snap.lock.json").read_text())["sources"]
    assert entry["resolved"]["snapshot"]["time"] == "20260606T060606Z"


@pytest.mark.parametrize(
    ("snapshot", "message"),
    [
        ({"time": "yesterday", "archives": {}}, "snapshot.time is 'yesterday', not a lock time"),
        ({"time": "2026-12-06T11:14:07Z", "archives": {}}, "snapshot.time is '2026-12-06"),
        (
            {"time": "20261206T111407Z", "archives": {"main": "not-a-url"}},
            "snapshot.archives.main is 'not-a-url', not an http://, https:// or file:// URL",
        ),
        (
            {"time": "20261206T111407Z", "archives": {"main": "https://"}},
            "snapshot.archives.main is 'https://', not an http://",
        ),
    ],
)
def test_a_malformed_snapshot_member_is_refused_when_the_lockfile_is_read(
    snapshot: dict[str, Any], message: str
) -> None:
    from nvkr.fetch.table import read_entry

    data = {"kind": "apt", "digest": "sha256:" + "a" * 64, "arch": "amd64", "packages": [],
            "snapshot": snapshot}  # fmt: skip
    with pytest.raises(LockError, match="^L: lock entry for source 'p': " + message.replace(".", r"\.")
                       .replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):  # fmt: skip
        read_entry(data, where="L: lock entry for source 'p'")
