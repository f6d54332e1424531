"""Registry credentials: where a user name and password come from, and what a 401 challenge asks.

:class:`nvkr.oci.registry.RegistryClient` takes credentials from the caller (flags), else
``NVKR_REGISTRY_USERNAME``/``NVKR_REGISTRY_PASSWORD``, else :func:`docker_credentials` (the
``auths`` of ``$DOCKER_CONFIG/config.json``, default ``~/.docker/config.json``, for that host).
When the registry answers 401 it reads the ``WWW-Authenticate`` header with
:func:`parse_challenge`: ``Basic`` is answered with those credentials, ``Bearer`` with a token from
the realm it names (anonymous, or bought with the credentials) for the scopes an operation needs.
:data:`CREDENTIALS_HINT` tells the user these sources when access is refused.
"""

from __future__ import annotations

import base64
import json
import os
import re
from pathlib import Path
from typing import Final

CREDENTIALS_HINT: Final = (
    "pass --username and --password-stdin, set NVKR_REGISTRY_USERNAME and "
    "NVKR_REGISTRY_PASSWORD, or add the registry to ~/.docker/config.json (docker login)"
)


def credentials_hint() -> str:
    """:data:`CREDENTIALS_HINT` naming the Docker config file in use ($DOCKER_CONFIG's)."""
    return CREDENTIALS_HINT.replace("~/.docker/config.json", docker_config_label())


_CHALLENGE_PARAM = re.compile(r'(\w+)\s*=\s*(?:"([^"]*)"|([^\s,]+))')


def docker_config_label() -> str:
    """The Docker config file credentials come from, as messages name it:
    ``$DOCKER_CONFIG/config.json`` spelled out when set, else ``~/.docker/config.json``."""
    config_dir = os.environ.get("DOCKER_CONFIG")
    return os.path.join(config_dir, "config.json") if config_dir else "~/.docker/config.json"


def docker_credentials(host: str) -> tuple[str, str] | None:
    """``(username, password)`` for registry ``host`` (``name[:port]``) from the ``auths`` of
    ``$DOCKER_CONFIG/config.json`` (default ``~/.docker/config.json``), or None.

    Keys may be bare hosts or URLs (``https://index.docker.io/v1/`` for Docker Hub); entries hold
    ``auth`` (base64 ``user:password``) or ``username``/``password``. Credential helpers
    (``credsStore``, ``credHelpers``) are not run.
    """
    config_dir = os.environ.get("DOCKER_CONFIG") or os.path.join(os.path.expanduser("~"), ".docker")
    try:
        doc = json.loads(Path(config_dir, "config.json").read_bytes())
    except (OSError, ValueError):
        return None
    auths = doc.get("auths") if isinstance(doc, dict) else None
    if not isinstance(auths, dict):
        return None
    aliases = {host}
    if host in ("docker.io", "registry-1.docker.io", "index.docker.io"):
        aliases |= {"docker.io", "registry-1.docker.io", "index.docker.io"}
    for key, entry in auths.items():
        key_host = re.sub(r"^[a-z]+://", "", str(key)).split("/", 1)[0]
        if key_host not in aliases or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                user, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                continue
            return user, password
        if entry.get("username"):
            return str(entry["username"]), str(entry.get("password", ""))
    return None


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``WWW-Authenticate: Bearer realm="...",service="...",scope="..."`` → (``bearer``, params)."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): m.group(2) or m.group(3) for m in _CHALLENGE_PARAM.finditer(rest)}
    return scheme.lower(), params
