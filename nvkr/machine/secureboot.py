"""UEFI Secure Boot for boot tests: the variable store, KVM's SMM, and what the console proves.

**Variables.** :func:`prepare_vars` writes the firmware's variable store (a copy per boot: the
firmware writes into it) with virt-firmware's library (``virt-fw-vars``): for the ``microsoft``
db the one Debian ships with its Secure Boot firmware (``OVMF_VARS_4M.ms.fd``,
``AAVMF_VARS.ms.fd``: Microsoft's 2011 PK/KEK/db, Secure Boot on); for ``uefi23`` and
``win23`` Debian's empty store with Microsoft's platform keys enrolled and that db profile
(``--enroll-microsoft --microsoft-db PROFILE --secure-boot``). Each ``--mok`` certificate (PEM
or DER) is added to ``MokList`` (NV+BS, as shim reads it at boot; never ``MokListRT``, which
shim makes) with the owner GUID :data:`OWNER_GUID`: the owner's key pre-enrolled, with no
MokManager dialogue. :func:`mok_certificates` reads them back.

Debian 13's shim 16.1 is signed twice, by Microsoft's UEFI CA 2011 and 2023, so a 2023-only
third-party db (``uefi23``) still boots it; ``win23`` (Windows UEFI CA 2023 only, no
third-party CA) refuses it, and so does a store without the MOK that signed the UKI.

**KVM.** OVMF's Secure Boot build needs SMM, and nested KVM may not offer it (QEMU exits at once
with "System Management Mode not supported by this hypervisor."). :func:`kvm_smm_problem`
probes that once per host boot (kept like :mod:`nvkr.machine.kvmhang`'s verdict), and boot
tests then run under TCG and say why.

**Console.** The boot proves enforcing Secure Boot by the kernel's lines :data:`LOCKDOWN_LINE`
and :data:`ENABLED_LINE` before the node agent's (:func:`check_console`). Shim's and the
firmware's refusals (:data:`REFUSALS`) end the boot at once: shim's "Verification failed" box
waits for a key forever.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, get_args

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from nvkr.errors import BootTestError, ToolError, UsageError
from nvkr.machine import kvmhang
from nvkr.machine.qemu import QEMU, kvm_works
from nvkr.run import FIXED_PATH, pinned_env, run
from nvkr.secureboot.measure_inputs import OWNER_GUID as _OWNER_GUID

DbProfile = Literal["microsoft", "uefi23", "win23"]
DB_PROFILES: Final[tuple[DbProfile, ...]] = get_args(DbProfile)
#: The owner GUID of nvkr's MokList entries (shim ignores it, but measures it into PCRs 7 and 14:
#: the predictions assume this one)
OWNER_GUID: Final = _OWNER_GUID
#: Architecture -> (Debian's store with Microsoft's keys, its empty store, the package).
VARS: Final = {
    "amd64": ("/usr/share/OVMF/OVMF_VARS_4M.ms.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd", "ovmf"),
    "arm64": ("/usr/share/AAVMF/AAVMF_VARS.ms.fd", "/usr/share/AAVMF/AAVMF_VARS.fd",
              "qemu-efi-aarch64"),
}  # fmt: skip

LOCKDOWN_LINE: Final = "Kernel is locked down from EFI Secure Boot"
ENABLED_LINE: Final = "secureboot: Secure boot enabled"
#: Shim's and the firmware's refusals: shim's box ("Verification failed: (0x1A) Security
#: Violation"), systemd-boot through shim ("Security Policy Violation"), the firmware refusing
#: shim ("BdsDxe: failed to load ...: Access Denied") and having nothing left to boot.
SHIM_REFUSAL: Final = r"Verification failed|Security (?:Policy )?Violation"
FIRMWARE_REFUSAL: Final = r": Access Denied\b"
REFUSALS: Final = f"{SHIM_REFUSAL}|{FIRMWARE_REFUSAL}|No bootable option"


def refusal_hint(failure: str, moks: Sequence[Mok], db: str) -> str | None:
    """What to do about a boot that ``failure`` (the first line of a boot test's error) says
    shim or the firmware refused: the second stage signed by no enrolled certificate (shim's
    "Verification failed" box, systemd-boot's "Security Policy Violation"), or shim refused by
    the firmware's db ("Access Denied"). None for any other failure."""
    if re.search(SHIM_REFUSAL, failure):
        if not moks:
            return (
                "shim refused the image's second stage (the owner-signed UKI) and no --mok was "
                "given: enroll the image owner's certificate with --mok CERT (the release set "
                "carries it beside the QCOW2; `nvkr release-set show SET --json` prints it, "
                "machineImages[].secureBoot.certificate.pem)"
            )
        return (
            "shim refused the image's second stage: it is signed by none of the --mok "
            f"certificates ({', '.join(m.subject for m in moks)}), or its signed bytes were "
            "changed; compare its signer with `nvkr release-set show`"
        )
    if re.search(FIRMWARE_REFUSAL, failure):
        return (
            f"the firmware's db (--secure-boot-db {db}) does not trust shim's signer: Debian "
            "13's shim is signed by Microsoft's UEFI CA 2011 and 2023, which the microsoft and "
            "uefi23 profiles hold"
        )
    return None


#: What the KVM SMM probe's QEMU says when the hypervisor has no SMM.
NO_SMM: Final = "System Management Mode not supported"
SMM_PROBE_SECONDS: Final = 5.0


@dataclass(frozen=True)
class SecureBoot:
    """A Secure Boot boot test's keys: the ``moks`` (certificate files, PEM or DER) enrolled as
    MOKs, and the firmware's ``db`` profile."""

    moks: tuple[Path, ...] = ()
    db: DbProfile = "microsoft"


@dataclass(frozen=True)
class Mok:
    """A certificate to enroll: its ``path``, ``der`` bytes, ``subject`` and DER sha256."""

    path: Path
    der: bytes
    subject: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.der).hexdigest()

    def to_json(self) -> dict[str, str]:
        return {"path": str(self.path), "subject": self.subject, "sha256": self.sha256}


def load_moks(paths: Sequence[Path]) -> list[Mok]:
    """The certificates ``paths`` name, PEM or DER.

    Raises:
        UsageError: a file is missing or holds no X.509 certificate.
    """
    moks = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise UsageError(f"{path}: cannot read the MOK certificate: {e.strerror}") from e
        try:
            cert = (x509.load_pem_x509_certificate(data) if b"-----BEGIN" in data
                    else x509.load_der_x509_certificate(data))  # fmt: skip
        except ValueError as e:
            raise UsageError(
                f"{path} is not an X.509 certificate (PEM or DER): {e}",
                hint="--mok takes the owner's certificate, not the key",
            ) from e
        moks.append(Mok(path, cert.public_bytes(Encoding.DER), cert.subject.rfc4514_string()))
    return moks


@contextlib.contextmanager
def _quiet_virt_firmware() -> Iterator[None]:
    """virt-firmware logs every step at INFO on the root logger: keep it out of nvkr's output."""
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(previous)


def prepare_vars(arch: str, secure_boot: SecureBoot, out: Path) -> list[Mok]:
    """Write ``out``: the variable store of a ``secure_boot`` boot of ``arch`` (module
    docstring); the same inputs give the same bytes. Returns the MOKs enrolled.

    Raises:
        UsageError: a MOK is not a certificate, or the db profile is unknown.
        BootTestError: the firmware's variable store is not installed.
    """
    if secure_boot.db not in DB_PROFILES:
        raise UsageError(f"no Secure Boot db profile {secure_boot.db!r}: "
                         f"expected {', '.join(DB_PROFILES)}")  # fmt: skip
    moks = load_moks(secure_boot.moks)
    ms, blank, package = VARS[arch]
    template = Path(ms if secure_boot.db == "microsoft" else blank)
    if not template.is_file():
        raise BootTestError(f"no UEFI variable store for {arch} at {template}",
                            hint=f"install Debian package {package}")  # fmt: skip
    from virt.firmware.varstore import edk2  # type: ignore[import-untyped]

    with _quiet_virt_firmware():
        store = edk2.Edk2VarStore(str(template))
        varlist = store.get_varlist()
        if secure_boot.db != "microsoft":
            varlist.enroll_platform_microsoft(ms_kek="all")
            varlist.add_microsoft_keys(ms_db=secure_boot.db)
            varlist.enable_secureboot()
        if moks:
            var = varlist.add_cert_prepare("MokList")
            for mok in moks:
                var.sigdb_add_cert_data(OWNER_GUID, mok.der)
        store.write_varstore(str(out), varlist)
    return moks


def mok_certificates(vars_path: Path) -> list[tuple[str, bytes]]:
    """The ``MokList`` of a variable store: (owner GUID, certificate DER) per entry."""
    from virt.firmware.varstore import edk2

    with _quiet_virt_firmware():
        varlist = edk2.Edk2VarStore(str(vars_path)).get_varlist()
    var = varlist.get("MokList")
    if var is None or var.sigdb is None:
        return []
    return [(str(sig["guid"]), bytes(sig["data"])) for siglist in var.sigdb for sig in siglist]


def kvm_smm_problem(arch: str) -> str | None:
    """Why KVM cannot run ``arch``'s Secure Boot firmware here, or None when it can (or the
    architecture's firmware needs no SMM). Probed once per host boot: a boot sector under
    ``-machine q35,smm=on -accel kvm`` must exit through ``isa-debug-exit``; the verdict is
    kept beside :mod:`nvkr.machine.kvmhang`'s."""
    if arch != "amd64":
        return None
    seen = kvmhang.note("kvm-smm-amd64")
    if seen is not None and isinstance(seen.get("problem"), str | None):
        problem: str | None = seen.get("problem")
        return problem
    problem = _probe_smm()
    kvmhang.keep("kvm-smm-amd64", {"problem": problem})
    return problem


def _probe_smm() -> str | None:
    binary = QEMU["amd64"][0]
    if shutil.which(binary, path=FIXED_PATH) is None or not kvm_works("amd64"):
        return "KVM does not run guests here"
    sector = bytes([0xB0, 0x01, 0xE6, 0xF4, 0xF4]).ljust(510, b"\0") + b"\x55\xaa"
    with tempfile.TemporaryDirectory(prefix="nvkr-smm-") as d:
        img = Path(d) / "probe.img"
        img.write_bytes(sector)
        argv = [
            binary, "-accel", "kvm", "-machine", "q35,smm=on", "-nodefaults", "-display",
            "none", "-no-reboot", "-m", "64", "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
            "-drive", f"file={img},format=raw,if=ide,snapshot=on",
        ]  # fmt: skip
        try:
            proc = run(argv, env=pinned_env(), check=False, timeout=SMM_PROBE_SECONDS)
        except ToolError:
            return f"a KVM guest with SMM did not finish a boot sector in {SMM_PROBE_SECONDS:.0f} s"
    if proc.returncode == 3:
        return None
    said = (proc.stderr or b"").decode(errors="replace").strip().splitlines()
    why = next((line for line in said if NO_SMM in line), said[-1] if said else "")
    why = why.removeprefix(f"{binary}: ")
    return f"KVM cannot run the Secure Boot firmware (it needs SMM): {why or 'QEMU failed'}"


def check_console(lines: Sequence[str], matched: str) -> dict[str, object]:
    """What the console proves about Secure Boot, up to the ``matched`` line: ``{"enforcing":
    True, "lockdown": True, "lines": [...]}``.

    Raises:
        BootTestError: the kernel did not say it is locked down by Secure Boot, or that Secure
            Boot is enabled, before that line.
    """
    until = len(lines)
    with contextlib.suppress(ValueError):
        until = lines.index(matched) + 1
    seen = {want: next((line for line in lines[:until] if want in line), None)
            for want in (LOCKDOWN_LINE, ENABLED_LINE)}  # fmt: skip
    missing = [want for want, line in seen.items() if line is None]
    if missing:
        raise BootTestError(
            f"the guest reached {matched!r} without proving enforcing Secure Boot: no kernel "
            "line " + " or ".join(repr(m) for m in missing) + " before it",
            hint="the image booted, but not under Secure Boot (the firmware's Secure Boot is "
            "off, or the kernel does not lock down under it)",
        )
    return {"enforcing": True, "lockdown": True,
            "lines": [" ".join(str(line).split()) for line in seen.values()]}  # fmt: skip
