"""A stand-in for SPIRE's release archives, with the upstream's names and layout.

No SPIRE binary is on any registry reachable from the test machines (GitHub is not), so tests serve
``spire-{version}-linux-{arch}-musl.tar.gz`` and its ``spire-{version}-linux-{arch}-musl_sha256sum.txt``
(``<hex>  <archive name>``, as upstream publishes it) under the release's GitHub path, beside the
Kubernetes stand-ins of :mod:`tests.helpers.k8smirror`. The archive holds what the real one holds
where nvkr looks: ``spire-{version}/bin/spire-agent`` and ``spire-{version}/bin/spire-server``, the
sample ``conf/`` and the licence, as a deterministic tar.gz.

Its spire-agent is a POSIX shell script (:func:`agent_standin`). ``spire-agent run -config FILE
-expandEnv`` expands the environment into the configuration as the real agent does, checks what
the real one needs before it dials a server (a trust domain, the server's address and port, a
readable trust bundle, a join token for the join_token attestor), writes the expanded
configuration to :data:`EXPANDED` and stays up; anything missing makes it exit 1 with the field
named, so its unit fails. It cannot attest: there is no SPIRE server here.
"""

from __future__ import annotations

import hashlib
import re
import string
from pathlib import Path

from tests.helpers.k8smirror import deterministic_tar_gz

VERSION = "1.15.3"
#: Where the stand-in writes the configuration it was given, expanded (a tmpfs in the guest).
EXPANDED = "/run/spire/agent/nvkr-standin-agent.conf"


def archive_name(version: str, arch: str) -> str:
    return f"spire-{version}-linux-{arch}-musl.tar.gz"


def release_path(version: str, name: str) -> str:
    """URL path of a release asset (GitHub's ``/OWNER/REPO/releases/download/TAG/NAME``)."""
    return f"/spiffe/spire/releases/download/v{version}/{name}"


def agent_standin(version: str, arch: str) -> bytes:
    """The stand-in ``spire-agent`` (see the module docstring)."""
    out = EXPANDED
    return f"""#!/bin/sh
# spire-agent {version} linux/{arch} (nvkr test stand-in: checks and expands its configuration)
set -eu
case "${{1:-}}" in
    -version|--version) echo "{version}"; exit 0 ;;
    run) shift ;;
    *) echo "spire-agent (stand-in): usage: spire-agent run -config FILE [-expandEnv]" >&2; exit 2 ;;
esac
config=/opt/spire/conf/agent/agent.conf
expand=
while [ $# -gt 0 ]; do
    case "$1" in
        -config) config=$2; shift 2 ;;
        -expandEnv) expand=1; shift ;;
        *) echo "spire-agent (stand-in): unknown flag $1" >&2; exit 2 ;;
    esac
done
[ -r "$config" ] || {{ echo "spire-agent (stand-in): cannot read $config" >&2; exit 1; }}
mkdir -p "$(dirname {out})"
if [ -n "$expand" ]; then
    # os.ExpandEnv: $NAME and ${{NAME}} become the environment's value, empty when unset
    set +u
    eval "cat <<NVKR_SPIRE_EOF
$(cat "$config")
NVKR_SPIRE_EOF" > {out}.tmp
    set -u
else
    cp "$config" {out}.tmp
fi
expanded={out}.tmp
field() {{ sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\\"\\(.*\\)\\"[[:space:]]*$/\\1/p" "$expanded" | head -n 1; }}
for name in trust_domain server_address server_port trust_bundle_path; do
    if [ -z "$(field $name)" ]; then
        echo "spire-agent (stand-in): $config: $name is empty" >&2
        exit 1
    fi
done
bundle=$(field trust_bundle_path)
grep -q "BEGIN CERTIFICATE" "$bundle" || {{ echo "spire-agent (stand-in): no PEM certificate in $bundle" >&2; exit 1; }}
if grep -q 'NodeAttestor "join_token"' "$expanded" && [ -z "$(field join_token)" ]; then
    echo "spire-agent (stand-in): $config: join_token is empty (NodeAttestor join_token)" >&2
    exit 1
fi
mv {out}.tmp {out}
expanded={out}
echo "spire-agent (stand-in): trust domain $(field trust_domain), server $(field server_address):$(field server_port)"
exec sleep infinity
""".encode()


def expand_env(config: str, env: dict[str, str]) -> str:
    """What ``-expandEnv`` (Go's os.ExpandEnv) makes of ``config``: ``$NAME`` and ``${NAME}`` the
    value in ``env``, empty when unset. The stand-in's shell expansion gives the same for the
    configurations nvkr writes (no backslashes, backquotes or ``$(``)."""
    assert "\\" not in config and "`" not in config and "$(" not in config

    class _Empty(dict[str, str]):
        def __missing__(self, key: str) -> str:
            return ""

    return string.Template(config).substitute(_Empty(env))


def release_archive(version: str, arch: str) -> bytes:
    """``spire-{version}-linux-{arch}-musl.tar.gz``: the upstream layout, stand-in binaries."""
    top = f"spire-{version}"
    server = (
        f'#!/bin/sh\n# spire-server {version} linux/{arch} (nvkr test stand-in)\necho "{version}"\n'
    )
    return deterministic_tar_gz(
        {
            f"{top}/bin/spire-agent": (agent_standin(version, arch), 0o755),
            f"{top}/bin/spire-server": (server.encode(), 0o755),
            f"{top}/conf/agent/agent.conf": (
                b'agent {\n    trust_domain = "example.org"\n}\n',
                0o644,
            ),
            f"{top}/LICENSE": (b"Apache License, Version 2.0 (stand-in)\n", 0o644),
        }
    )


def write_release(
    root: Path, version: str = VERSION, arches: tuple[str, ...] = ("amd64",)
) -> dict[str, bytes]:
    """Write the archives and their ``_sha256sum.txt`` files under ``root`` (a served directory
    mirroring ``https://github.com/``); returns the archives by URL path."""
    archives: dict[str, bytes] = {}
    for arch in arches:
        name = archive_name(version, arch)
        data = release_archive(version, arch)
        path = release_path(version, name)
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest()
        checksum = re.sub(r"\.tar\.gz$", "_sha256sum.txt", name)
        (target.parent / checksum).write_text(f"{digest}  {name}\n")
        archives[path] = data
    return archives
