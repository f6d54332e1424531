"""Writing ``<name>-<version>.tgz`` with Helm's layout and nvkr's reproducibility rules.

Layout, as helm/helm ``pkg/chart/v2/util/save.go`` (``writeTarContents``) writes it: regular
files only (no directory entries), every name under ``<chart name>/``, in the order
``Chart.yaml`` (re-marshalled from the metadata), ``Chart.lock`` (re-marshalled), ``values.yaml``
(as is), ``values.schema.json``, the templates, the other files, then each subchart the same way
under ``<name>/charts/<subchart name>/`` (subchart archives are expanded, as Helm does). Where
Helm's order is not fixed (subcharts come from a Go map) nvkr sorts by the entry name under
``charts/``.

Bytes: mode 0644, uid/gid 0, empty owner names, every mtime the build's epoch (Helm 4 uses file
mtimes or ``SOURCE_DATE_EPOCH``), PAX only where a name needs it, gzip with mtime 0, no file name
and level 9 (:func:`nvkr.repro.gzip_bytes`; the headers are :func:`nvkr.repro.tar_member`'s). The same chart and epoch give the same bytes on any
machine; Helm's own gzip stream differs (Go's deflate), never what a loader reads.
"""

from __future__ import annotations

import io
import json
import re

from nvkr.errors import BuildError
from nvkr.helm.chart import LoadedChart
from nvkr.helm.metadata import API_VERSION_V2, chart_yaml, lock_yaml
from nvkr.repro import gzip_bytes, tar_member, tar_writer

_OCI_TAG = re.compile(r"^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$")  # distribution spec "tag"


def oci_tag(version: str) -> str:
    """The OCI tag Helm pushes chart ``version`` under: ``+`` becomes ``_`` (OCI tags cannot
    hold ``+``; helm/helm ``pkg/registry`` does the same and reverses it on pull).

    ``"1.2.3+build.5"`` gives ``"1.2.3_build.5"``.

    Raises:
        BuildError: the result is not a valid OCI tag (over 128 characters, or bad characters).
    """
    tag = version.replace("+", "_")
    if not _OCI_TAG.match(tag):
        raise BuildError(
            f"chart version {version!r} gives OCI tag {tag!r}, which is not a valid tag",
            hint="tags are at most 128 characters of [A-Za-z0-9_.-], not starting with . or -",
        )
    return tag


def archive_name(chart: LoadedChart) -> str:
    """``<name>-<version>.tgz``, the file name ``helm package`` gives a chart."""
    return f"{chart.name}-{chart.version}.tgz"


def archive_members(chart: LoadedChart, prefix: str = "") -> list[tuple[str, bytes]]:
    """``(member name, bytes)`` of ``chart`` in Helm's order (see the module doc).

    Raises:
        BuildError: a chart name with a ``/``, invalid JSON in values.schema.json, or two
            subcharts with the same name (they would overwrite each other, in Helm too).
    """
    name = chart.name
    if "/" in name or "\\" in name or name in (".", ".."):
        raise BuildError(f"{chart.where}/Chart.yaml: chart name {name!r} is invalid")
    base = f"{prefix}{name}"
    out = [(f"{base}/Chart.yaml", chart_yaml(chart.metadata))]
    if chart.metadata.get("apiVersion") == API_VERSION_V2 and chart.lock is not None:
        out.append((f"{base}/Chart.lock", lock_yaml(chart.lock)))
    if chart.values is not None:
        out.append((f"{base}/values.yaml", chart.values.data))
    if chart.schema is not None:
        try:
            json.loads(chart.schema.data)
        except ValueError as e:
            raise BuildError(f"{chart.where}/values.schema.json: invalid JSON: {e}") from None
        out.append((f"{base}/values.schema.json", chart.schema.data))
    out += [(f"{base}/{f.name}", f.data) for f in chart.templates]
    out += [(f"{base}/{f.name}", f.data) for f in chart.files]
    for _, sub in chart.subcharts:
        out += archive_members(sub, f"{base}/charts/")
    seen: set[str] = set()
    for member, _ in out:
        if member in seen:
            raise BuildError(
                f"{chart.where}: the package would hold {member!r} twice",
                hint="two subcharts with the same chart name cannot both live in charts/",
            )
        seen.add(member)
    return out


def package_bytes(chart: LoadedChart, *, epoch: int) -> bytes:
    """The chart archive (gzipped tar) for ``chart``; mtimes are ``epoch`` (seconds since 1970).

    Raises:
        BuildError: as :func:`archive_members`.
    """
    buf = io.BytesIO()
    with tar_writer(buf) as tar:
        for name, data in archive_members(chart):
            tar.addfile(tar_member(name, mtime=epoch, mode=0o644, size=len(data)), io.BytesIO(data))
    return gzip_bytes(buf.getvalue())
