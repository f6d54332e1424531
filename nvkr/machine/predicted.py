"""A measured boot's PCRs against the release set's predictions (``nvkr boot-test --tpm`` of a set).

A Secure Boot machine image carries its PCR predictions as an in-toto attestation (predicate
``https://nvkr.dev/attestations/pcr-predictions/v1``, :mod:`nvkr.builders.node_image.secureboot`):
PCRs 4, 5, 7, 9, 11 and 14 of its first boot for a stated firmware variable store (Debian's
OVMF/AAVMF store with Microsoft's keys, by digest) and MokList (the owner's certificate). The
prediction holds only for that setup, so :func:`compare` first checks that the boot's is the
same (the host's store is the stated one, the ``microsoft`` db, the MOKs are the stated
certificates) and says why it does not compare otherwise; where it does, every predicted PCR
must equal the guest's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from nvkr.errors import BootTestError
from nvkr.machine.secureboot import VARS, Mok


def read_predictions(reader: Any, art: Mapping[str, Any], what: str) -> dict[str, Any] | None:
    """The ``predicate`` of the machine image ``art``'s (its metadata entry) PCR predictions
    statement in the release set ``reader`` (:class:`nvkr.oci.layout.LayoutReader`), or None.

    Raises:
        IntegrityError: a blob does not match its digest.
        BootTestError: the statement is about another file than the image's QCOW2.
    """
    from nvkr.oci import mediatypes as mt

    for att in art.get("attestations") or []:
        if att.get("role") != "pcr-predictions":
            continue
        manifest = reader.read_json(att, referrer=f"{what}'s pcr-predictions")
        (layer,) = [la for la in manifest["layers"] if la.get("mediaType") == mt.IN_TOTO_JSON]
        statement = reader.read_json(layer, referrer=f"{what}'s pcr-predictions")
        digests = {"sha256:" + s["digest"]["sha256"] for s in statement["subject"]}
        if art["primary"]["digest"] not in digests:
            raise BootTestError(f"{what}: its PCR predictions are about {sorted(digests)}, "
                                f"not its QCOW2 {art['primary']['digest']}")  # fmt: skip
        return dict(statement["predicate"])
    return None


def _why_not(predicate: Mapping[str, Any], arch: str, db: str, moks: Sequence[Mok]) -> str:
    """Why this boot's setup is not the one the predictions state ('' when it is)."""
    firmware = predicate.get("firmware") or {}
    if db != "microsoft":
        return f"the boot's db is {db}, the predictions are for Microsoft's 2011 keys"
    store = Path(VARS[arch][0])
    try:
        digest = "sha256:" + hashlib.sha256(store.read_bytes()).hexdigest()
    except OSError as e:
        return f"cannot read {store}: {e.strerror}"
    if digest != firmware.get("variableStoreDigest"):
        return (f"this host's {store} ({digest[:19]}…) is not the stated variable store "
                f"({firmware.get('package')} {firmware.get('version')}, "
                f"{str(firmware.get('variableStoreDigest'))[:19]}…)")  # fmt: skip
    stated = sorted(str(m.get("certificate")) for m in firmware.get("mokList") or [])
    enrolled = sorted("sha256:" + m.sha256 for m in moks)
    if stated != enrolled:
        return f"the MOKs enrolled ({len(enrolled)}) are not the stated MokList ({len(stated)})"
    return ""


def compare(
    predicate: Mapping[str, Any],
    guest: Mapping[int, str],
    *,
    arch: str,
    db: str,
    moks: Sequence[Mok],
    where: str = "the guest",
) -> dict[str, Any]:
    """The guest's PCRs (sha256 bank, by index) against ``predicate``'s: ``{"compared": True,
    "phase", "pcrs": {N: value}}``, or ``{"compared": False, "reason"}`` when the boot's setup
    is not the stated one.

    Raises:
        BootTestError: a predicted PCR differs from the guest's (each named).
    """
    reason = _why_not(predicate, arch, db, moks)
    if reason:
        return {"compared": False, "reason": reason}
    stated = (predicate.get("pcrs") or {}).items()
    pcrs = {str(k): str(v).lower() for k, v in sorted(stated, key=lambda kv: int(kv[0]))}
    wrong = [f"PCR {n}: {where} {guest.get(int(n), 'nothing')}, predicted {v}"
             for n, v in sorted(pcrs.items(), key=lambda kv: int(kv[0]))
             if guest.get(int(n), "").lower() != v]  # fmt: skip
    if wrong:
        raise BootTestError(
            "the guest's PCRs are not the release set's predictions: " + "; ".join(wrong),
            hint="the image booted is not the one predicted (a changed boot file or GPT), or "
            "the firmware measured differently: the TPM event log beside the console log "
            "names each measurement",
        )
    return {"compared": True, "phase": predicate.get("phase"), "pcrs": pcrs}
