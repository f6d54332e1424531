"""Signatures taken from a published release set, for a rebuild without the owner's key.

``nvkr verify --rebuild`` has no private key, so it cannot sign what it rebuilds. It can rebuild
everything a signature covers, though: a module's signature (:mod:`nvkr.secureboot.modsig`) is
appended to exactly the unsigned bytes a build without the key makes. :class:`PublishedSignatures`
reads the signed modules of the release set's machine images; when a signing action of the
rebuild finds no key, it asks here for the signed module whose unsigned payload is the one it
rebuilt, checks that signature against the recipe's certificate over those rebuilt bytes, and
uses it. Everything else is rebuilt, so an identical release set then means *identical but for
signatures by that certificate*: :attr:`PublishedSignatures.used` lists them for the report.
"""

from __future__ import annotations

import hashlib
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nvkr.jsondoc import JsonObject
from nvkr.secureboot import modsig

_MODULE_SUFFIXES = (".ko", ".ko.xz")
#: the signed second stages on a node image's ESP (nvkr.builders.node_image.secureboot)
SECOND_STAGES = ("EFI/BOOT/GRUBX64.EFI", "EFI/BOOT/GRUBAA64.EFI")


@dataclass
class PublishedSignatures:
    """The signed modules of ``images`` (QCOW2 paths, each with a name for messages), read on
    first use, by the sha256 of their unsigned payload; :attr:`used` records what was taken."""

    images: Sequence[tuple[str, Path]]
    used: list[JsonObject] = field(default_factory=list)
    _by_payload: dict[str, tuple[bytes, str]] | None = None
    _pe_by_digest: dict[str, tuple[bytes, str]] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _load(self) -> dict[str, tuple[bytes, str]]:
        if self._by_payload is None:
            found: dict[str, tuple[bytes, str]] = {}
            for name, disk in self.images:
                for path, data in _signed_modules(disk, name):
                    split = modsig.split_module(data, path)
                    digest = "sha256:" + hashlib.sha256(split.payload).hexdigest()
                    found.setdefault(digest, (data, f"{name}:{path}"))
            self._by_payload = found
        return self._by_payload

    def _load_pe(self) -> dict[str, tuple[bytes, str]]:
        if self._pe_by_digest is None:
            from nvkr.disk.imageread import read_esp_files
            from nvkr.secureboot.authenticode import pe_signatures
            from nvkr.secureboot.pe import authenticode_digest

            found: dict[str, tuple[bytes, str]] = {}
            for name, disk in self.images:
                for path, data in read_esp_files(disk, list(SECOND_STAGES), what=name).items():
                    if pe_signatures(data, path):
                        digest = "sha256:" + authenticode_digest(data, what=path).hex()
                        found.setdefault(digest, (data, f"{name}:/{path}"))
            self._pe_by_digest = found
        return self._pe_by_digest

    def signed_pe(self, digest: str) -> tuple[bytes, str] | None:
        """The published signed second stage (the UKI on the ESP) of Authenticode digest
        ``digest`` (``sha256:<hex>``), with where it was found; None when no image holds one."""
        with self._lock:
            return self._load_pe().get(digest)

    def signed_module(self, payload: bytes) -> tuple[bytes, str] | None:
        """The published signed module (uncompressed) whose unsigned payload is ``payload``,
        with where it was found; None when no image holds one."""
        digest = "sha256:" + hashlib.sha256(payload).hexdigest()
        with self._lock:
            return self._load().get(digest)

    def record(self, path: str, where: str, subject: str, certificate: str) -> None:
        with self._lock:
            self.used.append(
                {"path": path, "from": where, "signer": subject, "certificate": certificate}
            )


def _signed_modules(disk: Path, name: str) -> list[tuple[str, bytes]]:
    """Every signed module of the image outside the kernel package's ``kernel/`` directories
    (path, uncompressed bytes)."""
    from nvkr.disk.imageread import open_root_fs

    out: list[tuple[str, bytes]] = []
    with open_root_fs(disk, what=name) as fs:
        top = fs.lookup(b"/usr/lib/modules", follow=True)
        if top is None or not stat.S_ISDIR(top.mode):
            return out
        for kernel in fs.children(top):
            if not stat.S_ISDIR(kernel.mode):
                continue
            for sub in fs.children(kernel):
                if sub.path.endswith(b"/kernel") or not stat.S_ISDIR(sub.mode):
                    continue
                for entry in fs.walk(sub):
                    path = entry.path.decode(errors="replace")
                    if stat.S_ISREG(entry.mode) and path.endswith(_MODULE_SUFFIXES):
                        data = modsig.decompress(fs.read(entry), path)
                        if modsig.split_module(data, path).pkcs7 is not None:
                            out.append((path, data))
    return out


#: The published signatures of this process's rebuild (``nvkr verify --rebuild``), if any.
_GIVEN: list[PublishedSignatures] = []


def provide_published_signatures(signatures: PublishedSignatures | None) -> None:
    """Make ``signatures`` what signing actions of this process use when no key is given."""
    _GIVEN.clear()
    if signatures is not None:
        _GIVEN.append(signatures)


def published_signatures() -> PublishedSignatures | None:
    return _GIVEN[0] if _GIVEN else None
