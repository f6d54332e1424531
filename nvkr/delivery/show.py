"""Reading a release set for ``nvkr release-set show`` and ``export``: its metadata and index
descriptor, from a ``dist/<name>`` directory or a registry, and the artifact rows ``show`` lists.

A release set on disk (an OCI image layout) or in a registry (``REGISTRY/REPOSITORY:TAG``,
:func:`nvkr.releaseset.remote.read_remote_metadata`) is read through its metadata manifest's config
(``application/vnd.nvkr.release-set.metadata.v1+json``), checked against its digest on the way;
payload blobs (binaries, layers, charts) are not read. :func:`attestations` lists the rebuild
attestations kept for the set (:mod:`nvkr.verify.attestations`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from nvkr.errors import UsageError

if TYPE_CHECKING:
    from nvkr.verify.attestations import AttestationRow


class RegistryClients(Protocol):
    """How a verb reaches a registry (:class:`nvkr.oci.access.RegistryAccess`): ``--insecure`` and a
    :class:`~nvkr.oci.registry.RegistryClient` per registry host with the verb's credentials."""

    @property
    def insecure(self) -> bool: ...

    def client(self, registry: str, **options: Any) -> Any: ...


def load_release_set(
    source: str, *, registry: RegistryClients
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(metadata, release set index descriptor)`` of a dist/<name> directory or a registry
    reference (only the index, the metadata manifest and its config are fetched, through
    ``registry``'s settings).

    Raises:
        UsageError: ``source`` is neither; IntegrityError: a digest does not match.
    """
    layout = Path(source)
    if layout.is_dir():
        from nvkr.oci.layout import LayoutReader, require_layout

        require_layout(layout)
        from nvkr.releaseset import read_metadata
        from nvkr.releaseset.signing import release_set_entry

        return read_metadata(layout), release_set_entry(LayoutReader(layout))
    if layout.exists() or "/" not in source or source.startswith(("/", "./", "../")):
        raise UsageError(
            f"{source} is neither a release set directory nor a registry reference",
            hint="give dist/<name> or REGISTRY/REPOSITORY:TAG",
        )
    from nvkr.oci.registry import Reference
    from nvkr.releaseset.remote import read_remote_metadata

    ref = Reference.parse(source)
    with registry.client(ref.registry) as client:
        return read_remote_metadata(client, ref)


@dataclass(frozen=True)
class ArtifactRow:
    """One row of ``show``'s table: an artifact by name and digest, with the ``gpu/arch`` of
    every variant that holds these same bytes."""

    name: str
    kind: str
    arch: str
    digest: str
    variants: list[str]


def _platforms(art: dict[str, Any]) -> str:
    if art.get("platform"):
        return str(art["platform"]["architecture"])
    return ",".join(p["architecture"] for p in art.get("platforms", []))


def _digest(art: dict[str, Any]) -> str:
    for key in ("index", "manifest"):
        if key in art:
            return str(art[key]["digest"])
    return ""


def artifact_rows(meta: dict[str, Any]) -> list[ArtifactRow]:
    """The metadata's artifacts, one row per (name, digest) in first-seen order: the variants
    sharing an artifact's bytes are listed in one row."""
    seen: dict[tuple[str, str], list[str]] = {}
    for art in meta["artifacts"]:
        key = (art["name"], _digest(art))
        seen.setdefault(key, []).append(f"{art['variant']['gpu']}/{art['variant']['arch']}")
    rows = []
    for art in meta["artifacts"]:
        key = (art["name"], _digest(art))
        if key not in seen:
            continue
        rows.append(ArtifactRow(art["name"], art["kind"], _platforms(art), key[1], seen.pop(key)))
    return rows


def build_warnings(source: str) -> list[dict[str, str]] | None:
    """The build warnings (``{"action", "message"[, "hint"]}``) the build record beside a
    ``dist/<name>`` directory keeps; none for a set without a readable record (``nvkr verify``
    checks the record; this only reads it); None, not read, for a registry reference, whose
    record is a referrer ``show`` does not fetch (``nvkr pull`` writes it beside the set)."""
    layout = Path(source)
    if not layout.is_dir():
        return None
    from nvkr.releaseset.record import record_paths, record_warnings

    try:
        statement = json.loads(record_paths(layout)[0].read_bytes())
    except (OSError, ValueError):
        return []
    return record_warnings(statement) if isinstance(statement, dict) else []


def attestations(
    source: str, top: dict[str, Any], *, registry: RegistryClients
) -> list[AttestationRow]:
    """The verification summary attestations kept for the release set (beside a ``dist/<name>``
    directory, or the referrers of its index at a registry reference), each described without
    checking its signature (:func:`nvkr.verify.attestations.describe`; ``nvkr verify --policy``
    counts the trusted ones)."""
    from nvkr.verify.attestations import LayoutAttestations, RegistryAttestations, describe

    place: LayoutAttestations | RegistryAttestations
    if Path(source).is_dir():
        place = LayoutAttestations(Path(source))
    else:
        from nvkr.oci.registry import Reference

        ref = Reference.parse(source)
        place = RegistryAttestations(registry, ref.registry, ref.repository, str(top["digest"]))
    return [describe(found, str(top["digest"])) for found in place.read()]


def source_closure(
    source: str, top: dict[str, Any], *, registry: RegistryClients
) -> dict[str, Any] | None:
    """The source closure attached to the release set at a registry REF (``nvkr publish
    --with-sources``, :mod:`nvkr.delivery.sources`): its ``digest`` and the ``manifests`` it
    spans; ``{}`` when the registry has none; None for a directory (closures live in
    registries only)."""
    if Path(source).is_dir():
        return None
    from nvkr.delivery.sources import find_closure
    from nvkr.oci.registry import Reference

    ref = Reference.parse(source)
    with registry.client(ref.registry) as client:
        desc = find_closure(client, ref.repository, str(top["digest"]))
        if desc is None:
            return {}
        data, _, _ = client.get_manifest(ref.repository, str(desc["digest"]))
    manifests = json.loads(data).get("manifests") or []
    return {"digest": desc["digest"], "manifests": len(manifests)}
