"""End to end: the default recipe with Secure Boot on (recipes/secureboot/debian-13.yaml) and a
test owner key, from the session's default build.

The session's default build makes the project (tests/helpers/secureboot.py: a leaf that extends
recipes/default.yaml with the layer and names the test's certificate; its lockfile the default
one with the certificate's path source added) and builds its hopper/amd64 variant with the owner
key (tests/conftest.py, ``SecureBootSet``). The default recipe already holds the layer's
packages, so the root filesystem is the default build's: only the UKI, its signature and the
node image run. Then:

- the UKI signed again in another store gives the same bytes, as the unsigned UKI does;
- the image boots under enforcing Secure Boot (OVMF, Microsoft's 2011 keys, the owner's
  certificate as a MOK) with swtpm to the node agent (what ``nvkr boot-test --secure-boot --tpm``
  runs, from the release set), and the guest's PCRs 4, 5, 7, 9, 11 and 14 equal the
  predictions in the release set (the machine image's pcr-predictions attestation), as
  boot-test's own comparison says too; its module probe finds no out-of-tree module;
  one byte changed inside the signed UKI, and shim refuses the image; a db without Microsoft's
  third-party CA refuses shim;
- ``nvkr verify --rebuild``, without the key, rebuilds the set and says "identical but for
  signatures": the session's own rebuild (tests/conftest.py, ``DefaultBuild.rebuild``: from the
  registry's source closure, in the twin's clone and environment), whose registry claims
  tests/integration/test_verify_default.py checks.

Runs in the background from the session's first test, once the set is built.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from nvkr.store import Store
from tests.helpers.background import BackgroundTest
from tests.helpers.nvkr import Result, run_nvkr, seed_from_build
from tests.helpers.results import record_of
from tests.helpers.secureboot import CERT, REL

pytestmark = [pytest.mark.slow, pytest.mark.default_build]

UKI = "uki/uki@gpu=hopper,kubernetes=1.36,arch=amd64"
SIGNED_UKI = "signed-uki/signed-uki@gpu=hopper,kubernetes=1.36,arch=amd64"


def _done(result: Result) -> dict[str, dict[str, Any]]:
    """The actions a ``--json`` build ran, by builder (one each here)."""
    assert result.code == 0, result.stderr
    return {e["builder"]: e for e in result.json_events() if e["event"] == "action-done"}


def _secure_boot(tmp: Path, started: Future[Any]) -> None:
    built = started.result()
    _, store, first = built.first
    assert first.code == 0, first.stderr
    sb = built.secure_boot
    assert sb is not None, "the default build's twin failed"
    assert sb.locked.code == 0, sb.locked.stderr
    project, key, sb_store = sb.project, sb.key, sb.store
    ran = _done(sb.built)
    # the default build's root filesystem: only the chain and what holds it ran
    assert {"uki", "signed-uki", "node-image"} <= set(ran) and "rootfs" not in ran, sorted(ran)
    uki = record_of(Store(sb_store).get_action(ran["uki"]["key"]))
    signed = record_of(Store(sb_store).get_action(ran["signed-uki"]["key"]))
    assert uki is not None and signed is not None
    chain = uki["metadata"]["chain"]
    assert chain["shim"]["anchors"] == [
        "CN=Microsoft Corporation UEFI CA 2011,O=Microsoft Corporation,L=Redmond,ST=Washington,C=US",
        "CN=Microsoft UEFI CA 2023,O=Microsoft Corporation,C=US",
    ], chain
    assert chain["kernel"]["anchors"] == ["CN=Debian Secure Boot CA"], chain
    # the signature covers the UKI: the same Authenticode digest signed and unsigned
    assert signed["metadata"]["authenticode"] == uki["metadata"]["authenticode"]

    # signed again, in another store: the same unsigned and signed UKI
    again_store = seed_from_build(tmp / "store-again", store)
    again = _done(run_nvkr("build", REL, "--locked", "--offline", "--action", UKI, "--action", SIGNED_UKI,
                           "--json",
                           "--secure-boot-key", str(key), cwd=project, store=again_store))  # fmt: skip
    assert {"uki", "signed-uki"} <= set(again)
    for builder, record in (("uki", uki), ("signed-uki", signed)):
        other = record_of(Store(again_store).get_action(again[builder]["key"]))
        assert other is not None and other["outputs"] == record["outputs"], builder

    # booted under enforcing Secure Boot with swtpm, to the node agent: the guest's PCRs are
    # the predictions the release set carries; one byte changed inside the signed UKI and shim
    # refuses it, and its measurements would differ
    disk, statement = _image(sb.layout)
    predicted = statement["predicate"]["pcrs"]
    assert sorted(predicted, key=int) == ["4", "5", "7", "9", "11", "14"], predicted
    cert = str(project / CERT)
    # booted from the release set: boot-test compares the PCRs with the set's predictions too
    booted = _boot(sb.layout, tmp / "boot", "--mok", cert, "--tpm", store=sb_store)
    assert booted["code"] == 0, booted
    result = booted["image"]
    print(f"secure boot with TPM: {result['totalMilliseconds'] / 1000:.1f} s ({result['accel']})",
          file=sys.stderr, flush=True)  # fmt: skip
    assert result["secureBoot"]["enforcing"], result["secureBoot"]
    guest = {k: result["tpm"]["pcrs"][k].lower() for k in predicted}
    assert guest == predicted, (guest, predicted)
    assert result["tpm"]["predictions"] == {"compared": True, "phase": "after-stub",
                                            "pcrs": predicted}, result["tpm"]  # fmt: skip
    # the default image holds no out-of-tree module: the probe ran and found none
    assert result["secureBoot"]["modules"]["modules"] == [], result["secureBoot"]["modules"]
    changed, before, after = _tampered(disk, tmp / "tampered.qcow2", tmp)
    # the prediction's PCR 4 holds the UKI's Authenticode digest, which the change changes
    pcr4 = {e["digest"] for e in statement["predicate"]["events"] if e["pcr"] == 4}
    assert before.hex() in pcr4 and after.hex() not in pcr4 and before != after, pcr4
    tampered = _boot(changed, tmp / "tampered", "--mok", cert, store=sb_store)
    assert tampered["code"] != 0 and re.search(
        r"Verification failed|Security Violation", tampered["error"]
    ), tampered
    # a db with no third-party CA (Microsoft's Windows-only 2023 profile) refuses shim itself;
    # a 2023-only db does not: Debian's shim 16.1 carries both CAs' signatures (README)
    win23 = _boot(disk, tmp / "win23", "--mok", cert, "--secure-boot-db", "win23", store=sb_store)
    assert win23["code"] != 0 and "Access Denied" in win23["error"], win23

    # verify --rebuild without the key (the session's, from the registry, in the twin's clone):
    # every artifact rebuilt, the UKI's signature taken from the image, checked, and said
    assert built.rebuild is not None, built.published.stderr
    verified = built.rebuild.result()
    assert verified.code == 0, verified.stdout[-3000:] + verified.stderr
    rebuilt = json.loads(verified.stdout)["rebuild"]
    assert rebuilt["identical"] and all(a["identical"] for a in rebuilt["artifacts"]), rebuilt
    (used,) = rebuilt["signatures"]
    assert used["path"] == "/EFI/BOOT/GRUBX64.EFI" and used["signer"] == "CN=nvkr test owner"


def _boot(disk: Path, logs: Path, *args: str, store: Path) -> dict[str, Any]:
    """``nvkr boot-test DISK --secure-boot ARGS --json`` (TCG: OVMF's Secure Boot code needs
    SMM, which nested KVM may lack): its exit code, its image result and its error."""
    logs.mkdir()
    done = run_nvkr(
        "boot-test", str(disk), "--secure-boot", *args, "--accel", "tcg", "--timeout", "900",
        "--console-log", str(logs), "--json", cwd=logs, store=store,
    )  # fmt: skip
    events = done.json_events()
    image = next((e for e in events if e["event"] == "image-result"), None)
    error = " ".join(json.dumps(e) for e in events if e["event"] == "error")
    error += " " + (str(image.get("error", "")) if image else "")
    return {"code": done.code, "image": image, "error": error + done.stderr}


def _image(layout: Path) -> tuple[Path, dict[str, Any]]:
    """The set's machine image: its QCOW2 blob and its PCR predictions statement (the layer of
    its pcr-predictions attestation, whose subject is the machine image's manifest)."""
    blobs = layout / "blobs" / "sha256"

    def read(digest: str) -> Any:
        return json.loads((blobs / digest[7:]).read_bytes())

    index = read(json.loads((layout / "index.json").read_bytes())["manifests"][0]["digest"])
    meta = read(read(index["manifests"][0]["digest"])["config"]["digest"])
    (art,) = [a for a in meta["artifacts"] if a["kind"] == "machine-image"]
    (att,) = [a for a in art["attestations"] if a["role"] == "pcr-predictions"]
    manifest = read(att["digest"])
    assert manifest["subject"]["digest"] == art["manifest"]["digest"], manifest
    (layer,) = manifest["layers"]
    return blobs / art["primary"]["digest"][7:], read(layer["digest"])


def _tampered(disk: Path, out: Path, tmp: Path) -> tuple[Path, bytes, bytes]:
    """A copy of ``disk`` whose signed UKI (the ESP's GRUBX64.EFI) has one byte changed inside
    its .linux section, which the signature covers; the UKI's Authenticode digest before and
    after (what shim measures into PCR 4)."""
    from nvkr.secureboot.pe import authenticode_digest, pe_sections

    raw = tmp / "tampered.raw"
    subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", disk, raw], check=True)
    esp = f"{raw}@@{2048 * 2 * 512}"  # partition 2 (after the BIOS boot one) at sector 4096
    env = {"MTOOLS_SKIP_CHECK": "1", "PATH": "/usr/bin:/bin"}
    uki = tmp / "uki.efi"
    subprocess.run(["mcopy", "-n", "-i", esp, "::/EFI/BOOT/GRUBX64.EFI", uki], check=True, env=env)
    data = bytearray(uki.read_bytes())
    before = authenticode_digest(bytes(data))
    (linux,) = [s for s in pe_sections(bytes(data)) if s.name == ".linux"]
    data[linux.raw_pointer + (1 << 20)] ^= 1
    uki.write_bytes(data)
    subprocess.run(["mcopy", "-o", "-i", esp, uki, "::/EFI/BOOT/GRUBX64.EFI"], check=True, env=env)
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, out], check=True)
    raw.unlink()
    return out, before, authenticode_digest(bytes(data))


def start_in_background(request: pytest.FixtureRequest) -> BackgroundTest:
    """The test's body, from the session's first test on, once the default build is done."""
    return BackgroundTest.start(request, "secure-boot", _secure_boot, "_default_build_started")


def test_the_default_recipe_with_secure_boot_builds_boots_and_rebuilds_without_the_key(
    _started_in_background: dict[str, BackgroundTest],
) -> None:
    _started_in_background[__name__].check()
