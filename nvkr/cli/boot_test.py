"""``nvkr boot-test``: boot machine images in QEMU and wait for the node agent's readiness line.

It reports through :mod:`nvkr.monitor`: each attempt's start and a KVM stall
(:class:`~nvkr.monitor.events.BootStart`, :class:`~nvkr.monitor.events.BootStall`, from
:func:`nvkr.machine.boot.boot_test`), each image's outcome
(:class:`~nvkr.monitor.events.BootImageResult`, ``image-result`` in ``--json``), then a ``result``
(every image booted) or an ``error`` (exit 1 when one failed).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from nvkr.cli import App
from nvkr.errors import BootTestError, UsageError

if TYPE_CHECKING:
    from nvkr.machine.boot import BootEvent
    from nvkr.monitor import Monitor
    from nvkr.monitor.events import BootStall


def _images_of_set(layout: Path, artifact: str | None, variant: str | None) -> list[dict[str, Any]]:
    """The machine images of the release set in ``layout``: ``{"label", "path", "arch",
    "digest", "slug", "predictions"}`` (``slug``: the start of its console log's file name;
    ``predictions``: a Secure Boot image's PCR predictions, :func:`nvkr.machine.predicted.
    read_predictions`, or None)."""
    from nvkr.machine.predicted import read_predictions
    from nvkr.oci.layout import LayoutReader
    from nvkr.recipe.matrix import parse_variant_option
    from nvkr.releaseset.metadata import read_metadata

    meta = read_metadata(layout)
    want = parse_variant_option(variant) if variant else None
    reader = LayoutReader(layout)
    found: dict[str, dict[str, Any]] = {}
    for art in meta["artifacts"]:
        if art.get("kind") != "machine-image":
            continue
        if artifact is not None and art["name"] != artifact:
            continue
        v = art.get("variant") or {}
        if want and any(v.get(k) != val for k, val in want.items()):
            continue
        digest = art["primary"]["digest"]
        reader.read_json(art["manifest"], referrer=f"artifact {art['name']}")  # checks digests
        arch = (art.get("platform") or {}).get("architecture") or v.get("arch", "amd64")
        label = f"{art['name']} [{v.get('gpu', '?')} k8s{v.get('kubernetes', '?')} {arch}]"
        found.setdefault(
            digest,
            {
                "label": label,
                "path": layout / "blobs" / "sha256" / digest.split(":", 1)[1],
                "arch": arch,
                "digest": digest,
                "slug": f"{art['name']}-{v.get('gpu', 'x')}-k8s{v.get('kubernetes', 'x')}-{arch}",
                "predictions": read_predictions(reader, art, f"artifact {art['name']}"),
            },
        )
    if not found:
        what = f" named {artifact!r}" if artifact else ""
        raise UsageError(
            f"{layout}: the release set holds no machine image{what}"
            + (f" for {variant}" if variant else ""),
            hint="machine images are node-image artifacts listed in releaseSet.machineImages",
        )
    return list(found.values())


@click.command("boot-test")
@click.argument("target", type=click.Path(path_type=Path))
@click.option("--artifact", help="In a release set: only the machine image with this name.")
@click.option(
    "--variant", "variant", help="In a release set: only images of this variant (gpu=..,arch=..)."
)
@click.option(
    "--arch",
    type=click.Choice(["amd64", "arm64"]),
    default="amd64",
    show_default=True,
    help="Architecture of a QCOW2 file given directly.",
)
@click.option(
    "--expect",
    default=r"nvkr-node-agent: ready",
    show_default=True,
    help="Regular expression of the console line that means success.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=300.0,
    show_default=True,
    help="Seconds to wait for it, per image.",
)
@click.option(
    "--labels/--no-labels",
    default=True,
    show_default=True,
    help="Also wait for the agent's labels after its readiness line and check them against it.",
)
@click.option(
    "--memory", type=click.IntRange(min=256), default=1024, show_default=True, help="MiB."
)
@click.option(
    "--accel",
    type=click.Choice(["auto", "kvm", "tcg"]),
    default="auto",
    envvar="NVKR_BOOT_ACCEL",
    show_default=True,
    show_envvar=True,
    help="auto: KVM when it runs a guest here, booting again under TCG when the KVM guest "
    "makes no progress; kvm: KVM only (no progress is a failure); tcg: never KVM.",
)
@click.option(
    "--console-log",
    "console_log",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for the console logs, one file per image [default: <store>/logs/boot-test].",
)
@click.option(
    "--user-data",
    "user_data",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Cloud-config (or a '## template: jinja' one) on a NoCloud seed; validated before "
    "booting, then what it asks for is checked in the guest.",
)
@click.option(
    "--meta-data",
    "meta_data",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The seed's meta-data [default: instance-id from the user-data's digest, "
    "local-hostname nvkr-boot-test].",
)
@click.option(
    "--expect-file",
    "expect_files",
    multiple=True,
    metavar="PATH",
    help="With --user-data: a file the user-data's commands leave in the guest (repeatable).",
)
@click.option(
    "--secure-boot",
    "secure_boot",
    is_flag=True,
    help="Boot with UEFI Secure Boot enforcing (OVMF/AAVMF's Secure Boot firmware, Microsoft's "
    "keys, --mok as MOKs) and require the kernel's lockdown and Secure Boot lines.",
)
@click.option(
    "--mok",
    "moks",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="CERT",
    help="With --secure-boot: a certificate (PEM or DER) enrolled as a MOK in the variable "
    "store, as shim reads it (repeatable): the owner's.",
)
@click.option(
    "--secure-boot-db",
    "secure_boot_db",
    type=click.Choice(["microsoft", "uefi23", "win23"]),
    default="microsoft",
    show_default=True,
    help="With --secure-boot: the firmware's db. microsoft: Microsoft's 2011 CAs (Debian's "
    "store); uefi23: only the 2023 third-party UEFI CA; win23: only the Windows 2023 CA "
    "(refuses shim).",
)
@click.option(
    "--tpm",
    is_flag=True,
    help="With --secure-boot: a TPM 2.0 (swtpm); the guest's PCRs must equal its replayed "
    "event log, which is kept beside the console log.",
)
@click.option(
    "--module-checks/--no-module-checks",
    "module_checks",
    default=True,
    show_default=True,
    help="With --secure-boot: in the guest, each out-of-tree module (DKMS's, under "
    "/lib/modules/KERNEL/updates and extra) must be signed by a --mok certificate and taken by "
    "the kernel (it loads, or fails only after its signature was accepted: no device, its own "
    "init, or, tried after a dependency that failed, its links to that one); its unsigned copy "
    "and a copy with one byte changed must be refused for their signatures.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="JSON events on stdout (boot-start, boot-stall, image-result; then result or error).",
)
@click.pass_obj
def command(
    app: App,
    target: Path,
    artifact: str | None,
    variant: str | None,
    arch: str,
    expect: str,
    timeout: float,
    labels: bool,
    memory: int,
    accel: Literal["auto", "kvm", "tcg"],
    console_log: Path | None,
    user_data: Path | None,
    meta_data: Path | None,
    expect_files: tuple[str, ...],
    secure_boot: bool,
    moks: tuple[Path, ...],
    secure_boot_db: Literal["microsoft", "uefi23", "win23"],
    tpm: bool,
    module_checks: bool,
    as_json: bool,
) -> None:
    """Boot TARGET in QEMU until the node agent prints its readiness line.

    TARGET is a QCOW2 file, or a release set directory (dist/<set>): then every machine image in
    it (or those --artifact and --variant select) is booted in turn. QEMU runs with -snapshot
    (the image is never changed), under --accel, bounded by --timeout. A KVM guest whose
    console stays silent for 30 s before its kernel's first line makes no progress: under auto it
    is booted again under TCG with the whole --timeout. With --labels (the default) the labels
    the agent prints next are checked against its readiness line. Each image's whole console goes
    to a file in --console-log, named when the boot starts; on failure the last 40 console lines
    are printed and the exit status is 1.

    With --user-data each image boots with a NoCloud seed (a CIDATA volume: the user-data, the
    meta-data and nvkr's probe as vendor-data). The user-data is validated first (cloud-init's
    schema; exit 2 and no boot when it fails); after the boot the probe's report must show
    cloud-init done without errors, every write_files entry with its content, mode and owner,
    runcmd run, every --expect-file present and the meta-data's local-hostname as host name.

    With --secure-boot the image boots with UEFI Secure Boot enforcing: the Secure Boot
    firmware (amd64: OVMF with SMM, under TCG where KVM has no SMM) and a variable store made
    for the boot from Microsoft's keys (--secure-boot-db) with each --mok certificate in
    MokList. Shim's or the firmware's refusal ends the test at once; success needs the kernel's
    "Kernel is locked down from EFI Secure Boot" and "secureboot: Secure boot enabled" before
    the agent's line. With --tpm the guest also gets swtpm, and a boot hook (vendor-data of a
    NoCloud seed, beside --user-data's probe when given) prints its PCRs and TPM event log on
    the console: the log is kept as <console log>.eventlog and must replay to the PCRs; booted
    from a release set, the PCRs must also equal the image's predictions (its pcr-predictions
    attestation) when the boot is the one they state (this host's variable store is the stated
    one, db microsoft, the stated MOKs), else the result says why they were not compared.
    Another boot hook tries each out-of-tree module of the image under the kernel's lockdown
    (--module-checks, the default): signed by a --mok certificate, it must load or fail only
    after the kernel took its signature ("No such device": a GPU driver without a GPU; its own
    init, quoted from the kernel's log; or, tried by insmod after a dependency that failed, its
    links to that one: "Unknown symbol in module"), and its unsigned copy and a copy with one
    byte changed must be refused for their signatures. Each module is tried after those it
    needs (modules.dep).
    """
    from nvkr.monitor import monitoring, open_monitor
    from nvkr.monitor.events import Result

    with monitoring(open_monitor("boot-test", as_json=as_json)) as monitor:
        images = _images(target, artifact, variant, arch)
        if user_data is None and (meta_data is not None or expect_files):
            raise UsageError("--meta-data and --expect-file go with --user-data")
        if not secure_boot and (moks or tpm or secure_boot_db != "microsoft"):
            raise UsageError("--mok, --secure-boot-db and --tpm go with --secure-boot")
        if user_data is not None:
            # before any image boots: bad input costs no boot
            from nvkr.bounds import read_limited
            from nvkr.machine.seed import meta_data as seed_meta
            from nvkr.machine.userdata import load_user_data

            raw = read_limited(user_data, "user-data") if user_data.is_file() else b""
            for image in images:
                meta = seed_meta(raw, meta_data)[1]
                load_user_data(user_data, meta, arch=image["arch"], image=image["path"])
        if console_log is None:
            from nvkr.machine.boot import CONSOLE_LOGS
            from nvkr.store import default_root

            console_log = (app.store_root or default_root()) / CONSOLE_LOGS
        options: dict[str, Any] = {
            "expect": expect, "timeout": timeout, "memory_mib": memory, "accel": accel,
        }  # fmt: skip
        if user_data is not None:
            options.update(user_data=user_data, meta_data_file=meta_data,
                           expect_files=expect_files)  # fmt: skip
        if secure_boot:
            from nvkr.machine.secureboot import SecureBoot, load_moks

            load_moks(moks)  # a bad certificate costs no boot
            options.update(secure_boot=SecureBoot(moks, secure_boot_db), tpm=tpm,
                           modules=module_checks)  # fmt: skip
        failed = sum(
            not _boot_one(monitor, image, console_log, labels, options) for image in images
        )
        if failed:
            raise BootTestError(f"{failed} of {len(images)} machine images failed their boot test")
        monitor.emit(Result("boot-test", {"images": len(images)}))


def _images(
    target: Path, artifact: str | None, variant: str | None, arch: str
) -> list[dict[str, Any]]:
    """The images TARGET names (see :func:`_images_of_set`; a QCOW2 file's ``shown`` is how the
    start line names it)."""
    if target.is_dir():
        from nvkr.oci.layout import require_layout

        require_layout(target)
        return _images_of_set(target, artifact, variant)
    if not target.is_file():
        raise UsageError(f"{target}: no such file or directory")
    if artifact or variant:
        raise UsageError("--artifact and --variant select images in a release set directory")
    with open(target, "rb") as f:
        if f.read(4) != b"QFI\xfb":
            raise UsageError(
                f"{target} is not a QCOW2 image (no QFI magic)",
                hint="give a .qcow2 file or a release set directory (dist/<name>)",
            )
    return [
        {"label": str(target), "path": target, "arch": arch, "digest": None,
         "slug": target.stem, "shown": f"{target} ({arch})"},
    ]  # fmt: skip


def _boot_one(
    monitor: Monitor, image: dict[str, Any], logs: Path, labels: bool, options: dict[str, Any]
) -> bool:
    """Boot one image (``options``: :func:`nvkr.machine.boot.boot_test`'s ``expect``,
    ``timeout``, ``memory_mib``, ``accel``; with ``user_data`` also
    :func:`nvkr.machine.cloudinit.boot_with_user_data`'s), reporting its attempts and its
    :class:`~nvkr.monitor.events.BootImageResult` to ``monitor``; whether it booted."""
    from nvkr.agent_labels import AGENT_LABELS, check_agent_labels
    from nvkr.machine.boot import boot_test, new_console_log
    from nvkr.machine.cloudinit import boot_with_user_data
    from nvkr.machine.measured import boot_secure
    from nvkr.monitor.events import BootImageResult

    log_file = new_console_log(logs, image["slug"])
    seen: dict[str, Any] = {"accel": None}  # the accelerator of the last attempt
    label, digest = image["label"], image["digest"]
    checks: list[dict[str, Any]] = []
    extra: dict[str, Any] = {}
    try:
        common = {
            "arch": image["arch"], "then": AGENT_LABELS if labels else None,
            "log_file": log_file, "event": _reporter(monitor, image, seen), **options,
        }  # fmt: skip
        if "secure_boot" in options:
            eventlog = log_file.with_suffix(".eventlog") if options["tpm"] else None
            secured = boot_secure(Path(image["path"]), eventlog_file=eventlog, **common)
            result, checks = secured.boot, [c.to_json() for c in secured.checks]
            extra["secure_boot"] = secured.secure_boot_json()
            extra["total_seconds"] = secured.seconds
            if secured.tpm is not None:
                extra["tpm"] = secured.tpm.to_json(str(eventlog))
                if image.get("predictions") is not None:
                    from nvkr.machine.predicted import compare

                    extra["tpm"]["predictions"] = compare(
                        image["predictions"], secured.tpm.pcrs, arch=image["arch"],
                        db=secured.db, moks=secured.moks, where=f"the guest ({label})",
                    )  # fmt: skip
        elif "user_data" in options:
            booted = boot_with_user_data(Path(image["path"]), **common)
            result, checks = booted.boot, [c.to_json() for c in booted.checks]
        else:
            result = boot_test(Path(image["path"]), **common)
        printed = check_agent_labels(result.matched, result.lines) if labels else {}
    except BootTestError as e:
        monitor.emit(
            BootImageResult(
                label, digest, False, seen["accel"], str(log_file), code=e.code,
                error=e.message, hint=e.hint,
            )
        )  # fmt: skip
        return False
    monitor.emit(
        BootImageResult(
            label, digest, True, result.accel, str(log_file), line=result.matched,
            seconds=result.seconds, fallback=result.fallback, firmware=result.firmware,
            labels=printed, checks=checks, **extra,
        )
    )  # fmt: skip
    return True


def _reporter(monitor: Monitor, image: dict[str, Any], seen: dict[str, Any]) -> BootEvent:
    """The ``event`` of one image's boot test: its start and stall events to ``monitor``, named
    with the image's label and digest; ``seen["accel"]`` follows the attempts."""
    from nvkr.monitor.events import BootStart

    def event(e: BootStart | BootStall) -> None:
        seen["accel"] = e.accel
        if isinstance(e, BootStart):
            shown = image.get("shown", image["label"])
            monitor.emit(e._replace(image=image["label"], digest=image["digest"], shown=shown))
        else:
            monitor.emit(e._replace(image=image["label"], digest=image["digest"]))

    return event
