"""Progress read from real tools' output: qemu-img's meter (a real ``qemu-img convert -p``)
and mmdebstrap's phase lines (as a real arm64 rootfs build logged them)."""

from __future__ import annotations

import hashlib
import itertools
import os

from nvkr.disk import qcow2
from nvkr.monitor.tools import MMDEBSTRAP_PHASES, mmdebstrap_lines, qemu_img_lines

# the I: lines of a real `nvkr build` of the default recipe's arm64 rootfs (paths shortened)
MMDEBSTRAP_LOG = """\
I: arm64 cannot be executed natively, but transparently using qemu-user binfmt emulation
I: skipping check/signed-by as requested
I: using /store/tmp/act-7bc5ce1114ba-e366er4j/tmp/mmdebstrap.ytRdqFkxNQ as tempdir
I: running apt-get update...
I: downloading packages with apt...
I: extracting archives...
I: installing essential packages...
I: running --essential-hook directly: /builders/rootfs/defer-initramfs.essential-hook /tmp
I: installing remaining packages inside the chroot...
I: running special hook: sync-in /store/tmp/act-7bc5ce1114ba-e366er4j/overlay /
I: running --customize-hook directly: /builders/rootfs/build-initramfs.customize-hook /tmp
update-initramfs: Generating /boot/initrd.img-6.1.0-57-cloud
I: cleaning package lists and apt cache...
I: creating tarball...
I: done
I: removing tempdir /store/tmp/act-7bc5ce1114ba-e366er4j/tmp/mmdebstrap.ytRdqFkxNQ...
I: success in 1386.4478 seconds
"""


def test_mmdebstrap_phases_count_up_to_done():
    reports = []
    on_line = mmdebstrap_lines(lambda *r: reports.append(r))
    assert not any(on_line(line) for line in MMDEBSTRAP_LOG.splitlines()), "all lines logged"
    assert [r[0] for r in reports] == list(range(1, len(MMDEBSTRAP_PHASES) + 1))
    assert reports[4] == (5, 9, "steps", "installing remaining packages inside the chroot")
    assert reports[-1][3] == "done"


def test_qemu_img_meter_reports_percent_and_changes_no_byte(tmp_path):
    raw = tmp_path / "disk.raw"
    raw.write_bytes(os.urandom(1 << 20) + bytes(3 << 20) + os.urandom(1 << 20))
    plain, metered = tmp_path / "a.qcow2", tmp_path / "b.qcow2"
    qcow2.convert(raw, plain, log_file=tmp_path / "a.log")
    reports = []
    log = tmp_path / "b.log"
    qcow2.convert(raw, metered, log_file=log, on_line=qemu_img_lines(lambda *r: reports.append(r)))
    assert (
        hashlib.sha256(plain.read_bytes()).digest() == hashlib.sha256(metered.read_bytes()).digest()
    )
    assert reports and reports[-1] == (100.0, 100, "percent", "qemu-img convert")
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(reports))
    assert "/100%)" not in log.read_text(), "the meter stays out of the build log"
    assert " -p " in log.read_text()


def test_run_streams_an_isolated_tools_lines_and_keeps_its_timeout(tmp_path):
    """The path the rootfs builder takes: an isolated tool (namespaces of its own) whose lines
    reach ``on_line`` while it runs, all in the log; a timeout still stops it."""
    import time

    import pytest

    from nvkr.errors import ToolError
    from nvkr.run import run

    log = tmp_path / "build.log"
    seen: list[tuple[float, str]] = []
    script = "echo 'I: extracting archives...'; sleep 0.5; echo 'I: done'"
    started = time.monotonic()
    run(
        ["sh", "-c", script],
        log_file=log,
        isolate=True,
        on_line=lambda line: seen.append((time.monotonic() - started, line)) or False,
    )
    assert [line for _, line in seen] == ["I: extracting archives...", "I: done"]
    assert seen[0][0] < 0.4, "the first line arrived while the tool still ran"
    assert log.read_text().endswith("I: extracting archives...\nI: done\n")
    with pytest.raises(ToolError, match="timed out"):
        run(["sleep", "30"], log_file=log, timeout=0.5, on_line=lambda line: False)
