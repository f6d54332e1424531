"""The certificates that must trust what a Secure Boot chain is made of, pinned by digest.

- ``microsoft-uefi-ca-2011`` and ``microsoft-uefi-ca-2023``: Microsoft's third-party UEFI CAs, in
  the firmware's db of almost every machine: they sign shim. Debian 13's shim 16.1 carries a
  signature by each (two certificate-table entries).
- ``debian-secure-boot-ca``: Debian's Secure Boot CA, shim's vendor certificate: it signs the
  kernels (``linux-image-*``), MokManager and systemd-boot.

The PEM files are ``builders/secureboot-anchors/`` (copied from virt-firmware 26.10's bundle,
which firmware test suites use); each is checked against its SHA-256 fingerprint here before
use, the fingerprints Microsoft and Debian publish (the 2011 CA's
48E99B99...00248507 is the one in every OEM's db).
"""

from __future__ import annotations

import functools
import hashlib
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from nvkr.builders.assets import asset_dir
from nvkr.errors import IntegrityError

#: name -> sha256 of the DER certificate
PINS: Final = {
    "microsoft-uefi-ca-2011": "48e99b991f57fc52f76149599bff0a58c47154229b9f8d603ac40d3500248507",
    "microsoft-uefi-ca-2023": "f6124e34125bee3fe6d79a574eaa7b91c0e7bd9d929c1a321178efd611dad901",
    "debian-secure-boot-ca": "079646974bce09b1f04da67bd722d1fb0947ae4c4010bccdbba52d5b23cbf1a2",
}
MICROSOFT_UEFI: Final = ("microsoft-uefi-ca-2011", "microsoft-uefi-ca-2023")
DEBIAN: Final = ("debian-secure-boot-ca",)


@functools.cache
def anchor(name: str) -> x509.Certificate:
    """The pinned certificate ``name``.

    Raises:
        IntegrityError: its file is not the pinned certificate (names both digests).
    """
    path = asset_dir("secureboot-anchors") / f"{name}.pem"
    cert = x509.load_pem_x509_certificate(path.read_bytes())

    got = hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()
    if got != PINS[name]:
        raise IntegrityError(f"{path}: sha256 {got}, pinned {PINS[name]}: not {name}")
    return cert


def anchors(names: tuple[str, ...]) -> list[x509.Certificate]:
    return [anchor(n) for n in names]
