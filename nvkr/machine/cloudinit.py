"""Boot tests with user-data: a NoCloud seed, and a check of what cloud-init did in the guest.

:func:`boot_with_user_data` validates the user-data (:func:`nvkr.machine.userdata.load_user_data`,
before anything boots), builds the seed (:func:`nvkr.machine.seed.make_seed`: user-data as given,
meta-data, the probe as vendor-data), boots the image with it through
:func:`nvkr.machine.boot.boot_test` (``wait_for`` the probe's last line, which may come before or
after the agent's readiness line), and checks the probe's report (:func:`check_report`):
cloud-init's status is ``done`` with no errors, each ``write_files`` entry is there with its
content, mode and owner, the ``runcmd`` script ran, each ``--expect-file`` exists (checked inside
the running guest: ``/run`` is a tmpfs), and the host name is the meta-data's ``local-hostname``.

``nvkr boot-test --user-data`` calls it per image; tests call it directly with the same options.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.errors import BootTestError, UsageError
from nvkr.machine.boot import BootResult, boot_test
from nvkr.machine.seed import (
    PROBE_END,
    PROBE_PREFIX,
    boothook_parts,
    make_seed,
    meta_data,
    multipart,
    probe_vendor_data,
)
from nvkr.machine.userdata import FileExpectation, UserData, load_user_data

#: Console seconds the probe's report may take after the agent's readiness line (cloud-init's
#: final stage runs after multi-user.target; under TCG on a loaded host it takes minutes).
REPORT_TIMEOUT = 900.0

_LINE = re.compile(re.escape(PROBE_PREFIX) + r" (\S+) ?(.*)$")
_FILE = re.compile(r"^(?:sha256=(\S+) mode=(\S+) owner=(\S+) |(missing) )path=(.*)$")
_CONTENT = re.compile(r"^path=(.*) b64=([A-Za-z0-9+/=]*)$")


@dataclass(frozen=True)
class Check:
    """One thing the user-data asked for: ``what`` (``file /path``, ``runcmd``, ``cloud-init``,
    ``hostname``), whether it is ``ok``, and ``detail`` (what was found, or expected)."""

    what: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.what, "ok": self.ok, "detail": self.detail}


@dataclass(frozen=True)
class UserDataResult:
    """A boot with user-data: the ``boot`` result, the ``user_data``, the ``meta`` data given,
    the ``checks`` (all ok, else :func:`boot_with_user_data` raised)."""

    boot: BootResult
    user_data: UserData
    meta: dict[str, Any]
    checks: list[Check]


def parse_report(lines: Sequence[str]) -> dict[str, Any]:
    """The probe's report in console ``lines``: ``{"files": {path: {"sha256", "mode", "owner"}
    or None when missing}, "contents": {path: bytes} (the files it was asked to show),
    "runcmd": {"script", "ran"}, "hostname": str, "cloud-init": dict, "end": bool}``."""
    report: dict[str, Any] = {"files": {}, "end": False}
    shown: dict[str, list[str]] = {}
    for line in lines:
        m = _LINE.search(line)
        if m is None:
            continue
        kind, rest = m.groups()
        if kind == "file" and (f := _FILE.match(rest)):
            sha, mode, owner, missing, path = f.groups()
            report["files"][path] = None if missing else {"sha256": sha, "mode": int(mode, 8),
                                                          "owner": owner}  # fmt: skip
        elif kind == "content" and (c := _CONTENT.match(rest)):
            shown.setdefault(c.group(1), []).append(c.group(2))
        elif kind == "runcmd":
            report["runcmd"] = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
        elif kind == "hostname":
            report["hostname"] = rest.strip()
        elif kind == "cloud-init":
            try:
                report["cloud-init"] = json.loads(rest)
            except ValueError:
                report["cloud-init"] = {"status": "unreadable", "errors": [rest[:200]]}
        elif kind == "end":
            report["end"] = True
    report["contents"] = {path: base64.b64decode("".join(b64)) for path, b64 in shown.items()}
    return report


def _file_check(want: FileExpectation, found: dict[str, Any] | None) -> Check:
    where = f" (user-data line {want.line})" if want.line else " (--expect-file)"
    if found is None:
        return Check(f"file {want.path}", False, "missing" + where)
    wrong = []
    if want.sha256 is not None and found["sha256"] != want.sha256:
        wrong.append(f"sha256 {found['sha256'][:16]}… (expected {want.sha256[:16]}…)")
    if want.mode is not None and found["mode"] != want.mode:
        wrong.append(f"mode {found['mode']:04o} (expected {want.mode:04o})")
    if want.owner is not None and found["owner"] != want.owner:
        wrong.append(f"owner {found['owner']} (expected {want.owner})")
    if wrong:
        return Check(f"file {want.path}", False, ", ".join(wrong) + where)
    return Check(f"file {want.path}", True, f"mode {found['mode']:04o} {found['owner']} "
                 f"sha256 {found['sha256'][:16]}…")  # fmt: skip


def check_report(
    report: dict[str, Any], user_data: UserData, meta: dict[str, Any], expect_files: Sequence[str]
) -> list[Check]:
    """What the user-data asked for against what the probe found, one :class:`Check` each."""
    checks = []
    status = report.get("cloud-init") or {"status": "no report", "errors": []}
    errors = status.get("errors") or []
    ok = status.get("status") == "done" and not errors
    detail = f"status {status.get('status')}" + (f", errors: {'; '.join(map(str, errors))}"
                                                 if errors else "")  # fmt: skip
    if status.get("detail"):
        detail += f" ({status['detail']})"
    checks.append(Check("cloud-init", ok, detail))
    wanted = list(user_data.files)
    wanted += [FileExpectation(p, None, None, None) for p in expect_files]
    checks += [_file_check(w, report["files"].get(w.path)) for w in wanted]
    if user_data.runcmd:
        run = report.get("runcmd") or {}
        ran = run.get("script") == "present" and run.get("ran") == "yes"
        checks.append(Check("runcmd", ran, f"script {run.get('script')}, ran {run.get('ran')}"))
    name = meta.get("local-hostname")
    if name:
        got = report.get("hostname")
        checks.append(Check("hostname", got == name, f"{got} (meta-data local-hostname {name})"))
    return checks


def boot_with_user_data(
    image: Path,
    *,
    user_data: Path,
    meta_data_file: Path | None = None,
    expect_files: Sequence[str] = (),
    show_files: Sequence[str] = (),
    arch: str = "amd64",
    report_timeout: float = REPORT_TIMEOUT,
    boothooks: Sequence[bytes] = (),
    **boot_options: Any,
) -> UserDataResult:
    """Boot ``image`` with a NoCloud seed of ``user_data`` (and ``meta_data_file``, default
    :func:`nvkr.machine.seed.meta_data`) and check what cloud-init did.

    Args:
        expect_files: paths the user-data's commands should leave (checked in the running
            guest, so files in ``/run`` count).
        show_files: paths whose bytes the probe prints too (base64, the first 64 KiB):
            :func:`parse_report`'s ``contents`` of ``result.boot.lines``.
        report_timeout: seconds the probe's report may take after the boot's other lines.
        boothooks: ``#cloud-boothook`` parts of nvkr's own (:func:`nvkr.machine.tpmprobe.
            boothook`, :func:`nvkr.machine.moduleprobe.boothook`) that the vendor-data carries
            before the probe (a MIME multipart): the user-data stays as given.
        boot_options: the rest of :func:`nvkr.machine.boot.boot_test`'s keyword arguments
            (``expect``, ``then``, ``timeout``, ``accel``, ``log_file``, ``event``, ...).
    Returns:
        a :class:`UserDataResult` whose checks all passed.
    Raises:
        UsageError: the user-data or meta-data is invalid (before any boot).
        BootTestError: the boot failed, the report did not come, or a check failed (the
            message lists each failed check).
    """
    raw = _read(user_data)
    meta_bytes, meta = meta_data(raw, meta_data_file)
    loaded = load_user_data(user_data, meta, arch=arch, image=image)
    paths = sorted({f.path for f in loaded.files} | set(expect_files))
    with tempfile.TemporaryDirectory(prefix="nvkr-seed-") as tmp:
        seed = Path(tmp) / "seed.img"
        vendor = probe_vendor_data(paths, show_files)
        if boothooks:
            vendor = multipart([*boothook_parts(boothooks),
                                ("text/x-shellscript", "nvkr-probe", vendor)])  # fmt: skip
        files = {"user-data": raw, "meta-data": meta_bytes, "vendor-data": vendor}
        make_seed(seed, files, workdir=Path(tmp))
        boot_options.setdefault("then_timeout", report_timeout)
        waits = [*boot_options.pop("wait_for", ()), PROBE_END]
        result = boot_test(image, arch=arch, drives=[seed], wait_for=waits, **boot_options)
    report = parse_report(result.lines)
    checks = check_report(report, loaded, meta, expect_files)
    failed = [c for c in checks if not c.ok]
    if failed:
        log = boot_options.get("log_file")
        raise BootTestError(
            f"{image} booted, but cloud-init did not do what {user_data} asks: "
            + "; ".join(f"{c.what}: {c.detail}" for c in failed),
            hint=f"the guest's console is in {log}" if log else None,
        )
    return UserDataResult(result, loaded, meta, checks)


def _read(path: Path) -> bytes:
    """The user-data's bytes, as the seed holds them.

    Raises:
        UsageError: the file is missing or unreadable.
    """
    try:
        from nvkr.bounds import read_limited

        return read_limited(path, "user-data")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such user-data file") from None
    except OSError as e:
        raise UsageError(f"{path}: cannot read the user-data: {e.strerror}") from e
