"""git sources from repositories made in tmp_path (nvkr.fetch.git)."""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nvkr.canonical import sha256_bytes
from nvkr.errors import ChecksumError, DowngradeError, FetchError, LockError, OfflineError
from nvkr.fetch.context import NET_HINT, FetchContext
from nvkr.fetch.git import ensure, resolve
from nvkr.fetch.mirrors import Mirrors
from nvkr.recipe.sources import GitSource
from nvkr.repro import tar_bytes
from nvkr.store import Store


def tree_at(git, repo, commit: str, dest: Path) -> Path:
    """The tree of ``commit``, checked out independently of nvkr (git worktree)."""
    git(repo.path, "worktree", "add", "-q", "--detach", str(dest), commit)
    return dest


def members(store: Store, digest: str) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(store.read_blob(digest))) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_resolve_by_commit(git, git_repo, ctx: FetchContext, tmp_path: Path) -> None:
    first = git_repo.commits[0]  # not the branch tip: fetched by id
    entry = resolve("agent", GitSource(git=git_repo.url, commit=first), ctx, base_dir=tmp_path)
    assert entry == {
        "kind": "git",
        "url": git_repo.url,
        "commit": first,
        "digest": entry["digest"],
        "commitTime": git_repo.times[0],
    }
    expected = tar_bytes(tree_at(git, git_repo, first, tmp_path / "wt"), epoch=0)
    assert entry["digest"] == sha256_bytes(expected)
    got = members(ctx.store, entry["digest"])
    assert sorted(got) == ["README", "link", "tool", "tool/data.txt", "tool/run.sh"]
    assert got["tool/run.sh"].mode == 0o755
    assert got["tool/data.txt"].mode == 0o644
    assert got["link"].issym() and got["link"].linkname == "README"
    assert {m.mtime for m in got.values()} == {0}


def test_digest_stable_across_clones(git_repo, tmp_path: Path) -> None:
    source = GitSource(git=git_repo.url, commit=git_repo.commits[1])
    a = resolve("a", source, FetchContext(store=Store(tmp_path / "s1")), base_dir=tmp_path)
    b = resolve("a", source, FetchContext(store=Store(tmp_path / "s2")), base_dir=tmp_path)
    assert a == b
    assert a["commitTime"] == git_repo.times[1]
    assert "tool/new.txt" in members(Store(tmp_path / "s1"), a["digest"])


def test_subdir(git, git_repo, ctx: FetchContext, tmp_path: Path) -> None:
    commit = git_repo.commits[1]
    entry = resolve(
        "tool", GitSource(git=git_repo.url, commit=commit, subdir="tool"), ctx, base_dir=tmp_path
    )
    wt = tree_at(git, git_repo, commit, tmp_path / "wt")
    assert entry["digest"] == sha256_bytes(tar_bytes(wt / "tool", epoch=0))
    assert sorted(members(ctx.store, entry["digest"])) == ["data.txt", "new.txt", "run.sh"]


@pytest.mark.parametrize("subdir", ["nope", "../upstream", "README"])
def test_subdir_missing(git_repo, ctx: FetchContext, tmp_path: Path, snapshot, subdir: str) -> None:
    before = snapshot(ctx.store)
    with pytest.raises(FetchError) as exc:
        resolve(
            "t",
            GitSource(git=git_repo.url, commit=git_repo.commits[1], subdir=subdir),
            ctx,
            base_dir=tmp_path,
        )
    assert repr(subdir) in exc.value.message
    assert snapshot(ctx.store) == before


def test_nonexistent_commit(git_repo, ctx: FetchContext, tmp_path: Path, snapshot) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    before = snapshot(ctx.store)
    with pytest.raises(FetchError) as exc:
        resolve("agent", GitSource(git=git_repo.url, commit=commit), ctx, base_dir=tmp_path)
    assert commit in exc.value.message
    assert git_repo.url in exc.value.message
    assert "not found" in exc.value.message
    assert snapshot(ctx.store) == before


def test_tag_object_is_not_the_commit(
    git, git_repo, ctx: FetchContext, tmp_path: Path, snapshot
) -> None:
    # an annotated tag's object id peels to a commit, but HEAD then differs from the pin
    git(git_repo.path, "tag", "-a", "-m", "v1", "v1", git_repo.commits[0])
    tag_id = git(git_repo.path, "rev-parse", "v1")
    assert tag_id != git_repo.commits[0]
    before = snapshot(ctx.store)
    with pytest.raises(ChecksumError) as exc:
        resolve("agent", GitSource(git=git_repo.url, commit=tag_id), ctx, base_dir=tmp_path)
    assert exc.value.exit_code == 3
    assert tag_id in exc.value.message
    assert git_repo.commits[0] in exc.value.message
    assert snapshot(ctx.store) == before


def test_sha256_repository(git, ctx: FetchContext, tmp_path: Path) -> None:
    repo = tmp_path / "sha256-repo"
    repo.mkdir()
    git(repo, "-c", "init.defaultBranch=main", "init", "-q", "--object-format=sha256")
    (repo / "file").write_text("x\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "one")
    commit = git(repo, "rev-parse", "HEAD")
    assert len(commit) == 64
    entry = resolve("r", GitSource(git=repo.as_uri(), commit=commit), ctx, base_dir=tmp_path)
    assert entry["commit"] == commit
    assert sorted(members(ctx.store, entry["digest"])) == ["file"]


def test_unreachable_repository(ctx: FetchContext, tmp_path: Path) -> None:
    url = (tmp_path / "no-such-repo").as_uri()
    with pytest.raises(FetchError) as exc:
        resolve("agent", GitSource(git=url, commit="a" * 40), ctx, base_dir=tmp_path)
    assert "cannot fetch git repository" in exc.value.message
    assert url in exc.value.message


def test_falls_back_when_server_refuses_fetch_by_id(
    git_repo, ctx: FetchContext, tmp_path: Path, monkeypatch
) -> None:
    # protocol v0 servers refuse a "want" for an object no ref advertises; force v0 to get there
    import nvkr.fetch.git as fetch_git

    calls: list[list[str]] = []
    real_run = fetch_git.run

    def run_v0(argv: list[Any], **kw: Any) -> Any:
        argv = [str(a) for a in argv]
        calls.append(argv)
        if argv[:2] == ["git", "fetch"]:
            argv = ["git", "-c", "protocol.version=0", *argv[1:]]
        return real_run(argv, **kw)

    monkeypatch.setattr(fetch_git, "run", run_v0)
    entry = resolve(
        "agent", GitSource(git=git_repo.url, commit=git_repo.commits[0]), ctx, base_dir=tmp_path
    )
    fetches = [c for c in calls if c[:2] == ["git", "fetch"]]
    assert len(fetches) == 2
    assert "--depth" in fetches[0]
    assert fetches[1][-1] == "+refs/*:refs/remotes/origin/*"
    assert entry["commitTime"] == git_repo.times[0]


def test_mirror(git_repo, store: Store, tmp_path: Path) -> None:
    upstream = "https://git.example.invalid/org/"
    mirrors = Mirrors.parse([f"{upstream}={git_repo.path.parent.as_uri()}/"])
    source = GitSource(git=upstream + "upstream", commit=git_repo.commits[1])
    entry = resolve("agent", source, FetchContext(store=store, mirrors=mirrors), base_dir=tmp_path)
    assert entry["url"] == upstream + "upstream"


def test_ensure(git_repo, ctx: FetchContext, tmp_path: Path, snapshot, monkeypatch) -> None:
    source = GitSource(git=git_repo.url, commit=git_repo.commits[1])
    entry = resolve("agent", source, ctx, base_dir=tmp_path)
    fresh = FetchContext(store=Store(tmp_path / "fresh"))
    assert ensure("agent", source, entry, fresh, base_dir=tmp_path) == entry["digest"]
    assert fresh.store.has_blob(entry["digest"])

    offline = FetchContext(store=Store(tmp_path / "empty"), offline=True)
    with pytest.raises(OfflineError) as exc:
        ensure("agent", source, entry, offline, base_dir=tmp_path)
    assert "'agent'" in exc.value.message
    assert git_repo.commits[1] in exc.value.message

    bad = {**entry, "digest": "sha256:" + "0" * 64}
    other = FetchContext(store=Store(tmp_path / "other"))
    before = snapshot(other.store)
    with pytest.raises(ChecksumError) as cexc:
        ensure("agent", source, bad, other, base_dir=tmp_path)
    assert "sha256:" + "0" * 64 in cexc.value.message
    assert entry["digest"] in cexc.value.message
    assert snapshot(other.store) == before

    with pytest.raises(LockError, match="commit="):
        ensure(
            "agent",
            GitSource(git=git_repo.url, commit=git_repo.commits[0]),
            entry,
            ctx,
            base_dir=tmp_path,
        )


def test_ensure_blob_present_runs_no_git(
    git_repo, ctx: FetchContext, tmp_path: Path, request
) -> None:
    source = GitSource(git=git_repo.url, commit=git_repo.commits[1])
    entry = resolve("agent", source, ctx, base_dir=tmp_path)
    request.getfixturevalue("no_network")
    for c in (ctx, FetchContext(store=ctx.store, offline=True)):
        assert ensure("agent", source, entry, c, base_dir=tmp_path) == entry["digest"]


def test_resolve_offline(git_repo, ctx: FetchContext, tmp_path: Path, no_network) -> None:
    with pytest.raises(OfflineError):
        resolve(
            "a",
            GitSource(git=git_repo.url, commit=git_repo.commits[0]),
            FetchContext(store=ctx.store, offline=True),
            base_dir=tmp_path,
        )


# -- git daemon over loopback ------------------------------------------------------------------------
def _git_daemon_available() -> bool:
    if shutil.which("git") is None:
        return False
    exec_path = subprocess.run(
        ["git", "--exec-path"], capture_output=True, text=True
    ).stdout.strip()
    return (Path(exec_path) / "git-daemon").exists()


@pytest.fixture
def git_daemon(git_repo, free_port: int) -> Iterator[str]:
    # Debian's git package ships git-daemon, and install.sh installs git: a missing daemon is a
    # broken install, not a reason to skip.
    assert _git_daemon_available(), "git daemon is missing: run ./install.sh"
    base = git_repo.path.parent
    proc = subprocess.Popen(
        [
            "git",
            "daemon",
            "--export-all",
            f"--base-path={base}",
            "--listen=127.0.0.1",
            f"--port={free_port}",
            "--reuseaddr",
            str(base),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", free_port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("git daemon did not start")
                time.sleep(0.05)
        yield f"git://127.0.0.1:{free_port}/"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_git_daemon(git_daemon: str, git_repo, ctx: FetchContext, tmp_path: Path) -> None:
    local = resolve(
        "a",
        GitSource(git=git_repo.url, commit=git_repo.commits[0]),
        FetchContext(store=Store(tmp_path / "l")),
        base_dir=tmp_path,
    )
    url = git_daemon + "upstream"
    entry = resolve("a", GitSource(git=url, commit=git_repo.commits[0]), ctx, base_dir=tmp_path)
    assert entry["url"] == url
    assert entry["digest"] == local["digest"]
    with pytest.raises(FetchError, match="not found"):
        resolve("a", GitSource(git=url, commit="f" * 40), ctx, base_dir=tmp_path)


# -- what a failed fetch says -------------------------------------------------------------------
def _fetch_error(url: str, ctx: FetchContext, tmp_path: Path) -> FetchError:
    with pytest.raises(FetchError) as exc:
        resolve("agent", GitSource(git=url, commit="a" * 40), ctx, base_dir=tmp_path)
    return exc.value


def test_a_404_keeps_the_servers_words_and_does_not_blame_the_network(
    http_server, ctx: FetchContext, tmp_path: Path
) -> None:
    # what GitHub answers for a repository that does not exist (or that the user may not see)
    http_server.add(
        "/org/repo.git/info/refs", b"Repository not found.\n", status=404, content_type="text/plain"
    )
    err = _fetch_error(http_server.url("/org/repo.git"), ctx, tmp_path)
    assert "remote: Repository not found." in err.message
    assert "fatal: repository 'http://127.0.0.1:" in err.message
    assert err.hint != NET_HINT and "network" not in (err.hint or "")
    assert "check the URL" in (err.hint or "")


def test_a_refused_connection_blames_the_network(
    ctx: FetchContext, tmp_path: Path, free_port: int
) -> None:
    err = _fetch_error(f"http://127.0.0.1:{free_port}/org/repo.git", ctx, tmp_path)
    assert "Couldn't connect to server" in err.message or "Connection refused" in err.message
    assert err.hint == NET_HINT


def test_a_server_asking_for_credentials_says_so(
    http_server, ctx: FetchContext, tmp_path: Path
) -> None:
    http_server.add(
        "/private.git/info/refs",
        fail_first=10,
        fail_status=401,
        fail_headers={"WWW-Authenticate": 'Basic realm="git"'},
    )
    err = _fetch_error(http_server.url("/private.git"), ctx, tmp_path)
    assert "could not read Username" in err.message
    assert "credentials" in (err.hint or "") and err.hint != NET_HINT


def test_a_path_that_is_no_repository_is_not_a_network_failure(
    ctx: FetchContext, tmp_path: Path
) -> None:
    err = _fetch_error((tmp_path / "not-a-repo").as_uri(), ctx, tmp_path)
    assert "does not appear to be a git repository" in err.message
    assert err.hint != NET_HINT


def test_a_network_failure_is_not_fetched_again_by_refs(
    ctx: FetchContext, tmp_path: Path, free_port: int, monkeypatch
) -> None:
    """The full-fetch fallback is for servers refusing an unadvertised commit; an unreachable
    server would only fail (or time out) a second time."""
    import nvkr.fetch.git as fetch_git

    calls: list[list[str]] = []
    real_run = fetch_git.run

    def counting(argv: list[Any], **kw: Any) -> Any:
        calls.append([str(a) for a in argv])
        return real_run(argv, **kw)

    monkeypatch.setattr(fetch_git, "run", counting)
    _fetch_error(f"http://127.0.0.1:{free_port}/org/repo.git", ctx, tmp_path)
    assert len([c for c in calls if c[:2] == ["git", "fetch"]]) == 1


def test_an_https_repository_redirected_to_plain_http_is_refused(
    https_server, http_server, tls_cert, ctx: FetchContext, tmp_path: Path, monkeypatch
) -> None:
    """git does its own transport: an https remote whose server redirects to http must never
    be asked over plain HTTP (no downgrade; the hardening issue's item 3)."""
    import nvkr.fetch.git as fetch_git

    refs = "/org/repo.git/info/refs"
    http_server.add(refs, b"# never to be asked\n", content_type="text/plain")
    https_server.redirect(refs, http_server.url(refs) + "?service=git-upload-pack")
    env = fetch_git._env
    monkeypatch.setattr(
        fetch_git, "_env", lambda home: {**env(home), "GIT_SSL_CAINFO": str(tls_cert[0])}
    )
    with pytest.raises(DowngradeError) as exc:
        resolve(
            "agent",
            GitSource(git=https_server.url("/org/repo.git"), commit="a" * 40),
            ctx,
            base_dir=tmp_path,
        )
    assert http_server.total_hits == 0, exc.value.message
    assert https_server.total_hits == 1, "refused at once, not fetched again by refs"
    assert exc.value.exit_code == 3 and "plain http" in exc.value.message
    assert https_server.url("/org/repo.git") in exc.value.message


def test_a_relative_store_root(git_repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # git runs in work dirs inside the store: a store root relative to the working directory
    # nvkr started in must not be read relative to those
    monkeypatch.chdir(tmp_path)
    store = Store(Path("rel") / "store")
    source = GitSource(git=git_repo.url, commit=git_repo.commits[0])
    entry = resolve("agent", source, FetchContext(store=store), base_dir=tmp_path)
    assert (tmp_path / "rel" / "store" / "blobs" / "sha256" / entry["digest"][7:]).is_file()


def test_the_builds_fetch_line_says_the_bytes_git_brought(git_repo, tmp_path: Path) -> None:
    """git counts its own transfer: the build's fetch line says the bytes of what the store
    gained (the tree's tar), not 0 (a fresh user's trial, where a pypi source said 0 bytes)."""
    from types import SimpleNamespace

    from nvkr.action import ResolvedSource
    from nvkr.execute import _SourceGate
    from nvkr.fetch.table import read_entry
    from nvkr.monitor.events import Event, Transfer

    source = GitSource(git=git_repo.url, commit=git_repo.commits[0])
    first = FetchContext(store=Store(tmp_path / "first"))
    entry = read_entry(resolve("agent", source, first, base_dir=tmp_path), where="test")
    events: list[Event] = []
    fresh = Store(tmp_path / "fresh")
    resolved = ResolvedSource("agent", source, entry, tmp_path)
    _SourceGate(FetchContext(store=fresh), events.append).ensure(
        SimpleNamespace(sources={"agent": resolved})  # type: ignore[arg-type]
    )
    (done,) = [e for e in events if isinstance(e, Transfer) and e.finished]
    assert done.done == fresh.blob_path(entry.digest).stat().st_size > 0
