"""A boot (:func:`nvkr.machine.boot.boot_test`, :func:`nvkr.machine.cloudinit.boot_with_user_data`
or :func:`nvkr.machine.measured.boot_secure`) in a child Python process, for the session's
background threads (tests/conftest.py, ``_started_in_background``): in the pytest process a boot
would share nvkr's modules with the tests running meanwhile, and the unit tests replace functions
of :mod:`nvkr.machine.boot` and :mod:`nvkr.machine.qemu` while they run (a fake console reader, a
KVM probe that always answers). The child gets the thread's environment
(:func:`tests.helpers.nvkr.thread_env`) and its arguments as JSON on stdin, and prints the result
(or the error) as JSON.

``python -m tests.helpers.boot_child`` is the child's side; :func:`boot_test`,
:func:`boot_with_user_data` and :func:`boot_secure` the parent's.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from tests.helpers import REPO

if TYPE_CHECKING:
    from nvkr.machine.boot import BootResult

#: At most two of the session's background boots at once (two cores). With up to four TCG guests
#: on two cores (the catalog leaf's, the default build's two), a guest's kernel panicked in a
#: clean-clone run: a vCPU jumped into the middle of a static-key NOP while the kernel patched it
#: (QEMU's multi-threaded TCG, its vCPU threads preempted at will); the 15 runs before, with at
#: most two boots at once, never did. A boot in a background thread takes a slot for its run.
BOOT_SLOTS = threading.BoundedSemaphore(2)

#: the keyword arguments that are paths (``drives``, a list of them, too)
PATHS = ("user_data", "meta_data_file", "log_file")


def _in_child(call: str, image: Path, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``call`` (``boot_test`` or ``boot_with_user_data``) of ``image`` in a child process, in
    one of :data:`BOOT_SLOTS`: what it printed, read back.

    Raises:
        AssertionError: the boot failed (the nvkr error's class, message and hint), or the
            child did not print a result (its stderr).
    """
    from tests.helpers.nvkr import thread_env

    args = {k: str(v) if isinstance(v, Path) else v for k, v in kwargs.items()}
    if "drives" in args:
        args["drives"] = [str(d) for d in args["drives"]]
    with BOOT_SLOTS:
        proc = subprocess.run(
            [sys.executable, "-m", "tests.helpers.boot_child"],
            input=json.dumps({"call": call, "image": str(image), **args}),
            capture_output=True,
            text=True,
            cwd=REPO,
            env=thread_env(),
            check=False,
        )
    try:
        out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise AssertionError(f"the boot's child process printed no result: {proc.stderr}") from None
    if "error" in out:
        raise AssertionError(f"{out['type']}: {out['error']} ({out['hint']})")
    return out


def boot_test(image: Path, **kwargs: Any) -> BootResult:
    """:func:`nvkr.machine.boot.boot_test` (``kwargs`` as there, JSON-able) run in a child
    process. Raises AssertionError as :func:`_in_child`."""
    from nvkr.machine.boot import BootResult

    return BootResult(**_in_child("boot_test", image, kwargs)["boot"])


def boot_with_user_data(image: Path, **kwargs: Any) -> SimpleNamespace:
    """:func:`nvkr.machine.cloudinit.boot_with_user_data` (``kwargs`` as there, JSON-able) run
    in a child process. Returns ``boot`` (a :class:`nvkr.machine.boot.BootResult`) and
    ``checks`` (:class:`nvkr.machine.cloudinit.Check`).

    Raises:
        AssertionError: the boot failed (the nvkr error's class, message and hint), or the
            child did not print a result (its stderr).
    """
    from nvkr.machine.boot import BootResult
    from nvkr.machine.cloudinit import Check

    out = _in_child("boot_with_user_data", image, kwargs)
    return SimpleNamespace(
        boot=BootResult(**out["boot"]), checks=[Check(**c) for c in out["checks"]]
    )


def boot_secure(
    image: Path, *, moks: list[Path], db: str = "microsoft", **kwargs: Any
) -> SimpleNamespace:
    """:func:`nvkr.machine.measured.boot_secure` (``kwargs`` as there, JSON-able; ``moks`` and
    ``db`` its :class:`~nvkr.machine.secureboot.SecureBoot`) run in a child process. Returns
    ``boot``, the user-data ``checks``, the ``module_checks`` (:class:`nvkr.machine.cloudinit.
    Check`) and ``secure_boot`` (the result's ``secure_boot_json()``).

    Raises:
        AssertionError: as :func:`boot_with_user_data`.
    """
    from nvkr.machine.boot import BootResult
    from nvkr.machine.cloudinit import Check

    out = _in_child("boot_secure", image, {"moks": [str(m) for m in moks], "db": db, **kwargs})
    return SimpleNamespace(
        boot=BootResult(**out["boot"]), checks=[Check(**c) for c in out["checks"]],
        module_checks=[Check(**c) for c in out["module_checks"]], secure_boot=out["secure_boot"],
    )  # fmt: skip


def main() -> None:
    from nvkr.errors import NvkrError
    from nvkr.machine.boot import boot_test
    from nvkr.machine.cloudinit import boot_with_user_data

    args = json.load(sys.stdin)
    call, image = args.pop("call"), Path(args.pop("image"))
    for key in PATHS:
        if args.get(key) is not None:
            args[key] = Path(args[key])
    if "drives" in args:
        args["drives"] = [Path(d) for d in args["drives"]]
    try:
        if call == "boot_test":
            booted = boot_test(image, **args)
            print(json.dumps({"boot": dataclasses.asdict(booted)}))
            return
        if call == "boot_secure":
            from nvkr.machine.measured import boot_secure
            from nvkr.machine.secureboot import SecureBoot

            keys = SecureBoot(tuple(Path(m) for m in args.pop("moks")), args.pop("db"))
            secured = boot_secure(image, secure_boot=keys, **args)
            print(json.dumps({
                "boot": dataclasses.asdict(secured.boot),
                "checks": [dataclasses.asdict(c) for c in secured.checks],
                "module_checks": [dataclasses.asdict(c) for c in secured.module_checks],
                "secure_boot": secured.secure_boot_json(),
            }))  # fmt: skip
            return
        result = boot_with_user_data(image, **args)
    except NvkrError as e:
        print(json.dumps({"error": e.message, "hint": e.hint, "type": type(e).__name__}))
        return
    print(
        json.dumps(
            {
                "boot": dataclasses.asdict(result.boot),
                "checks": [dataclasses.asdict(c) for c in result.checks],
            }
        )
    )


if __name__ == "__main__":
    main()
