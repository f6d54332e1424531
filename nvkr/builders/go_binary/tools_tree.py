"""Tools trees: a ``rootfs`` artifact of locked Debian packages as the C toolchain of a cgo build.

A ``go-binary`` artifact with ``cgo: true`` names one (``toolsTree``). At plan time
:func:`c_toolchain` reads the tree's locked apt closure: the compiler driver for the target
(``gcc`` when the tree's arch is the target's, else the cross compiler ``aarch64-linux-gnu-gcc``
or ``x86_64-linux-gnu-gcc``), and the packages whose files make a cgo binary's bytes (compiler,
assembler and linker, the target's C library headers and start files, libgcc, kernel headers)
with their versions, which go into the action's ``tools``, its record and the binary's SBOM.
The action depends on the rootfs action, whose key covers every .deb of the tree, so two trees
give two keys. At run time :func:`unpack_tree` caches the rootfs tar unpacked under the store's
``tools/<hex>/tree`` and the build runs chrooted into it (:mod:`nvkr.mountns`): the host's
compiler, headers and libc are never seen.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvkr.run import run
from nvkr.store import Store

#: GNU triplets of the variant arches (Debian's multiarch names).
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}


@dataclass(frozen=True)
class CToolchain:
    """The C toolchain of a tools tree for one target.

    ``cc``: the compiler driver on the tree's ``PATH`` (Go's ``CC``); ``packages``: name →
    version of the locked packages that make the bytes; ``missing``: the packages the target
    needs that the tree lacks (the driver and the C library's development files).
    """

    cc: str
    packages: dict[str, str]
    missing: tuple[str, ...]


def _patterns(tree_arch: str, target: str) -> tuple[str, list[str], list[str]]:
    """``(cc, required package names, package name patterns)`` for ``target`` on a tree of
    ``tree_arch`` (Debian's names: ``gcc-12`` holds cc1, ``binutils-<triplet>`` as and ld, ...)."""
    triplet = TRIPLETS[target]
    binutils = f"binutils-{triplet.replace('_', '-')}"
    if tree_arch == target:
        required = ["gcc", "libc6-dev"]
        patterns = ["gcc", r"gcc-\d+", r"cpp-\d+", "binutils", binutils, "libc6", "libc6-dev"]
        patterns += [r"libgcc-\d+-dev", "linux-libc-dev"]
        return "gcc", required, patterns
    cross = f"{target}-cross"
    required = [f"gcc-{triplet}", f"libc6-dev-{cross}"]
    patterns = [f"gcc-{triplet}", rf"gcc-\d+-{triplet}", rf"cpp-\d+-{triplet}", binutils]
    patterns += [f"libc6-{cross}", f"libc6-dev-{cross}", rf"libgcc-\d+-dev-{cross}"]
    patterns += [f"linux-libc-dev-{cross}"]
    return f"{triplet}-gcc", required, patterns


def c_toolchain(packages: Iterable[Mapping[str, Any]], tree_arch: str, target: str) -> CToolchain:
    """The C toolchain for ``target`` (a variant arch) in a tree of ``tree_arch`` whose locked
    closure is ``packages`` (``{"name", "version", ...}`` each, as :mod:`nvkr.fetch.apt`
    records them). See :class:`CToolchain`; nothing raises, the caller reports ``missing``."""
    cc, required, patterns = _patterns(tree_arch, target)
    wanted = re.compile("|".join(f"(?:{p})" for p in patterns))
    versions = {str(p["name"]): str(p["version"]) for p in packages}
    chosen = {n: v for n, v in sorted(versions.items()) if wanted.fullmatch(n)}
    missing = tuple(n for n in required if n not in versions)
    return CToolchain(cc, chosen, missing)


def tree_c_toolchain(packages: Iterable[Mapping[str, Any]], tree_arch: str) -> dict[str, str]:
    """name → version of the packages of a tree's closure that belong to its C toolchain for
    any target it can build for (the lockfile's summary of a tools tree)."""
    found: dict[str, str] = {}
    listed = list(packages)
    for target in TRIPLETS:
        toolchain = c_toolchain(listed, tree_arch, target)
        if not toolchain.missing:
            found.update(toolchain.packages)
    return dict(sorted(found.items()))


def unpack_tree(store: Store, tar_digest: str) -> Path:
    """The rootfs tar ``tar_digest`` unpacked once into ``tools/<hex>/tree``; returns that path.

    GNU tar with numeric owners and permissions; ``/dev`` is left empty (the build gets the
    host's null, zero and random nodes bound there), so a tree unpacks without creating device
    nodes, as root or not.

    Raises:
        ToolError: tar failed. IntegrityError: the tar holds no ``usr/bin/env``.
    """

    def unpack(tmp: Path) -> None:
        tree = tmp / "tree"
        tree.mkdir()
        run(
            [
                "tar",
                "--numeric-owner",
                "--exclude=./dev/*",
                "-xpf",
                store.blob_path(tar_digest),
                "-C",
                tree,
            ]
        )

    return store.unpacked(tar_digest, unpack, check="tree/usr/bin/env") / "tree"
