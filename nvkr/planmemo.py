"""The plan memo: a no-op ``nvkr build`` answered without loading the recipe, planning or
walking the plan, from what the last full no-op of the same command recorded.

A full no-op spends most of its time importing and running what makes the plan (the recipe's
models, the source table, the builders); its outcome only depends on files and settings that a
few hundred ``stat`` calls can check. After a full build that ran no builder, ``nvkr build``
writes a memo, ``<store>/state/plan-memo/<invocation>.json`` (:func:`nvkr.atomic.write_atomic`;
the newest :data:`KEEP` are kept), and the next identical command replays it when everything
still matches.

**The key.** The memo's file name is the sha256 of the invocation: the memo format's version,
the interpreter (``sys.version``, its executable, ``sys.path``), the working directory, the
effective user, the command's options (recipe, variants, mirrors, ``--offline``, ``--lockfile``,
``--locked``, ``--out``, ``--jobs``, store, ``--config``) and the environment variables nvkr
reads (every ``NVKR_*`` and :data:`ENV`; hashed, never stored). Its content holds the rest,
checked on every hit:

- nvkr's own code and builder assets: a stat fingerprint (path, size, mtime_ns, inode, mode)
  of every file under the ``nvkr`` package and the checkout's ``builders/`` (``__pycache__``
  left out: a byte-compiled module is only used while its source's size and mtime match);
- every file the full build read and every directory it listed, from opening the session to
  the end of the build, as the interpreter's audit hook saw them in the building thread (the
  recipe, its bases and layers, the catalog's rules, the lockfile, the config file, every file
  and directory of a path source, ...), minus the interpreter's own tree, nvkr's code, the store
  and ``--out``; and explicitly the recipe's files, the lockfile, the config file and every
  ``recipes/compatibility.yaml`` the rules lookup tries, present or not. Each is a stat
  fingerprint (size, mtime_ns, ctime_ns, inode, mode; None when absent) taken *before* the build
  read it: a change of content always changes one of them (a rewrite moves the mtime and
  ctime, a replacement the inode; no one can set a ctime back), and a change racing the read
  makes the next run miss, never hit;
- the Python packages: the stat of each ``sys.path`` directory under the interpreter's prefix
  (installing or removing a distribution changes it).

**On a hit** it verifies what a no-op build verifies, under the same store hold and lock, and
produces the same output: the store's leftovers are cleaned up and said; the record of every
action of the plan has the stat it had (so the warnings and build records read from them are
the same; a removed record misses); the records where the walk stopped are in the store with
every output blob intact (:meth:`nvkr.store.Store.get_action`); each release set's
``index.json`` hashes right and every blob passes its seal
(:meth:`~nvkr.store.Store.checked_path`), as materializing checks; every file and directory of
``--out/<name>/`` and its build record (and envelope, or their absence) has the stat it had when
the build wrote them, and each blob is still the store's inode (or, copied across file systems,
has its size). Then it writes the build's GC root (:mod:`nvkr.store_gc`) and emits the events
the full build emitted (``actions-planned``, ``action-cached``, ``action-warning``, notes,
``result``), so the human and ``--json`` outputs and the exit code are the full path's.
Anything that does not match, and a memo that cannot be read or parsed, silently takes the full
path, which writes the memo again. A corrupt blob found on the way is deleted and said (as the
full path would) before the full path runs.

**Bypassed** (always the full path, no memo written): ``--debug``, ``--action``, ``--sign``,
``--push``, ``--cached-only``, any remote cache option (and no memo is written when the
environment or config file enables a remote cache), ``NVKR_PLAN_MEMO=off``; and no memo is
written after a build that ran or took from a cache any action, resolved a source the lockfile
lacks (or had no lockfile), started a process or opened a connection while planning, logged or
warned outside its events, or emitted an event other than those above.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from nvkr.monitor.events import (
    ActionCached,
    ActionsPlanned,
    ActionWarning,
    Event,
    Note,
    Result,
    StoreNotice,
)

if TYPE_CHECKING:
    from nvkr.build import BuildOutcome
    from nvkr.monitor import Monitor
    from nvkr.session import Session
    from nvkr.store import Store

log = logging.getLogger("nvkr.planmemo")

#: The memo format; a memo of another version misses.
VERSION = 1
#: Memos kept per store (one per distinct invocation; the oldest go first).
KEEP = 16
#: Environment variables besides ``NVKR_*`` that the key covers.
ENV = (
    "SOURCE_DATE_EPOCH", "HOME", "PATH", "TZ", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR",
    "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR", "DOCKER_CONFIG",
)  # fmt: skip
#: Audit events that make a build's planning more than reading files: no memo is written.
UNSAFE = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "socket.connect", "socket.getaddrinfo", "urllib.Request",
})  # fmt: skip

#: ``[size, mtime_ns, ctime_ns, inode, mode]``, or None: absent (or not stat-able).
Fingerprint = list[int] | None
Hold = Callable[[contextlib.AbstractContextManager[Any]], object]

_PACKAGE = Path(__file__).resolve().parent


def fingerprint(path: str) -> Fingerprint:
    """The stat fingerprint of ``path`` (symlinks followed), None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]


def code_fingerprint(package: Path = _PACKAGE) -> str:
    """sha256 over path, size, mtime_ns, inode and mode of every file of nvkr's ``package``
    and the checkout's ``builders/`` beside it (the builders' assets), ``__pycache__`` left
    out."""
    digest = hashlib.sha256()
    stack = [str(p) for p in (package.parent / "builders", package) if p.is_dir()]
    while stack:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            digest.update(f"!{directory}\n".encode())
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    stack.append(entry.path)
                continue
            fp = fingerprint(entry.path)
            digest.update(f"{entry.path}\0{fp and [fp[0], fp[1], fp[3], fp[4]]}\n".encode())
    return digest.hexdigest()


def _python_paths() -> list[list[Any]]:
    """The ``sys.path`` directories under the interpreter's prefixes, with their fingerprints
    (installing or removing a distribution changes its directory's)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    out: list[list[Any]] = []
    for entry in sys.path:
        real = os.path.realpath(entry or ".")
        if any(real == p or real.startswith(p + os.sep) for p in prefixes):
            out.append([real, fingerprint(real)])
    return out


def _library_dirs() -> tuple[str, ...]:
    """The interpreter's standard library and site-packages directories, as path prefixes."""
    import sysconfig

    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


class ActionRef(NamedTuple):
    """What a replayed action event names of its action (all a renderer reads)."""

    key: str
    name: str
    builder: str


def _ref(action: Any) -> list[str]:
    return [action.key, action.name, action.builder]


def encode_event(event: Event) -> list[Any] | None:
    """``event`` as JSON the memo keeps, None for an event a no-op memo cannot replay."""
    match event:
        case Note(message=message, level=level, hint=hint):
            return ["note", message, level, hint]
        case ActionsPlanned(actions=actions, to_run=to_run, cached=cached, remote=remote):
            return ["planned", actions, to_run, cached, remote]
        case ActionCached(action=action):
            return ["cached", _ref(action)]
        case ActionWarning(action=action, message=message, hint=hint):
            return ["warning", _ref(action), message, hint]
        case Result(verb=verb, fields=fields, exit_code=code, summary=summary):
            return ["result", verb, fields, code, summary]
    return None


def decode_event(item: list[Any]) -> Event:
    """The event :func:`encode_event` wrote as ``item``.

    Raises:
        ValueError: not one of those.
    """
    match item:
        case ["note", str(message), str(level), hint]:
            return Note(message, level, hint)
        case ["planned", int(actions), int(to_run), int(cached), int(remote)]:
            return ActionsPlanned(actions, to_run, cached, remote)
        case ["cached", [str(key), str(name), str(builder)]]:
            return ActionCached(ActionRef(key, name, builder))
        case ["warning", [str(key), str(name), str(builder)], str(message), hint]:
            return ActionWarning(ActionRef(key, name, builder), message, hint)
        case ["result", str(verb), dict(fields), int(code), dict(summary)]:
            return Result(verb, fields, code, summary)
    raise ValueError(f"not a memo event: {item!r}")


def _tree(root: Path) -> list[list[Any]]:
    """Every file and directory under ``root`` (itself included) with its fingerprint, sorted."""
    out: list[list[Any]] = [[".", fingerprint(str(root))]]
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            out.append([os.path.relpath(path, root), fingerprint(path)])
    out.sort(key=lambda item: str(item[0]))
    return out


def _same_files(files: list[list[Any]]) -> bool:
    return all(fingerprint(str(path)) == fp for path, fp in files)


class _Reads:
    """What the building thread opened and listed, each path's fingerprint before its first use
    (the audit hook's recording, :meth:`BuildMemo.recording`)."""

    def __init__(self, skip: tuple[str, ...], listed_by_imports: set[str]) -> None:
        self.thread = threading.get_ident()
        self.skip = skip
        self.listed_by_imports = listed_by_imports
        self.files: dict[str, Fingerprint] = {}
        self.unsafe: str | None = None
        self.busy = False

    def saw(self, event: str, args: tuple[Any, ...]) -> None:
        if event in UNSAFE:
            self.unsafe = self.unsafe or event
            return
        path = args[0] if args else None
        if path is None or isinstance(path, int):
            return
        path = os.path.abspath(os.fsdecode(os.fspath(path)))
        if event == "os.listdir" and path in self.listed_by_imports:
            return  # the import system's directory cache
        if path in self.files or path.startswith(self.skip):
            return
        self.files[path] = fingerprint(path)


_recording: _Reads | None = None
_hooked = False
_guard = threading.Lock()
_WATCHED = frozenset({"open", "os.listdir", "os.scandir"}) | UNSAFE


def _audit(event: str, args: tuple[Any, ...]) -> None:
    reads = _recording
    if reads is None or event not in _WATCHED or reads.busy:
        return
    if threading.get_ident() != reads.thread:
        return
    reads.busy = True
    try:
        reads.saw(event, args)
    except (TypeError, ValueError, OSError):
        reads.unsafe = reads.unsafe or f"unreadable {event} event"
    finally:
        reads.busy = False


class _Unclean(logging.Handler):
    """Notes that something reached the log while recording: a memo would not replay it."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        self.recorder.unclean = self.recorder.unclean or f"logged: {record.getMessage()}"


class Recorder:
    """A :class:`~nvkr.monitor.Monitor` that passes every event on to ``monitor`` and keeps
    what a memo replays (:meth:`BuildMemo.recording`)."""

    def __init__(self, monitor: Monitor, reads: _Reads) -> None:
        self.monitor = monitor
        self.reads = reads
        self.events: list[list[Any]] = []
        self.unclean: str | None = None

    def emit(self, event: Event) -> None:
        self.monitor.emit(event)
        item = encode_event(event)
        if item is None:
            self.unclean = self.unclean or f"event {type(event).__name__}"
        else:
            self.events.append(item)

    def close(self) -> None:
        self.monitor.close()


class BuildMemo:
    """The memo of one ``nvkr build`` invocation (module docstring): :meth:`replay` it, or
    record a full build (:meth:`recording`) and :meth:`save` it."""

    def __init__(self, store_root: Path, out: Path, invocation: dict[str, Any]) -> None:
        self.store_root = store_root
        self.out = out
        name = hashlib.sha256(json.dumps(invocation, sort_keys=True).encode()).hexdigest()
        self.path = store_root / "state" / "plan-memo" / f"{name}.json"

    @classmethod
    def for_build(
        cls,
        *,
        store_root: Path | None,
        config: Path | None,
        debug: bool,
        bypass: bool,
        options: dict[str, Any],
    ) -> BuildMemo | None:
        """The memo of a build with these ``options`` (the command's, as given), None when it
        is bypassed (``bypass``: an option the memo never serves; ``debug``;
        ``NVKR_PLAN_MEMO=off``)."""
        if bypass or debug or os.environ.get("NVKR_PLAN_MEMO") == "off":
            return None
        from nvkr.store import default_root

        root = Path(os.path.abspath(store_root if store_root is not None else default_root()))
        out = Path(os.path.abspath(options["out"]))
        invocation = {
            "version": VERSION,
            "python": [sys.version, sys.executable, sys.path],
            "cwd": os.getcwd(),
            "user": os.geteuid(),
            "store": str(root),
            "config": str(config) if config is not None else None,
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in options.items()},
            "env": {k: v for k, v in os.environ.items() if k.startswith("NVKR_") or k in ENV},
        }
        return cls(root, out, invocation)

    # -- the hit ---------------------------------------------------------------------------
    def _read(self) -> dict[str, Any] | None:
        try:
            memo = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return None
        if not isinstance(memo, dict) or memo.get("version") != VERSION:
            return None
        return memo

    def replay(self, monitor: Monitor, hold: Hold) -> bool:
        """Answer the build from the memo when everything still matches (module docstring):
        every event to ``monitor``, True. False when anything differs (the caller builds);
        ``hold`` keeps the store's reader lock for the command's life."""
        memo = self._read()
        try:
            if memo is None or memo["code"] != code_fingerprint():
                return self._miss("no memo" if memo is None else "nvkr's code changed")
            if not _same_files(memo["files"]) or not _same_files(memo["python"]):
                return self._miss("an input file changed")
            events = [decode_event(item) for item in memo["events"]]
            pre_lock = int(memo["preLock"])
            if not isinstance(memo["gcRoot"], dict):
                raise TypeError("gcRoot")
        except (KeyError, TypeError, ValueError):
            return self._miss("unreadable memo")
        from nvkr.scratch import cleanup_line
        from nvkr.store import Store

        store = Store(self.store_root)
        hold(store.reading())
        notices: list[Event] = []
        store.notice = lambda digest, why: notices.append(StoreNotice("blob-corrupt", digest, why))
        store.tree_notice = lambda d, why: notices.append(StoreNotice("tools-changed", d, why))
        with store.lock() as cleaned:
            said = cleanup_line(cleaned)
            why = self._verify(memo, store)
            if why is None and not notices:
                from nvkr.store_gc import write_root_document

                write_root_document(store, memo["gcRoot"], invocation_id=str(uuid.uuid4()))
        if said:
            events.insert(pre_lock, Note(said))
        if why is not None or notices:
            for event in ([Note(said)] if said else []) + notices:
                monitor.emit(event)
            return self._miss(why or "a store blob is corrupt")
        for event in events:
            monitor.emit(event)
        log.debug("plan memo: hit (%s)", self.path.name)
        return True

    def _miss(self, why: str) -> bool:
        log.debug("plan memo: miss: %s", why)
        return False

    def _verify(self, memo: dict[str, Any], store: Store) -> str | None:
        """None when the store and ``--out`` hold what the memo's build left, else why not."""
        try:
            for key, fp in memo["records"]:
                if fingerprint(str(store.action_path(key))) != fp:
                    return f"the action record of {key[:19]} changed"
            for key in memo["cached"]:
                if store.get_action(key) is None:
                    return f"the result of {key[:19]} is not in the store"
            for item in memo["releaseSets"]:
                store.read_blob(item["index"])  # hashed as it is read, as materialize does
                paths = {d: store.checked_path(d) for d in item["blobs"]}
                layout = Path(item["path"])
                if _tree(layout) != item["tree"] or not _same_files(item["files"]):
                    return f"{layout} changed"
                if not _links_current(layout, paths, item["links"]):
                    return f"{layout} no longer links the store's blobs"
        except Exception as e:  # anything amiss: the full path says what
            return f"{type(e).__name__}: {e}"
        return None

    # -- the full path ---------------------------------------------------------------------
    @contextlib.contextmanager
    def recording(self, monitor: Monitor) -> Iterator[Recorder]:
        """Record a full build run inside: its events (the :class:`Recorder` yielded, the
        monitor to build with), the files it reads, whatever it logs or warns."""
        global _recording, _hooked
        skip = _library_dirs() + tuple(
            str(p) + os.sep
            for p in (_PACKAGE, _PACKAGE.parent / "builders", self.store_root, self.out)
        ) + ("/proc/", "/sys/", "/dev/")  # fmt: skip
        reads = _Reads(skip, {os.path.abspath(p or ".") for p in sys.path})
        recorder = Recorder(monitor, reads)
        unclean = _Unclean(recorder)
        root = logging.getLogger()
        shown = warnings.showwarning

        def warned(*args: Any, **kwargs: Any) -> None:
            recorder.unclean = recorder.unclean or "a Python warning"
            shown(*args, **kwargs)

        with _guard:
            if not _hooked:
                sys.addaudithook(_audit)
                _hooked = True
            ours = _recording is None
            if ours:
                _recording = reads
            else:  # another thread of this process records a build (an in-process caller)
                reads.unsafe = "another build recorded at the same time"
        root.addHandler(unclean)
        warnings.showwarning = warned
        try:
            yield recorder
        finally:
            if ours:
                _recording = None
            root.removeHandler(unclean)
            warnings.showwarning = shown

    def save(
        self, recorder: Recorder, session: Session, outcome: BuildOutcome, *, cache: bool
    ) -> None:
        """Write the memo of the full build ``recorder`` saw (``session``, ``outcome``; ``cache``:
        whether remote caches were used), unless it did more than a local no-op (module
        docstring). A store that refuses the write only leaves the memo out."""
        report, resolver = outcome.report, session.resolver
        why = (
            recorder.unclean
            or recorder.reads.unsafe
            or ("remote caches" if cache else None)
            or ("actions ran" if report.built or report.remote else None)
            or ("the lockfile lacks sources" if resolver.lock is None or resolver.resolved_now
                else None)
            or ("a partial selection" if len(outcome.written) != len(outcome.plan.release_sets)
                else None)
        )  # fmt: skip
        # Before the store lock, build() says only that a selection is partial (a note); right
        # after it, what the lock's cleanup removed, which a hit says anew (and so never keeps).
        pre_lock = 0 if session.all_variants else 1
        events = recorder.events
        if why is None and pre_lock and (not events or events[0][:3:2] != ["note", "note"]):
            why = "unexpected events before the store lock"
        cleanup = events[pre_lock : pre_lock + 1] or [[""]]  # a line of scratch.cleanup_line
        if why is None and cleanup[0][0] == "note" and cleanup[0][1].startswith("store: removed"):
            why = "the store lock cleaned up leftovers"
        if why is not None:
            log.debug("plan memo: not written: %s", why)
            return
        try:
            memo = self._memo(recorder, session, outcome, pre_lock)
            self._write(memo)
        except (OSError, ValueError) as e:
            log.debug("plan memo: not written: %s", e)

    def _memo(
        self, recorder: Recorder, session: Session, outcome: BuildOutcome, pre_lock: int
    ) -> dict[str, Any]:
        from nvkr.catalog.rules import RULES_FILE
        from nvkr.fetch.mirrors import default_config_path
        from nvkr.releaseset.record import record_paths
        from nvkr.store_gc import root_document

        plan, store = outcome.plan, session.store
        files = dict(recorder.reads.files)  # fingerprints from before the build read them
        recipe = Path(os.path.abspath(session.loaded.path))
        config = Path(os.path.abspath(default_config_path()))  # app.config is in the key
        explicit = [*session.loaded.files, session.lock_path, config]
        explicit += [p / RULES_FILE for p in recipe.parents if p.name == "recipes"]
        for path in explicit:
            files.setdefault(os.path.abspath(path), fingerprint(str(path)))
        sets = []
        for item in outcome.written:
            result = outcome.report.results[plan.release_sets[item.name]]
            blobs = [o.digest for o in result.outputs_with("blob")]
            index = result.output("index", f"release set {item.name}").digest
            record_files = [[str(p), fingerprint(str(p))] for p in record_paths(item.path)]
            links = {d: fingerprint(str(store.blob_path(d))) for d in blobs}
            sets.append({
                "path": str(item.path), "index": index, "blobs": blobs, "links": links,
                "tree": _tree(item.path), "files": record_files,
            })  # fmt: skip
        written = [w.to_json() for w in outcome.written]
        # the recipe as nvkr.build.build roots it
        recipe_line = f"{recipe.resolve()} {' '.join(sorted(v.id for v in plan.variants))}"
        return {
            "version": VERSION,
            "code": code_fingerprint(),
            "python": _python_paths(),
            "files": sorted([path, fp] for path, fp in files.items()),
            "records": [[k, fingerprint(str(store.action_path(k)))] for k in sorted(plan.actions)],
            "cached": list(outcome.report.cached),
            "releaseSets": sets,
            "gcRoot": root_document(recipe=recipe_line, plan=plan, release_sets=written),
            "preLock": pre_lock,
            "events": recorder.events,
        }

    def _write(self, memo: dict[str, Any]) -> None:
        from nvkr.atomic import write_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(memo, sort_keys=True).encode(), mode=0o644)
        log.debug("plan memo: written (%s)", self.path.name)
        memos = sorted(self.path.parent.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in memos[:-KEEP]:
            with contextlib.suppress(OSError):
                old.unlink()


def memoized(
    memo: BuildMemo | None,
    monitor: Monitor,
    hold: Hold,
    full: Callable[[Monitor], tuple[Session, bool, BuildOutcome]],
) -> None:
    """Answer a build from ``memo`` when it still matches, else run ``full`` (the build,
    returning its session, whether remote caches were used and its outcome) recording what a
    memo needs, and save it. ``memo`` None: just ``full``."""
    if memo is None:
        full(monitor)
    elif not memo.replay(monitor, hold):
        with memo.recording(monitor) as recorder:
            session, cache, outcome = full(recorder)
        memo.save(recorder, session, outcome, cache=cache)


def _links_current(layout: Path, paths: dict[str, Path], links: dict[str, Fingerprint]) -> bool:
    """Each blob of ``layout`` is still the store's (the inode it linked, or a copy of its
    size across file systems), and the store's is the one the memo's build saw."""
    for digest, source in paths.items():
        want, linked = fingerprint(str(source)), links.get(digest)
        if want is None or linked is None or want[3] != linked[3]:
            return False
        have = fingerprint(str(layout / "blobs" / "sha256" / digest.split(":", 1)[1]))
        if have is None or have[0] != want[0]:
            return False
    return True
