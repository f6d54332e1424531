"""The SPIRE agent of a node image (``spireAgent``): where its files go and how they are rendered.

The image carries ``/usr/bin/spire-agent``, ``/etc/spire/agent/agent.conf`` (rendered from the
builder's ``builders/spire-agent/agent.conf.j2``, or from the recipe's ``config`` template) and
an enabled ``spire-agent.service``. Nothing per node or per cluster is in the image: the unit
starts only where the node's cloud-init user-data wrote ``/etc/spire/agent/agent.env`` (the
server's address and port, the join token, the trust domain unless the recipe fixed it) and the
server's trust bundle ``/etc/spire/agent/bundle.pem``; ``spire-agent run -expandEnv`` puts the
environment's values into the configuration (spiffe/spire ``doc/spire_agent.md``).

The templates have their own assets directory, hashed into the key of the images that carry the
agent only (:func:`spire_assets_digest`), so an image without one keeps its key.
"""

from __future__ import annotations

import functools
from typing import Any

from nvkr.builders.assets import asset_dir
from nvkr.builders.node_image.params import SpireAgentParams
from nvkr.canonical import sha256_bytes
from nvkr.repro import tar_bytes

#: The templates (``builders/spire-agent``): agent.conf and the unit, both rendered whenever an
#: image carries the agent.
SPIRE_ASSETS = asset_dir("spire-agent")
CONFIG_TEMPLATE = "agent.conf.j2"
UNIT_TEMPLATE = "spire-agent.service.j2"

SPIRE_AGENT_BINARY = "/usr/bin/spire-agent"
SPIRE_AGENT_CONF = "/etc/spire/agent/agent.conf"
SPIRE_AGENT_UNIT = "/etc/systemd/system/spire-agent.service"
#: What the node's user-data writes: the agent's environment and the server's trust bundle.
SPIRE_AGENT_ENV = "/etc/spire/agent/agent.env"
SPIRE_TRUST_BUNDLE = "/etc/spire/agent/bundle.pem"
#: The environment variables agent.conf takes from :data:`SPIRE_AGENT_ENV`.
ENV_SERVER_ADDRESS = "SPIRE_SERVER_ADDRESS"
ENV_SERVER_PORT = "SPIRE_SERVER_PORT"
ENV_JOIN_TOKEN = "SPIRE_JOIN_TOKEN"
ENV_TRUST_DOMAIN = "SPIRE_TRUST_DOMAIN"

#: Paths the templates are given (``paths.*``).
PATHS = {
    "binary": SPIRE_AGENT_BINARY,
    "config": SPIRE_AGENT_CONF,
    "env": SPIRE_AGENT_ENV,
    "bundle": SPIRE_TRUST_BUNDLE,
    "dataDir": "/var/lib/spire/agent",
    "runtimeDir": "/run/spire/agent",
    "socket": "/run/spire/agent/public/api.sock",
    "devidCert": "/etc/spire/agent/devid.crt.pem",
    "devidPriv": "/etc/spire/agent/devid.priv.blob",
    "devidPub": "/etc/spire/agent/devid.pub.blob",
    "x509Cert": "/etc/spire/agent/node.crt.pem",
    "x509Key": "/etc/spire/agent/node.key.pem",
}


@functools.cache
def spire_assets_digest() -> str:
    """``sha256:<hex>`` of :data:`SPIRE_ASSETS` (in the key of images carrying the agent)."""
    return sha256_bytes(tar_bytes(SPIRE_ASSETS, epoch=0))


def template_values(spire: SpireAgentParams, image: dict[str, Any]) -> dict[str, Any]:
    """What agent.conf's and the unit's templates are given: ``trustDomain`` (the recipe's, or
    ``${SPIRE_TRUST_DOMAIN}`` for the node's), ``trustDomainFromEnv``, ``nodeAttestor``,
    :data:`PATHS` and the image's ``arch``, ``gpu``, ``kubernetes``, ``kubernetesVersion``."""
    return {
        "trustDomain": spire.trustDomain or "${" + ENV_TRUST_DOMAIN + "}",
        "trustDomainFromEnv": spire.trustDomain is None,
        "nodeAttestor": spire.nodeAttestor,
        "paths": dict(PATHS),
        **{k: image[k] for k in ("arch", "gpu", "kubernetes", "kubernetesVersion")},
    }


def env_names(spire: SpireAgentParams) -> list[str]:
    """The variables the node's :data:`SPIRE_AGENT_ENV` must set for nvkr's agent.conf."""
    names = [ENV_SERVER_ADDRESS, ENV_SERVER_PORT]
    if spire.nodeAttestor == "join_token":
        names.append(ENV_JOIN_TOKEN)
    if spire.trustDomain is None:
        names.append(ENV_TRUST_DOMAIN)
    return names
