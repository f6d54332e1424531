"""The size of each machine image of a release set, for ``nvkr release-set show``: the QCOW2's
bytes (from the metadata), its virtual disk size (from the QCOW2's own header) and its
compression (the machine image manifest's ``dev.nvkr.disk-compression`` annotation, absent on an
uncompressed image); and a Secure Boot image's owner (its certificate, a layer of its manifest)
and PCR predictions (its ``pcr-predictions`` attestation, :mod:`nvkr.releaseset.attestations`).

It reads, per distinct machine image, its manifest and the first :data:`HEADER_BYTES` of its
QCOW2: from the blobs of a ``dist/<name>`` layout, or from a registry (the manifest checked
against its digest, the header by one ranged ``GET``). A header is a hint for display only, never
checked against the blob's digest (that needs the whole blob: ``nvkr verify`` does it).

The header (qemu's ``docs/interop/qcow2.txt``, "Header"): magic ``QFI\\xfb`` at bytes 0-3, the
virtual disk size in bytes at 24-31, big-endian.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from nvkr.delivery.show import RegistryClients
from nvkr.oci import mediatypes as mt

#: QCOW2 header bytes read: the v3 header through ``compression_type`` (byte 104) and padding.
HEADER_BYTES: Final = 112
QCOW2_MAGIC: Final = b"QFI\xfb"


@dataclass(frozen=True)
class MachineImageSize:
    """One machine image (one QCOW2), with the ``gpu/arch`` of every variant that holds it.

    Attributes:
        size: the QCOW2 file's bytes.
        virtual_size: the virtual disk's bytes; None when the blob is not a QCOW2 or could not
            be read.
        compression: ``zlib`` or ``zstd``; ``none`` for an uncompressed image.
    """

    name: str
    variants: list[str]
    digest: str
    size: int
    virtual_size: int | None
    compression: str
    #: a Secure Boot image's owner certificate subject and PCR predictions (None without)
    secure_boot: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"name", "variants", "digest", "size", "virtualSize", "compression",
        "secureBoot"}``; ``secureBoot``: ``{"owner", "certificate": {"sha256", "pem"},
        "firmware", "phase", "pcrs"}`` or null."""
        return {
            "name": self.name,
            "variants": self.variants,
            "digest": self.digest,
            "size": self.size,
            "virtualSize": self.virtual_size,
            "compression": self.compression,
            "secureBoot": self.secure_boot,
        }


#: the layers of a Secure Boot machine image read for display (small: a certificate, a statement);
#: the predictions are its ``pcr-predictions`` attestation (a layer in sets built before)
_CERT_LAYER, _PREDICTIONS_LAYER = "secure-boot-owner.der", "pcr-predictions.intoto.json"
_PREDICTIONS_ROLE = "pcr-predictions"


def _predictions(
    art: dict[str, Any],
    layers: dict[str, dict[str, Any]],
    read_manifest: Callable[[dict[str, Any]], bytes],
) -> dict[str, Any] | None:
    """The descriptor of a machine image's PCR predictions statement: the layer of its
    ``pcr-predictions`` attestation (:mod:`nvkr.releaseset.attestations`, named in the
    metadata), else a layer of its own manifest; None without."""
    for att in art.get("attestations") or []:
        if att.get("role") == _PREDICTIONS_ROLE:
            manifest = json.loads(read_manifest(att))
            (layer,) = [la for la in manifest["layers"] if la.get("mediaType") == mt.IN_TOTO_JSON]
            return dict(layer)
    return layers.get(_PREDICTIONS_LAYER)


def _secure_boot(
    art: dict[str, Any],
    manifest: dict[str, Any],
    read_manifest: Callable[[dict[str, Any]], bytes],
    read_small: Callable[[str, int], bytes],
) -> dict[str, Any] | None:
    """The owner (a layer of the machine image's manifest) and the PCR predictions (its
    attestation) of the machine image ``art`` (its metadata entry), or None."""
    layers = {
        str((layer.get("annotations") or {}).get(mt.ANN_TITLE)): layer
        for layer in manifest.get("layers") or []
    }
    pred = _predictions(art, layers, read_manifest)
    if pred is None:
        return None
    from cryptography import x509

    predicate = json.loads(read_small(str(pred["digest"]), int(pred["size"])))["predicate"]
    owner, certificate = None, None
    if _CERT_LAYER in layers:
        layer = layers[_CERT_LAYER]
        der = read_small(str(layer["digest"]), int(layer["size"]))
        cert = x509.load_der_x509_certificate(der)
        owner = cert.subject.rfc4514_string()
        from cryptography.hazmat.primitives.serialization import Encoding

        # what `boot-test --mok` and `mokutil --import` take, for whoever holds only the set
        certificate = {
            "sha256": "sha256:" + hashlib.sha256(der).hexdigest(),
            "pem": cert.public_bytes(Encoding.PEM).decode(),
        }
    firmware = predicate.get("firmware") or {}
    return {
        "owner": owner,
        "certificate": certificate,
        "firmware": f"{firmware.get('package')} {firmware.get('version')}",
        "phase": predicate.get("phase"),
        "pcrs": predicate.get("pcrs"),
    }


def virtual_size(header: bytes) -> int | None:
    """The virtual disk size (bytes) a QCOW2 header states; None when ``header`` is none."""
    if len(header) < 32 or header[:4] != QCOW2_MAGIC:
        return None
    return int.from_bytes(header[24:32], "big")


#: (manifest descriptor) -> manifest bytes, (blob digest) -> its first HEADER_BYTES (or b"")
_Reader = tuple[
    Callable[[dict[str, Any]], bytes], Callable[[str], bytes], Callable[[str, int], bytes]
]


def _sizes(meta: dict[str, Any], reader: _Reader) -> list[MachineImageSize]:
    read_manifest, read_header, read_small = reader
    found: dict[str, dict[str, Any]] = {}
    for art in meta.get("artifacts", []):
        if art.get("kind") != "machine-image" or "primary" not in art:
            continue
        digest = str(art["primary"]["digest"])
        seen = found.setdefault(digest, {"art": art, "variants": []})
        variant = art.get("variant") or {}
        seen["variants"].append(f"{variant.get('gpu')}/{variant.get('arch')}")
    sizes = []
    for digest, seen in found.items():
        art = seen["art"]
        secure_boot = None
        try:
            manifest = json.loads(read_manifest(art["manifest"]))
            annotations = manifest.get("annotations") or {}
            secure_boot = _secure_boot(art, manifest, read_manifest, read_small)
        except (OSError, ValueError, KeyError, AttributeError):
            annotations = {}
        sizes.append(
            MachineImageSize(
                name=str(art["name"]),
                variants=seen["variants"],
                digest=digest,
                size=int(art["primary"]["size"]),
                virtual_size=virtual_size(read_header(digest)),
                compression=str(annotations.get(mt.ANN_NVKR_DISK_COMPRESSION, "none")),
                secure_boot=secure_boot,
            )
        )
    return sizes


def _layout_reader(layout: Path) -> _Reader:
    from nvkr.oci.layout import LayoutReader

    reader = LayoutReader(layout)

    def header(digest: str) -> bytes:
        try:
            with open(reader.blob_path(digest), "rb") as f:
                return f.read(HEADER_BYTES)
        except OSError:
            return b""

    return (
        lambda desc: reader.blob_path(str(desc["digest"])).read_bytes(),
        header,
        lambda digest, size: reader.blob_path(digest).read_bytes()[:size],
    )


def machine_image_sizes(
    meta: dict[str, Any], source: str, *, registry: RegistryClients
) -> list[MachineImageSize]:
    """The machine images of the release set ``source`` (what
    :func:`nvkr.delivery.show.load_release_set` read as ``meta``), one per QCOW2, in the
    metadata's order.

    Raises:
        RegistryError: the registry refuses or cannot be reached (as for the metadata).
        IntegrityError: a manifest does not match its digest.
    """
    if not any(a.get("kind") == "machine-image" for a in meta.get("artifacts", [])):
        return []
    layout = Path(source)
    if layout.is_dir():
        return _sizes(meta, _layout_reader(layout))
    from nvkr.oci.registry import Reference
    from nvkr.releaseset.remote import fetch_manifest

    ref = Reference.parse(source)
    repo = ref.repository
    with registry.client(ref.registry) as client:
        return _sizes(
            meta,
            (
                lambda desc: fetch_manifest(client, repo, desc, f"machine image {desc['digest']}"),
                lambda digest: client.read_blob_start(repo, digest, HEADER_BYTES),
                lambda digest, size: client.read_blob_start(repo, digest, min(size, 1 << 20)),
            ),
        )
