"""``nvkr boot-test --secure-boot --tpm`` of a release set: the guest's PCRs against the image's
PCR predictions attestation (nvkr.machine.predicted), compared only where the boot is the one
the predictions state. The real boot's comparison: tests/integration/test_secure_boot.py."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from nvkr.cli.boot_test import _images_of_set
from nvkr.errors import BootTestError
from nvkr.machine.predicted import compare
from nvkr.machine.secureboot import VARS, Mok
from nvkr.monitor.events import BootImageResult
from nvkr.monitor.lines import _image_result_lines
from tests.unit.test_secure_boot_predictions import PCRS, _build

MOK = Mok(Path("owner.crt"), b"owner certificate", "CN=nvkr test owner")
GUEST = {4: "ab" * 32, 7: "cd" * 32, 11: "ef" * 32, 5: "01" * 32}


def _predicate(**firmware: Any) -> dict[str, Any]:
    store = Path(VARS["amd64"][0]).read_bytes()  # install.sh installs ovmf
    stated = {"package": "ovmf", "version": "2025.02-8",
              "variableStoreDigest": "sha256:" + hashlib.sha256(store).hexdigest(),
              "mokList": [{"owner": "x", "certificate": "sha256:" + MOK.sha256}]}  # fmt: skip
    return {"firmware": {**stated, **firmware}, "phase": "after-stub", "pcrs": PCRS}


def test_a_release_sets_image_carries_its_predictions(tmp_path: Path) -> None:
    layout = _build(tmp_path)
    (image,) = _images_of_set(layout, None, None)
    assert image["predictions"]["pcrs"] == PCRS and image["predictions"]["phase"] == "after-stub"


def test_the_guests_pcrs_equal_the_predictions_or_each_difference_is_named() -> None:
    done = compare(_predicate(), GUEST, arch="amd64", db="microsoft", moks=[MOK])
    assert done == {"compared": True, "phase": "after-stub", "pcrs": PCRS}
    with pytest.raises(BootTestError) as e:
        compare(_predicate(), {**GUEST, 7: "00" * 32}, arch="amd64", db="microsoft", moks=[MOK],
                where="the guest (node-image)")  # fmt: skip
    assert e.value.message == (
        "the guest's PCRs are not the release set's predictions: PCR 7: the guest (node-image) "
        f"{'00' * 32}, predicted {'cd' * 32}"
    )
    assert "TPM event log" in str(e.value.hint)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            {"db": "uefi23"},
            "the boot's db is uefi23, the predictions are for Microsoft's 2011 keys",
        ),
        ({"moks": []}, "the MOKs enrolled (0) are not the stated MokList (1)"),
        ({"variableStoreDigest": "sha256:" + "0" * 64}, "is not the stated variable store"),
    ],
)
def test_a_boot_other_than_the_stated_one_is_not_compared_and_says_why(
    change: dict[str, Any], reason: str
) -> None:
    predicate = _predicate(**{k: v for k, v in change.items() if k == "variableStoreDigest"})
    options: dict[str, Any] = {"db": "microsoft", "moks": [MOK]}
    options.update({k: v for k, v in change.items() if k in options})
    done = compare(predicate, {**GUEST, 7: "00" * 32}, arch="amd64", **options)
    assert done["compared"] is False and reason in done["reason"], done


def test_the_text_result_shows_the_pcrs_and_the_comparison() -> None:
    tpm = {"pcrs": {str(n): v for n, v in GUEST.items()}, "replayed": [4, 5, 7, 11],
           "eventLog": {"sha256": "12" * 32, "events": [], "file": "x.eventlog"},
           "predictions": compare(_predicate(), GUEST, arch="amd64", db="microsoft", moks=[MOK])}  # fmt: skip
    result = BootImageResult("node-image", None, True, "tcg", "x.log", line="ready", tpm=tpm)
    lines = _image_result_lines(result)
    assert (
        f"   tpm: PCRs (sha256) 4={'ab' * 8}… 5={'01' * 8}… 7={'cd' * 8}… 11={'ef' * 8}…" in lines
    )
    assert "   tpm: PCRs 4,7,11 equal the release set's predictions (phase after-stub)" in lines
    tpm["predictions"] = {"compared": False, "reason": "the boot's db is win23"}
    lines = _image_result_lines(result._replace(tpm=tpm))
    assert lines[-1] == "   tpm: not compared with the predictions: the boot's db is win23"
    assert json.dumps(result.to_json())  # JSON-able


def test_the_lockdown_mode_is_the_one_a_guest_report_read() -> None:
    """``secureBoot.lockdown`` is a string whether or not a report read it (it was ``true``
    without ``--tpm`` and the mode with it)."""
    from nvkr.machine import moduleprobe
    from nvkr.machine.measured import SecureBootResult

    console: dict[str, Any] = {"lines": []}
    boot: Any = None
    bare = SecureBootResult(boot, [MOK], "microsoft", console)
    assert bare.secure_boot_json()["lockdown"] == "on"
    report = moduleprobe.Report("6.12", "none [integrity] confidentiality", [], "", True)
    probed = SecureBootResult(boot, [MOK], "microsoft", console, modules=report)
    assert probed.secure_boot_json()["lockdown"] == "integrity"
