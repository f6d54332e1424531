"""``nvkr boot-test``: boot machine images in QEMU and wait for the node agent's readiness line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from nvkr.cli import App
from nvkr.errors import BootTestError, UsageError

if TYPE_CHECKING:
    from nvkr.machine.boot import BootEvent


def _images_of_set(layout: Path, artifact: str | None, variant: str | None) -> list[dict[str, Any]]:
    """The machine images of the release set in ``layout``: ``{"label", "path", "arch",
    "digest", "slug"}`` (``slug``: the start of its console log's file name)."""
    from nvkr.oci.layout import LayoutReader
    from nvkr.recipe import parse_variant_option
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
    "--json", "as_json", is_flag=True, help="JSON events (start, stall, result) on stdout."
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
    """
    from nvkr.agent_labels import AGENT_LABELS, check_agent_labels
    from nvkr.machine.boot import CONSOLE_LOGS, boot_test, new_console_log

    if target.is_dir():
        from nvkr.oci.layout import require_layout

        require_layout(target)
        images = _images_of_set(target, artifact, variant)
    elif target.is_file():
        if artifact or variant:
            raise UsageError("--artifact and --variant select images in a release set directory")
        with open(target, "rb") as f:
            if f.read(4) != b"QFI\xfb":
                raise UsageError(
                    f"{target} is not a QCOW2 image (no QFI magic)",
                    hint="give a .qcow2 file or a release set directory (dist/<name>)",
                )
        images = [
            {"label": str(target), "path": target, "arch": arch, "digest": None,
             "slug": target.stem, "shown": f"{target} ({arch})"},
        ]  # fmt: skip
    else:
        raise UsageError(f"{target}: no such file or directory")
    if console_log is None:
        from nvkr.store import default_root

        console_log = (app.store_root or default_root()) / CONSOLE_LOGS
    failed = 0
    for image in images:
        log_file = new_console_log(console_log, image["slug"])
        seen: dict[str, Any] = {"accel": None}  # the accelerator of the last attempt
        try:
            result = boot_test(
                Path(image["path"]),
                arch=image["arch"],
                expect=expect,
                timeout=timeout,
                memory_mib=memory,
                then=AGENT_LABELS if labels else None,
                accel=accel,
                log_file=log_file,
                event=_reporter(image, as_json, seen),
            )
            printed = check_agent_labels(result.matched, result.lines) if labels else {}
        except BootTestError as e:
            failed += 1
            if as_json:
                doc = {
                    "event": "result", "image": image["label"], "digest": image["digest"],
                    "ok": False, "error": e.message, "accel": seen["accel"], "log": str(log_file),
                }  # fmt: skip
                click.echo(json.dumps(doc, sort_keys=True))
            click.echo(e.render(), err=True)
            continue
        if as_json:
            doc = {
                "event": "result",
                "image": image["label"],
                "digest": image["digest"],
                "ok": True,
                "line": result.matched,
                "seconds": round(result.seconds, 1),
                "accel": result.accel,
                "fallback": result.fallback,
                "firmware": result.firmware,
                "labels": printed,
                "log": str(log_file),
            }
            click.echo(json.dumps(doc, sort_keys=True))
        else:
            how = f"{result.accel} after a KVM stall" if result.fallback else result.accel
            click.echo(f"ok {image['label']}: {result.matched} ({result.seconds:.1f} s, {how})")
            if printed:
                shown_labels = ",".join(f"{k}={v}" for k, v in sorted(printed.items()))
                click.echo(f"   labels: {shown_labels}")
    if failed:
        raise BootTestError(f"{failed} of {len(images)} machine images failed their boot test")


def _reporter(image: dict[str, Any], as_json: bool, seen: dict[str, Any]) -> BootEvent:
    """The ``event`` of one image's boot test: a JSON line each (image label and digest added),
    or the start line and the stall warning on stderr; ``seen["accel"]`` follows the attempts."""
    from nvkr.machine.boot import event_line

    def event(kind: str, fields: dict[str, Any]) -> None:
        seen["accel"] = fields["accel"]
        if as_json:
            doc = {**fields, "event": kind, "image": image["label"], "digest": image["digest"]}
            click.echo(json.dumps(doc, sort_keys=True))
        elif kind == "start":
            line = event_line(kind, fields, image.get("shown", image["label"]))
            click.echo(f"boot-test: {line}", err=True)
        elif kind == "stall" and fields["retry"]:
            click.echo(f"warning: boot-test: {event_line(kind, fields, image['label'])}", err=True)

    return event
