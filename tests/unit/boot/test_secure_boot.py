"""``nvkr boot-test --secure-boot [--tpm]``, fast: the QEMU command line of each mode, the
variable store (the MOK read back with virt-firmware), KVM without SMM, the TPM probe's report
on the console and its check, and the refusals of shim and the firmware matched on the real
consoles the spike of issue 32 recorded (tests/fixtures/secureboot). Whole boots run with fake
QEMUs (tests/helpers/fake_qemu.py) that play a Secure Boot console; the real swtpm runs beside
them (and must be gone afterwards). Boots of a real image are the slow tier's."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from nvkr.errors import BootTestError, UsageError
from nvkr.machine import boot, kvmhang, qemu, secureboot, tpmprobe
from nvkr.machine.boot import console_text
from nvkr.machine.measured import boot_secure
from nvkr.machine.secureboot import (
    OWNER_GUID,
    REFUSALS,
    SecureBoot,
    load_moks,
    mok_certificates,
    prepare_vars,
)
from tests.helpers.cli import invoke
from tests.helpers.fake_qemu import accels, calls, fake_qemu

FIXTURES = Path(__file__).parents[2] / "fixtures"
EVENTLOG = (FIXTURES / "tpm" / "ovmf-shim-uki.eventlog").read_bytes()
GUEST_PCRS = json.loads((FIXTURES / "tpm" / "ovmf-shim-uki.pcrs.json").read_text())["sha256"]
needs_ovmf = pytest.mark.skipif(
    not Path(secureboot.VARS["amd64"][0]).is_file(), reason="Debian's ovmf (install.sh)"
)

#: The console of the spike's design (b) boot, cut down: OVMF's lines, the EFI stub's, the
#: kernel's proof of Secure Boot, the agent.
FIRMWARE = [
    ("say", '\x1b[2J\x1b[01;01HBdsDxe: loading Boot0001 "UEFI Misc Device" from PciRoot(0x0)/Pci(0x1,0x0)\r\n'),
    ("say", "EFI stub: UEFI Secure Boot is enabled.\r\n"),
    ("say", "[    0.000000] Linux version 6.12.118+deb13-cloud-amd64 (debian-kernel@lists.debian.org)\r\n"),
]  # fmt: skip
SECURE = [
    ("say", "[    0.000000] Kernel is locked down from EFI Secure Boot; see man kernel_lockdown.7\r\n"),
    ("say", "[    0.000000] secureboot: Secure boot enabled\r\n"),
]  # fmt: skip
READY = [("say", "[   23.6] node-agent[363]: nvkr-node-agent: ready gpus=0 product=none\r\n")]


def _cert(tmp_path: Path, name: str = "owner") -> tuple[Path, Path, bytes]:
    """A self-signed RSA certificate as PEM and DER files; its DER bytes."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"nvkr test {name} key")])
    when = datetime.datetime(2025, 12, 1, tzinfo=datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
        .public_key(key.public_key()).serial_number(1).not_valid_before(when)
        .not_valid_after(when + datetime.timedelta(days=3650)).sign(key, hashes.SHA256())
    )  # fmt: skip
    der = cert.public_bytes(serialization.Encoding.DER)
    pem_path, der_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.der"
    pem_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    der_path.write_bytes(der)
    return pem_path, der_path, der


def _report(pcrs: dict[str, str] | None = None, log: bytes = EVENTLOG, prefix: str = "") -> list:
    """The TPM probe's report as the guest prints it, as fake QEMU ``say`` steps."""
    pcrs = GUEST_PCRS if pcrs is None else pcrs
    p = f"{prefix}{tpmprobe.PREFIX}"
    text = [f"{p} secureboot 01", f"{p} lockdown none [integrity] confidentiality"]
    text += [f"{p} pcr {n} {pcrs[str(n)].upper()}" for n in range(16)]
    text.append(f"{p} eventlog sha256={hashlib.sha256(log).hexdigest()} size={len(log)}")
    b64 = base64.b64encode(log).decode()
    text += [f"{p} eventlog-b64 {b64[i : i + 64]}" for i in range(0, len(b64), 64)]
    text.append(f"{p} end")
    return [("say", "".join(line + "\r\n" for line in text))]


# -- the QEMU command line ----------------------------------------------------------------------


def _argv(arch: str, **kw: Any) -> list[str]:
    args: dict[str, Any] = dict(arch=arch, accel="tcg", firmware="secure-boot", memory_mib=1024,
                                smp=2, console=Path("/t/c.sock"), qmp=Path("/t/q.sock"),
                                pidfile=Path("/t/pid"), network=False,
                                uefi_vars=Path("/t/vars.fd"))  # fmt: skip
    args.update(kw)
    return qemu.qemu_argv(Path("/i/node.qcow2"), **args)


def _after(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == option]


@needs_ovmf
def test_amd64_secure_boot_is_q35_with_smm_and_the_secure_pflash():
    argv = _argv("amd64", tpm_socket=Path("/t/swtpm.sock"))
    assert _after(argv, "-machine") == ["q35,smm=on"]
    assert _after(argv, "-global") == ["driver=cfi.pflash01,property=secure,value=on"]
    assert _after(argv, "-drive")[:2] == [
        "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.secboot.fd",
        "if=pflash,format=raw,unit=1,file=/t/vars.fd",
    ]
    assert "-chardev" in argv and "socket,id=tpm,path=/t/swtpm.sock" in argv
    assert _after(argv, "-tpmdev") == ["emulator,id=tpm0,chardev=tpm"]
    assert _after(argv, "-device") == ["tpm-tis,tpmdev=tpm0"]
    assert "-snapshot" in argv and "-bios" not in argv


@needs_ovmf
def test_arm64_secure_boot_is_the_virt_machine_without_smm_and_a_tis_device():
    assert Path(qemu.SECURE_BOOT_CODE["arm64"]).is_file(), "install qemu-efi-aarch64 (install.sh)"
    argv = _argv("arm64", tpm_socket=Path("/t/swtpm.sock"))
    assert _after(argv, "-machine") == ["virt"] and "-global" not in argv
    assert _after(argv, "-cpu") == [qemu.TCG_ARM64_CPU]
    assert _after(argv, "-drive")[:2] == [
        "if=pflash,format=raw,unit=0,readonly=on,file=/usr/share/AAVMF/AAVMF_CODE.ms.fd",
        "if=pflash,format=raw,unit=1,file=/t/vars.fd",
    ]
    assert _after(argv, "-device") == ["tpm-tis-device,tpmdev=tpm0"]


def test_without_secure_boot_or_tpm_the_command_line_is_as_before():
    argv = _argv("amd64", firmware="bios", uefi_vars=None)
    assert _after(argv, "-machine") == ["pc"]
    assert not {"-global", "-tpmdev", "-device"} & set(argv)
    assert not any("pflash" in a for a in argv)
    with pytest.raises(BootTestError, match="needs its variable store"):
        _argv("amd64", uefi_vars=None)


# -- the variable store -------------------------------------------------------------------------


@needs_ovmf
def test_the_mok_is_in_the_store_as_shim_reads_it_and_the_store_is_reproducible(tmp_path):
    pem, der_path, der = _cert(tmp_path)
    first, second, from_der = tmp_path / "1.fd", tmp_path / "2.fd", tmp_path / "3.fd"
    (mok,) = prepare_vars("amd64", SecureBoot((pem,)), first)
    assert mok.der == der and mok.subject == "CN=nvkr test owner key"
    assert mok_certificates(first) == [(str(OWNER_GUID), der)]
    assert str(OWNER_GUID) == "2605215f-19e8-52ff-995e-5714c7d7aa3e"
    prepare_vars("amd64", SecureBoot((pem,)), second)
    prepare_vars("amd64", SecureBoot((der_path,)), from_der)
    assert first.read_bytes() == second.read_bytes() == from_der.read_bytes()

    from virt.firmware.varstore import edk2

    varlist = edk2.Edk2VarStore(str(first)).get_varlist()
    mok_list = varlist["MokList"]
    assert mok_list.attr == 0x3  # non-volatile + boot services: shim makes MokListRT itself
    assert "MokListRT" not in varlist
    # the rest is Debian's Microsoft-key store as shipped: Secure Boot on, its PK/KEK/db/dbx
    shipped = edk2.Edk2VarStore(secureboot.VARS["amd64"][0]).get_varlist()
    for name in ("PK", "KEK", "db", "dbx"):
        assert varlist[name].data == shipped[name].data, name
    # no MOK: the store as shipped
    plain = tmp_path / "plain.fd"
    assert prepare_vars("amd64", SecureBoot(), plain) == []
    assert mok_certificates(plain) == []


def _db_subjects(path: Path) -> list[str]:
    from virt.firmware.varstore import edk2

    db = edk2.Edk2VarStore(str(path)).get_varlist()["db"]
    return [sl.x509.subject.rfc4514_string() for sl in db.sigdb if sl.x509 is not None]


@needs_ovmf
@pytest.mark.parametrize(
    ("db", "want"),
    [
        ("microsoft", {"Microsoft Windows Production PCA 2011", "Microsoft Corporation UEFI CA 2011"}),
        ("uefi23", {"Microsoft UEFI CA 2023"}),
        ("win23", {"Windows UEFI CA 2023"}),
    ],
)  # fmt: skip
def test_each_db_profile_holds_its_certificates(tmp_path, db, want):
    pem, _, der = _cert(tmp_path)
    out = tmp_path / "vars.fd"
    prepare_vars("amd64", SecureBoot((pem,), db), out)  # type: ignore[arg-type]
    names = {re.search(r"CN=([^,]+)", s).group(1) for s in _db_subjects(out)}  # type: ignore[union-attr]
    assert names == want
    assert mok_certificates(out) == [(str(OWNER_GUID), der)]


def test_a_mok_that_is_no_certificate_is_refused(tmp_path):
    key = tmp_path / "owner.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(UsageError, match=r"owner.key is not an X.509 certificate") as e:
        load_moks([key])
    assert "not the key" in (e.value.hint or "")
    with pytest.raises(UsageError, match="cannot read the MOK certificate"):
        load_moks([tmp_path / "missing.crt"])


# -- KVM without SMM ----------------------------------------------------------------------------


def test_the_smm_probe_is_kept_for_the_host_and_secure_boot_then_runs_under_tcg(
    image, tmp_path, kvm_host, monkeypatch
):
    probes: list[int] = []
    why = "KVM cannot run the Secure Boot firmware (it needs SMM): System Management Mode not supported by this hypervisor."

    def probe() -> str:
        probes.append(1)
        return why

    monkeypatch.setattr(secureboot, "_probe_smm", probe)
    assert secureboot.kvm_smm_problem("amd64") == why
    assert secureboot.kvm_smm_problem("amd64") == why
    assert probes == [1]  # kept in the verdict directory for the rest of the host's boot
    assert kvmhang.note("kvm-smm-amd64")["problem"] == why  # type: ignore[index]
    assert secureboot.kvm_smm_problem("arm64") is None

    fake = fake_qemu(tmp_path / "q", {"tcg": [*FIRMWARE, *SECURE, *READY]})
    monkeypatch.setitem(qemu.QEMU, "amd64", (str(fake), "qemu-system-x86"))
    vars_path = tmp_path / "vars.fd"
    vars_path.write_bytes(b"vars")
    result = boot.boot_test(image, firmware="secure-boot", uefi_vars=vars_path, timeout=20,
                            grace=0.0)  # fmt: skip
    assert accels(fake) == ["tcg"] and result.fallback == why and result.firmware == "secure-boot"
    with pytest.raises(BootTestError, match="System Management Mode not supported"):
        boot.boot_test(image, firmware="secure-boot", uefi_vars=vars_path, accel="kvm")
    assert accels(fake) == ["tcg"]  # refused before QEMU


# -- refusals, on the spike's real consoles -----------------------------------------------------


@pytest.mark.parametrize(
    ("console", "words"),
    [
        ("shim-tampered-uki.console", "Verification failed: (0x1A) Security Violation"),
        ("firmware-win23-db.console", 'failed to load Boot0001 "UEFI Misc Device" from PciRoot(0x0)/Pci(0x1,0x0): Access Denied'),
        ("systemd-boot-tampered-uki.console", "Verification failed: Security Policy Violation"),
    ],
)  # fmt: skip
def test_a_refusal_is_the_first_matching_console_line(console, words):
    # shim's box (its tampered-UKI and missing-MOK consoles are the same bytes) never ends
    # its line: the boot test matches incomplete lines too
    raw = (FIXTURES / "secureboot" / console).read_bytes()
    lines = [console_text(line) for line in raw.split(b"\n")]
    first = next(line for line in lines if re.search(REFUSALS, line))
    assert words in " ".join(first.split())


def test_a_boot_of_the_spike_without_refusal_lines_matches_none():
    lines = [text for _, text in [*FIRMWARE, *SECURE, *READY]]
    lines += [
        "[   71.648579] Loading of unsigned module is rejected",
        "MODTEST unsigned: refused: insmod: ERROR: could not insert module "
        "/root/dummy-unsigned.ko: Key was rejected by service",
        "[    3.093607] Lockdown: swapper/0: hibernation is restricted; see man kernel_lockdown.7",
    ]
    assert not [line for line in lines if re.search(REFUSALS, line)]


def _fake_boot(monkeypatch, tmp_path: Path, steps: list) -> Path:
    fake = fake_qemu(tmp_path / "q", {"tcg": steps})
    monkeypatch.setitem(qemu.QEMU, "amd64", (str(fake), "qemu-system-x86"))
    return fake


@needs_ovmf
def test_shims_box_fails_the_boot_at_once_naming_its_words(image, tmp_path, monkeypatch):
    raw = (FIXTURES / "secureboot" / "shim-tampered-uki.console").read_bytes()
    _fake_boot(monkeypatch, tmp_path, [("say", raw.decode("latin-1"))])
    start = time.monotonic()
    with pytest.raises(BootTestError) as e:
        boot_secure(image, secure_boot=SecureBoot(), accel="tcg", timeout=60, grace=0.0)
    assert time.monotonic() - start < 20  # not the timeout: shim's box waits forever
    assert (
        "console printed 'ERROR Verification failed: (0x1A) Security Violation" in e.value.message
    )
    assert "(secure-boot, tcg)" in e.value.message
    # The last console lines are text: shim's box (one line of 4 KB, mostly frame characters a
    # terminal cannot show) is cut to its words, and the hint says what a user forgot: --mok.
    tail = e.value.message.split("last console lines:\n", 1)[1].splitlines()
    assert all(len(line) <= boot.SHOWN_LINE for line in tail), [len(line) for line in tail]
    assert not [line for line in tail if "\ufffd" in line or "  " in line.strip()]
    assert any("ERROR Verification failed: (0x1A) Security Violation OK" in ln for ln in tail)
    assert e.value.hint is not None and "no --mok was given" in e.value.hint, e.value.hint
    assert "--mok CERT" in e.value.hint and "secureBoot.certificate.pem" in e.value.hint


@needs_ovmf
def test_shims_refusal_with_a_mok_says_the_uki_is_signed_by_none_of_them(
    image, tmp_path, monkeypatch
):
    _, crt, _ = _cert(tmp_path, "someone")
    raw = (FIXTURES / "secureboot" / "shim-tampered-uki.console").read_bytes()
    _fake_boot(monkeypatch, tmp_path, [("say", raw.decode("latin-1"))])
    with pytest.raises(BootTestError) as e:
        boot_secure(image, secure_boot=SecureBoot(moks=(crt,)), accel="tcg", timeout=60,
                    grace=0.0)  # fmt: skip
    assert e.value.hint is not None and "CN=nvkr test someone key" in e.value.hint, e.value.hint
    assert "signed by none of the --mok certificates" in e.value.hint


@needs_ovmf
def test_the_firmwares_refusal_of_shim_names_the_db_profile(image, tmp_path, monkeypatch):
    raw = (FIXTURES / "secureboot" / "firmware-win23-db.console").read_bytes()
    _fake_boot(monkeypatch, tmp_path, [("say", raw.decode("latin-1"))])
    with pytest.raises(BootTestError) as e:
        boot_secure(image, secure_boot=SecureBoot(db="win23"), accel="tcg", timeout=60,
                    grace=0.0)  # fmt: skip
    assert "Access Denied" in e.value.message
    assert e.value.hint is not None and "--secure-boot-db win23" in e.value.hint, e.value.hint
    assert "microsoft and uefi23" in e.value.hint


def test_the_console_tail_shows_text_lines_of_bounded_length():
    """Any console's last lines, not only shim's: a line of frame characters, escapes or
    replacement characters is cut to its words, and a long line is cut with its length said."""
    lines = [
        "[    1.0] ok line  with  two spaces",
        "\x1b[2J\ufffd\ufffd  ERROR  \ufffd",
        "x" * 5000,
    ]
    shown = boot._tail(lines).splitlines()
    assert shown[0] == "[    1.0] ok line  with  two spaces"  # a text line as it was
    assert shown[1] == "[2J ERROR"
    assert len(shown[2]) <= boot.SHOWN_LINE and shown[2].endswith("(5000 characters)")


@needs_ovmf
def test_a_boot_without_the_kernels_secure_boot_lines_fails(image, tmp_path, monkeypatch):
    _fake_boot(monkeypatch, tmp_path, [*FIRMWARE, SECURE[1], *READY])
    with pytest.raises(BootTestError, match="without proving enforcing Secure Boot: no kernel "
                       "line 'Kernel is locked down from EFI Secure Boot' before it"):  # fmt: skip
        boot_secure(image, secure_boot=SecureBoot(), accel="tcg", timeout=20, grace=0.0,
                    modules=False)  # fmt: skip


# -- the TPM report -----------------------------------------------------------------------------


def test_the_report_is_read_through_journald_prefixes_and_checked():
    lines = [console_text(text.encode()) for _, s in _report(prefix="[  12.3] cloud-init[401]: ")
             for text in s.splitlines()]  # fmt: skip
    report = tpmprobe.parse(["noise", *lines, "more noise"])
    assert report.ended and report.tpm and report.secureboot == "01"
    measured = tpmprobe.check(report)
    assert measured.sha256 == hashlib.sha256(EVENTLOG).hexdigest()
    assert measured.replayed == [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 14]
    assert measured.lockdown_mode == "integrity"
    doc = measured.to_json("x.eventlog")
    assert doc["pcrs"]["10"] == GUEST_PCRS["10"] and doc["eventLog"]["file"] == "x.eventlog"
    assert len(doc["eventLog"]["events"]) == 48


def _lines(steps: list) -> list[str]:
    return [line for _, s in steps for line in s.splitlines()]


def test_a_pcr_the_log_does_not_reach_fails_naming_it():
    pcrs = dict(GUEST_PCRS, **{"7": "ab" * 32})
    with pytest.raises(BootTestError, match=r"does not replay to the PCRs .*: PCR 7: replay "
                       r"63d2c0cd[0-9a-f]+, the guest read abab"):  # fmt: skip
        tpmprobe.check(tpmprobe.parse(_lines(_report(pcrs))))
    # PCR 10 (IMA's own log) is reported, not compared
    tpmprobe.check(tpmprobe.parse(_lines(_report(dict(GUEST_PCRS, **{"10": "cd" * 32})))))


def test_a_garbled_or_missing_report_fails():
    lines = _lines(_report())
    garbled = [line.replace("eventlog-b64 A", "eventlog-b64 B", 1) for line in lines]
    with pytest.raises(BootTestError, match="came over the console garbled"):
        tpmprobe.check(tpmprobe.parse(garbled))
    with pytest.raises(BootTestError, match="no complete TPM report"):
        tpmprobe.check(tpmprobe.parse(lines[:-1]))
    p = tpmprobe.PREFIX
    with pytest.raises(BootTestError, match="has no TPM"):
        tpmprobe.check(tpmprobe.parse([f"{p} secureboot 01", f"{p} no-tpm", f"{p} end"]))


def test_the_boothook_reads_sysfs_with_coreutils_only():
    hook = tpmprobe.boothook().decode()
    assert hook.startswith("#cloud-boothook\n#!/bin/sh\n")
    assert "/sys/class/tpm/tpm0/pcr-sha256/$i" in hook and "base64 -w 64" in hook
    assert "binary_bios_measurements" in hook and "exec >/dev/console" in hook
    assert "tpm2_" not in hook and "mokutil" not in hook


def _swtpm_processes(tmp: str) -> list[str]:
    """Command lines of running swtpm processes whose state is under ``tmp``."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if cmd.startswith("swtpm ") and tmp in cmd:
                found.append(cmd)
    return found


@needs_ovmf
@pytest.mark.skipif(not Path("/usr/bin/swtpm").exists(), reason="swtpm (install.sh)")
def test_the_cli_boots_with_a_tpm_and_reports_in_json(image, tmp_path, monkeypatch):
    pem, _, _ = _cert(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    modules = [("say", "[  13.1] cloud-init[402]: nvkr-modules: kernel 6.12.118+deb13-cloud-amd64\r\n"
                        "[  13.2] cloud-init[402]: nvkr-modules: end\r\n")]  # fmt: skip
    fake = _fake_boot(monkeypatch, tmp_path, [*FIRMWARE, *SECURE, *_report(), *modules, *READY])
    logs = tmp_path / "logs"
    code, out, err = invoke(
        "boot-test", str(image), "--secure-boot", "--tpm", "--mok", str(pem), "--no-labels",
        "--json", "--accel", "tcg", "--timeout", "30", "--console-log", str(logs),
    )  # fmt: skip
    assert code == 0, err
    result = next(e for e in map(json.loads, out.splitlines()) if e["event"] == "image-result")
    assert result["ok"] and result["firmware"] == "secure-boot"
    sb = result["secureBoot"]
    assert sb["enforcing"] is True and sb["lockdown"] == "integrity" and sb["db"] == "microsoft"
    assert [m["subject"] for m in sb["moks"]] == ["CN=nvkr test owner key"]
    assert sb["kernelLines"][0].endswith("Kernel is locked down from EFI Secure Boot; see man "
                                         "kernel_lockdown.7")  # fmt: skip
    tpm = result["tpm"]
    assert tpm["pcrs"]["4"] == GUEST_PCRS["4"] and 4 in tpm["replayed"]
    log = Path(tpm["eventLog"]["file"])
    assert log.read_bytes() == EVENTLOG and log.parent == logs and log.suffix == ".eventlog"
    assert tpm["eventLog"]["events"][25]["description"] == "\\EFI\\BOOT\\BOOTX64.EFI"
    assert result["totalMilliseconds"] >= result["milliseconds"]
    # the module probe ran beside the TPM's (an image without out-of-tree modules)
    assert sb["modules"] == {"kernel": "6.12.118+deb13-cloud-amd64", "lockdown": "",
                             "modules": [], "checks": []}  # fmt: skip
    # QEMU got the secure firmware, a copy of the store, the TPM and the seed with the hook
    (argv,) = calls(fake)
    assert "q35,smm=on" in argv and "tpm-tis,tpmdev=tpm0" in argv
    drives = _after(argv, "-drive")
    assert any(d.startswith("if=pflash,format=raw,unit=1,file=") for d in drives)
    assert any(d.endswith("seed.img,if=virtio,format=raw,readonly=on") for d in drives)
    # swtpm ran for the boot and is gone with its state
    text = next(logs.glob("*.log")).read_text()
    assert "$ swtpm socket --tpm2" in text
    assert _swtpm_processes(str(tmp_path / "tmp")) == []
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_options_go_with_secure_boot_and_a_bad_mok_costs_no_boot(image, tmp_path):
    for extra in (["--tpm"], ["--mok", "x.crt"], ["--secure-boot-db", "win23"]):
        code, _, err = invoke("boot-test", str(image), *extra)
        assert code == 2 and "go with --secure-boot" in err, extra
    bad = tmp_path / "owner.key"
    bad.write_text("not a certificate")
    code, _, err = invoke("boot-test", str(image), "--secure-boot", "--mok", str(bad))
    assert code == 2 and "is not an X.509 certificate" in err
