"""Boot tests under UEFI Secure Boot, with a TPM: ``nvkr boot-test --secure-boot [--tpm]``.

:func:`boot_secure` prepares the variable store (:func:`nvkr.machine.secureboot.prepare_vars`:
Microsoft's keys as the db profile asks, the owner's certificates as MOKs), boots the image
with the Secure Boot firmware (:func:`nvkr.machine.boot.boot_test`, ``firmware="secure-boot"``;
shim's and the firmware's refusals end it at once), and checks that the kernel said it is
locked down by Secure Boot and that Secure Boot is enabled before the agent's line
(:func:`nvkr.machine.secureboot.check_console`).

With ``tpm`` the guest gets swtpm and a NoCloud seed whose vendor-data is nvkr's boot hook
(:func:`nvkr.machine.tpmprobe.boothook`); the boot then also waits for its report, and the event
log must replay to the PCRs the guest read (:func:`nvkr.machine.tpmprobe.check`). The event log
is kept in ``eventlog_file``. With ``modules`` (the default) the seed's vendor-data also tries
every out-of-tree module of the image (:mod:`nvkr.machine.moduleprobe`: DKMS's): each must be
signed by an enrolled MOK and taken by the kernel (it loads, or fails only after its signature
was accepted), and its unsigned copy and a copy with one byte changed must be refused for their
signatures. With ``user_data`` as well, the seed is
:func:`nvkr.machine.cloudinit.boot_with_user_data`'s, the boot hooks beside its probe in the
vendor-data (a MIME multipart): the user-data is booted as given, and what it asks is checked
as without Secure Boot. A user-data that turns vendor-data off (``vendor_data: {enabled:
false}``) turns off these reports too, and the boot fails waiting for them.
"""

from __future__ import annotations

import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvkr.errors import BootTestError
from nvkr.machine import moduleprobe, tpmprobe
from nvkr.machine.boot import BootResult, boot_test
from nvkr.machine.cloudinit import Check, boot_with_user_data
from nvkr.machine.secureboot import (
    REFUSALS,
    Mok,
    SecureBoot,
    check_console,
    prepare_vars,
    refusal_hint,
)
from nvkr.machine.seed import boothooks_vendor_data, make_seed, meta_data
from nvkr.machine.tpmprobe import Measurements

#: The boot test's default ``fail`` (:func:`nvkr.machine.boot.boot_test`).
DEFAULT_FAIL = r"nvkr-node-agent: not-ready|Kernel panic"
#: The user-data of a boot with boot hooks but without ``--user-data``: nothing (the boot hooks
#: are vendor-data).
EMPTY_USER_DATA = b"#cloud-config\n{}\n"


@dataclass(frozen=True)
class SecureBootResult:
    """A boot under enforcing Secure Boot: the ``boot``, the ``moks`` enrolled, the ``db``
    profile, what the console proved (``console``: the kernel's lines), the ``tpm``
    measurements (with ``tpm``), the user-data ``checks`` (with ``user_data``), the
    out-of-tree ``modules`` report and its ``module_checks`` (with ``modules``), and the
    ``seconds`` of the whole boot (to the last report, when it came after the agent's line)."""

    boot: BootResult
    moks: list[Mok]
    db: str
    console: dict[str, Any]
    tpm: Measurements | None = None
    checks: list[Check] = field(default_factory=list)
    seconds: float = 0.0
    modules: moduleprobe.Report | None = None
    module_checks: list[Check] = field(default_factory=list)

    def secure_boot_json(self) -> dict[str, Any]:
        """``secureBoot`` of the boot's JSON result: ``lockdown`` is the mode a guest report
        read (``integrity``), else ``on`` (the console's line proved it, naming no mode)."""
        read = [r.lockdown for r in (self.tpm, self.modules) if r is not None and r.lockdown]
        modes = [m.group(1) for line in read if (m := re.search(r"\[(\w+)\]", line))]
        out: dict[str, Any] = {"enforcing": True, "lockdown": modes[0] if modes else "on",
                               "db": self.db, "moks": [m.to_json() for m in self.moks],
                               "kernelLines": self.console["lines"]}  # fmt: skip
        if self.tpm is not None:
            out["secureBootVariable"] = self.tpm.secureboot
        if self.modules is not None:
            out["modules"] = moduleprobe.to_json(self.modules, self.module_checks)
        return out


def boot_secure(
    image: Path,
    *,
    secure_boot: SecureBoot,
    tpm: bool = False,
    modules: bool = True,
    arch: str = "amd64",
    eventlog_file: Path | None = None,
    user_data: Path | None = None,
    meta_data_file: Path | None = None,
    expect_files: tuple[str, ...] = (),
    **boot_options: Any,
) -> SecureBootResult:
    """Boot ``image`` under enforcing Secure Boot (module docstring).

    Args:
        secure_boot: the MOKs and the db profile.
        tpm: give the guest swtpm and check its PCRs against the replayed event log.
        modules: try the image's out-of-tree modules under lockdown (module docstring).
        eventlog_file: where the event log is written (with ``tpm``).
        user_data, meta_data_file, expect_files: as
            :func:`nvkr.machine.cloudinit.boot_with_user_data`'s.
        boot_options: :func:`nvkr.machine.boot.boot_test`'s other keyword arguments; ``fail``
            gets shim's and the firmware's refusals added.
    Raises:
        UsageError: a MOK that is no certificate; invalid user-data (before any boot).
        BootTestError: the boot failed or was refused, the console does not prove enforcing
            Secure Boot, the measurements do not replay, or a module check failed.
    """
    fail = boot_options.pop("fail", DEFAULT_FAIL)
    boot_options["fail"] = f"{fail}|{REFUSALS}" if fail else REFUSALS
    hooks = [probe for on, probe in ((tpm, tpmprobe), (modules, moduleprobe)) if on]
    boot_options["wait_for"] = [*boot_options.get("wait_for", ()), *(p.END for p in hooks)]
    boothooks = [p.boothook() for p in hooks]
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="nvkr-sb-") as tmp:
        vars_path = Path(tmp) / "vars.fd"
        moks = prepare_vars(arch, secure_boot, vars_path)
        common: dict[str, Any] = {"arch": arch, "firmware": "secure-boot", "uefi_vars": vars_path,
                                  "tpm": tpm}  # fmt: skip
        start = time.monotonic()
        try:
            if user_data is not None:
                done = boot_with_user_data(
                    image, user_data=user_data, meta_data_file=meta_data_file,
                    expect_files=expect_files, boothooks=boothooks, **common, **boot_options,
                )  # fmt: skip
                result, checks = done.boot, done.checks
            elif boothooks:
                seed = Path(tmp) / "seed.img"
                meta = meta_data(EMPTY_USER_DATA, None)[0]
                make_seed(seed, {"user-data": EMPTY_USER_DATA, "meta-data": meta,
                                 "vendor-data": boothooks_vendor_data(boothooks)},
                          workdir=Path(tmp))  # fmt: skip
                boot_options.setdefault("then_timeout", 300.0)
                result = boot_test(image, drives=[seed], **common, **boot_options)
            else:
                result = boot_test(image, **common, **boot_options)
        except BootTestError as e:  # a refusal says what to do about it
            if hint := refusal_hint(e.message.split("\n", 1)[0], moks, secure_boot.db):
                e.hint = f"{hint}; {e.hint}" if e.hint else hint
            raise
        seconds = round(time.monotonic() - start, 3)
    console = check_console(result.lines, result.matched)
    where = f"the guest ({image})"
    report, module_checks = None, []
    if modules:
        report = moduleprobe.parse(result.lines)
        module_checks = moduleprobe.check(report, [m.der for m in moks], where=where)
    measured = None
    if tpm:
        measured = tpmprobe.check(tpmprobe.parse(result.lines), where=where)
        if measured.secureboot != "01":
            raise BootTestError(
                f"the guest's SecureBoot variable is {measured.secureboot!r}, not 01 (enforcing)"
            )
        if eventlog_file is not None:
            eventlog_file.write_bytes(measured.eventlog)
    return SecureBootResult(result, moks, secure_boot.db, console, measured, checks, seconds,
                            report, module_checks)  # fmt: skip
