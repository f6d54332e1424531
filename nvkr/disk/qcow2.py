"""The raw disk file converted to QCOW2 with ``qemu-img``, uncompressed and with every format
option pinned, so the bytes depend on the raw image alone (not on qemu-img's defaults); then
checked with ``qemu-img check``. The output appears under its name only once it is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from nvkr.errors import IntegrityError
from nvkr.run import pinned_env, run, tail

#: QCOW2 v3 with qemu 7.2's defaults written out. No compression: compressed clusters depend on
#: zlib's version and on qemu-img's parallel writes.
QCOW2_OPTIONS = (
    "compat=1.1,cluster_size=65536,refcount_bits=16,lazy_refcounts=off,"
    "extended_l2=off,preallocation=off,compression_type=zlib"
)


def convert(
    raw: Path,
    out: Path,
    *,
    log_file: Path | None = None,
    on_line: Callable[[str], bool] | None = None,
) -> int:
    """Convert the raw disk ``raw`` into the QCOW2 file ``out``; returns its size in bytes.

    Written to a temporary name in ``out``'s directory, checked, then renamed over ``out``.
    With ``on_line`` (and ``log_file``) qemu-img runs with ``-p`` and its output goes through
    it (:func:`nvkr.monitor.tools.qemu_img_lines` reads the percentage); ``-p`` changes no byte
    of the image.

    Raises:
        IntegrityError: ``qemu-img check`` finds the new image corrupt or leaking clusters, or
            its virtual size differs from the raw file's size.
        ToolError: qemu-img failed or is missing (Debian package qemu-utils).
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    env = pinned_env()
    try:
        meter = ["-p"] if on_line is not None and log_file is not None else []
        run(
            ["qemu-img", "convert", *meter, "-f", "raw", "-O", "qcow2", "-o", QCOW2_OPTIONS,
             str(raw), str(tmp)],
            env=env,
            log_file=log_file,
            on_line=on_line,
        )  # fmt: skip
        check = run(
            ["qemu-img", "check", "-f", "qcow2", "--output=json", str(tmp)], env=env, check=False
        )
        if check.returncode != 0:
            raise IntegrityError(
                f"qemu-img check found the new image for {out} damaged "
                f"(exit {check.returncode}):\n"
                + tail((check.stdout + check.stderr).decode(errors="replace"))
            )
        info = json.loads(
            run(["qemu-img", "info", "-f", "qcow2", "--output=json", str(tmp)], env=env).stdout
        )
        if info.get("virtual-size") != raw.stat().st_size:
            raise IntegrityError(
                f"the QCOW2 for {out} has virtual size {info.get('virtual-size')}, "
                f"the raw disk {raw.stat().st_size} bytes"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    return out.stat().st_size
