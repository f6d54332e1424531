"""The .debs of the lockfile a foreign-architecture tree runs natively on an x86-64 host.

A tree for another arch (arm64) is built under qemu-user; its perl and python are the slowest
programs its maintainer scripts start. Where the lockfile also pins the amd64 build of the
tree's own versions of them (a recipe whose matrix has both arches), the rootfs builder takes
those .debs and runs them natively (:mod:`nvkr.builders.rootfs.native`), and ``nvkr mirror
export`` exports them beside the tree's own (:mod:`nvkr.airgap.export`): both ask
:func:`wanted_debs` which they are and :meth:`nvkr.lock.Resolver.locked_debs` for them.
"""

from __future__ import annotations

import re
from typing import Any

#: The arch of the .debs a foreign tree's interpreters are taken from (an x86-64 host's).
LOCK_ARCH = "amd64"
#: Per interpreter, the packages it needs from the lockfile at the tree's own versions: its
#: program's (perl-base; python's is the tree's ``python3.X-minimal``) and the libraries that
#: program loads besides libc6 (always taken: its loader and C library are the programs').
PERL_DEBS = ("perl-base", "libcrypt1")
PYTHON_LIBS = ("libexpat1", "zlib1g")
LIBC = "libc6"
PYTHON_MINIMAL = re.compile(r"python(3\.\d+)-minimal")
#: The tree's libperl (the ``perl`` package's XS modules, under ``perl/<version>``): taken too
#: when the tree holds it, as those modules must be the native perl's build.
LIBPERL = re.compile(r"libperl5\.\d+")


def python_package(locked: dict[str, str]) -> str | None:
    """The tree's ``python3.X-minimal`` package, or None."""
    return next((n for n in sorted(locked) if PYTHON_MINIMAL.fullmatch(n)), None)


def wanted_debs(packages: list[dict[str, Any]]) -> dict[str, str]:
    """The amd64 .debs (name → the tree's version) whose perl and python a foreign tree of the
    locked ``packages`` runs natively when the lockfile pins them all: perl-base, libcrypt1
    (and the tree's libperl5.X), the tree's python3.X-minimal with libexpat1 and zlib1g, and
    libc6; only those the tree holds itself (no perl-base: none)."""
    locked = {str(p.get("name")): str(p.get("version")) for p in packages}
    if PERL_DEBS[0] not in locked:
        return {}
    names = list(PERL_DEBS) + [n for n in locked if LIBPERL.fullmatch(n)]
    python = python_package(locked)
    if python is not None:
        names += [python, *PYTHON_LIBS]
    return {n: locked[n] for n in [*names, LIBC] if n in locked}
