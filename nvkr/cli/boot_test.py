"""``nvkr boot-test``: boot machine images in QEMU and wait for the node agent's readiness line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from nvkr.cli import App
from nvkr.errors import BootTestError, UsageError


def _images_of_set(layout: Path, artifact: str | None, variant: str | None) -> list[dict[str, Any]]:
    """The machine images of the release set in ``layout``: ``{"label", "path", "arch"}``."""
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
@click.option("--json", "as_json", is_flag=True, help="One JSON object per image on stdout.")
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
    as_json: bool,
) -> None:
    """Boot TARGET in QEMU until the node agent prints its readiness line.

    TARGET is a QCOW2 file, or a release set directory (dist/<set>): then every machine image in
    it (or those --artifact and --variant select) is booted in turn. QEMU runs with -snapshot
    (the image is never changed), TCG unless KVM answers, bounded by --timeout. With --labels
    (the default) the labels the agent prints next are checked against its readiness line. On failure the last 40 console lines are
    printed and the exit status is 1.
    """
    from nvkr.agent_labels import AGENT_LABELS, check_agent_labels
    from nvkr.boot import boot_test

    if target.is_dir():
        from nvkr.cli.common import require_layout

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
        images = [{"label": str(target), "path": target, "arch": arch, "digest": None}]
    else:
        raise UsageError(f"{target}: no such file or directory")
    failed = 0
    for image in images:
        try:
            result = boot_test(
                Path(image["path"]),
                arch=image["arch"],
                expect=expect,
                timeout=timeout,
                memory_mib=memory,
                then=AGENT_LABELS if labels else None,
            )
            printed = check_agent_labels(result.matched, result.lines) if labels else {}
        except BootTestError as e:
            failed += 1
            if as_json:
                click.echo(json.dumps({"image": image["label"], "ok": False, "error": e.message}))
            click.echo(e.render(), err=True)
            continue
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "image": image["label"],
                        "digest": image["digest"],
                        "ok": True,
                        "line": result.matched,
                        "seconds": round(result.seconds, 1),
                        "accel": result.accel,
                        "firmware": result.firmware,
                        "labels": printed,
                    }
                )
            )
        else:
            click.echo(
                f"ok {image['label']}: {result.matched} ({result.seconds:.1f} s, {result.accel})"
            )
            if printed:
                shown = ",".join(f"{k}={v}" for k, v in sorted(printed.items()))
                click.echo(f"   labels: {shown}")
    if failed:
        raise BootTestError(f"{failed} of {len(images)} machine images failed their boot test")
