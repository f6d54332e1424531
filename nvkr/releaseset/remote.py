"""Reading a release set's metadata from a registry, without its payload.

``nvkr release-set show REF`` and ``nvkr pull`` start here: :func:`read_remote_metadata` fetches
the release set index (by tag or digest), its first member (the metadata manifest) and that
manifest's config (the metadata JSON, :mod:`nvkr.releaseset.metadata`) and nothing else, each
checked against its digest by :class:`nvkr.oci.registry.RegistryClient`. It applies the same
checks as :func:`nvkr.releaseset.metadata.read_metadata` does on a layout on disk.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from nvkr.errors import IntegrityError, RegistryError, UsageError
from nvkr.jsondoc import load_json_object
from nvkr.oci import mediatypes as mt
from nvkr.oci.registry import Reference, RegistryClient
from nvkr.releaseset.metadata import METADATA_SCHEMA_VERSION

#: The metadata JSON is a few hundred KiB at most; a larger config is not one.
MAX_METADATA = 16 << 20


def fetch_manifest(client: RegistryClient, repo: str, desc: Mapping[str, Any], what: str) -> bytes:
    """The bytes of the manifest ``desc`` names in ``repo``, checked against its digest and size.

    Raises:
        IntegrityError: another digest or size than ``desc`` gives (``what`` names it).
        RegistryError: as :meth:`RegistryClient.get_manifest`.
    """
    data, _, digest = client.get_manifest(repo, str(desc["digest"]))
    if digest != desc["digest"] or len(data) != desc.get("size"):
        raise IntegrityError(
            f"{what}: {desc['digest']} is {len(data)} bytes, its descriptor says {desc.get('size')}"
        )
    return data


def read_remote_metadata(
    client: RegistryClient, ref: Reference
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metadata JSON of the release set ``ref`` names, and the index's descriptor.

    Three requests: the release set index (``ref``'s digest, else its tag), the metadata
    manifest (the index's ``manifests[0]``) and its config blob. No payload layer is fetched.

    Args:
        client: the client of ``ref.registry``.
        ref: ``REGISTRY/REPOSITORY:TAG`` or ``...@sha256:<hex>``.
    Returns:
        ``(metadata, descriptor)``: the metadata JSON (schemaVersion
        :data:`~nvkr.releaseset.metadata.METADATA_SCHEMA_VERSION`) and
        ``{"mediaType", "digest": "sha256:<hex>", "size" (bytes)}`` of the release set index.
    Raises:
        UsageError: the reference names another manifest than a release set index (exit 2).
        IntegrityError: a digest mismatch, or a malformed release set (exit 3).
        RegistryError: no such tag or manifest (``status`` 404), refused credentials, or
            unreachable.
    """
    repo = ref.repository
    where = f"{ref.registry}/{repo}"
    try:
        data, media_type, digest = client.get_manifest(repo, ref.digest or str(ref.tag or "latest"))
    except RegistryError as e:
        if e.status != 404:
            raise
        if ref.digest:
            hint = f"{where} holds no manifest {ref.digest}: check the digest (nvkr publish "
            hint += "prints it) and the repository"
        elif ref.tag:
            hint = f"{where} has no tag {ref.tag!r}: nvkr publish tags a release set with its "
            hint += "name unless told otherwise, and prints the tag it wrote"
        else:
            hint = "no tag given, so 'latest' was looked up: nvkr publish tags a release set "
            hint += f"with its name, e.g. {where}:<release set name>"
        raise RegistryError(e.message, hint=hint, status=404) from e
    index = load_json_object(data, f"{where}@{digest}", error=IntegrityError)
    members = index.get("manifests")
    if media_type != mt.OCI_INDEX or index.get("artifactType") != mt.NVKR_RELEASE_SET:
        # another manifest of the repository (an artifact, a signature): the wrong name given
        kind = index.get("artifactType") or media_type
        raise UsageError(
            f"{where}@{digest} is not an nvkr release set index but a {kind}",
            hint="name the release set's tag or digest, as nvkr publish printed it",
        )
    if not isinstance(members, list) or not members or not isinstance(members[0], dict):
        raise IntegrityError(f"{where}@{digest}: the release set index lists no metadata manifest")
    top = {"mediaType": media_type, "digest": digest, "size": len(data)}
    meta_desc = members[0]
    what = f"release set {digest} manifests[0]"
    meta_manifest = load_json_object(
        fetch_manifest(client, repo, meta_desc, what), what, error=IntegrityError
    )
    config = meta_manifest.get("config")
    if meta_manifest.get("artifactType") != mt.NVKR_RELEASE_SET or not isinstance(config, dict):
        raise IntegrityError(
            f"{where}: {meta_desc['digest']} is not a release set metadata manifest"
        )
    if config.get("mediaType") != mt.NVKR_RELEASE_SET_METADATA:
        raise IntegrityError(
            f"{where}: metadata config has mediaType {config.get('mediaType')!r}",
            hint=f"this nvkr reads {mt.NVKR_RELEASE_SET_METADATA}; a newer nvkr may read this set",
        )
    size = config.get("size")
    if not isinstance(size, int) or not 0 <= size <= MAX_METADATA:
        raise IntegrityError(f"{where}: metadata config size {size!r} is not plausible")
    buf = io.BytesIO()
    client.get_blob(repo, str(config["digest"]), buf, size=size)
    if buf.tell() != size:
        raise IntegrityError(
            f"{where}: metadata {config['digest']} is {buf.tell()} bytes, not {size}"
        )
    meta = load_json_object(
        buf.getvalue(), f"{where}: metadata {config['digest']}", error=IntegrityError
    )
    if meta.get("schemaVersion") != METADATA_SCHEMA_VERSION:
        raise IntegrityError(
            f"{where}: release set metadata schemaVersion is {meta.get('schemaVersion')!r}, "
            f"this nvkr reads {METADATA_SCHEMA_VERSION}",
            hint="use the nvkr version that built the release set (metadata nvkrVersion)",
        )
    return meta, top
