"""The shell every generated job runs (POSIX sh, the same on every platform).

A unit job enables binfmt for foreign arches (a privileged container may register handlers
with the host kernel; the rootfs builder checks with ``arch-test`` and names what is missing),
then runs its ``nvkr build`` with the remote cache: it reads the main cache
(``$NVKR_PIPELINE_CACHE``) and, in a pull request, its own (``$NVKR_PIPELINE_PR_CACHE``), and
writes the pull request's repository when there is one, else the main one, with
``--cache-mode max`` (the next job, on another runner, needs every result). The final job
assembles with ``--cached-only`` from the same caches; on the default branch it also signs and
publishes, a pull request does neither.
"""

from __future__ import annotations

from nvkr.ci import CiOptions

_PR = "NVKR_PIPELINE_PR_CACHE"


def binfmt_lines() -> list[str]:
    """Register qemu-user for the arches the runner is not (no-ops where already done): with
    binfmt-support's ``update-binfmts`` where the image has it (Debian 12's qemu-user-static),
    else by writing the systemd binfmt.d line of Debian 13's qemu-user-binfmt to the kernel (what
    systemd-binfmt does; a job's container runs no systemd)."""
    return [
        "test -e /proc/sys/fs/binfmt_misc/register || "
        "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true",
        "for a in qemu-aarch64 qemu-x86_64; do test -e /proc/sys/fs/binfmt_misc/$a || "
        "update-binfmts --enable $a 2>/dev/null || "
        "grep -h '^:' /usr/lib/binfmt.d/$a.conf > /proc/sys/fs/binfmt_misc/register 2>/dev/null "
        "|| true; done",
    ]


def _reads(options: CiOptions) -> list[str]:
    return [
        '--cache-from "$NVKR_PIPELINE_CACHE"',
        f'${{{_PR}:+--cache-from "${_PR}"}}',
        f"--cache-trust {options.trust}",
        f"${{{_PR}:+--cache-trust {options.pr_trust}}}",
    ]


def unit_lines(args: str, key: str, options: CiOptions) -> list[str]:
    """``nvkr build ARGS`` with the cache flags, one flag per continued line; ``key`` is the
    ``--cache-sign-key`` value (``env://NAME``, or a shell word that expands to one)."""
    flags = [
        "--cache-mode max",
        *_reads(options),
        f'--cache-to "${{{_PR}:-$NVKR_PIPELINE_CACHE}}"',
        f"--cache-sign-key {key}",
    ]
    return _continued(f"nvkr build {args}", flags)


def final_lines(argvs: list[str], key: str, options: CiOptions) -> list[str]:
    """The final job: each recipe's ``nvkr build ... --cached-only``, signed with ``key`` and
    pushed to ``options.push`` unless this is a pull request."""
    release = f"--sign {key}" + (f" --push {options.push}" if options.push else "")
    if options.with_sources:  # the CI image is what a rebuild runs in
        release += f" --with-sources --build-env {options.image}"
    lines = [
        "# a pull request assembles from its caches; only the default branch signs and publishes",
        f'release="{release}"',
        f'test -z "${_PR}" || release=""',
    ]
    for args in argvs:
        lines += _continued(f"nvkr build {args}", [*_reads(options), "$release"])
    return lines


def _continued(command: str, flags: list[str]) -> list[str]:
    return [f"{command} \\", *(f"  {f} \\" for f in flags[:-1]), f"  {flags[-1]}"]
