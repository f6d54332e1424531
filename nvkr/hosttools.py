"""Versions of the host's Debian-packaged tools (mmdebstrap, e2fsprogs, qemu-utils, ...).

Builders that run host tools put their versions into the action key, so an upgraded tool means a
rebuild. The versions come from dpkg's status file, read once per process: planning stays free of
subprocesses and a no-op build stays fast.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from nvkr.errors import ToolError

DPKG_STATUS = Path("/var/lib/dpkg/status")


@functools.cache
def _installed(status: Path = DPKG_STATUS) -> dict[str, str]:
    versions: dict[str, str] = {}
    try:
        text = status.read_text(errors="replace")
    except OSError:
        return versions
    for block in re.split(r"\n\s*\n", text):
        pkg = re.search(r"^Package: (\S+)", block, re.M)
        ver = re.search(r"^Version: (\S+)", block, re.M)
        st = re.search(r"^Status: (.+)$", block, re.M)
        if pkg and ver and st and st.group(1).strip().endswith(" installed"):
            versions[pkg.group(1)] = ver.group(1)
    return versions


def package_version(package: str, *, purpose: str) -> str:
    """The installed version of Debian package ``package`` (e.g. ``"1.3.5-2"``).

    Args:
        purpose: what needs it, for the message (e.g. ``"the rootfs builder"``).
    Raises:
        ToolError: the package is not installed (names it and what needs it).
    """
    version = _installed().get(package)
    if version is None:
        raise ToolError(
            f"{purpose} needs the Debian package {package!r}, which is not installed",
            hint=f"apt-get install --no-install-recommends {package} (or run ./install.sh)",
        )
    return version
