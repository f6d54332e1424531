"""A Helm chart as the release set holds it: a manifest shaped as ``helm push`` makes it.

The chart packer of :func:`nvkr.releaseset.assemble`, beside the binary and image ones in
:mod:`nvkr.releaseset.artifacts`: it takes the helm-chart action's cached .tgz, config JSON and
optional .prov, checks them against the action metadata, and writes the OCI image manifest Helm
would push (annotations from :func:`helm_annotations`), so ``helm pull`` and ``helm install``
of the published chart see what they expect.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from nvkr.action import ActionResult
from nvkr.errors import BuildError
from nvkr.jsondoc import JsonObject
from nvkr.oci import mediatypes as mt
from nvkr.oci.layout import descriptor, image_manifest, manifest_bytes
from nvkr.provenance import digest_set
from nvkr.releaseset.artifacts import _Blobs, _Packed, _trim


def _pack_chart(
    result: ActionResult, blobs: _Blobs, *, what: str, label: str, created: str
) -> _Packed:
    """A Helm chart manifest, shaped as ``helm push`` makes it (SPECS.md "Helm constants.go").

    config = the chart's config blob, layers = the .tgz (and a .prov if the action made one)
    sorted by digest, no ``artifactType``, no layer annotations; manifest annotations as Helm's
    ``generateOCIAnnotations`` derives them from the chart metadata, with ``created`` = the epoch.
    """
    tgz = result.output("primary", what)
    config_out = result.output("config", what)
    extra = [o for o in result.outputs if o is not tgz and o is not config_out]
    provs = [o for o in extra if o.media_type == mt.HELM_PROVENANCE]
    if len(provs) > 1 or len(extra) > len(provs):
        raise BuildError(
            f"{what}: a Helm chart manifest holds the chart, its config and at most one "
            f"provenance file; the action also made " + ", ".join(repr(o.name) for o in extra)
        )
    for out, media_type in ((tgz, mt.HELM_CHART_CONTENT), (config_out, mt.HELM_CONFIG)):
        if out.media_type != media_type:
            raise BuildError(
                f"{what}: output {out.name!r} has mediaType {out.media_type!r}, "
                f"expected {media_type}"
            )
    for out in (tgz, config_out, *provs):
        blobs.reference(out.digest, out.size, out.media_type, f"{what} output {out.name!r}")
    chart = _chart_facts(result.metadata, what)
    try:
        config = json.loads(blobs.read_checked(config_out.digest, what))
    except ValueError as e:
        raise BuildError(f"{what}: the chart config is not JSON: {e}") from e
    if not isinstance(config, dict) or (config.get("name"), config.get("version")) != (
        chart["name"],
        chart["version"],
    ):
        raise BuildError(
            f"{what}: the chart config names {_name_version(config)}, the action metadata "
            f"{chart['name']} {chart['version']}",
            hint="the helm-chart builder disagrees with itself; this is a bug in nvkr, please report it",
        )
    layers = sorted(
        (descriptor(o.media_type, o.digest, o.size) for o in (tgz, *provs)),
        key=lambda d: d["digest"],
    )
    annotations = helm_annotations(config, created)
    annotations[mt.ANN_NVKR_ARTIFACT] = label
    manifest = manifest_bytes(
        image_manifest(
            descriptor(mt.HELM_CONFIG, config_out.digest, config_out.size),
            layers,
            annotations,
        )
    )
    blobs.put(manifest, mt.OCI_MANIFEST)
    mdesc = descriptor(mt.OCI_MANIFEST, manifest, annotations={mt.ANN_NVKR_ARTIFACT: label})
    return _Packed(
        desc=mdesc,
        subjects=[{"name": tgz.name, "digest": digest_set(tgz.digest)}],
        fields={
            "manifest": _trim(mdesc),
            "primary": {
                "name": tgz.name,
                "mediaType": tgz.media_type,
                "digest": tgz.digest,
                "size": tgz.size,
            },
            "chart": chart,
        },
    )


def _name_version(config: Any) -> str:
    if not isinstance(config, dict):
        return "nothing (not a JSON object)"
    return f"{config.get('name')!r} {config.get('version')!r}"


def _chart_facts(meta: JsonObject, what: str) -> dict[str, str]:
    name, version = meta.get("chartName"), meta.get("version")
    if not isinstance(name, str) or not name or not isinstance(version, str) or not version:
        raise BuildError(
            f"{what}: the action metadata lacks chartName or version (got {name!r}, {version!r})"
        )
    app_version = meta.get("appVersion") or ""
    # Helm's push turns '+' (semver build metadata) into '_': OCI tags cannot hold '+'.
    tag = meta.get("tag") or version.replace("+", "_")
    if not isinstance(app_version, str) or not isinstance(tag, str):
        raise BuildError(f"{what}: appVersion and tag in the action metadata must be strings")
    return {"name": name, "version": version, "appVersion": app_version, "tag": tag}


#: Helm's ``immutableOciAnnotations``: chart annotations never override these (nor nvkr's own).
_HELM_IMMUTABLE: Final = frozenset({mt.ANN_TITLE, mt.ANN_VERSION, mt.ANN_NVKR_ARTIFACT})


def helm_annotations(chart: Mapping[str, Any], created: str) -> dict[str, str]:
    """The manifest annotations ``helm push`` derives from a chart's metadata.

    Follows helm/helm pkg/registry/chart.go ``generateOCIAnnotations``: description, title
    (name), version, url (home), created, source (first of sources), authors (maintainers as
    ``Name (email)``, comma-separated), each only when not blank; then the chart's own
    ``annotations``, which never override title or version. Unlike Helm, ``created`` is given
    (the epoch, RFC 3339), never the wall clock, and non-ASCII stays as is.

    Args:
        chart: the chart config JSON (Chart.yaml's fields: ``name``, ``version``, ...).
        created: ``YYYY-MM-DDTHH:MM:SSZ``.
    Returns:
        annotation key → value.
    """
    out: dict[str, str] = {}

    def add(key: str, value: Any) -> None:
        if isinstance(value, str) and value.strip():
            out[key] = value

    add(mt.ANN_DESCRIPTION, chart.get("description"))
    add(mt.ANN_TITLE, chart.get("name"))
    add(mt.ANN_VERSION, chart.get("version"))
    add(mt.ANN_URL, chart.get("home"))
    add(mt.ANN_CREATED, created)
    sources = chart.get("sources")
    if isinstance(sources, list) and sources:
        add(mt.ANN_SOURCE, sources[0])
    maintainers = chart.get("maintainers")
    if isinstance(maintainers, list) and maintainers:
        parts = []
        for m in maintainers:
            m = m if isinstance(m, Mapping) else {}
            email = m.get("email") or ""
            parts.append(f"{m.get('name') or ''}" + (f" ({email})" if email else ""))
        add(mt.ANN_AUTHORS, ", ".join(parts))
    extra = chart.get("annotations")
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            if key not in _HELM_IMMUTABLE and isinstance(value, str):
                out[str(key)] = value
    return out
