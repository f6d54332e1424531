"""The one subprocess gateway: every external tool nvkr runs goes through :func:`run`.

It logs the exact argv at debug level, passes a pinned environment (``TZ=UTC``,
``LC_ALL=C.UTF-8``, a fixed ``PATH``, ``HOME`` pointing into the work dir, ``umask 022``) plus
what the caller adds, captures output to a log file when asked, and turns a failed tool into one
readable :class:`~nvkr.errors.ToolError` (exit 127 becomes "tool X not found").
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from nvkr.errors import ToolError

log = logging.getLogger("nvkr.run")

FIXED_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def pinned_env(
    extra: Mapping[str, str] | None = None, *, home: Path | None = None
) -> dict[str, str]:
    """The environment every tool gets: nothing inherited but what reproducibility allows.

    Proxy variables are passed through (they choose a route, never the bytes fetched).
    """
    env = {
        "PATH": FIXED_PATH,
        "TZ": "UTC",
        "LC_ALL": "C.UTF-8",
        "LANG": "C.UTF-8",
        "HOME": str(home) if home else "/nonexistent",
    }
    for k in ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        if k in os.environ:
            env[k] = os.environ[k]
    if extra:
        env.update(extra)
    return env


def _umask_022() -> None:
    os.umask(0o022)


def tail(text: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log_file: Path | None = None,
    check: bool = True,
    input: bytes | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` with a pinned environment.

    Args:
        argv: the command; ``argv[0]`` is looked up on the fixed PATH unless it is a path.
        env: the complete environment (use :func:`pinned_env`); defaults to ``pinned_env()``.
        log_file: when given, stdout and stderr are appended to it (and ``.stdout`` is empty);
            otherwise both are captured in the result.
        timeout: seconds before the tool is killed.
    Returns:
        the completed process (stdout/stderr as bytes when captured).
    Raises:
        ToolError: the tool is not installed (exit 127 or ENOENT), or it exited non-zero with
            ``check``; the message holds the command and the tail of its output.
    """
    args = [os.fspath(a) for a in argv]
    env = dict(env) if env is not None else pinned_env()
    log.debug("run: %s (cwd=%s)", shlex.join(args), cwd)
    try:
        if log_file is not None:
            with open(log_file, "ab") as lf:
                lf.write(f"$ {shlex.join(args)}\n".encode())
                lf.flush()
                proc = subprocess.run(
                    args,
                    cwd=cwd,
                    env=env,
                    stdout=lf,
                    stderr=subprocess.STDOUT,
                    input=input,
                    timeout=timeout,
                    preexec_fn=_umask_022,
                    check=False,
                )
        else:
            proc = subprocess.run(
                args,
                cwd=cwd,
                env=env,
                capture_output=True,
                input=input,
                timeout=timeout,
                preexec_fn=_umask_022,
                check=False,
            )
    except FileNotFoundError as e:
        raise ToolError(
            f"tool {args[0]!r} not found", hint="run the README's install command"
        ) from e
    except subprocess.TimeoutExpired as e:
        raise ToolError(f"{shlex.join(args)} timed out after {timeout} s") from e
    if proc.returncode == 127:
        raise ToolError(
            f"tool {args[0]!r} not found (exit 127)", hint="run the README's install command"
        )
    if check and proc.returncode != 0:
        if log_file is not None:
            output = log_file.read_text(errors="replace")
        else:
            output = (proc.stdout or b"").decode(errors="replace") + (proc.stderr or b"").decode(
                errors="replace"
            )
        raise ToolError(
            f"{Path(args[0]).name} exited with {proc.returncode}: {shlex.join(args)}\n{tail(output)}"
        )
    return proc
