"""The ``git`` source kind: a repository at a full commit id, stored as a deterministic tar.

A git source's content is its checked-out tree (or ``subdir`` of it) at the pinned commit. The
tree is written with :func:`nvkr.repro.write_tar` (epoch 0, ``.git`` excluded), so the source
digest depends only on paths, file contents, the executable bit and symlink targets, never on
the clone's timestamps or the machine's umask. The git CLI does the fetching, through
:func:`nvkr.run.run` with a pinned environment (no system or user config, no prompts): first
``git fetch --depth 1 <url> <commit>``; when the server refuses to serve an unadvertised object
(protocol v0 servers, some hosts), a full fetch of every ref. After checkout, ``HEAD`` must equal
the pin: the commit id is the integrity check, as the sha256 is for a url source.

A fetch that fails is reported in git's own words (its ``fatal:``/``error:`` lines and the
server's ``remote:`` lines, e.g. GitHub's "remote: Repository not found."), with a hint that fits
what they say: only a failure of the network itself (no route, refused, timed out, name not
resolved) says to check the network; a repository that is not there, that wants credentials, or
whose certificate does not verify says that instead, and is not fetched a second time by refs.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, BinaryIO, cast

from nvkr.errors import ChecksumError, DowngradeError, FetchError, ToolError
from nvkr.fetch.context import NET_HINT, FetchContext, check_entry
from nvkr.fetch.mirrors import mirror_label
from nvkr.recipe.sources import GitSource
from nvkr.redact import redact_url
from nvkr.repro import write_tar
from nvkr.run import pinned_env, run
from nvkr.store import BlobWriter

log = logging.getLogger("nvkr.fetch")

# Abort a transfer that stays below 1 KiB/s for 60 s instead of hanging a build forever.
_LOW_SPEED = {"GIT_HTTP_LOW_SPEED_LIMIT": "1024", "GIT_HTTP_LOW_SPEED_TIME": "60"}
_TIMEOUT = 3600  # seconds for one git command; a pinned source should never take longer


class _TarSink:
    """The file-like end of a :class:`BlobWriter` that :mod:`tarfile` needs (write + tell)."""

    def __init__(self, writer: BlobWriter) -> None:
        self._writer = writer

    def write(self, data: bytes) -> int:
        self._writer.write(bytes(data))
        return len(data)

    def tell(self) -> int:
        return self._writer.size


def _env(home: Path) -> dict[str, str]:
    extra = {"GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_NOSYSTEM": "1", **_LOW_SPEED}
    # the agent socket selects an ssh identity for ssh:// remotes; it cannot change the bytes
    if "SSH_AUTH_SOCK" in os.environ:
        extra["SSH_AUTH_SOCK"] = os.environ["SSH_AUTH_SOCK"]
    return pinned_env(extra, home=home)


# What git, curl and ssh say when the network failed, not the repository or the request.
_NETWORK = re.compile(
    r"could not resolve (host|hostname|proxy)|couldn't resolve|failed to connect|couldn't connect"
    r"|connection refused|connection timed out|connection reset|network is unreachable"
    r"|no route to host|operation timed out|operation too slow|timed out after"
    r"|unable to connect to|temporary failure in name resolution|name or service not known",
    re.IGNORECASE,
)
# what curl says (through git) when a redirect names a protocol protocol.*.allow forbids
_DOWNGRADE = re.compile(r'protocol "?http"? not supported or disabled', re.IGNORECASE)
_NOT_FOUND = re.compile(
    r"repository '.*' not found|does not appear to be a git repository|repository not found"
    r"|returned error: (404|410)",
    re.IGNORECASE,
)
_CREDENTIALS = re.compile(
    r"could not read (username|password)|authentication failed|permission denied"
    r"|returned error: (401|403)|access denied",
    re.IGNORECASE,
)
_TLS = re.compile(r"ssl certificate problem|certificate verification failed", re.IGNORECASE)
# progress the server reports on its side band: not what went wrong
_PROGRESS = ("remote: Enumerating", "remote: Counting", "remote: Compressing", "remote: Total")


def _git_says(err: ToolError) -> str:
    """git's own ``fatal:``/``error:`` lines and the server's ``remote:`` lines from a failed
    command, in order (else the whole message)."""
    lines = [ln.strip() for ln in err.message.splitlines()]
    said: list[str] = []
    for i, ln in enumerate(lines):
        if ln.startswith("remote:") and not ln.startswith(_PROGRESS) and ln != "remote:":
            said.append(ln)
        elif ln.startswith(("fatal:", "error:")):
            # "fatal: unable to connect to HOST:" puts the reason on the next line
            if ln.endswith(":") and i + 1 < len(lines):
                ln = f"{ln} {lines[i + 1]}"
            said.append(ln)
    return "; ".join(dict.fromkeys(said)) if said else err.message


def _failure_hint(said: str) -> tuple[str, bool]:
    """The hint for a failed fetch whose git output is ``said``, and whether fetching every
    ref instead could help (not when the network, the URL or the credentials are the
    problem)."""
    if _NOT_FOUND.search(said):
        return (
            "check the URL: the server says there is no such repository (a private one answers "
            "the same to anyone who may not read it); --mirror PREFIX=REPLACEMENT fetches from "
            "a copy",
            False,
        )
    if _CREDENTIALS.search(said):
        return (
            "the repository wants credentials, and nvkr runs git without prompts or credential "
            "helpers: use an ssh:// URL (SSH_AUTH_SOCK is passed through), or --mirror to a "
            "copy it can read",
            False,
        )
    if _TLS.search(said):
        return "the server's TLS certificate does not verify for this name: fix it", False
    if _NETWORK.search(said):
        return NET_HINT, False
    return "check the URL, and that the repository still holds the pinned commit", True


def _store_checkout(
    name: str,
    source: GitSource,
    ctx: FetchContext,
    expected_digest: str | None,
) -> tuple[str, int]:
    """Fetch, check out, verify and tar the pinned commit; return (blob digest, commit time)."""
    what = f"source {name!r}"
    fetch_url = ctx.mirrors.rewrite(source.git)
    where = mirror_label(fetch_url, source.git)
    commit = source.commit
    with ctx.store.workdir(prefix="git-") as work:
        home = work / "home"
        home.mkdir()
        repo = work / "repo"
        env = _env(home)

        # git talks to the remote itself: an https remote must never be followed to plain
        # HTTP (curl's redirect protocols follow git's protocol.*.allow)
        no_downgrade = ["-c", "protocol.http.allow=never"] if fetch_url.startswith("https:") else []

        def git(*args: str, check: bool = True) -> str:
            argv = ["git", *no_downgrade, *args]
            proc = run(argv, cwd=repo, env=env, timeout=_TIMEOUT, check=check)
            return proc.stdout.decode(errors="replace").strip() if proc.returncode == 0 else ""

        # a 64-hex pin names a SHA-256 repository, which a SHA-1 repository cannot fetch from
        fmt = "sha256" if len(commit) == 64 else "sha1"
        init = ["git", "-c", "init.defaultBranch=main", "init", "-q", f"--object-format={fmt}"]
        run([*init, str(repo)], cwd=work, env=env)
        log.info("fetching %s at %s", where, commit)
        try:
            git("fetch", "-q", "--depth", "1", fetch_url, commit)
        except ToolError as first:
            said = _git_says(first)
            if no_downgrade and _DOWNGRADE.search(said):
                raise DowngradeError(
                    f"{what}: {where} redirected git to plain http, which nvkr never follows "
                    f"from an https URL: {said}",
                    hint="fix the URL or the server's redirect: bytes read over plain HTTP are "
                    "not what the https URL names",
                ) from first
            hint, by_refs = _failure_hint(said)
            if not by_refs:
                raise FetchError(
                    f"{what}: cannot fetch git repository {where}: {said}", hint=hint
                ) from first
            log.info("%s: fetch by commit id refused (%s); fetching all refs", where, said)
            try:
                git("fetch", "-q", fetch_url, "+refs/*:refs/remotes/origin/*")
            except ToolError as e:
                said = _git_says(e)
                raise FetchError(
                    f"{what}: cannot fetch git repository {where}: {said}",
                    hint=_failure_hint(said)[0],
                ) from e
        if not git("cat-file", "-t", f"{commit}^{{commit}}", check=False):
            raise FetchError(
                f"{what}: commit {commit} not found in {where}",
                hint="pin a full commit id that the repository still has (not a branch or tag name)",
            )
        git("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit)
        head = git("rev-parse", "HEAD")
        if head != commit:
            raise ChecksumError(
                f"{what}: {where} checked out {head}, expected {commit}",
                hint="the repository does not hold the pinned commit; nothing was stored",
            )
        commit_time = int(git("show", "-s", "--format=%ct", "HEAD"))
        tree = repo
        if source.subdir:
            tree = (repo / source.subdir).resolve()
            if not tree.is_relative_to(repo.resolve()) or not tree.is_dir():
                raise FetchError(f"{what}: {where} has no directory {source.subdir!r} at {commit}")
        expected = {"sha256": expected_digest} if expected_digest else None
        label = f"{where} at {commit}"
        with ctx.store.writer(expected=expected, what=what, url=label) as writer:
            write_tar(tree, cast(BinaryIO, _TarSink(writer)), epoch=0)
            info = writer.commit()
    return info.digest, commit_time


def resolve(name: str, source: GitSource, ctx: FetchContext, *, base_dir: Path) -> dict[str, Any]:
    """Fetch the pinned commit and store its tree as a deterministic tar.

    Returns:
        ``{"kind": "git", "url": <recipe URL>, "commit": <full id>, "digest": "sha256:<hex>"
        (of the tar of the tree, or of ``subdir``), "commitTime": <committer time, seconds since
        1970-01-01 UTC>}``.
    Raises:
        FetchError: the repository cannot be fetched, lacks the commit or the subdir.
        ChecksumError: the checked-out ``HEAD`` is not the pinned commit.
        OfflineError: ``ctx.offline``.
        ToolError: git is missing or a local git command failed.
    """
    ctx.require_online(name, f"git {source.git} at {source.commit}")
    digest, commit_time = _store_checkout(name, source, ctx, None)
    return {
        "kind": "git",
        "url": redact_url(source.git),
        "commit": source.commit,
        "digest": digest,
        "commitTime": commit_time,
    }


def ensure(
    name: str, source: GitSource, resolved: dict[str, Any], ctx: FetchContext, *, base_dir: Path
) -> str:
    """Make the store hold the locked tree; return its ``sha256:<hex>`` (no git run when present).

    Raises:
        LockError: ``resolved`` is not a git entry for this URL and commit.
        OfflineError: the tree is missing and ``ctx.offline``.
        ChecksumError: the fetched tree's tar differs from ``resolved["digest"]``.
        FetchError, ToolError: as :func:`resolve`.
    """
    check_entry(name, resolved, "git", **source.lock_identity())
    digest: str = resolved["digest"]
    if ctx.store.has_blob(digest):
        return digest
    ctx.require_online(name, f"git {source.git} at {source.commit} ({digest})")
    got, _ = _store_checkout(name, source, ctx, digest)
    return got
