"""The real ``nvkr`` command in a subprocess, as a user runs it (:func:`start_nvkr`,
:func:`run_nvkr`), a copy of what a clone holds (:func:`make_clone`), and stores seeded from the
session's source store or default build (:func:`seed`, :func:`seed_from_build`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

from tests.helpers import REPO


def seed(root: Path, go_toolchain: tuple[Path, str], *, go_cache: bool = True) -> Path:
    """Make a fresh store at ``root`` holding the default recipe's locked sources (as if fetched
    before): every blob of the session's source store, hard-linked (copied across file systems).
    Builds from it run every builder but download nothing.

    ``go_cache``: Go's build cache too (:func:`link_go_cache`: the standard library compiled for
    amd64 once in the session, by the ``go_toolchain`` fixture), as on a machine that built
    before; ``False`` where the test's claim is two Go builds that share nothing."""
    from nvkr.store import Store

    src_root, _digest = go_toolchain
    store = Store(root)
    for blob in Store(src_root).blobs_dir.iterdir():
        dst = store.blob_path("sha256:" + blob.name)
        if dst.exists():
            continue
        try:
            os.link(blob, dst)
        except OSError:
            shutil.copyfile(blob, dst)
            os.chmod(dst, 0o444)
    if go_cache:
        link_go_cache(Store(src_root).cache_dir / "go-build", store.cache_dir / "go-build")
    return root


def link_go_cache(src: Path, dest: Path) -> None:
    """``dest`` a Go build cache holding every entry of ``src``, hard-linked: Go writes an entry
    once (a new file, renamed into place) and only reads it after, so the stores share its bytes
    and not its directory. The files at its top (``trim.txt``, rewritten in place) are copied.
    Nothing when ``src`` does not exist."""
    if not src.is_dir():
        return
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["cp", "-al", f"{src}/.", str(dest)], check=True)
    for entry in dest.iterdir():
        if entry.is_file():  # a link to src's: a copy of its own instead
            entry.unlink()
            shutil.copyfile(src / entry.name, entry)


def seed_from_build(root: Path, built: Path) -> Path:
    """A fresh store at ``root`` holding everything the store ``built`` holds: blobs hard-linked,
    action records copied, unpacked toolchains hard-linked, Go's build cache linked
    (:func:`link_go_cache`), the other tool caches copied. A build of the default recipe from it
    runs only the actions whose inputs a test changed."""
    from nvkr.store import Store

    src, store = Store(built), Store(root)
    for blob in src.blobs_dir.iterdir():
        dst = store.blob_path("sha256:" + blob.name)
        if not dst.exists():
            os.link(blob, dst)
    for record in (built / "actions").glob("*.json"):
        shutil.copyfile(record, root / "actions" / record.name)
    if (built / "tools").is_dir():
        (root / "tools").mkdir(exist_ok=True)
        subprocess.run(["cp", "-al", f"{built / 'tools'}/.", str(root / "tools")], check=True)
    for cache in src.cache_dir.iterdir() if src.cache_dir.is_dir() else ():
        if cache.name == "go-build":
            link_go_cache(cache, store.cache_dir / cache.name)
        else:
            store.cache_dir.mkdir(exist_ok=True)
            subprocess.run(["cp", "-a", str(cache), str(store.cache_dir)], check=True)
    return root


class Result(NamedTuple):
    """What a run of the CLI left: exit code, stdout, stderr (``code, out, err = result``)."""

    code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout then stderr: what a terminal shows (for messages on either stream)."""
        return self.stdout + self.stderr

    def json_events(self) -> list[dict]:
        return [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]


class Started:
    """A ``python -m nvkr`` started by :func:`start_nvkr`; :meth:`result` waits for it."""

    def __init__(self, proc: subprocess.Popen[str], timeout: float) -> None:
        self.proc, self.timeout = proc, timeout

    def result(self) -> Result:
        try:
            out, err = self.proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
            err += f"\n(killed after {self.timeout} s)"
        return Result(self.proc.returncode, out, err)

    def kill(self, grace: float = 60.0) -> None:
        """Stop it and every process it started (its own session): SIGTERM first, so a running
        mmdebstrap unmounts the proc, sys and dev it mounted in its chroot (SIGKILL left them
        mounted under the test's tmp dir, which then could not be deleted), then SIGKILL
        whatever is left after ``grace`` seconds."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        with contextlib.suppress(ProcessLookupError):
            while time.monotonic() < deadline:
                self.proc.poll()  # reap the leader, so the group empties
                os.killpg(self.proc.pid, 0)  # raises once no process of the group is left
                time.sleep(0.2)
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()


_thread = threading.local()


def in_background(env: dict[str, str], nice: int = 0) -> None:
    """Make this thread one of the session's background threads: the CLI runs it starts get
    ``env`` (the session's environment, taken before any test changed it) instead of the
    current test's, and run at ``nice`` (``nice -n``: a lower CPU priority; see
    tests/helpers/background.py), and the fast tier's guard lets it start the slow tier's tools
    (:func:`tests.helpers.toolguard.exempt_this_thread`). For a thread pool's ``initializer``."""
    from tests.helpers import toolguard

    _thread.env = dict(env)
    _thread.nice = nice
    toolguard.exempt_this_thread()


def thread_env() -> dict[str, str]:
    """The environment this thread starts processes in: a background thread's
    (:func:`in_background`), else the current test's."""
    return dict(getattr(_thread, "env", os.environ))


def start_nvkr(
    *args: str,
    cwd: Path,
    store: Path,
    env: dict[str, str] | None = None,
    umask: int | None = None,
    timeout: float = 1800,
) -> Started:
    """Start the real CLI (``python -m nvkr``) in a subprocess without waiting for it (in the
    test's environment, or a background thread's: :func:`in_background`)."""
    full_env = {
        **thread_env(),
        "NVKR_CACHE": str(store),
        "NVKR_CONFIG": str(cwd / "no-config.yaml"),
        **(env or {}),
    }
    if "SOURCE_DATE_EPOCH" not in (env or {}):
        full_env.pop("SOURCE_DATE_EPOCH", None)
    preexec = (lambda: os.umask(umask)) if umask is not None else None
    nice = getattr(_thread, "nice", 0)
    proc = subprocess.Popen(
        [*(["nice", "-n", str(nice)] if nice else []), sys.executable, "-m", "nvkr", *args],
        cwd=cwd,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec,
        start_new_session=True,
    )
    return Started(proc, timeout)


def run_nvkr(
    *args: str, cwd: Path, store: Path, env: dict[str, str] | None = None, umask: int | None = None
) -> Result:
    """Run the real CLI (``python -m nvkr``) in a subprocess, as a user would (see
    :func:`start_nvkr`), and wait for it (at most 1500 s: the session's default build runs in
    the background meanwhile, so a build here may get half the machine)."""
    return start_nvkr(*args, cwd=cwd, store=store, env=env, umask=umask, timeout=1500).result()


def machine_image(layout: Path, **variant: str) -> Path:
    """The QCOW2 of the one machine image in the release set at ``layout`` whose variant has
    ``variant``'s fields (``gpu="hopper", arch="amd64"``; none: the set's only one)."""
    from nvkr.releaseset import read_metadata

    (image,) = [
        a
        for a in read_metadata(layout)["artifacts"]
        if a["kind"] == "machine-image"
        and all(a["variant"].get(k) == v for k, v in variant.items())
    ]
    return layout / "blobs" / "sha256" / image["primary"]["digest"].split(":", 1)[1]


def make_clone(dest: Path) -> Path:
    """A copy of the repository's recipes, lockfiles and agent sources (what a clone holds)."""
    for part in ("recipes", "lockfiles", "agents", "charts"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest
