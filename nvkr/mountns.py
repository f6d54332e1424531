"""Running a command chrooted into a tree, with mounts that cannot outlive it.

A builder that runs tools from a tree of its own (a cgo build's compiler from a tools tree) must
not see the host's ``/usr`` and must never leave a mount behind, whatever kills it. So every
mount is made inside fresh namespaces (``unshare --mount --propagation private --pid --fork
--kill-child --net``): the mounts exist only in a mount namespace that dies with its last
process, nothing propagates to the host's, and the build's processes live in their own PID
namespace, all killed when its first process (or the ``unshare`` above it, through
``--kill-child``) dies; the network namespace has only a loopback interface that is down (build
actions get no network). As root the namespaces are plain ones; otherwise a user namespace maps
the caller to root (where the kernel allows unprivileged user namespaces).

Inside, the tree is bind-mounted read-only (a shared, cached tree stays as it was unpacked),
with a private ``/proc``, a ``/dev`` holding only ``null``, ``zero``, ``full``, ``random`` and
``urandom`` (the host's nodes, bound), and a fresh tmpfs on ``/tmp`` under which the caller's
directories are bound (:class:`Bind`). :func:`chroot_argv` is the one place that mounts.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

#: The device nodes a compiler and the Go tool use (the host's, bound over empty files).
DEV_NODES = ("null", "zero", "full", "random", "urandom")


@dataclass(frozen=True)
class Bind:
    """The host directory ``source`` seen at ``target`` (an absolute path under ``/tmp``) in
    the tree; read-only unless ``writable``."""

    source: Path
    target: str
    writable: bool = False


def chroot_argv(
    tree: Path, mountpoint: Path, binds: Sequence[Bind], argv: Sequence[str], *, cwd: str
) -> list[str]:
    """The command that runs ``argv`` in ``cwd`` chrooted into ``tree`` (module doc).

    Args:
        tree: the root file system (needs ``/proc``, ``/dev``, ``/tmp`` and ``/usr/bin/env``).
        mountpoint: an empty host directory the tree is bound on inside the namespace (a
            per-action one, e.g. in the work dir; on the host it stays empty).
        binds: directories to bind under ``/tmp`` (created in its tmpfs).
        argv: the command, as the tree sees it; its environment is the caller's (pass one
            whose paths are paths in the tree).
    Returns:
        an argv for :func:`nvkr.run.run`: ``unshare ... -- /bin/sh -c SCRIPT`` (the script is
        logged with it: every mount, then ``exec chroot``).
    Raises:
        ValueError: a bind target that is not an absolute path under ``/tmp``.
    """
    root = shlex.quote(str(mountpoint))

    def inside(path: str) -> str:
        return shlex.quote(str(mountpoint) + path)

    lines = [
        "set -eu",
        f"mount --bind {shlex.quote(str(tree))} {root}",
        f"mount -o remount,bind,ro,nosuid,nodev {root}",
        f"mount -t proc -o nosuid,nodev,noexec proc {inside('/proc')}",
        f"mount -t tmpfs -o mode=0755,nosuid,size=1m nvkr-dev {inside('/dev')}",
    ]
    for node in DEV_NODES:
        lines += [
            f": > {inside('/dev/' + node)}",
            f"mount --bind /dev/{node} {inside('/dev/' + node)}",
        ]
    lines.append(f"mount -t tmpfs -o mode=1777,nosuid,nodev nvkr-tmp {inside('/tmp')}")
    for bind in binds:
        target = PurePosixPath(bind.target)
        if not target.is_absolute() or ".." in target.parts or target.parts[:2] != ("/", "tmp"):
            raise ValueError(f"bind target {bind.target!r} is not an absolute path under /tmp")
        lines += [
            f"mkdir -p {inside(str(target))}",
            f"mount --bind {shlex.quote(str(bind.source))} {inside(str(target))}",
        ]
        if not bind.writable:
            lines.append(f"mount -o remount,bind,ro {inside(str(target))}")
    lines.append(
        f"exec chroot {root} /usr/bin/env --chdir={shlex.quote(cwd)} "
        + " ".join(shlex.quote(a) for a in argv)
    )
    unshare = ["unshare", "--mount", "--propagation", "private", "--pid", "--fork"]
    unshare += ["--kill-child", "--net"]
    if os.geteuid() != 0:
        unshare += ["--user", "--map-root-user"]
    return [*unshare, "--", "/bin/sh", "-c", "\n".join(lines)]
