"""Lockfiles: the resolved identity of every source and toolchain a recipe uses.

``nvkr lock`` renders every source of every variant, resolves it (fetching and verifying it into
the store, see :func:`nvkr.fetch.api.resolve`) and writes ``lockfiles/<recipe>.lock.json`` as
canonical JSON (sorted keys, no floats, trailing newline)::

    {"lockVersion": 1,
     "recipe": {"name": "default", "path": "../recipes/default.yaml", "digest": "sha256:.."},
     "sources": [{"name": "go", "spec": {...the rendered recipe entry...},
                  "variants": ["gpu=hopper,kubernetes=1.36,arch=amd64", ...],
                  "resolved": {"kind": "pypi", "digest": "sha256:..", ...}}, ...],
     "tools": {"go": {"source": "go", "version": "1.27.3", "digest": "sha256:.."},
               "build-tools-packages": {"source": "build-tools-packages",
                                        "cToolchain": {"amd64": {"gcc-12": "12.2.0-14", ...}}}}}

A tools tree's C toolchain (the compiler, binutils and C library packages of the apt source a
cgo build's ``toolsTree`` is made from, per arch) is listed among the tools; every .deb of it is
pinned in its source's closure.

A source entry may also record facts read from its bytes for the compatibility rules
(``"ovsdbSchemas"``: the OVSDB schemas of a git tree's models or of a .deb, see
:mod:`nvkr.catalog.schemas`); ``nvkr lock`` reads them afresh, ``plan`` and ``build`` take them
from the lockfile.

A source is looked up by its name and its rendered spec, so a changed pin, URL or version is a
miss. Path sources (this repository's own directories) are listed without a digest: they are
hashed afresh on every build. ``nvkr build --locked`` refuses any difference and names it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.action import ResolvedSource
from nvkr.atomic import write_atomic
from nvkr.bounds import MAX_LOCKFILE_BYTES, read_limited
from nvkr.canonical import canonical_json, canonical_json_file, sha256_bytes
from nvkr.errors import ChecksumError, LockError
from nvkr.fetch.api import fetcher_for, fetcher_of, resolve
from nvkr.fetch.context import FetchContext
from nvkr.fetch.entries import REFRESH_HINT, LockEntry, apt_manifest_bytes
from nvkr.fetch.table import read_entry
from nvkr.recipe.base import ArtifactModel
from nvkr.recipe.loader import LoadedRecipe
from nvkr.recipe.matrix import Variant
from nvkr.recipe.yamlsource import where
from nvkr.redact import redact_urls

#: The fields of a source that pin its bytes, in the order a checksum error points at them.
PIN_FIELDS = ("sha256", "sha512", "digest", "commit", "checksumUrl", "packages", "version")

LOCK_VERSION = 1
#: the members of a source entry; any other member is a fact read from the source's bytes and
#: recorded by the check that read it (``ovsdbSchemas``: :mod:`nvkr.catalog.schemas`)
_ENTRY_KEYS = frozenset({"name", "spec", "variants", "resolved"})


def default_lock_path(recipe_path: Path) -> Path:
    """``recipes/a/b.yaml`` → ``lockfiles/a/b.lock.json`` (sibling of the ``recipes`` dir);
    a recipe outside any ``recipes`` dir → ``<its dir>/lockfiles/<stem>.lock.json``."""
    p = Path(os.path.abspath(recipe_path))
    for parent in p.parents:
        if parent.name == "recipes":
            rel = p.relative_to(parent).with_suffix(".lock.json")
            return parent.parent / "lockfiles" / rel
    return p.parent / "lockfiles" / (p.stem + ".lock.json")


def _spec(source: Any) -> dict[str, Any]:
    """The rendered recipe entry as the lockfile records it: URLs without user info
    (:mod:`nvkr.redact`; fetching takes the credentials from the recipe, never the lock)."""
    spec: dict[str, Any] = redact_urls(source.model_dump(exclude_none=True))
    return spec


def _spec_key(name: str, spec: dict[str, Any]) -> bytes:
    return canonical_json([name, spec])


def _differences(old: Any, new: Any, path: str = "") -> list[str]:
    """``field.path: old -> new`` for every leaf that differs between two specs (maps are
    walked, so a changed package pin reads ``packages.socat: '1.7.4.4-2' -> '1.7.4.4-3'``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted({*old, *new}):
            if old.get(k) != new.get(k):
                sub = f"{path}.{k}" if path else str(k)
                if k not in old:
                    out.append(f"{sub}: added {new[k]!r}")
                elif k not in new:
                    out.append(f"{sub}: removed (was {old[k]!r})")
                else:
                    out += _differences(old[k], new[k], sub)
        return out
    return [f"{path}: {old!r} -> {new!r}"]


def read_lock(path: Path) -> dict[str, Any] | None:
    """The lock document at ``path``, or None when there is none.

    Raises:
        LockError: the file is not valid JSON or not a lockfile of this version.
    """
    try:
        data = read_limited(path, "lockfile", MAX_LOCKFILE_BYTES)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LockError(
            f"{path}: cannot read the lockfile: {_os_reason(e)}",
            hint="name a lockfile with --lockfile, or remove what is there and run `nvkr lock`",
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LockError(
            f"{path}: not UTF-8 (byte {e.start}), so not a lockfile",
            hint="regenerate it with `nvkr lock`",
        ) from None
    try:
        doc: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as e:
        raise LockError(
            f"{path}:{e.lineno}: not valid JSON: {e.msg}", hint="regenerate it with `nvkr lock`"
        ) from e
    if (
        not isinstance(doc, dict)
        or doc.get("lockVersion") != LOCK_VERSION
        or not isinstance(doc.get("sources"), list)
    ):
        raise LockError(
            f"{path}: not an nvkr lockfile (lockVersion {LOCK_VERSION})",
            hint="regenerate it with `nvkr lock`",
        )
    return doc


def _os_reason(e: OSError) -> str:
    if isinstance(e, IsADirectoryError):
        return "it is a directory"
    return (e.strerror or str(e)).lower()


def lock_digest(doc: dict[str, Any]) -> str:
    """``sha256:<hex>`` of the lockfile bytes as nvkr writes them."""
    return sha256_bytes(canonical_json_file(doc))


@dataclass
class Resolver:
    """Binds each variant's sources to lock entries; resolves what the lock lacks (unless locked).

    Args:
        lock_path: where the lockfile lives (recorded paths are relative to it).
        lock: the lockfile read from disk (None when there is none).
        locked: refuse anything the lock does not hold (``--locked``).
        records_lock_time: keep what a resolution records of where and when it was made (an apt
            source's snapshot archives and lock time): ``nvkr lock``'s. A build or plan that
            resolves what the lock lacks holds the entries without it, so the in-memory lock
            that provenance then names (by digest) is the same on every run that resolves the
            same sources.
    """

    loaded: LoadedRecipe
    lock_path: Path
    lock: dict[str, Any] | None
    ctx: FetchContext
    locked: bool = False
    records_lock_time: bool = False
    _entries: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    _used: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    _names: dict[str, int] = field(default_factory=dict)  # the lockfile's entries per name
    resolved_now: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for entry in (self.lock or {}).get("sources", []):
            # a lockfile written before nvkr stripped user info matches, and is rewritten without
            entry = redact_urls(entry)
            self._entries[_spec_key(entry["name"], entry["spec"])] = entry
            self._names[entry["name"]] = self._names.get(entry["name"], 0) + 1

    def base_dir(self, variant: Variant, name: str) -> Path:
        """The directory ``name``'s relative paths start from: that of the file declaring it."""
        dirs = variant.source_dirs or self.loaded.source_dirs
        return Path(dirs.get(name, Path(self.loaded.path).parent))

    def source_for(self, variant: Variant, name: str) -> ResolvedSource:
        """The locked source ``name`` of ``variant`` (path sources hashed now)."""
        source = variant.recipe.sources[name]
        spec = _spec(source)
        key = _spec_key(name, spec)
        base = self.base_dir(variant, name)
        entry = self._used.get(key)
        if entry is None:
            locked_entry = self._entries.get(key)
            local = fetcher_of(source).local
            if local:  # the repository's own files (path): hashed afresh on every build
                resolved = self._resolve(variant, name, base)
            elif locked_entry is not None:
                where = self._where(name, locked_entry)
                resolved = read_entry(locked_entry["resolved"], where=where)
                try:  # an entry at odds with its recipe source, even where nothing fetches it
                    fetcher_of(source).check(name, source, resolved)
                except LockError as e:
                    raise LockError(
                        f"{self.lock_path}: {e.message}{self._which(name, locked_entry)}",
                        hint=REFRESH_HINT,
                    ) from None
            elif self.locked:
                raise LockError(
                    f"source {name!r} of variant {variant.id} is not in the lockfile {self.lock_path}"
                )
            else:
                resolved = self._resolve(variant, name, base)
                self.resolved_now.append(name)
            entry = {"name": name, "spec": spec, "variants": [], "resolved": resolved}
            if locked_entry is not None and not local:
                # what was read from the bytes (the catalog's rules: ``ovsdbSchemas``) goes on
                entry.update({k: v for k, v in locked_entry.items() if k not in _ENTRY_KEYS})
            self._used[key] = entry
        if variant.id not in entry["variants"]:
            entry["variants"].append(variant.id)
        return ResolvedSource(name=name, spec=source, entry=entry["resolved"], base_dir=base)

    def locked_debs(
        self, variant: Variant, name: str, arch: str, versions: Mapping[str, str]
    ) -> ResolvedSource | None:
        """The .debs of ``arch`` that the lockfile pins for apt source ``name`` at exactly
        ``versions`` (package → version), as an apt source of their own: ``name``, its spec
        with that arch and those packages, an entry listing just them (its manifest's digest).
        What a foreign tree's builder runs natively (:mod:`nvkr.builders.rootfs.native`). None
        when no entry of ``name`` for ``arch`` holds them all (no lockfile, a matrix without
        that arch): the caller does without. Binds nothing: the lockfile written is the same."""
        wanted = dict(versions)
        for entry in self._entries.values():
            resolved = entry.get("resolved") or {}
            if entry.get("name") != name or resolved.get("kind") != "apt":
                continue
            if resolved.get("arch") != arch:
                continue
            found = [
                p
                for p in resolved.get("packages") or []
                if isinstance(p, dict) and wanted.get(str(p.get("name"))) == p.get("version")
            ]
            if len(found) != len(wanted) or not wanted:
                continue
            found.sort(key=lambda p: (p["name"], p["arch"]))
            subset = {
                **{k: v for k, v in resolved.items() if k in ("keyrings", "snapshot")},
                "kind": "apt",
                "arch": arch,
                "digest": sha256_bytes(apt_manifest_bytes(arch, found)),
                "packages": found,
            }
            typed = read_entry(subset, where=self._where(name, entry))
            spec = variant.recipe.sources[name].model_copy(
                update={"arch": arch, "packages": wanted}
            )
            return ResolvedSource(
                name=name, spec=spec, entry=typed, base_dir=self.base_dir(variant, name)
            )
        return None

    def resolved(self) -> list[LockEntry]:
        """The lock entry of every source bound so far."""
        return [entry["resolved"] for entry in self._used.values()]

    def bound_entry(self, variant: Variant, name: str) -> dict[str, Any]:
        """The entry :meth:`source_for` binds ``name`` of ``variant`` to (binding it now when it
        is not), its ``resolved`` a :class:`~nvkr.fetch.entries.LockEntry`: the document
        :meth:`document` writes, so what a caller records in it beside the four members (the
        OVSDB schemas :mod:`nvkr.catalog.schemas` reads) is written too."""
        self.source_for(variant, name)
        return self._used[_spec_key(name, _spec(variant.recipe.sources[name]))]

    def _where(self, name: str, entry: dict[str, Any] | None = None) -> str:
        """How messages name the lock entry of ``name`` (with :meth:`_which`)."""
        return f"{self.lock_path}: lock entry for source {name!r}{self._which(name, entry)}"

    def _which(self, name: str, entry: dict[str, Any] | None) -> str:
        """`` (of VARIANT; ...)``, the variants ``entry`` serves, where the lockfile has several
        entries of ``name`` (one per arch); else empty."""
        if entry is None or self._names.get(name, 0) < 2 or not entry.get("variants"):
            return ""
        return f" (of {'; '.join(map(str, entry['variants']))})"

    def _resolve(self, variant: Variant, name: str, base: Path) -> LockEntry:
        """:func:`nvkr.fetch.api.resolve` (the entry's URLs without user info); a checksum
        failure also names where the pin was written (``FILE:LINE: sources.NAME.sha256``), the
        place to fix a wrong pin."""
        source = variant.recipe.sources[name]
        try:
            entry = resolve(name, source, self.ctx, base_dir=base)
            typed = read_entry(redact_urls(entry.to_json()), where=self._where(name))
            return typed if self.records_lock_time else typed.without_lock_record()
        except ChecksumError as e:
            locations = variant.locations or self.loaded.locations
            written = _spec(source)
            pin = next((f for f in PIN_FIELDS if f in written), None)
            path: tuple[str, ...] = ("sources", name) + ((pin,) if pin else ())
            e.message = f"{e.message} (pinned at {where(locations, path)})"
            e.args = (e.message,)
            raise

    def drift(self, variants: list[Variant], *, all_variants: bool = True) -> list[str]:
        """Every difference between the recipe and the lockfile, one line each (empty: none).

        ``all_variants`` says ``variants`` is the whole matrix, so lock entries no variant uses
        are drift too (with a ``--variant`` selection they belong to the cells left out).
        """
        if self.lock is None:
            return [f"there is no lockfile at {self.lock_path}"]
        by_name: dict[str, list[dict[str, Any]]] = {}
        for entry in redact_urls(self.lock["sources"]):
            by_name.setdefault(entry["name"], []).append(entry)
        wanted: set[bytes] = set()
        # The same drift usually shows in every variant: one line per difference, naming the
        # variants it concerns.
        cells: dict[tuple[str, str], list[str]] = {}
        for variant in variants:
            for name, source in sorted(variant.recipe.sources.items()):
                spec = _spec(source)
                key = _spec_key(name, spec)
                wanted.add(key)
                if key in self._entries:
                    continue
                if name in by_name:
                    # compare with the entry this variant used (the arm64 entry for an arm64
                    # variant), else the first of that name
                    mine = [e for e in by_name[name] if variant.id in (e.get("variants") or [])]
                    old = (mine or by_name[name])[0]["spec"]
                    detail = ", ".join(_differences(old, spec))
                    problem = f"source {name!r} changed since the lock: {detail}"
                else:
                    problem = f"source {name!r} is not in the lockfile"
                cells.setdefault((name, problem), []).append(variant.id)
        problems = [
            f"{problem} ({'all variants' if len(ids) == len(variants) > 1 else '; '.join(ids)})"
            for (_, problem), ids in cells.items()
        ]
        if all_variants:
            drifted = {name for name, _ in cells}
            for key, entry in sorted(self._entries.items()):
                if key not in wanted and entry["name"] not in drifted:
                    problems.append(
                        f"the lockfile pins source {entry['name']!r}, which the recipe no longer has"
                    )
        if not problems and self.lock.get("recipe", {}).get("digest") != self.loaded.digest:
            problems.append(
                f"the recipe changed since the lock (lock has {self.lock.get('recipe', {}).get('digest')}, "
                f"recipe is {self.loaded.digest})"
            )
        return sorted(dict.fromkeys(problems))

    def check_locked(self, variants: list[Variant], *, all_variants: bool = True) -> None:
        """Raise :class:`LockError` listing every drift (``--locked``)."""
        problems = self.drift(variants, all_variants=all_variants)
        if problems:
            raise LockError(
                f"{self.lock_path} does not match {self.loaded.path}:\n  - "
                + "\n  - ".join(problems),
                hint=f"run `nvkr lock {self.loaded.path}` and commit the lockfile, or build without --locked",
            )

    def document(self) -> dict[str, Any]:
        """The lock document for every source bound so far (what ``nvkr lock`` writes)."""
        rows: list[tuple[dict[str, Any], LockEntry]] = []  # each source, and its typed entry
        for entry in self._used.values():
            resolved = entry["resolved"].to_json()
            if fetcher_for(resolved["kind"]).local:  # hashed on every build: no digest pinned
                resolved.pop("digest", None)
            written = {
                **{k: v for k, v in entry.items() if k not in _ENTRY_KEYS},
                "name": entry["name"],
                "spec": entry["spec"],
                "variants": sorted(entry["variants"]),
                "resolved": resolved,
            }
            rows.append((written, entry["resolved"]))
        rows.sort(key=lambda row: canonical_json([row[0]["name"], row[0]["spec"]]))
        sources = [written for written, _ in rows]
        toolchains = self._toolchain_sources()
        tools: dict[str, Any] = {}
        for written, typed in rows:
            name = written["name"]
            version = fetcher_for(typed.kind).version(typed) if name in toolchains else None
            if version is not None:  # a toolchain pinned by its release (a wheel)
                tools[name] = {"source": name, "version": version, "digest": typed.digest}
        trees = self._tools_tree_sources()
        for written, typed in rows:
            name = written["name"]
            debs = fetcher_for(typed.kind).debs(typed) if name in trees else None
            if debs is not None:  # a tools tree's packages: its C toolchain
                tool = tools.setdefault(name, {"source": name, "cToolchain": {}})
                arch = str(written["resolved"].get("arch"))
                summary = trees[name].tree_c_toolchain(debs, arch)
                tool["cToolchain"][arch] = summary
        recipe_rel = os.path.relpath(
            os.path.abspath(self.loaded.path), os.path.abspath(self.lock_path.parent)
        )
        return {
            "lockVersion": LOCK_VERSION,
            "recipe": {
                "name": self.loaded.recipe.metadata.name,
                "path": Path(recipe_rel).as_posix(),
                "digest": self.loaded.digest,
            },
            "sources": sources,
            "tools": tools,
        }

    def _tools_tree_sources(self) -> dict[str, ArtifactModel]:
        """The apt sources of the tools trees the artifacts name (their C toolchains are tools),
        each with the first artifact naming it, whose model summarises the tree's C toolchain."""
        artifacts = self.loaded.recipe.artifacts
        trees: dict[str, ArtifactModel] = {}
        for art in artifacts.values():
            for name in sorted(art.tool_sources(artifacts).c_trees):
                trees.setdefault(name, art)
        return trees

    def _toolchain_sources(self) -> set[str]:
        """The sources holding a toolchain the artifacts build with (the Go toolchain)."""
        artifacts = self.loaded.recipe.artifacts
        return {n for art in artifacts.values() for n in art.tool_sources(artifacts).toolchains}


def write_lock(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as canonical JSON, whole or not at all (:func:`nvkr.atomic.write_atomic`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, canonical_json_file(doc))
