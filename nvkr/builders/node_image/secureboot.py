"""A node image's Secure Boot chain (``secureBoot`` in the recipe): what it checks, plans and lays
out besides the plain image.

- **modules** (a ``signed-modules`` artifact of the image's rootfs): its tar is laid over the
  unpacked tree, the owner-signed modules over DKMS's unsigned ones.
- **uki** (a ``signed-uki`` artifact of a ``uki`` of the image's rootfs): the ESP holds, on the
  removable path (UEFI 2.10, 3.5.1.1), Debian's Microsoft-signed shim as ``\\EFI\\BOOT\\BOOTX64.EFI``
  (``BOOTAA64.EFI``), its MokManager beside it (shim starts it when a MOK request is pending or
  a second stage fails), and the signed UKI as ``grubx64.efi`` (``grubaa64.efi``), the name shim
  starts. No ``fbx64.efi``: with it, shim runs the fallback, which finds no boot entry to restore
  and resets the machine. shim and MokManager come from the tree (``/usr/lib/shim/*.efi.signed``:
  packages shim-signed and shim-helpers-ARCH-signed), so their versions are the locked ones. The
  UKI's command line names the root file system by the UUID derived from the UKI action's key:
  the image derives every disk identifier from that key too (``diskSeed``), and GRUB's
  configuration (BIOS boot, amd64) carries the same command line.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from nvkr.action import ActionOutput
from nvkr.builders.api import ActionContext, PlanRefs, Problem, a_kind, builder_of
from nvkr.builders.node_image.artifact import NodeImageArtifact
from nvkr.builders.node_image.staging import primary_output
from nvkr.builders.uki.builder import uki_seed
from nvkr.builders.uki.signing import CERT_ROLE
from nvkr.canonical import canonical_json
from nvkr.errors import DiskError
from nvkr.hosttools import package_version
from nvkr.recipe.matrix import Variant
from nvkr.run import run
from nvkr.secureboot.measure_inputs import OWNER_GUID

#: Per arch: the ESP's removable-path files -> where the tree's packages put them
_SHIM = {
    "amd64": {
        "EFI/BOOT/BOOTX64.EFI": "usr/lib/shim/shimx64.efi.signed",
        "EFI/BOOT/MMX64.EFI": "usr/lib/shim/mmx64.efi.signed",
    },
    "arm64": {
        "EFI/BOOT/BOOTAA64.EFI": "usr/lib/shim/shimaa64.efi.signed",
        "EFI/BOOT/MMAA64.EFI": "usr/lib/shim/mmaa64.efi.signed",
    },
}
#: the second stage shim starts from the removable path
SECOND_STAGE = {"amd64": "EFI/BOOT/GRUBX64.EFI", "arm64": "EFI/BOOT/GRUBAA64.EFI"}


def problems(artifact_name: str, artifact: NodeImageArtifact, variant: Variant) -> list[Problem]:
    """``secureBoot.modules`` is a signed-modules artifact of the image's own rootfs,
    ``secureBoot.uki`` a signed-uki of a uki of it whose kernel arguments are the image's, and
    the image is assembled natively."""
    sb = artifact.secureBoot
    if sb is None:
        return []
    found: list[Problem] = []
    recipe = variant.recipe.artifacts
    for field, wanted in (("modules", "signed-modules"), ("uki", "signed-uki")):
        name = getattr(sb, field)
        if name is None:
            continue
        where = ("artifacts", artifact_name, "secureBoot", field)
        builder = builder_of(variant, name)
        if builder is not None and builder != wanted:
            found.append((where, f"{name!r} is {a_kind(builder)} artifact, not a {wanted}", None))
            continue
        signed = recipe.get(name)
        of = getattr(signed, "rootfs", None)  # signed-modules name it; a signed-uki its uki does
        uki = recipe.get(getattr(signed, "uki", "") or "")
        if field == "uki" and uki is not None:
            of = getattr(uki, "rootfs", None)
            args = list(getattr(uki, "kernelArgs", []))
            if artifact.kernelArgs and artifact.kernelArgs != args:
                found.append(
                    (
                        ("artifacts", artifact_name, "kernelArgs"),
                        f"the image's kernelArgs {artifact.kernelArgs} are not those of the UKI "
                        f"{getattr(signed, 'uki', '')!r} it boots ({args})",
                        "write the kernel arguments in the uki artifact only",
                    )
                )
        if of is not None and of != artifact.rootfs:
            found.append(
                (
                    where,
                    f"{name!r} is made from rootfs {of!r}, the image from {artifact.rootfs!r}",
                    f"make it from rootfs {artifact.rootfs!r}",
                )
            )
    if artifact.backend == "diskimage-builder":
        found.append(
            (
                ("artifacts", artifact_name, "secureBoot"),
                "Secure Boot needs the native backend: diskimage-builder installs its own "
                "boot loader",
                'remove backend: "diskimage-builder"',
            )
        )
    return found


@dataclass(frozen=True)
class ChainParams:
    """What the chain sets in the image's params: ``disk_seed`` (the UKI action's key hex) and
    the UKI's ``kernel_args``; both None without ``secureBoot.uki``."""

    disk_seed: str | None = None
    kernel_args: list[str] | None = None


def plan(
    artifact: NodeImageArtifact, variant: Variant, refs: PlanRefs, deps: dict[str, str]
) -> ChainParams:
    """Add the signing actions to ``deps``; what the chain sets in the params."""
    sb = artifact.secureBoot
    if sb is None:
        return ChainParams()
    if sb.modules is not None:
        deps["signedModules"] = refs.artifact(sb.modules).key
    if sb.uki is None:
        return ChainParams()
    deps["signedUki"] = refs.artifact(sb.uki).key
    signed = variant.recipe.artifacts[sb.uki]  # a signed-uki: check() ran
    uki = refs.artifact(str(getattr(signed, "uki")))  # noqa: B009
    args = uki.params.get("kernelArgs")
    return ChainParams(uki_seed(uki.key), [str(a) for a in args] if isinstance(args, list) else [])


def overlay_modules(ctx: ActionContext, deps: dict[str, str], tree: Path) -> None:
    """The owner-signed modules over the unsigned ones (``secureBoot.modules``)."""
    if "signedModules" not in deps:
        return
    signed = primary_output(ctx, ctx.deps[deps["signedModules"]], "signed modules")
    run(
        ["tar", "--numeric-owner", "--overwrite", "-xpf", signed, "-C", tree],
        log_file=ctx.log_file,
    )


def esp_files(ctx: ActionContext, deps: dict[str, str], tree: Path, arch: str) -> dict[str, Path]:
    """The ESP's Secure Boot chain (``secureBoot.uki``), or {} for GRUB's own.

    Raises:
        DiskError: the tree lacks shim or MokManager (names the packages).
    """
    if "signedUki" not in deps:
        return {}
    files: dict[str, Path] = {}
    for dest, rel in _SHIM[arch].items():
        path = tree / rel
        if not path.is_file() or path.is_symlink():
            raise DiskError(
                f"the rootfs has no /{rel} for the ESP's {dest}",
                hint=f"add shim-signed and shim-helpers-{arch}-signed to the rootfs packages",
            )
        files[dest] = path
    files[SECOND_STAGE[arch]] = primary_output(ctx, ctx.deps[deps["signedUki"]], "signed UKI")
    return files


def certificate_outputs(ctx: ActionContext, deps: dict[str, str]) -> None:
    """The owner's certificate (DER and PEM) the signed UKI was signed with, as outputs of the
    image: the machine image's artifact in a release set then carries it beside the disk."""
    if "signedUki" not in deps:
        return
    signed = ctx.deps[deps["signedUki"]]
    for out in sorted(signed.outputs, key=lambda o: o.name):
        if out.role != CERT_ROLE:
            continue
        copy = ctx.workdir / out.name
        copy.write_bytes(ctx.store.checked_path(out.digest).read_bytes())
        ctx.add_output(copy, name=out.name, media_type=out.media_type, role=CERT_ROLE)


#: Per arch: the firmware whose Secure Boot the predictions are for (its variable store with
#: Microsoft's 2011 keys, as Debian's ovmf and qemu-efi-aarch64 ship it) and its package
FIRMWARE = {
    "amd64": ("/usr/share/OVMF/OVMF_VARS_4M.ms.fd", "ovmf"),
    "arm64": ("/usr/share/AAVMF/AAVMF_VARS.ms.fd", "qemu-efi-aarch64"),
}
PREDICTIONS_ROLE = "pcr-predictions"
PREDICTION_TYPE = "https://nvkr.dev/attestations/pcr-predictions/v1"


def firmware_tools(arch: str) -> dict[str, str]:
    """The firmware package whose key set the predictions are for, for the action key."""
    _, package = FIRMWARE[arch]
    return {package: package_version(package, purpose="the node image's PCR predictions")}


def predictions(
    ctx: ActionContext, deps: dict[str, str], tree: Path, arch: str, disk: ActionOutput
) -> None:
    """The TPM measurements of the image's first boot under the stated firmware with the owner's
    certificate as a MOK (:mod:`nvkr.secureboot.measure`), as an in-toto Statement about the
    QCOW2, an output of the image (``pcr-predictions.intoto.json``)."""
    if "signedUki" not in deps:
        return
    from nvkr.disk.imageread import disk_head
    from nvkr.secureboot import measure
    from nvkr.secureboot import measure_inputs as mi
    from nvkr.secureboot.pe import authenticode_digest

    signed = ctx.deps[deps["signedUki"]]
    uki = ctx.store.checked_path(signed.output("primary", "signed UKI").digest).read_bytes()
    der = next(o for o in signed.outputs if o.role == CERT_ROLE and o.name.endswith(".der"))
    cert = ctx.store.checked_path(der.digest).read_bytes()
    vars_path, package = FIRMWARE[arch]
    store = Path(vars_path).read_bytes()
    variables = mi.read_varstore(store, vars_path)
    variables[(measure.SHIM_LOCK, "MokList")] = mi.x509_signature_list(OWNER_GUID, cert)
    shim = (tree / _SHIM[arch][next(iter(_SHIM[arch]))]).read_bytes()
    firmware = mi.firmware_keys(variables, mi.shim_db_entry(variables, shim))
    state = mi.shim_state(variables, mi.shim_builtins(shim))
    images = [
        measure.BootImage("shim", authenticode_digest(shim)),
        measure.BootImage(
            "UKI", authenticode_digest(uki), mi.image_authority(uki, firmware, state, "the UKI")
        ),
    ]
    predicted = measure.predict(
        firmware,
        state,
        images,
        mi.uki_inputs(uki),
        mi.gpt_event_data(disk_head(ctx.store.checked_path(disk.digest))),
    )
    statement = {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": disk.name, "digest": {"sha256": disk.digest.split(":", 1)[1]}}],
        "predicateType": PREDICTION_TYPE,
        "predicate": {
            "firmware": {
                "package": package,
                "version": ctx.action.tools.get(package, ""),
                "variableStore": vars_path,
                "variableStoreDigest": "sha256:" + hashlib.sha256(store).hexdigest(),
                "mokList": [{"owner": str(OWNER_GUID),
                             "certificate": "sha256:" + hashlib.sha256(cert).hexdigest()}],
            },
            **predicted.to_json(),
        },
    }  # fmt: skip
    out = ctx.workdir / "pcr-predictions.intoto.json"
    out.write_bytes(canonical_json(statement))
    ctx.add_output(out, name=out.name, media_type="application/vnd.in-toto+json",
                   role=PREDICTIONS_ROLE)  # fmt: skip
