"""The cluster release's charts, rendered for the add-ons of a Cluster API export.

:func:`rendered_addons` reads each chart of ``clusterRelease.charts`` from the release set (its
``.tgz`` blob, from the layout or the registry, checked against its digest by the reader) and
renders it with Helm itself (helm-python-sdk, as :mod:`nvkr.helm.check` does at build time):
release name the chart's name, namespace :data:`ADDONS_NAMESPACE`, the chart's own values. The
manifests keep the images as the chart pins them (the helm-chart builder writes the release
set's ``repo@sha256:`` references into values.yaml), which is why the export ships them in a
ClusterResourceSet (:mod:`nvkr.delivery.export.capi.cluster`).
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from nvkr.delivery.export.document import find_artifact
from nvkr.delivery.show import RegistryClients
from nvkr.errors import BuildError

#: Namespace the charts are rendered for (``.Release.Namespace``) on the workload cluster.
ADDONS_NAMESPACE: Final = "kube-system"


def render_chart(archive: bytes, release: str, namespace: str = ADDONS_NAMESPACE) -> str:
    """``helm template`` of a chart archive: its rendered manifests (files in name order, each
    after a ``# Source: <file>`` line, separated by ``---``; NOTES.txt left out).

    Raises:
        BuildError: the chart does not render (Helm's message); ToolError: no helm-python-sdk.
    """
    from nvkr.helm.check import _helm

    helm = _helm()
    with tempfile.TemporaryDirectory(prefix="nvkr-addon-") as tmp:
        path = Path(tmp) / f"{release}.tgz"
        path.write_bytes(archive)
        try:
            with helm.Chart.load(str(path)) as chart:
                files = chart.render(None, name=release, namespace=namespace, is_install=True)
        except helm.HelmError as e:
            raise BuildError(f"chart {release}: helm template failed: {e.detail}") from None
    parts = [
        f"# Source: {name}\n{text.strip()}\n"
        for name, text in sorted(files.items())
        if text.strip() and not name.endswith("NOTES.txt")
    ]
    return "---\n".join(parts)


def rendered_addons(
    source: str, meta: Mapping[str, Any], registry: RegistryClients
) -> dict[str, str]:
    """``{chart name: rendered manifests}`` of the cluster release's charts."""
    charts = (meta.get("clusterRelease") or {}).get("charts") or []
    if not charts:
        return {}
    blobs = {}
    for chart in charts:
        art = find_artifact(meta, chart["name"], (chart.get("variants") or [None])[0])
        blobs[chart["name"]] = dict(art["primary"])
    data = _read_blobs(source, blobs, registry)
    return {name: render_chart(data[name], name) for name in sorted(data)}


def _read_blobs(
    source: str, blobs: Mapping[str, Mapping[str, Any]], registry: RegistryClients
) -> dict[str, bytes]:
    if Path(source).is_dir():
        from nvkr.oci.layout import LayoutReader

        reader = LayoutReader(Path(source))
        return {name: reader.read_blob(desc) for name, desc in blobs.items()}
    from nvkr.oci.reference import Reference

    ref = Reference.parse(source)
    out = {}
    with registry.client(ref.registry) as client:
        for name, desc in blobs.items():
            buf = io.BytesIO()
            client.get_blob(ref.repository, str(desc["digest"]), buf, size=int(desc["size"]))
            out[name] = buf.getvalue()
    return out
