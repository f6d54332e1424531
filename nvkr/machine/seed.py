"""The NoCloud seed ``nvkr boot-test --user-data`` attaches: a CIDATA volume, the same bytes for
the same inputs.

cloud-init's NoCloud datasource reads ``user-data``, ``meta-data`` and ``vendor-data`` from a
file system labelled ``cidata`` (ds-identify finds it by its label; cloud-init docs,
"NoCloud"). :func:`make_seed` writes one as a FAT12 image: ``mkfs.fat --invariant`` with a volume
id taken from the files' digest, the files copied by ``mcopy -m`` with their mtimes set to
:data:`SEED_EPOCH` (mtools stamps what it makes with ``SOURCE_DATE_EPOCH``), in a fixed order,
under ``TZ=UTC`` (:func:`nvkr.run.pinned_env`), as :mod:`nvkr.disk.fat` makes the ESP.

:func:`meta_data` gives the default meta-data (``instance-id`` from the user-data's digest, so a
changed user-data is a new instance, and a ``local-hostname``); :func:`probe_vendor_data` is the
vendor-data: a shell script cloud-init's ``scripts_vendor`` module runs in its final stage,
which writes and starts (``--no-block``, it runs after ``cloud-final.service`` ends) the unit
that prints the report :mod:`nvkr.machine.cloudinit` reads from the console.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import yaml

from nvkr.bounds import read_limited
from nvkr.bounds.yamldata import load
from nvkr.errors import UsageError
from nvkr.run import pinned_env, run

#: The mtime of the seed's files (FAT cannot hold times before 1980): 2025-12-01T00:00:00Z.
SEED_EPOCH: Final = 1764547200
#: The volume label NoCloud looks for.
SEED_LABEL: Final = "CIDATA"
#: The host name a guest gets when the meta-data names none.
DEFAULT_HOSTNAME: Final = "nvkr-boot-test"
#: Every report line of the probe starts with this (after journald's ``unit[pid]: ``).
PROBE_PREFIX: Final = "nvkr-probe:"
#: The probe's last line.
PROBE_END: Final = rf"{PROBE_PREFIX} end checks=\d+"


def meta_data(user_data: bytes, given: Path | None) -> tuple[bytes, dict[str, object]]:
    """The seed's ``meta-data`` bytes and their mapping: ``given`` as it is, else
    ``instance-id: nvkr-<first 16 hex of the user-data's sha256>`` and ``local-hostname``.

    Raises:
        UsageError: ``given`` is missing, not YAML, or not a mapping (naming file and line).
        LimitError: ``given`` is over a bound of :mod:`nvkr.bounds` (its size, its aliases).
    """
    if given is None:
        iid = "nvkr-" + hashlib.sha256(user_data).hexdigest()[:16]
        data = f"instance-id: {iid}\nlocal-hostname: {DEFAULT_HOSTNAME}\n".encode()
        return data, {"instance-id": iid, "local-hostname": DEFAULT_HOSTNAME}
    try:
        data = read_limited(given, "meta-data")
    except FileNotFoundError:
        raise UsageError(f"{given}: no such meta-data file") from None
    except OSError as e:
        raise UsageError(f"{given}: cannot read the meta-data: {e.strerror}") from e
    try:
        meta = load(data, given) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise UsageError(f"{given}{line}: the meta-data is not valid YAML: {e}") from e
    if not isinstance(meta, dict):
        raise UsageError(
            f"{given}:1: expected a mapping (instance-id, local-hostname, ...), found "
            f"{type(meta).__name__}"
        )
    return data, meta


def probe_vendor_data(paths: list[str], show: Sequence[str] = ()) -> bytes:
    """The vendor-data script: a unit ordered after ``cloud-final.service`` that prints, one
    line each on the console, ``nvkr-probe: file sha256=<hex> mode=<octal> owner=<u:g>
    path=<path>`` (or ``file missing path=<path>``) for ``paths``, the bytes of each file of
    ``show`` that exists as ``nvkr-probe: content path=<path> b64=<base64, 76 characters a
    line>`` lines (the first 64 KiB), ``nvkr-probe: runcmd
    script=present|missing ran=yes|no``, ``nvkr-probe: hostname <name>``, ``nvkr-probe:
    cloud-init <cloud-init status --long --format json, on one line>`` and ``nvkr-probe: end
    checks=<n>``. It leaves the user-data untouched (and runs unless the user-data turns
    vendor-data off)."""
    checks = "\n".join(f"report_file {shlex.quote(p)}" for p in paths)
    checks += "".join(f"\nshow_file {shlex.quote(p)}" for p in show)
    probe = f"""#!/bin/sh
# nvkr boot-test probe: reports what cloud-init did, after cloud-final.service.
p={PROBE_PREFIX}
report_file() {{
    if [ -e "$1" ]; then
        echo "$p file sha256=$(sha256sum < "$1" | cut -d' ' -f1) mode=$(stat -c %a "$1") owner=$(stat -c %U:%G "$1") path=$1"
    else
        echo "$p file missing path=$1"
    fi
}}
show_file() {{
    [ -f "$1" ] || return 0
    head -c 65536 "$1" | base64 -w 76 | while read -r line; do echo "$p content path=$1 b64=$line"; done
}}
{checks}
i=/var/lib/cloud/instance
script=missing; [ -f $i/scripts/runcmd ] && script=present
ran=no; [ -e $i/sem/config_scripts_user ] && ran=yes
echo "$p runcmd script=$script ran=$ran"
echo "$p hostname $(hostname)"
echo "$p cloud-init $(cloud-init status --long --format json 2>&1 | tr -d '\\n')"
echo "$p end checks={len(paths) + 3}"
"""
    unit = """[Unit]
Description=nvkr boot-test probe (what cloud-init did)
After=cloud-final.service

[Service]
Type=oneshot
ExecStart=/bin/sh /run/nvkr-probe.sh
StandardOutput=journal+console
StandardError=journal+console
"""
    return f"""#!/bin/sh
# nvkr boot-test vendor-data: starts the probe once cloud-init's final stage is over.
cat > /run/nvkr-probe.sh <<'NVKR_PROBE'
{probe}NVKR_PROBE
cat > /run/systemd/system/nvkr-probe.service <<'NVKR_UNIT'
{unit}NVKR_UNIT
systemctl start --no-block nvkr-probe.service
""".encode()


def multipart(parts: Sequence[tuple[str, str, bytes]]) -> bytes:
    """A MIME multipart of ``(content type, file name, bytes)`` parts, as cloud-init reads
    user-data and vendor-data made of several parts (``text/cloud-boothook``,
    ``text/x-shellscript``...); its boundary comes from the parts' digest, so the same parts
    give the same bytes."""
    digest = hashlib.sha256()
    for ctype, name, body in parts:
        digest.update(f"{ctype}\0{name}\0".encode() + hashlib.sha256(body).digest())
    boundary = f"nvkr-{digest.hexdigest()[:32]}"
    out = [f'Content-Type: multipart/mixed; boundary="{boundary}"\nMIME-Version: 1.0\n\n']
    for ctype, name, body in parts:
        out.append(f'--{boundary}\nContent-Type: {ctype}; charset="utf-8"\nMIME-Version: 1.0\n'
                   "Content-Transfer-Encoding: 8bit\n"
                   f'Content-Disposition: attachment; filename="{name}"\n\n')  # fmt: skip
        out.append(body.decode() + ("" if body.endswith(b"\n") else "\n"))
    out.append(f"--{boundary}--\n")
    return "".join(out).encode()


def boothook_parts(boothooks: Sequence[bytes]) -> list[tuple[str, str, bytes]]:
    """``boothooks`` (``#cloud-boothook`` scripts) as :func:`multipart`'s parts, named in order
    (cloud-init runs a multipart's boot hooks one after another, in order)."""
    return [("text/cloud-boothook", f"nvkr-boothook-{n}", hook)
            for n, hook in enumerate(boothooks, 1)]  # fmt: skip


def boothooks_vendor_data(boothooks: Sequence[bytes]) -> bytes:
    """Vendor-data running ``boothooks``: the one boot hook as it is, several as a multipart."""
    return boothooks[0] if len(boothooks) == 1 else multipart(boothook_parts(boothooks))


def make_seed(
    image: Path, files: dict[str, bytes], *, workdir: Path, log_file: Path | None = None
) -> None:
    """Write ``image``: a FAT volume labelled :data:`SEED_LABEL` holding ``files`` (name ->
    bytes: ``user-data``, ``meta-data``, ``vendor-data``); the same ``files`` give the same
    bytes.

    Raises:
        ToolError: mkfs.fat or mtools failed or are missing (Debian: dosfstools, mtools).
    """
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    total = sum(len(d) for d in files.values())
    mib = 1024 * 1024
    size = (total * 2 // mib + 2) * mib  # room for the FATs and clusters, in whole MiB
    with open(image, "wb") as f:
        f.truncate(size)
    env = pinned_env(
        {"SOURCE_DATE_EPOCH": str(SEED_EPOCH), "MTOOLS_SKIP_CHECK": "1", "MTOOLSRC": "/dev/null"},
        home=workdir,
    )
    run(
        ["mkfs.fat", "--invariant", "-i", digest.hexdigest()[:8], "-n", SEED_LABEL, str(image)],
        env=env, log_file=log_file,
    )  # fmt: skip
    staging = workdir / "seed-files"
    staging.mkdir(exist_ok=True)
    for name in sorted(files):
        src = staging / name
        src.write_bytes(files[name])
        os.utime(src, (SEED_EPOCH, SEED_EPOCH))
        run(["mcopy", "-m", "-i", str(image), str(src), f"::/{name}"], env=env, log_file=log_file)
