"""Out-of-tree kernel modules under enforcing Secure Boot, tried in the guest and judged on the host.

Under Secure Boot, Debian's kernels are locked down and load a module only when its signature
verifies against a key they trust: their own, the firmware's db, or a MOK. DKMS builds modules
(NVIDIA's, or any ``*-dkms`` package's) unsigned, and nvkr's ``signed-modules`` action signs them
with the owner's key (README, "Secure Boot with the owner's key"). :func:`boothook` is a
cloud-init boot hook (``#cloud-boothook``, vendor-data of the boot test's NoCloud seed) that tries
each module under ``/lib/modules/$(uname -r)/updates`` and ``.../extra`` (where DKMS and other
out-of-tree builds install them) three ways, and prints one line per fact on ``/dev/console``,
each starting with :data:`PREFIX`:

- ``kernel <release>`` and ``lockdown <the kernel's /sys/kernel/security/lockdown>``;
- ``module <path>`` (relative to the kernel's module directory), then for it
  ``signer <path> <modinfo's signer>`` and ``sigkey <path> <modinfo's sig_key>``;
- ``load <path> unsigned <exit status> <insmod's last words>``: a copy with its signature cut
  off (``struct module_signature`` and the magic at the end say how long it is);
- ``load <path> changed <exit status> <...>``: a copy with one byte of the signed payload
  changed, its signature kept;
- ``needs <path> <dependency's path>``: one per dependency (``modules.dep``'s) the probe tried
  before whose own signed load failed;
- ``load <path> signed <exit status> <...>``: the module itself, last: by ``modprobe`` (its
  dependencies too), but by ``insmod`` alone when it ``needs`` one (below);
- ``klog <path> <case> <line>``: up to three lines the kernel logged during that load, before its
  ``load`` line (``Loading of unsigned module is rejected``; a driver's own reason to fail), but
  not its taint notices (``loading out-of-tree module taints kernel``...: it prints them once,
  for the first module it takes, whichever that is);
- ``error <text>`` when the probe cannot run (no ``python3``: it makes the copies; Debian's
  ``systemd-ukify``, which a Secure Boot image's UKI needs, brings it), then ``end``.

The probe takes the modules in an order modprobe could load them in: the fewest dependencies
first, then by path (``modules.dep`` lists all of a module's dependencies, transitively: a
dependency's list is a strict part of its dependent's, so a module comes after those it needs).
``modprobe`` stops at the first dependency that fails, before it tries the module: NVIDIA's
nvidia-current finds no GPU ("No such device"), and each of nvidia-current-modeset, -drm and
-uvm, modprobed, would only repeat its failure, loading its 60 MB again (about 11 s of guest
time each under TCG). A module that needs one that failed is insmodded alone: the kernel
checks its signature before it links it, and then cannot link it, the dependency's symbols
(and those of any other module it needs, which insmod does not load) missing ("Unknown symbol
in module", ENOENT).

The kernel checks a module's signature before anything else of it (``load_module`` calls
``module_sig_check`` first), so the copies are refused for their signatures whatever they would
need to link. :func:`parse` reads the report; :func:`check` judges it (:data:`REFUSED`,
:data:`BROKEN`, :data:`NO_DEVICE`): each module is signed by one of the enrolled MOKs (its
issuer's common name and serial number, as kmod's ``modinfo`` prints them); the kernel accepts
its signature (it loads, or fails after the signature check and linking: ``No such device`` for
a GPU driver without a GPU, or the module's own reason, which the result quotes from the
kernel's log; or, insmodded alone, ``Unknown symbol in module`` when it ``needs`` a dependency
whose failure the report shows, which the result names with that dependency's words); both
copies are refused for their signature. An unknown symbol without such a dependency is a
failure. A module signed by someone else is reported and left alone.

Debian's kernels enforce module signatures under Secure Boot (``module.sig_enforce``): an
unsigned module is refused with EKEYREJECTED, the kernel logging "Loading of unsigned module is
rejected", as is a signature that does not verify. A kernel that only locks down refuses an
unsigned one with EPERM ("Lockdown: insmod: unsigned module loading is restricted").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from cryptography import x509
from cryptography.x509.oid import NameOID

from nvkr.errors import BootTestError
from nvkr.machine.cloudinit import Check

PREFIX: Final = "nvkr-modules:"
#: The report's last line.
END: Final = rf"{PREFIX} end\b"
#: What insmod says when the kernel refuses a module for its signature: lockdown's refusal of an
#: unsigned module or one signed by an unknown key (EPERM; the kernel logs "Lockdown: insmod:
#: unsigned module loading is restricted"), a signature that does not verify (EKEYREJECTED),
#: no key for it where signatures are enforced (ENOKEY).
REFUSED: Final = (
    "Operation not permitted",
    "Key was rejected by service",
    "Required key not available",
)
#: What insmod says of a module the kernel cannot link or take for this kernel, whatever its
#: signature (ENOEXEC: a vermagic or ELF it does not accept; ENOENT: an unknown symbol, unless
#: the module needs a dependency that failed: then its links to that one are left unresolved).
BROKEN: Final = ("Invalid module format", "Exec format error", "Unknown symbol")
#: What modprobe says when the module loaded but found no device to drive (ENODEV).
NO_DEVICE: Final = "No such device"
#: Where the probe looks, relative to /lib/modules/<release>/.
OUT_OF_TREE: Final = ("updates", "extra")
_LINE = re.compile(re.escape(PREFIX) + r" (\S+) ?(.*)$")

_COPIES = r"""import gzip, lzma, sys
src, unsigned, changed = sys.argv[1:]
data = open(src, "rb").read()
if src.endswith(".xz"):
    data = lzma.decompress(data)
elif src.endswith(".gz"):
    data = gzip.decompress(data)
elif not src.endswith(".ko"):
    sys.exit("compression of " + src + " not known to the probe")
magic = b"~Module signature appended~\n"
if not data.endswith(magic):
    print("unsigned")
    sys.exit(0)
sig_len = int.from_bytes(data[-len(magic) - 4:-len(magic)], "big")
end = len(data) - len(magic) - 12 - sig_len
data = bytearray(data)
open(unsigned, "wb").write(memoryview(data)[:end])
data[end // 2] ^= 0x01
open(changed, "wb").write(data)
print("signed")
"""


def boothook() -> bytes:
    """The ``#cloud-boothook`` part that tries the out-of-tree modules (module docstring).

    ``NVKR_PROBE_ROOT`` (a directory standing for ``/``) and ``NVKR_PROBE_CONSOLE`` (a file
    standing for ``/dev/console``) let a test run it on a host with stand-ins of kmod's
    tools; cloud-init sets neither."""
    dirs = " ".join(f'"$m/{d}"' for d in OUT_OF_TREE)
    return f"""#cloud-boothook
#!/bin/sh
# nvkr boot-test --secure-boot: each out-of-tree module, its unsigned copy and a changed copy,
# loaded under the kernel's lockdown, each module after those it needs; the outcome on the
# console.
exec >"${{NVKR_PROBE_CONSOLE:-/dev/console}}" 2>&1
p={PREFIX}
k=$(uname -r)
m="${{NVKR_PROBE_ROOT:-}}/lib/modules/$k"
w="${{NVKR_PROBE_ROOT:-}}/var/tmp/nvkr-modules"
echo "$p kernel $k"
echo "$p lockdown $(cat /sys/kernel/security/lockdown 2>/dev/null || echo missing)"
last() {{ printf '%s' "$1" | tr '\\n' ' ' | sed 's/.*: //'; }}
# what the kernel logged since line $1 of its log, without timestamps nor the taint notices it
# prints for the first out-of-tree module it takes, whichever that is: the first three lines
said() {{ dmesg 2>/dev/null | tail -n +$(($1 + 1)) | sed 's/^\\[[^]]*\\] //' |
    grep -v -e ' taints kernel\\.' -e '^Disabling lock debugging due to kernel taint' | head -n 3; }}
lines() {{ dmesg 2>/dev/null | wc -l; }}
# field NAME: its value in $info (modinfo's "name:   value" lines), the first one
field() {{ printf '%s\\n' "$info" | sed -n "s/^$1:[[:space:]]*//p" | head -n 1; }}
if ! command -v python3 >/dev/null 2>&1; then
    echo "$p error no python3 in the image: the probe makes the module copies with it"
    echo "$p end"
    exit 0
fi
mkdir -p "$w"
cat > "$w/copies.py" <<'NVKR_COPIES'
{_COPIES}NVKR_COPIES
# "PATH DEP..." for each out-of-tree module, the fewest dependencies first, then by path
# (modules.dep: "rel: dep...", all of a module's, transitive): a dependency's list is a strict
# part of its dependent's, so each module comes after those it needs
ordered() {{
    for d in {dirs}; do [ -d "$d" ] && find "$d" -name '*.ko*'; done | awk -v m="$m/" '
        BEGIN {{ while ((getline l < (m "modules.dep")) > 0) {{
            split(l, a, ":"); dep[a[1]] = a[2] }} }}
        {{ r = substr($0, length(m) + 1); print split(dep[r], x, " "), $0 dep[r] }}' |
        sort -k1,1n -k2,2 | cut -d' ' -f2-
}}
# the modules whose signed load failed, each between spaces
failed=" "
ordered | while read -r f deps; do
    rel=${{f#"$m"/}}
    echo "$p module $rel"
    # one modinfo for both fields: kmod decompresses the whole module each time (NVIDIA's is
    # 60 MB, slow to unpack under TCG)
    info=$(modinfo "$f" 2>/dev/null)
    echo "$p signer $rel $(field signer)"
    echo "$p sigkey $rel $(field sig_key)"
    kind=$(python3 "$w/copies.py" "$f" "$w/unsigned.ko" "$w/changed.ko" 2>&1)
    if [ "$kind" = signed ]; then
        for copy in unsigned changed; do
            n=$(lines)
            out=$(insmod "$w/$copy.ko" 2>&1); rc=$?
            said "$n" | while read -r line; do echo "$p klog $rel $copy $line"; done
            echo "$p load $rel $copy $rc $(last "$out")"
            [ $rc -eq 0 ] && rmmod "$w/$copy.ko" 2>/dev/null
        done
    else
        echo "$p copies $rel $kind"
    fi
    rm -f "$w/unsigned.ko" "$w/changed.ko"
    needs=
    for dep in $deps; do
        case "$failed" in *" $dep "*) needs="$needs $dep"; echo "$p needs $rel $dep" ;; esac
    done
    n=$(lines)
    if [ -n "$needs" ]; then
        # modprobe would stop at that dependency again: the module alone, whose signature the
        # kernel checks before it links it (then "Unknown symbol in module")
        out=$(insmod "$f" 2>&1); rc=$?
    else
        name=$(basename "$f"); name=${{name%%.ko*}}
        out=$(modprobe "$name" 2>&1); rc=$?
    fi
    [ $rc -eq 0 ] || failed="$failed$rel "
    said "$n" | while read -r line; do echo "$p klog $rel signed $line"; done
    echo "$p load $rel signed $rc $(last "$out")"
done
rm -rf "$w"
echo "$p end"
""".encode()


@dataclass
class Module:
    """One module the probe tried: its ``path`` (under /lib/modules/<release>/), kmod's
    ``signer`` and ``sigkey``, ``copies`` (``signed``, else why the probe made none), each
    ``loads`` case (``signed``, ``unsigned``, ``changed``) as (exit status, insmod's words),
    what the kernel logged during it (``klog``), and the modules it ``needs`` whose own signed
    load failed before it (their paths)."""

    path: str
    signer: str = ""
    sigkey: str = ""
    copies: str = "signed"
    needs: list[str] = field(default_factory=list)
    loads: dict[str, tuple[int, str]] = field(default_factory=dict)
    klog: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    """The probe's report: the ``kernel`` release, its ``lockdown`` line, the ``modules``,
    an ``error`` the probe gave, and whether it ``ended``."""

    kernel: str
    lockdown: str
    modules: list[Module]
    error: str
    ended: bool


def parse(lines: Sequence[str]) -> Report:
    """The probe's report in the console ``lines`` (the last one when the probe ran twice)."""
    kernel = lockdown = error = ""
    modules: dict[str, Module] = {}
    ended = False
    for line in lines:
        m = _LINE.search(line)
        if m is None:
            continue
        kind, rest = m.group(1), m.group(2).strip()
        path, _, value = rest.partition(" ")
        if kind == "kernel":
            if ended:  # a second run of the probe: start again
                modules, error, ended = {}, "", False
            kernel = rest
        elif kind == "lockdown":
            lockdown = rest
        elif kind == "error":
            error = rest
        elif kind == "end":
            ended = True
        elif kind == "module":
            modules[rest] = Module(rest)
        elif path in modules:
            _module_line(modules[path], kind, value)
    return Report(kernel, lockdown, list(modules.values()), error, ended)


def _module_line(mod: Module, kind: str, value: str) -> None:
    """One report line about ``mod`` (``value``: what follows its path)."""
    if kind == "signer":
        mod.signer = value
    elif kind == "sigkey":
        mod.sigkey = value
    elif kind == "copies":
        mod.copies = value
    elif kind == "needs":
        mod.needs.append(value.strip())
    elif kind == "klog":
        case, _, text = value.partition(" ")
        mod.klog.setdefault(case, []).append(text.strip())
    elif kind == "load":
        case, _, outcome = value.partition(" ")
        status, _, words = outcome.partition(" ")
        if status.lstrip("-").isdigit():
            mod.loads[case] = (int(status), words.strip())


def _common_name(name: x509.Name) -> str:
    attrs = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(attrs[-1].value) if attrs else name.rfc4514_string()


def _serial(sigkey: str) -> int | None:
    """kmod's ``sig_key`` (hex bytes joined by colons) as an integer, or None."""
    digits = sigkey.replace(":", "").strip()
    try:
        return int(digits, 16) if digits else None
    except ValueError:
        return None


def signed_by(module: Module, moks: Sequence[bytes]) -> x509.Certificate | None:
    """The enrolled certificate (DER in ``moks``) whose issuer's common name and serial number
    are the module signature's (as kmod prints them), or None."""
    serial = _serial(module.sigkey)
    for der in moks:
        cert = x509.load_der_x509_certificate(der)
        if serial == cert.serial_number and module.signer == _common_name(cert.issuer):
            return cert
    return None


def _kernel(mod: Module, case: str) -> str:
    lines = mod.klog.get(case) or []
    return f" (kernel: {'; '.join(lines)})" if lines else ""


def _refused(mod: Module, case: str) -> tuple[bool, str]:
    """Whether the ``case`` copy was refused for its signature, and what happened."""
    outcome = mod.loads.get(case)
    if outcome is None:
        return False, "not tried"
    status, words = outcome
    if status == 0:
        return False, "loaded"
    if any(r in words for r in REFUSED):
        return True, f"refused: {words}{_kernel(mod, case)}"
    return False, f"failed, not for its signature: {words}{_kernel(mod, case)}"


def _unlinked(mod: Module, modules: dict[str, Module]) -> list[str]:
    """What ``mod`` links against that did not load: each of its ``needs`` whose own signed
    load failed in the report, with what was said of it."""
    found = []
    for dep in mod.needs:
        status, words = modules[dep].loads.get("signed", (0, "")) if dep in modules else (0, "")
        if status != 0:
            found.append(f"{dep}, which did not load ({words or 'no reason given'})")
    return found


def _accepted(mod: Module, modules: dict[str, Module]) -> tuple[bool, str]:
    """Whether the kernel took the signed module's signature (it loaded, or failed after the
    signature check: in linking it, for a dependency that did not load, or later), and what
    happened. ``modules``: the report's, by path."""
    status, words = mod.loads.get("signed", (-1, "not tried"))
    if status == 0:
        return True, "loaded"
    if NO_DEVICE in words:
        return True, f"failed only for lack of its device ({words})"
    unlinked = _unlinked(mod, modules)
    if "Unknown symbol" in words and unlinked and not any(r in words for r in REFUSED):
        return True, f"signature accepted; it links against {', and '.join(unlinked)}"
    if status < 0 or not words or any(r in words for r in (*REFUSED, *BROKEN)):
        return False, f"did not load: {words or 'no reason given'}{_kernel(mod, 'signed')}"
    return True, f"signature accepted, then it failed: {words}{_kernel(mod, 'signed')}"


def check(report: Report, moks: Sequence[bytes], *, where: str = "the guest") -> list[Check]:
    """Judge the report (module docstring): one :class:`Check` per module and case.

    Raises:
        BootTestError: no complete report, the probe could not run, or a module signed by an
            enrolled MOK failed a case (each named, with what insmod said).
    """
    if not report.ended:
        raise BootTestError(f"{where} printed no complete module report ({PREFIX} ... end)",
                            hint="the image runs no cloud-init, or the probe was cut short")  # fmt: skip
    if report.error:
        raise BootTestError(f"the module probe could not run in {where}: {report.error}")
    checks: list[Check] = []
    by_path = {mod.path: mod for mod in report.modules}
    for mod in report.modules:
        cert = signed_by(mod, moks)
        if cert is None:
            signer = f"signed by {mod.signer!r}" if mod.signer else "unsigned"
            # an unsigned module cannot load under lockdown: that is the image's defect
            checks.append(Check(f"module {mod.path}", bool(mod.signer),
                                f"{signer}, by no enrolled MOK: not tried"))  # fmt: skip
            continue
        owner = _common_name(cert.subject)
        checks.append(Check(f"module {mod.path} signed by {owner}", *_accepted(mod, by_path)))
        for case, what in (("unsigned", "unsigned copy"), ("changed", "copy with a byte changed")):
            ok, detail = _refused(mod, case)
            if mod.copies != "signed":
                ok, detail = False, f"no copy made: {mod.copies}"
            checks.append(Check(f"module {mod.path}: its {what}", ok, detail))
    failed = [c for c in checks if not c.ok]
    if failed:
        raise BootTestError(
            f"out-of-tree modules under lockdown in {where}: "
            + "; ".join(f"{c.what}: {c.detail}" for c in failed),
            hint="an unsigned module, or one signed by a key the guest does not trust, cannot "
            "load under Secure Boot: sign it with the owner's key (signed-modules) and enroll "
            "the owner's certificate (--mok)",
        )
    return checks


def to_json(report: Report, checks: Sequence[Check]) -> dict[str, Any]:
    """``modules`` of the boot's JSON result."""
    return {"kernel": report.kernel, "lockdown": report.lockdown,
            "modules": [{"path": m.path, "signer": m.signer, "sigKey": m.sigkey, "needs": m.needs,
                         "loads": {case: {"status": s, "said": w, "kernel": m.klog.get(case, [])}
                                   for case, (s, w) in sorted(m.loads.items())}}
                        for m in report.modules],
            "checks": [c.to_json() for c in checks]}  # fmt: skip
