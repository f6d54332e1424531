"""Loading a chart the way Helm does: a directory (with ``.helmignore``) or a ``.tgz``.

This follows helm/helm ``pkg/chart/v2/loader`` (``LoadDir``, ``LoadArchiveFiles``, ``LoadFiles``):
the directory walk follows symlinks and visits names sorted per directory, skips what
``.helmignore`` (and Helm's default ``templates/.?*``) ignores, refuses irregular files and files
over 5 MiB, and strips a UTF-8 byte order mark from every file. Files are then sorted into
``Chart.yaml``, ``Chart.lock``, ``values.yaml``, ``values.schema.json``, ``templates/``,
subcharts under ``charts/`` (a ``.tgz`` or a directory each; names starting with ``_`` or ``.``
are skipped, ``.prov`` files kept as plain files) and the chart's other files. A
:class:`LoadedChart` is what :mod:`nvkr.helm.package` writes back out.
"""

from __future__ import annotations

import gzip
import io
import os
import posixpath
import stat
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.errors import BuildError
from nvkr.helm.ignore import HelmIgnore
from nvkr.helm.metadata import check_loadable_version, read_lock, read_metadata

MAX_FILE_SIZE = 5 * 1024 * 1024  # archive.MaxDecompressedFileSize
MAX_CHART_SIZE = 100 * 1024 * 1024  # archive.MaxDecompressedChartSize
UTF8_BOM = b"\xef\xbb\xbf"


@dataclass
class ChartFile:
    """One file of a chart: ``name`` is its ``/``-separated path inside the chart directory."""

    name: str
    data: bytes


@dataclass
class LoadedChart:
    """A chart as Helm's loader holds it.

    ``metadata`` is Helm's ``Metadata`` (see :func:`nvkr.helm.metadata.read_metadata`), ``lock``
    its ``Lock`` or None, ``values`` and ``schema`` the raw files or None; ``templates`` and
    ``files`` in Helm's walk order; ``subcharts`` as ``(entry under charts/, chart)`` sorted by
    entry name. ``where`` names the chart in messages.
    """

    where: str
    metadata: dict[str, Any]
    lock: dict[str, Any] | None = None
    values: ChartFile | None = None
    schema: ChartFile | None = None
    templates: list[ChartFile] = field(default_factory=list)
    files: list[ChartFile] = field(default_factory=list)
    subcharts: list[tuple[str, LoadedChart]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def version(self) -> str:
        return str(self.metadata.get("version", ""))


def walk_order(name: str) -> tuple[str, ...]:
    """Sort key giving Helm's walk order: names sorted per directory, depth first (Go compares
    bytes; Python compares code points, which orders UTF-8 the same)."""
    return tuple(name.split("/"))


def _read_tree(
    root: Path,
    rules: HelmIgnore,
    where: str,
    warn: Callable[[str], None] | None = None,
    within: Path | None = None,
    followed: list[str] | None = None,
) -> list[ChartFile]:
    """The files under ``root`` Helm's ``LoadDir`` would read (sympath.Walk + .helmignore);
    ``warn`` gets :meth:`HelmIgnore.subchart_warning` for each path left out under ``charts/``.
    A symlink is followed when it resolves inside ``within`` (default: ``root``), and
    ``followed`` gets ``NAME -> TARGET`` for each one that leads out of ``root``."""

    def left_out(n: str, is_dir: bool) -> bool:
        if not rules.ignored(n, is_dir):
            return False
        if warn is not None and (line := rules.subchart_warning(n, is_dir, where)):
            warn(line)
        return True

    out: list[ChartFile] = []
    real_root = root.resolve()
    boundary = (within or root).resolve()
    active: set[Path] = set()

    def visit(directory: Path, rel: str) -> None:
        real = directory.resolve()
        if real in active:
            raise BuildError(f"{where}/{rel}: symlink loop", hint="remove the looping symlink")
        active.add(real)
        for name in sorted(os.listdir(directory)):
            path = directory / name
            n = f"{rel}{name}"
            try:
                st = os.stat(path)  # follows symlinks, as Helm's sympath.Walk does
            except OSError as e:
                raise BuildError(f"{where}/{n}: cannot read: {e.strerror}") from None
            if path.is_symlink() and not path.resolve().is_relative_to(real_root):
                link = _followed_link(path, boundary, f"{where}/{n}", within is not None)
                if followed is not None:
                    followed.append(f"{n} -> {link}")
            if stat.S_ISDIR(st.st_mode):
                if not left_out(n, True):
                    visit(path, n + "/")
                continue
            if left_out(n, False):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise BuildError(f"{where}/{n}: cannot load irregular file (device, socket, fifo)")
            if st.st_size > MAX_FILE_SIZE:
                raise BuildError(
                    f"{where}/{n}: {st.st_size} bytes is larger than Helm's limit of {MAX_FILE_SIZE}",
                    hint="list it in .helmignore, or keep large data out of the chart",
                )
            out.append(ChartFile(n, path.read_bytes().removeprefix(UTF8_BOM)))
        active.discard(real)

    visit(root, "")
    return out


def _followed_link(path: Path, boundary: Path, name: str, in_source: bool) -> str:
    """The target of the link ``path`` that leads out of the chart, when it resolves inside
    ``boundary`` (the chart's source, or the chart).

    Raises:
        BuildError: it leads out of ``boundary`` (naming the link and its target as written).
    """
    target = os.readlink(path)
    if not path.resolve().is_relative_to(boundary):
        raise BuildError(
            f"{name}: symlink to {target!r} points outside the "
            + ("chart's source" if in_source else "chart"),
            hint="a chart's symlinks may lead anywhere inside its source's tree (helm package "
            "follows them); copy the file in",
        )
    return target


def load_dir(
    root: Path,
    where: str,
    warn: Callable[[str], None] | None = None,
    *,
    within: Path | None = None,
    followed: list[str] | None = None,
) -> LoadedChart:
    """Load the chart directory ``root`` as ``helm package`` does (strict Chart.yaml reading).
    ``warn`` gets a line for each file or directory under ``charts/`` (a subchart's) that a
    ``.helmignore`` pattern without ``/`` leaves out (it matches at any depth: one meant for the
    top level drops the subcharts' files too). Symlinks are followed, as Helm does, where they
    resolve inside ``within`` (the tree of the chart's source; default: the chart itself);
    ``followed`` gets ``NAME -> TARGET`` for each that leads out of the chart directory (its
    file is packaged in the link's place).

    Raises:
        BuildError: a bad ``.helmignore`` pattern, an unreadable or oversized file, an invalid
            Chart.yaml or Chart.lock, or a subchart that does not load.
    """
    ignore_file = root / ".helmignore"
    text = ignore_file.read_text(errors="replace") if ignore_file.is_file() else ""
    rules = HelmIgnore.parse(text, where=f"{where}/.helmignore")
    files = _read_tree(root, rules, where, warn, within, followed)
    return load_files(files, where, lenient=False, top=True)


def load_archive(data: bytes, where: str) -> LoadedChart:
    """Load a chart archive (``.tgz``) as Helm's ``LoadArchive`` does; ``.helmignore`` is not
    applied to archives. Chart.yaml is read leniently (it was packaged elsewhere).

    Raises:
        BuildError: not a gzipped tar, an unsafe or oversized member, or a chart that does not load.
    """
    files: list[ChartFile] = []
    remaining = MAX_CHART_SIZE
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar:
                if member.isdir() or member.type in (tarfile.XHDTYPE, tarfile.XGLTYPE):
                    continue
                name = member.name
                sep = "\\" if "\\" in name else "/"
                parts = name.split(sep)
                n = "/".join(parts[1:])
                if n.startswith("/"):
                    raise BuildError(f"{where}: chart illegally contains absolute paths")
                n = posixpath.normpath(n) if n else "."
                if n == ".":
                    raise BuildError(f"{where}: member {name!r} lies outside the chart's directory")
                if n.startswith(".."):
                    raise BuildError(f"{where}: chart illegally references parent directory")
                if parts[0] == "Chart.yaml":
                    raise BuildError(f"{where}: Chart.yaml is not in the chart's directory")
                if member.size > MAX_FILE_SIZE or member.size > remaining:
                    raise BuildError(f"{where}/{n}: larger than Helm's size limits")
                if not member.isfile():
                    raise BuildError(f"{where}/{n}: not a regular file (links are not charts')")
                f = tar.extractfile(member)
                assert f is not None
                body = f.read()
                remaining -= len(body)
                files.append(ChartFile(n, body.removeprefix(UTF8_BOM)))
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, OSError) as e:
        raise BuildError(f"{where}: not a chart archive (gzipped tar): {e}") from None
    if not files:
        raise BuildError(f"{where}: no files in chart archive")
    return load_files(files, where, lenient=True)


def load_files(
    files: list[ChartFile], where: str, *, lenient: bool, top: bool = False
) -> LoadedChart:
    """Sort loaded files into a :class:`LoadedChart` (Helm's ``LoadFiles``).

    ``top`` marks the chart being packaged, whose version the recipe sets: its own version is
    not checked here. Subcharts must carry a version Helm's loader accepts.

    Raises:
        BuildError: no Chart.yaml, an invalid Chart.yaml or Chart.lock, requirements.yaml or
            requirements.lock (Helm 2 dependency files), or a subchart that does not load.
    """
    by_name = {f.name: f for f in files}
    if "Chart.yaml" not in by_name:
        raise BuildError(
            f"{where}: Chart.yaml file is missing", hint="is 'subdir' the chart directory?"
        )
    meta = read_metadata(by_name["Chart.yaml"].data, f"{where}/Chart.yaml", lenient=lenient)
    if not top:
        check_loadable_version(meta, f"{where}/Chart.yaml")
    chart = LoadedChart(where=where, metadata=meta)
    groups: dict[str, list[ChartFile]] = {}
    for f in sorted(files, key=lambda f: walk_order(f.name)):
        if f.name != "Chart.yaml":
            _sort_file(chart, groups, f)
    for entry, members in sorted(groups.items()):
        if entry[:1] not in ("_", "."):
            chart.subcharts.append((entry, _load_subchart(entry, members, where, lenient)))
    return chart


def _sort_file(chart: LoadedChart, groups: dict[str, list[ChartFile]], f: ChartFile) -> None:
    """Put one file of a chart (not its Chart.yaml) where :func:`load_files` keeps it; a file
    under ``charts/`` goes to ``groups`` by its entry there (an archive or a directory).

    Raises:
        BuildError: a Helm 2 dependency file, or an invalid Chart.lock.
    """
    where = chart.where
    if f.name == "Chart.lock":
        chart.lock = read_lock(f.data, f"{where}/Chart.lock")
    elif f.name == "values.yaml":
        chart.values = f
    elif f.name == "values.schema.json":
        chart.schema = f
    elif f.name in ("requirements.yaml", "requirements.lock"):
        raise BuildError(
            f"{where}/{f.name}: Helm 2 dependency file in a chart",
            hint="apiVersion v2 charts list dependencies in Chart.yaml and lock them in Chart.lock",
        )
    elif f.name.startswith("templates/"):
        chart.templates.append(f)
    elif f.name.startswith("charts/") and not f.name.endswith(".prov"):
        rest = f.name.removeprefix("charts/")
        groups.setdefault(rest.split("/", 1)[0], []).append(ChartFile(rest, f.data))
    else:
        chart.files.append(f)


def _load_subchart(entry: str, members: list[ChartFile], where: str, lenient: bool) -> LoadedChart:
    """The subchart ``charts/<entry>``: a ``.tgz`` archive or a directory of ``members``.

    Raises:
        BuildError: a directory named .tgz, a plain file under charts/, or a subchart that does
            not load.
    """
    sub_where = f"{where}/charts/{entry}"
    if entry.endswith(".tgz"):
        if members[0].name != entry:
            raise BuildError(f"{sub_where}: expected a chart archive, found a directory")
        return load_archive(members[0].data, sub_where)
    inner = [ChartFile(m.name.split("/", 1)[1], m.data) for m in members if "/" in m.name]
    if not inner:
        raise BuildError(
            f"{sub_where}: a file directly under charts/ that is not a chart archive",
            hint="charts/ holds subcharts only (.tgz files or chart directories)",
        )
    return load_files(inner, sub_where, lenient=lenient)
