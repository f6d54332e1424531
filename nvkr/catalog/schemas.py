"""OVSDB schemas read from the locked sources' bytes, for rule check ``ovsdb-schema``.

A libovsdb client (OVN-Kubernetes) talks to its databases through models that libovsdb's
modelgen generated from one schema; each generated ``model.go`` embeds that schema as
``var schema = `{...}```, whose ``"name"`` and ``"version"`` say which. A server package
(Debian's ``ovn-central``) ships the schemas its databases run as ``.ovsschema`` JSON files with
the same two members (RFC 7047 section 3.2; the version is ``x.y.z``, ovsdb-server(7)). libovsdb
refuses a server whose schema lacks a table or column of its models, so the models' version must
be at most the server's, database by database (:mod:`nvkr.catalog.evaluation`).

Nothing here fetches: the bytes are the store's blobs of the variant's lock entries (the git
source's tree as nvkr stores it, the apt source's locked .deb). What was read is recorded in the
lock entry as ``ovsdbSchemas``, so ``nvkr lock`` writes it to the lockfile and ``plan`` and
``build`` check it without the blobs (a fresh CI runner need not fetch a tree to plan)::

    git: [{"file": "go-controller/pkg/nbdb/model.go", "name": "OVN_Northbound",
           "version": "7.11.0"}, ...]                                   (repository paths)
    apt: [{"package": "ovn-central", "file": "/usr/share/ovn/ovn-nb.ovsschema",
           "name": "OVN_Northbound", "version": "7.11.0"}, ...]

``nvkr lock`` reads every file again (:class:`SourceSchemas` with ``reread``); a record the
lockfile lacks is read from the store when the blob is there, and is a violation otherwise (the
rules fail closed).
"""

from __future__ import annotations

import json
import re
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvkr.catalog.facts import RuleSchemas, SchemaFile
from nvkr.catalog.rules import CompatibilityRules, OvsdbSchemaRule
from nvkr.catalog.versions import VersionError, parse_upstream
from nvkr.fetch.entries import AptEntry
from nvkr.recipe.matrix import Variant
from nvkr.recipe.sources import AptSource, GitSource
from nvkr.recipe.yamlsource import where

if TYPE_CHECKING:
    from nvkr.store import Store

RECORD = "ovsdbSchemas"
#: bytes read of one schema or model file at most (OVN's largest model.go is about 150 KB)
MAX_SCHEMA_BYTES = 16 << 20
_MODEL = re.compile(r"^var schema = `(.*?)`", re.S | re.M)


class SchemaReadError(Exception):
    """A file that is not what the rule says it is (no schema in it, not JSON, no version)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def model_schema(data: bytes, file: str) -> tuple[str, str]:
    """The ``(name, version)`` of the schema a libovsdb modelgen ``model.go`` embeds.

    Raises:
        SchemaReadError: no ``var schema = `...``` in it, or no name and x.y.z version.
    """
    match = _MODEL.search(data.decode("utf-8", "replace"))
    if match is None:
        raise SchemaReadError(
            f"{file} embeds no schema (no `var schema = `...``: not a libovsdb modelgen model file)"
        )
    return _name_version(match.group(1), file)


def ovsschema(data: bytes, file: str) -> tuple[str, str]:
    """The ``(name, version)`` of an ``.ovsschema`` file.

    Raises:
        SchemaReadError: not JSON, or no name and x.y.z version.
    """
    return _name_version(data.decode("utf-8", "replace"), file)


def _name_version(text: str, file: str) -> tuple[str, str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaReadError(
            f"{file}: its schema is not JSON (line {e.lineno}: {e.msg})"
        ) from None
    name = doc.get("name") if isinstance(doc, dict) else None
    version = doc.get("version") if isinstance(doc, dict) else None
    if not isinstance(name, str) or not isinstance(version, str):
        raise SchemaReadError(f'{file}: its schema has no "name" and "version" (RFC 7047 3.2)')
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", version):
        raise SchemaReadError(f"{file}: schema {name} has version {version!r}, expected x.y.z")
    return name, version


def tree_files(tar: Path, names: Iterable[str]) -> dict[str, bytes]:
    """The regular files ``names`` of a stored tree (nvkr's tar of a git tree), by name; a name
    the tree lacks (or holds as a link or directory) is absent from the result."""
    wanted, found = set(names), {}
    with tarfile.open(tar, "r:") as archive:
        for info in archive:
            if info.name in wanted and info.isfile() and info.size <= MAX_SCHEMA_BYTES:
                member = archive.extractfile(info)
                if member is not None:
                    found[info.name] = member.read()
                    if len(found) == len(wanted):
                        break
    return found


def deb_files(deb: Path, names: Iterable[str]) -> dict[str, bytes]:
    """The regular files ``names`` (absolute paths) of a .deb's data, by name (python-debian
    reads the data member, whatever its compression); missing ones are absent."""
    from debian.arfile import ArError
    from debian.debfile import DebError, DebFile

    found: dict[str, bytes] = {}
    try:
        data = DebFile(str(deb)).data
    except (ArError, DebError) as e:
        raise ValueError(f"not a readable .deb: {e}") from None
    for name in names:
        try:
            member = data.get_file(name)
        except DebError:
            continue
        content = member.read(MAX_SCHEMA_BYTES + 1)
        if isinstance(content, bytes) and len(content) <= MAX_SCHEMA_BYTES:
            found[name] = content
    return found


def _same_repo(a: str, b: str) -> bool:
    def norm(url: str) -> str:
        return url.rstrip("/").removesuffix(".git").lower()

    return norm(a) == norm(b)


EntryOf = Callable[[Variant, str], dict[str, Any]]


class SourceSchemas:
    """The schemas of a variant's locked sources, per ``ovsdb-schema`` rule (what
    :func:`nvkr.catalog.evaluation.check_variants` takes as ``schemas``).

    Args:
        entry: the lock entry a variant's source is bound to (:meth:`nvkr.lock.Resolver.
            bound_entry`); what is read is recorded in it (:data:`RECORD`).
        store: where the blobs are read from when the entry records nothing (or ``reread``).
        reread: read every file from the blobs, whatever the entry records (``nvkr lock``).
    """

    def __init__(self, entry: EntryOf, store: Store, *, reread: bool = False) -> None:
        self.entry, self.store, self.reread = entry, store, reread
        #: (rule id, why) -> the variants whose models are pinned with no server package to
        #: hold them to (the rule does not apply; validate cannot tell, so the caller says it)
        self.unchecked: dict[tuple[str, str], list[str]] = {}

    def __call__(self, variant: Variant, rules: CompatibilityRules) -> dict[str, RuleSchemas]:
        return {
            rule.id: self.rule(variant, rule)
            for rule in rules.rules
            if isinstance(rule, OvsdbSchemaRule)
        }

    def rule(self, variant: Variant, rule: OvsdbSchemaRule) -> RuleSchemas:
        """What ``rule`` reads of ``variant``'s sources: the models of every git source of
        ``models.git`` whose tree holds the files (one record per commit and file), the schemas
        of ``server.package`` in every apt source whose locked closure has it."""
        models: dict[tuple[str, str], SchemaFile] = {}
        servers: list[SchemaFile] = []
        unread: list[str] = []
        has_models = has_server = False
        for name, source in sorted(variant.recipe.sources.items()):
            if isinstance(source, GitSource) and _same_repo(source.git, rule.models.git):
                prefix = f"{source.subdir.strip('/')}/" if source.subdir else ""
                files = [f for f in rule.models.files if f.startswith(prefix)]
                if not files:
                    continue  # a source of another directory of the repository
                has_models = True
                place = where(variant.locations, ("sources", name, "commit"))
                what = f"{source.git} at commit {source.commit[:12]}"
                label = f"{what} ({place})"
                entry = self.entry(variant, name)

                def read_tree(
                    blob: Path, files: list[str] = files, prefix: str = prefix
                ) -> dict[str, bytes]:
                    got = tree_files(blob, [f.removeprefix(prefix) for f in files])
                    return {
                        f: got[f.removeprefix(prefix)]
                        for f in files
                        if f.removeprefix(prefix) in got
                    }

                digest = entry["resolved"].digest
                records, held = self._records(
                    entry, {}, files, digest, read_tree, model_schema, label, unread
                )
                for record in _one_per_database(records, label, unread):
                    fact = _fact(record, f"{record['file']} of {what}, {place}", held, unread)
                    if fact is not None:
                        models.setdefault((source.commit, record["file"]), fact)
            elif isinstance(source, AptSource):
                entry = self.entry(variant, name)
                resolved = entry["resolved"]
                debs = resolved.packages if isinstance(resolved, AptEntry) else ()
                locked = {p.name: p for p in debs}
                package = locked.get(rule.server.package)
                if package is None:
                    continue
                has_server = True
                pinned = rule.server.package in source.packages
                at = (
                    ("sources", name, "packages", rule.server.package)
                    if pinned
                    else ("sources", name)
                )
                what = f"{rule.server.package} {package.version}"
                place = where(variant.locations, at)
                label = f"{what} ({place})"
                files = rule.server.files

                def read_deb(blob: Path, files: list[str] = files) -> dict[str, bytes]:
                    return deb_files(blob, files)

                key = {"package": rule.server.package}
                records, held = self._records(
                    entry,
                    key,
                    files,
                    package.sha256,
                    read_deb,
                    ovsschema,
                    label,
                    unread,
                )
                for record in _one_per_database(records, label, unread):
                    fact = _fact(record, f"{record['file']} of {what}, {place}", held, unread)
                    if fact is not None:
                        servers.append(fact)
        if has_models and not has_server:
            self.unchecked.setdefault((rule.id, rule.without_server), []).append(variant.id)
        return RuleSchemas(
            models=tuple(models.values()),
            servers=tuple(servers),
            unread=tuple(unread),
            has_models=has_models,
            has_server=has_server,
        )

    def _records(
        self,
        entry: dict[str, Any],
        key: dict[str, str],
        files: list[str],
        digest: str,
        read: Callable[[Path], dict[str, bytes]],
        parse: Callable[[bytes, str], tuple[str, str]],
        label: str,
        unread: list[str],
    ) -> tuple[list[dict[str, str]], bool]:
        """The records of ``files`` (with ``key``: the package) of ``entry``, and whether they
        are the entry's own: those it holds, unless ``reread`` or one is missing; else read
        from blob ``digest`` and recorded in it. What cannot be read is said in ``unread``."""
        held: list[dict[str, str]] = [r for r in entry.get(RECORD) or [] if isinstance(r, dict)]
        mine = {r.get("file"): r for r in held if all(r.get(k) == v for k, v in key.items())}
        if not self.reread and all(f in mine for f in files):
            return [mine[f] for f in files], True
        if not self.store.has_blob(digest):
            unread.append(
                f"{label}: the lockfile records no schema of {', '.join(files)} and the store "
                f"does not hold the bytes ({digest}) to read it: run `nvkr lock`"
            )
            return [], False
        try:
            contents = read(self.store.blob_path(digest))
        except (OSError, tarfile.TarError, ValueError) as e:
            unread.append(f"{label}: cannot read {', '.join(files)}: {e}")
            return [], False
        records = []
        for file in files:
            if file not in contents:
                unread.append(f"{file} is not in {label}: the rule reads it")
                continue
            try:
                name, version = parse(contents[file], file)
            except SchemaReadError as e:
                unread.append(f"{label}: {e.message}")
                continue
            records.append({**key, "file": file, "name": name, "version": version})
        kept = [
            r
            for r in held
            if not (r.get("file") in files and all(r.get(k) == v for k, v in key.items()))
        ]
        entry[RECORD] = sorted(
            [*kept, *records], key=lambda r: (r.get("package", ""), r.get("file", ""))
        )
        return records, False


def _one_per_database(
    records: list[dict[str, str]], label: str, unread: list[str]
) -> list[dict[str, str]]:
    """``records``, unless two files of one source name the same database: each file the rule
    names is one database's, so that is said in ``unread`` and none of them is compared."""
    files: dict[str, list[str]] = {}
    for record in records:
        files.setdefault(str(record.get("name")), []).append(str(record.get("file")))
    twice = {name: paths for name, paths in files.items() if len(paths) > 1}
    for name, paths in sorted(twice.items()):
        unread.append(
            f"{' and '.join(paths)} of {label} all hold a schema named {name}: the rule reads "
            "one database from each file"
        )
    return [r for r in records if str(r.get("name")) not in twice]


def _fact(record: dict[str, str], place: str, held: bool, unread: list[str]) -> SchemaFile | None:
    """A record as a :class:`SchemaFile`, its place saying when it is the lockfile's record
    rather than bytes read now (a version that does not parse goes to ``unread``)."""
    if held:
        place += "; as the lockfile records it"
    try:
        version = parse_upstream(str(record.get("version")), where=place)
    except VersionError as e:
        unread.append(e.message)
        return None
    return SchemaFile(str(record.get("name")), version, str(record.get("version")), place)
