"""The out-of-tree module probe of ``nvkr boot-test --secure-boot`` (nvkr.machine.moduleprobe).

The probe's shell script runs here for real, with ``NVKR_PROBE_ROOT`` standing for the guest's
``/`` and stand-ins of kmod's tools that judge a module as a locked-down kernel does (a
signature that verifies against the enrolled certificate loads, a changed one is rejected, an
unsigned module is refused by lockdown, a GPU driver finds no device). What Debian's real kernel
and kmod say is held by the catalog leaf's Secure Boot boot
(tests/integration/test_catalog_leaf.py)."""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from nvkr.errors import BootTestError
from nvkr.machine import moduleprobe
from nvkr.machine.cloudinit import Check
from tests.unit.test_secureboot import MODULE, _cert, _pem_key, _sign_like_sign_file

KERNEL = "6.12.57+deb13-amd64"

#: kmod's tools as a locked-down kernel answers them. Their environment: MOK, the enrolled
#: certificate (PEM); MODULES, /lib/modules/KERNEL with its modules.dep; KLOG, the kernel's log;
#: LOADED, the modules loaded (their paths under MODULES); CALLS, each insmod and modprobe run.
STAND_INS = {
    "uname": f"#!/bin/sh\necho {KERNEL}\n",
    "rmmod": "#!/bin/sh\nexit 0\n",
    # the kernel's log: what the insmod stand-in logged
    "dmesg": '#!/bin/sh\ncat "$KLOG" 2>/dev/null\n',
    "modinfo": """#!PYTHON
import sys
from nvkr.secureboot import modsig
# modinfo [-F FIELD] PATH: FIELD's value, or every field as "name:   value" lines (kmod's)
field, path = (sys.argv[2], sys.argv[3]) if sys.argv[1] == "-F" else (None, sys.argv[1])
data = modsig.decompress(open(path, "rb").read())
split = modsig.split_module(data)
fields = {"filename": path}
if split.pkcs7 is not None:
    sig = modsig.parse_pkcs7(split.pkcs7)
    at = sig.issuer_der.index(bytes([6, 3, 0x55, 4, 3])) + 5  # the issuer's CN after its OID
    fields["signer"] = sig.issuer_der[at + 2:at + 2 + sig.issuer_der[at + 1]].decode()
    h = "%X" % sig.serial
    h = ("0" + h) if len(h) % 2 else h
    fields["sig_key"] = ":".join(h[i:i + 2] for i in range(0, len(h), 2))
    fields["sig_hashalgo"] = "sha256"
for name, value in fields.items():
    if field is None:
        print(f"{name + ':':<16}{value}")
    elif name == field:
        print(value)
""",
    "insmod": """#!PYTHON
import os, sys
from nvkr.errors import IntegrityError
from nvkr.secureboot import modsig
from nvkr.secureboot.owner import parse_certificate
path = sys.argv[1]
with open(os.environ["CALLS"], "a") as calls:
    calls.write(f"insmod {path}\\n")
data = modsig.decompress(open(path, "rb").read())
cert = parse_certificate(open(os.environ["MOK"], "rb").read(), "mok")
try:
    modsig.verify_module(data, cert)
except IntegrityError as e:
    signed = modsig.split_module(data).pkcs7 is not None
    if not signed:
        with open(os.environ["KLOG"], "a") as log:
            log.write("[   45.1] Loading of unsigned module is rejected\\n")
    why = "Key was rejected by service" if signed else "Operation not permitted"
    sys.exit(f"insmod: ERROR: could not insert module {path}: {why}")
# linked after its signature check: a dependency that is not loaded leaves its symbols unknown
rel = os.path.relpath(path, os.environ["MODULES"])
deps = {}
for line in open(os.path.join(os.environ["MODULES"], "modules.dep")):
    mod, _, rest = line.partition(":")
    deps[mod] = rest.split()
loaded = open(os.environ["LOADED"]).read().split() if os.path.exists(os.environ["LOADED"]) else []
name = os.path.basename(path).split(".ko")[0]
# the first module the kernel takes taints it, before it is linked
with open(os.environ["KLOG"], "a+") as log:
    log.seek(0)
    if "taints kernel" not in log.read():
        log.write(f"[   46.1] {name}: loading out-of-tree module taints kernel.\\n"
                  "[   46.1] Disabling lock debugging due to kernel taint\\n")
if "nosym" in name or any(d not in loaded for d in deps.get(rel, [])):
    with open(os.environ["KLOG"], "a") as log:
        log.write(f"[   80.2] {name}: Unknown symbol {name}_dep_call (err -2)\\n")
    sys.exit(f"insmod: ERROR: could not insert module {path}: Unknown symbol in module")
if "gpu" in name:
    sys.exit(f"insmod: ERROR: could not insert module {path}: No such device")
if "ib" in name:
    with open(os.environ["KLOG"], "a") as log:
        log.write("[   79.1] ib: nv_mem_client_init:560 ERROR compiled without IB peer memory\\n")
    sys.exit(f"insmod: ERROR: could not insert module {path}: Invalid argument")
with open(os.environ["LOADED"], "a") as log:
    log.write(rel + "\\n")
""",
    # kmod's modprobe: the module's dependencies (modules.dep), each after its own and each once,
    # then the module; the first that fails stops it, its words said for it
    "modprobe": """#!PYTHON
import os, subprocess, sys
with open(os.environ["CALLS"], "a") as calls:
    calls.write(f"modprobe {sys.argv[1]}\\n")
deps = {}
for line in open(os.path.join(os.environ["MODULES"], "modules.dep")):
    mod, _, rest = line.partition(":")
    deps[mod] = rest.split()
(rel,) = [m for m in deps if os.path.basename(m).split(".ko")[0] == sys.argv[1]]
order = []
def visit(mod):
    for dep in deps.get(mod, []):
        visit(dep)
    if mod not in order:
        order.append(mod)
visit(rel)
for mod in order:
    if os.path.exists(os.environ["LOADED"]) and mod in open(os.environ["LOADED"]).read().split():
        continue
    out = subprocess.run(["insmod", os.path.join(os.environ["MODULES"], mod)],
                         capture_output=True, text=True)
    if out.returncode:
        name, why = os.path.basename(mod).split(".ko")[0], out.stderr.strip().rsplit(": ", 1)[-1]
        sys.exit(f"modprobe: ERROR: could not insert '{name}': {why}")
""",
}


@pytest.fixture(scope="module")
def owner(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("mok")
    key = rsa.generate_private_key(65537, 2048)
    (d / "owner.key").write_bytes(_pem_key(key))
    (d / "owner.crt").write_bytes(
        _cert(key, "nvkr test owner").public_bytes(serialization.Encoding.PEM)
    )
    return d / "owner.key", d / "owner.crt"


def _run_probe(
    tmp_path: Path, modules: dict[str, bytes], mok: Path, deps: dict[str, list[str]] | None = None
) -> list[str]:
    """The probe's script run over ``modules`` (path under /lib/modules/KERNEL -> bytes), with
    each one's dependencies in ``deps`` (modules.dep's, as depmod writes it: none by default):
    the lines it printed on its console. The stand-ins' calls (``insmod PATH``, ``modprobe
    NAME``) are left in ``tmp_path / "calls"``."""
    root, bin_dir = tmp_path / "root", tmp_path / "bin"
    mods = root / "lib/modules" / KERNEL
    for rel, data in modules.items():
        path = mods / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    (mods / "modules.dep").write_text(
        "".join(f"{rel}:{''.join(' ' + d for d in (deps or {}).get(rel, []))}\n" for rel in modules)
    )
    bin_dir.mkdir()
    for name, body in STAND_INS.items():
        (bin_dir / name).write_text(body.replace("#!PYTHON", f"#!{sys.executable}"))
        (bin_dir / name).chmod(0o755)
    script = tmp_path / "probe.sh"
    script.write_bytes(moduleprobe.boothook())
    console = tmp_path / "console"
    env = {"PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "PYTHONPATH": os.getcwd(), "NVKR_PROBE_ROOT": str(root),
           "NVKR_PROBE_CONSOLE": str(console), "MOK": str(mok), "MODULES": str(mods),
           "KLOG": str(tmp_path / "klog"), "LOADED": str(tmp_path / "loaded"),
           "CALLS": str(tmp_path / "calls")}  # fmt: skip
    subprocess.run(["sh", str(script)], env=env, check=True, timeout=120)
    return ["[   12.5] cloud-init[612]: " + line for line in console.read_text().splitlines()]


def test_signed_modules_load_and_their_copies_are_refused_for_their_signatures(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    key, crt = owner
    signed = _sign_like_sign_file(MODULE, key, crt, tmp_path)
    gpu = _sign_like_sign_file(MODULE + b"gpu", key, crt, tmp_path)
    ib = _sign_like_sign_file(MODULE + b"ib", key, crt, tmp_path)
    xz = lzma.compress(signed, check=lzma.CHECK_CRC32)
    lines = _run_probe(
        tmp_path,
        {
            "updates/dkms/loop.ko.xz": xz,
            "updates/dkms/gpu.ko.xz": lzma.compress(gpu),
            "updates/dkms/ib.ko.xz": lzma.compress(ib),
            "kernel/drivers/in-tree.ko.xz": lzma.compress(MODULE),
        },
        crt,
    )
    report = moduleprobe.parse(lines)
    assert report.ended and report.kernel == KERNEL and not report.error
    # in-tree modules are the kernel's: not tried
    assert [m.path for m in report.modules] == [
        "updates/dkms/gpu.ko.xz", "updates/dkms/ib.ko.xz", "updates/dkms/loop.ko.xz"
    ]  # fmt: skip
    loop = report.modules[2]
    assert loop.signer == "nvkr test owner" and loop.sigkey == "12:D6:87"  # serial 1234567
    assert loop.loads == {"unsigned": (1, "Operation not permitted"),
                          "changed": (1, "Key was rejected by service"), "signed": (0, "")}  # fmt: skip
    # what the kernel logged during each load, without its timestamp
    assert loop.klog == {"unsigned": ["Loading of unsigned module is rejected"]}
    checks = {c.what: c for c in moduleprobe.check(report, [_der(crt)])}
    assert all(c.ok for c in checks.values()) and len(checks) == 9, checks
    detail = {what.removeprefix("module updates/dkms/"): c.detail for what, c in checks.items()}
    assert detail["gpu.ko.xz signed by nvkr test owner"] == (
        "failed only for lack of its device (No such device)"
    )
    # a module whose own init fails, after the kernel took its signature: said, with the log
    assert detail["ib.ko.xz signed by nvkr test owner"] == (
        "signature accepted, then it failed: Invalid argument (kernel: ib: nv_mem_client_init:560 "
        "ERROR compiled without IB peer memory)"
    )
    assert detail["loop.ko.xz signed by nvkr test owner"] == "loaded"
    assert detail["loop.ko.xz: its unsigned copy"] == (
        "refused: Operation not permitted (kernel: Loading of unsigned module is rejected)"
    )
    assert detail["loop.ko.xz: its copy with a byte changed"] == (
        "refused: Key was rejected by service"
    )
    shown = moduleprobe.to_json(report, list(checks.values()))
    assert shown["modules"][2]["loads"]["changed"] == {
        "status": 1, "said": "Key was rejected by service", "kernel": []
    }  # fmt: skip


def test_the_kernels_taint_notices_are_not_quoted(owner: tuple[Path, Path], tmp_path: Path) -> None:
    """The kernel prints its taint notices for the first out-of-tree module it takes, whichever
    the order makes that (nvidia-peermem, with the fewest dependencies): left out, the three
    lines quoted are the module's own reason to fail."""
    key, crt = owner
    ib = lzma.compress(_sign_like_sign_file(MODULE + b"ib", key, crt, tmp_path))
    lines = _run_probe(tmp_path, {"updates/dkms/ib.ko.xz": ib}, crt)
    assert "ib: loading out-of-tree module taints kernel." in (tmp_path / "klog").read_text()
    (mod,) = moduleprobe.parse(lines).modules
    assert mod.klog["signed"] == [
        "ib: nv_mem_client_init:560 ERROR compiled without IB peer memory"
    ]  # fmt: skip


def test_an_unsigned_module_or_one_by_a_key_not_enrolled_fails_the_check(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    _key, crt = owner
    other_key = rsa.generate_private_key(65537, 2048)
    (tmp_path / "other.key").write_bytes(_pem_key(other_key))
    (tmp_path / "other.crt").write_bytes(
        _cert(other_key, "someone else").public_bytes(serialization.Encoding.PEM)
    )
    stranger = _sign_like_sign_file(MODULE, tmp_path / "other.key", tmp_path / "other.crt",
                                    tmp_path)  # fmt: skip
    lines = _run_probe(
        tmp_path,
        {
            "updates/dkms/plain.ko.xz": lzma.compress(MODULE),
            "extra/stranger.ko.xz": lzma.compress(stranger),
        },
        crt,
    )
    report = moduleprobe.parse(lines)
    plain = next(m for m in report.modules if m.path.endswith("plain.ko.xz"))
    assert plain.copies == "unsigned" and plain.loads["signed"] == (1, "Operation not permitted")
    with pytest.raises(BootTestError) as e:
        moduleprobe.check(report, [_der(crt)], where="the guest (x.qcow2)")
    assert e.value.message == (
        "out-of-tree modules under lockdown in the guest (x.qcow2): module "
        "updates/dkms/plain.ko.xz: unsigned, by no enrolled MOK: not tried"
    )
    # signed by someone else: reported, not tried, and no failure of its own
    stranger_only = moduleprobe.Report(KERNEL, "", [report.modules[0]], "", True)
    (c,) = moduleprobe.check(stranger_only, [_der(crt)])
    assert c == Check("module extra/stranger.ko.xz", True,
                      "signed by 'someone else', by no enrolled MOK: not tried")  # fmt: skip


def test_a_copy_that_loads_or_a_refusal_for_another_reason_fails(owner: tuple[Path, Path]) -> None:
    _, crt = owner
    prefix = moduleprobe.PREFIX
    lines = [
        f"{prefix} kernel {KERNEL}",
        f"{prefix} module updates/dkms/m.ko.xz",
        f"{prefix} signer updates/dkms/m.ko.xz nvkr test owner",
        f"{prefix} sigkey updates/dkms/m.ko.xz 12:D6:87",
        f"{prefix} load updates/dkms/m.ko.xz unsigned 0 ",
        f"{prefix} load updates/dkms/m.ko.xz changed 1 Invalid module format",
        f"{prefix} load updates/dkms/m.ko.xz signed 1 Unknown symbol in module",
        f"{prefix} end",
    ]
    with pytest.raises(BootTestError) as e:
        moduleprobe.check(moduleprobe.parse(lines), [_der(crt)])
    assert e.value.message.split(": ", 1)[1].split("; ") == [
        "module updates/dkms/m.ko.xz signed by nvkr test owner: did not load: Unknown symbol "
        "in module",
        "module updates/dkms/m.ko.xz: its unsigned copy: loaded",
        "module updates/dkms/m.ko.xz: its copy with a byte changed: failed, not for its "
        "signature: Invalid module format",
    ]


def test_a_dependent_of_a_module_that_failed_is_tried_after_it_by_insmod(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    """NVIDIA's case: nvidia-current-modeset and -drm need nvidia-current, which finds no GPU.
    The dependency is tried first (the fewest dependencies first, whatever the paths' order)
    and loaded once; its dependents are insmodded themselves, their signatures accepted and
    their links to it left unresolved, which the check takes with the dependency's words."""
    key, crt = owner
    gpu, modeset, drm = (
        lzma.compress(_sign_like_sign_file(MODULE + name, key, crt, tmp_path))
        for name in (b"gpu", b"modeset", b"drm")
    )
    lines = _run_probe(
        tmp_path,
        {"updates/dkms/drm.ko.xz": drm, "updates/dkms/gpu.ko.xz": gpu,
         "updates/dkms/modeset.ko.xz": modeset},
        crt,
        deps={"updates/dkms/drm.ko.xz": ["updates/dkms/modeset.ko.xz", "updates/dkms/gpu.ko.xz"],
              "updates/dkms/modeset.ko.xz": ["updates/dkms/gpu.ko.xz"]},
    )  # fmt: skip
    report = moduleprobe.parse(lines)
    assert [m.path.removeprefix("updates/dkms/") for m in report.modules] == [
        "gpu.ko.xz", "modeset.ko.xz", "drm.ko.xz"
    ]  # fmt: skip
    gpu_mod, modeset_mod, drm_mod = report.modules
    assert gpu_mod.needs == [] and gpu_mod.loads["signed"] == (1, "No such device")
    assert modeset_mod.needs == ["updates/dkms/gpu.ko.xz"]
    assert drm_mod.needs == ["updates/dkms/modeset.ko.xz", "updates/dkms/gpu.ko.xz"]
    for mod in (modeset_mod, drm_mod):
        assert mod.loads["signed"] == (1, "Unknown symbol in module"), mod
        name = mod.path.removeprefix("updates/dkms/").removesuffix(".ko.xz")
        assert mod.klog["signed"] == [f"{name}: Unknown symbol {name}_dep_call (err -2)"]
    calls = (tmp_path / "calls").read_text().splitlines()
    mods = tmp_path / "root/lib/modules" / KERNEL / "updates/dkms"
    assert [c for c in calls if not c.startswith(f"insmod {tmp_path}/root/var/")] == [
        "modprobe gpu", f"insmod {mods}/gpu.ko.xz",
        f"insmod {mods}/modeset.ko.xz", f"insmod {mods}/drm.ko.xz",
    ]  # fmt: skip
    checks = {c.what: c for c in moduleprobe.check(report, [_der(crt)])}
    assert all(c.ok for c in checks.values()) and len(checks) == 9, checks
    detail = {what.removeprefix("module updates/dkms/"): c.detail for what, c in checks.items()}
    assert detail["modeset.ko.xz signed by nvkr test owner"] == (
        "signature accepted; it links against updates/dkms/gpu.ko.xz, which did not load "
        "(No such device)"
    )
    assert detail["drm.ko.xz signed by nvkr test owner"] == (
        "signature accepted; it links against updates/dkms/modeset.ko.xz, which did not load "
        "(Unknown symbol in module), and updates/dkms/gpu.ko.xz, which did not load "
        "(No such device)"
    )
    assert detail["drm.ko.xz: its unsigned copy"].startswith("refused: Operation not permitted")
    shown = moduleprobe.to_json(report, list(checks.values()))
    assert [m["needs"] for m in shown["modules"]] == [[], modeset_mod.needs, drm_mod.needs]


def test_an_unknown_symbol_without_a_failed_dependency_fails(
    owner: tuple[Path, Path], tmp_path: Path
) -> None:
    """A module whose dependency loaded is modprobed as before, and an unknown symbol of its
    own (built against another kernel's exports) fails the check: only a dependency's failure
    excuses one."""
    key, crt = owner
    loop, nosym = (
        lzma.compress(_sign_like_sign_file(MODULE + name, key, crt, tmp_path))
        for name in (b"loop", b"nosym")
    )
    lines = _run_probe(
        tmp_path,
        {"updates/dkms/loop.ko.xz": loop, "updates/dkms/nosym.ko.xz": nosym},
        crt,
        deps={"updates/dkms/nosym.ko.xz": ["updates/dkms/loop.ko.xz"]},
    )
    report = moduleprobe.parse(lines)
    loop_mod, nosym_mod = report.modules
    assert loop_mod.loads["signed"] == (0, "") and nosym_mod.needs == []
    assert nosym_mod.loads["signed"] == (1, "Unknown symbol in module")
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c for c in calls if c.startswith("modprobe")] == ["modprobe loop", "modprobe nosym"]
    with pytest.raises(BootTestError) as e:
        moduleprobe.check(report, [_der(crt)])
    assert e.value.message.split(": ", 1)[1] == (
        "module updates/dkms/nosym.ko.xz signed by nvkr test owner: did not load: Unknown symbol "
        "in module (kernel: nosym: Unknown symbol nosym_dep_call (err -2))"
    )


@pytest.mark.parametrize(
    ("dep_load", "words", "why"),
    [
        ("signed 1 No such device", "Unknown symbol in module", ""),
        ("signed 0 ", "Unknown symbol in module", "did not load: Unknown symbol in module"),
        (None, "Unknown symbol in module", "did not load: Unknown symbol in module"),
        ("signed 1 No such device", "Key was rejected by service",
         "did not load: Key was rejected by service"),
        ("signed 1 No such device", "Invalid module format",
         "did not load: Invalid module format"),
    ],
)  # fmt: skip
def test_a_needs_line_excuses_only_an_unknown_symbol_after_a_failed_dependency(
    owner: tuple[Path, Path], dep_load: str | None, words: str, why: str
) -> None:
    """The host's side of a ``needs`` line: the dependency's own load in the report says
    whether it failed; a dependency that loaded, or one the report does not show, excuses
    nothing, and nothing excuses a refusal for the signature or a module the kernel cannot
    take."""
    _, crt = owner
    prefix, dep, mod = moduleprobe.PREFIX, "updates/dkms/gpu.ko.xz", "updates/dkms/uvm.ko.xz"
    lines = [f"{prefix} kernel {KERNEL}"]
    if dep_load is not None:
        lines += [f"{prefix} module {dep}", f"{prefix} signer {dep} someone else",
                  f"{prefix} load {dep} {dep_load}"]  # fmt: skip
    lines += [
        f"{prefix} module {mod}",
        f"{prefix} signer {mod} nvkr test owner",
        f"{prefix} sigkey {mod} 12:D6:87",
        f"{prefix} load {mod} unsigned 1 Key was rejected by service",
        f"{prefix} load {mod} changed 1 Key was rejected by service",
        f"{prefix} needs {mod} {dep}",
        f"{prefix} load {mod} signed 1 {words}",
        f"{prefix} end",
    ]
    report = moduleprobe.parse(lines)
    assert report.modules[-1].needs == [dep]
    if not why:
        checks = {c.what: c for c in moduleprobe.check(report, [_der(crt)])}
        assert checks[f"module {mod} signed by nvkr test owner"] == Check(
            f"module {mod} signed by nvkr test owner", True,
            f"signature accepted; it links against {dep}, which did not load (No such device)",
        )  # fmt: skip
        return
    with pytest.raises(BootTestError) as e:
        moduleprobe.check(report, [_der(crt)])
    assert e.value.message.split(": ", 1)[1] == (f"module {mod} signed by nvkr test owner: {why}")


def test_no_report_or_no_python_is_a_clear_failure(owner: tuple[Path, Path]) -> None:
    _, crt = owner
    with pytest.raises(BootTestError, match=r"printed no complete module report"):
        moduleprobe.check(moduleprobe.parse(["nvkr-modules: kernel 6.12"]), [_der(crt)])
    lines = [f"{moduleprobe.PREFIX} kernel 6.12", f"{moduleprobe.PREFIX} error no python3 in the "
             "image: the probe makes the module copies with it", f"{moduleprobe.PREFIX} end"]  # fmt: skip
    with pytest.raises(BootTestError, match=r"could not run in the guest: no python3"):
        moduleprobe.check(moduleprobe.parse(lines), [_der(crt)])
    # an image without out-of-tree modules: nothing to check
    empty = moduleprobe.parse([f"{moduleprobe.PREFIX} kernel 6.12", f"{moduleprobe.PREFIX} end"])
    assert moduleprobe.check(empty, [_der(crt)]) == []


def _der(crt: Path) -> bytes:
    from cryptography import x509

    return x509.load_pem_x509_certificate(crt.read_bytes()).public_bytes(serialization.Encoding.DER)
