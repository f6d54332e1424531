"""Which disk file ``nvkr image`` reads: a machine image of a release set, or a QCOW2 given as is.

A SOURCE is what ``nvkr release-set show`` takes (a ``dist/<name>`` layout or a registry
reference, :func:`nvkr.delivery.show.load_release_set`) with the ARTIFACT name of a machine image
and, when the set holds several images of that name, ``--variant`` to pick one; or a disk image
file (QCOW2 or raw), which takes no ARTIFACT. From a layout the QCOW2 blob is read in place; from
a registry it is downloaded (checked against its digest) into a temporary directory that lives as
long as the context.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.delivery.show import RegistryClients, load_release_set
from nvkr.errors import IntegrityError, UsageError


@dataclass(frozen=True)
class ImageChoice:
    """A machine image picked from a release set: its ``label`` (``node-image [hopper
    k8s1.36 amd64]``), the QCOW2's ``digest`` (``sha256:<hex>``) and ``size`` (bytes)."""

    label: str
    digest: str
    size: int
    variants: tuple[str, ...]


def _variant_text(v: dict[str, Any]) -> str:
    return ",".join(f"{k}={v[k]}" for k in ("gpu", "kubernetes", "arch") if k in v)


def machine_image_names(meta: dict[str, Any]) -> list[str]:
    """The names of the machine-image artifacts in release set metadata ``meta``, sorted, once
    each (one name may have an image per variant)."""
    return sorted(
        {str(a["name"]) for a in meta.get("artifacts") or [] if a.get("kind") == "machine-image"}
    )


def choose_image(
    meta: dict[str, Any], artifact: str | None, variant: str | None, *, where: str
) -> ImageChoice:
    """The one machine image named ``artifact`` in the release set metadata ``meta`` that
    ``variant`` (``gpu=hopper,arch=amd64``, any subset of the axes) selects.

    Raises:
        UsageError: no ARTIFACT given, no machine image of that name or variant, or several
            different images match (each listed with its variant).
    """
    from nvkr.recipe.matrix import parse_variant_option

    images = [a for a in meta.get("artifacts") or [] if a.get("kind") == "machine-image"]
    names = machine_image_names(meta)
    if artifact is None:
        raise UsageError(
            f"{where} is a release set: name the machine image to read",
            hint="its machine images: " + (", ".join(names) or "none"),
        )
    want = parse_variant_option(variant) if variant else {}
    named = [a for a in images if a.get("name") == artifact]
    if not named:
        raise UsageError(
            f"{where} holds no machine image named {artifact!r}",
            hint="its machine images: " + (", ".join(names) or "none"),
        )
    found: dict[str, ImageChoice] = {}
    for art in named:
        v = art.get("variant") or {}
        if any(str(v.get(k)) != val for k, val in want.items()):
            continue
        primary = art["primary"]
        digest = str(primary["digest"])
        old = found.get(digest)
        vids = (*old.variants, _variant_text(v)) if old else (_variant_text(v),)
        arch = (art.get("platform") or {}).get("architecture") or v.get("arch", "?")
        label = f"{artifact} [{v.get('gpu', '?')} k8s{v.get('kubernetes', '?')} {arch}]"
        found[digest] = ImageChoice(old.label if old else label, digest, int(primary["size"]), vids)
    every = "; ".join(_variant_text(a.get("variant") or {}) for a in named)
    if not found:
        raise UsageError(
            f"{where}: no machine image {artifact!r} for --variant {variant}",
            hint=f"its variants: {every}",
        )
    if len(found) > 1:
        choices = "; ".join(" | ".join(c.variants) for c in found.values())
        raise UsageError(
            f"{where}: {len(found)} machine images named {artifact!r}"
            + (f" match --variant {variant}" if variant else "")
            + f": {choices}",
            hint="pick one with --variant, e.g. --variant "
            + next(iter(found.values())).variants[0],
        )
    return next(iter(found.values()))


@contextlib.contextmanager
def machine_image_file(
    source: str,
    artifact: str | None,
    variant: str | None,
    *,
    registry: RegistryClients,
) -> Iterator[tuple[Path, str]]:
    """``(disk file, label)`` of the machine image ``source``/``artifact``/``variant`` name
    (module doc); the file lives as long as the context.

    Raises:
        UsageError: see :func:`choose_image`; a disk file given with an ARTIFACT.
        IntegrityError: the layout lacks the image's blob, or a download fails its digest.
        RegistryError: the registry cannot be read.
    """
    path = Path(source)
    if path.is_file():
        if artifact is not None or variant is not None:
            raise UsageError(
                f"{source} is a disk image file: it takes no ARTIFACT or --variant",
                hint="ARTIFACT and --variant pick a machine image of a release set",
            )
        yield path, source
        return
    meta, _ = load_release_set(source, registry=registry)
    choice = choose_image(meta, artifact, variant, where=source)
    if path.is_dir():
        blob = path / "blobs" / "sha256" / choice.digest.split(":", 1)[1]
        if not blob.is_file():
            raise IntegrityError(
                f"{source}: the blob {choice.digest} of {choice.label} is missing",
                hint="the layout is incomplete; pull or build it again",
            )
        yield blob, f"{choice.label} of {source}"
        return
    from nvkr.oci.registry import Reference

    ref = Reference.parse(source)
    with tempfile.TemporaryDirectory(prefix="nvkr-image-") as tmp:
        disk = Path(tmp) / "image.qcow2"
        with registry.client(ref.registry) as client, open(disk, "wb") as f:
            got = client.get_blob(ref.repository, choice.digest, f, size=choice.size)
        if got != choice.size:
            raise IntegrityError(
                f"{source}: {choice.label} {choice.digest} is {got} bytes, not {choice.size}"
            )
        yield disk, f"{choice.label} of {source}"
