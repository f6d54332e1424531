"""Names, API versions and the control-plane endpoint of a Cluster API export.

Shared by every part of :mod:`nvkr.delivery.export.capi`: the annotation and label keys, the
DNS-1123 names Kubernetes requires (:func:`dns_label`, :func:`pool_names`), the API versions
``--api-version`` and ``--metal3-api-version`` choose (:class:`ApiVersions`), the object
references whose shape changed between Cluster API v1beta1 and v1beta2 (:meth:`ApiVersions.ref`),
``--control-plane-endpoint HOST:PORT`` (:func:`parse_endpoint`) and the YAML writer
(:func:`dump_yaml`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from nvkr.errors import UsageError
from nvkr.yamlemit import Dumper

ANN_MACHINE_IMAGE: Final = "nvkr.dev/machine-image"
ANN_MACHINE_IMAGE_REF: Final = "nvkr.dev/machine-image-ref"
ANN_RELEASE_SET: Final = "nvkr.dev/release-set"
ANN_RELEASE_SET_NAME: Final = "nvkr.dev/release-set-name"
#: On an infrastructure cluster nvkr cannot fill in (no ``--infrastructure``): what to do.
ANN_PLACEHOLDER: Final = "nvkr.dev/placeholder"
LABEL_GPU: Final = "nvkr.dev/gpu-generation"
LABEL_ARCH: Final = "kubernetes.io/arch"
LABEL_POOL: Final = "nvkr.dev/node-pool"
LABEL_CLUSTER: Final = "cluster.x-k8s.io/cluster-name"
#: CAPM3 (without an external cloud provider, ``Metal3Cluster.spec.cloudProviderEnabled``) sets
#: a Machine's providerID from the Node with this label, whose value cloud-init renders from
#: the meta-data Ironic writes (the host's uuid): without it no Machine gets its Node.
LABEL_METAL3_UUID: Final = "metal3.io/uuid"
METAL3_UUID_VALUE: Final = "{{ ds.meta_data.uuid }}"
INFRASTRUCTURE_GROUP: Final = "infrastructure.cluster.x-k8s.io"
#: On the Cluster; the ClusterResourceSet of the add-ons selects clusters by it.
LABEL_ADDONS: Final = "nvkr.dev/addons"

#: Cluster API versions ``--api-version`` accepts: v1beta2 (served from CAPI 1.11, its storage
#: version; the default) and v1beta1 (deprecated, no longer served from CAPI 1.16).
CAPI_API_VERSIONS: Final = ("v1beta1", "v1beta2")
DEFAULT_CAPI_API_VERSION: Final = "v1beta2"
#: CAPM3 API versions ``--metal3-api-version`` accepts: v1beta2 (served from CAPM3 1.13; the
#: default) and v1beta1 (what CAPM3 1.12 serves, and only that).
METAL3_API_VERSIONS: Final = ("v1beta1", "v1beta2")
DEFAULT_METAL3_API_VERSION: Final = "v1beta2"

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL_MAX: Final = 63
_NUMERIC_DOTTED: Final = re.compile(r"^[0-9]+(\.[0-9]+)*\.?$")
_DNS_SUBDOMAIN: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)


@dataclass(frozen=True)
class ApiVersions:
    """The API versions one export writes: Cluster API's (``capi``) and CAPM3's (``metal3``)."""

    capi: str = DEFAULT_CAPI_API_VERSION
    metal3: str = DEFAULT_METAL3_API_VERSION

    def __post_init__(self) -> None:
        if self.capi not in CAPI_API_VERSIONS:
            raise UsageError(
                f"--api-version {self.capi!r} is not a Cluster API version nvkr writes",
                hint="one of: " + ", ".join(CAPI_API_VERSIONS),
            )
        if self.metal3 not in METAL3_API_VERSIONS:
            raise UsageError(
                f"--metal3-api-version {self.metal3!r} is not a CAPM3 version nvkr writes",
                hint="v1beta2 (CAPM3 1.13 and later) or v1beta1 (CAPM3 1.12)",
            )

    @property
    def v1beta2(self) -> bool:
        return self.capi == "v1beta2"

    @property
    def metal3_v1beta2(self) -> bool:
        return self.metal3 == "v1beta2"

    @property
    def infrastructure(self) -> str:
        """CAPM3's apiVersion, ``infrastructure.cluster.x-k8s.io/<metal3 version>``."""
        return f"{INFRASTRUCTURE_GROUP}/{self.metal3}"

    def group(self, group: str) -> str:
        """``<group>/<capi version>``, e.g. ``cluster.x-k8s.io/v1beta2``."""
        return f"{group}/{self.capi}"

    def ref(self, api_version: str, kind: str, name: str) -> dict[str, str]:
        """An object reference: v1beta1's ``corev1.ObjectReference`` (apiVersion, kind, name);
        v1beta2's ``ContractVersionedObjectReference`` (apiGroup, kind, name: the version is
        found from the CRD's contract labels; api/core/v1beta2/common_types.go)."""
        if self.v1beta2:
            return {"apiGroup": api_version.split("/", 1)[0], "kind": kind, "name": name}
        return {"apiVersion": api_version, "kind": kind, "name": name}


@dataclass(frozen=True)
class Endpoint:
    """``--control-plane-endpoint``: the API server's stable address (a VIP on bare metal)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_endpoint(text: str) -> Endpoint:
    """``HOST:PORT`` (``10.0.0.10:6443``, ``api.example.com:6443``, ``[fd00::10]:6443``).

    Raises:
        UsageError: no port (an unbracketed IPv6 address: the hint brackets it), a port
            outside 1..65535, the unspecified address (0.0.0.0, ::), an all-numeric dotted
            host that is no IPv4 address (999.1.1.1), or a host that is neither an IP address
            nor a DNS subdomain (RFC 1123, what Cluster API's APIEndpoint.host holds).
    """
    hint = "HOST:PORT, e.g. --control-plane-endpoint 10.0.0.10:6443 (bare metal: a VIP)"
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([^:\[\]]+):(\d+)", text.strip())
    if match is None:
        # An unbracketed IPv6 address's colons hide where a port starts; fd00::1:6443 is an
        # address too, but one whose last group reads as a port more likely meant address:port.
        bare, _, port_text = text.strip().rpartition(":")
        if _is_ipv6(bare) and port_text.isdigit():
            hint = f"an IPv6 address goes in brackets: [{bare}]:{port_text}"
        elif _is_ipv6(text.strip()):
            hint = f"an IPv6 address goes in brackets, then its port: [{text.strip()}]:6443"
        raise UsageError(f"control-plane endpoint {text!r} is not HOST:PORT", hint=hint)
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not 1 <= port <= 65535:
        raise UsageError(f"control-plane endpoint {text!r}: port {port} is not 1..65535", hint=hint)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if _NUMERIC_DOTTED.match(host):
            # a DNS subdomain by its syntax, but no resolver takes it for a name: a typo'd IPv4
            raise UsageError(
                f"control-plane endpoint {text!r}: {host!r} is not an IPv4 address (four "
                "numbers 0..255) and an all-numeric name is no DNS name",
                hint=hint,
            ) from None
        if match.group(1) or len(host) > 253 or not _DNS_SUBDOMAIN.match(host.lower()):
            raise UsageError(
                f"control-plane endpoint {text!r}: {host!r} is neither an IP address nor a DNS "
                "name",
                hint=hint,
            ) from None
        return Endpoint(host.lower(), port)
    if address.is_unspecified:
        raise UsageError(
            f"control-plane endpoint {text!r}: {host} is the unspecified address (what a server "
            "listens on), not one a node can reach",
            hint=hint,
        )
    return Endpoint(str(address), port)


def _is_ipv6(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv6Address)
    except ValueError:
        return False


class _NoAliasDumper(Dumper):
    # kubectl and kustomize read anchors, but people diff and patch this output: no &id001.
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_yaml(resources: Sequence[Mapping[str, Any]]) -> str:
    """``resources`` as multi-document YAML (``---`` before each), keys in their given order."""
    return yaml.dump_all(
        [dict(r) for r in resources],
        Dumper=_NoAliasDumper,
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        width=1000,
    )


def dns_label(text: str) -> str:
    """``text`` as a DNS-1123 label (RFC 1123): lower-case ``[a-z0-9-]``, at most 63 characters.

    Any other character becomes ``-``; a name cut to fit ends in 8 hex digits of its sha256 so
    two long names stay distinct.

    Raises:
        UsageError: nothing of ``text`` is left.
    """
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    label = re.sub(r"-{2,}", "-", label)
    if len(label) > _DNS_LABEL_MAX:
        suffix = hashlib.sha256(text.encode()).hexdigest()[:8]
        label = label[: _DNS_LABEL_MAX - 9].rstrip("-") + "-" + suffix
    if not _DNS_LABEL.match(label):
        raise UsageError(
            f"{text!r} has no characters left for a Kubernetes name", hint="use [a-z0-9-]"
        )
    return label


def check_dns_label(text: str, flag: str) -> str:
    """``text`` when it is a DNS-1123 label (RFC 1123: at most 63 of ``[a-z0-9-]``, alphanumeric
    at both ends), the name Kubernetes and Cluster API's ``clusterName`` fields (MaxLength 63)
    take.

    Raises:
        UsageError: it is not, naming ``flag`` (a name rewritten behind the user's back would
            not be the one they look for).
    """
    if len(text) <= _DNS_LABEL_MAX and _DNS_LABEL.match(text):
        return text
    try:
        example = dns_label(text)
    except UsageError:
        example = "gpu"
    raise UsageError(
        f"{flag} {text!r} is not a DNS-1123 label",
        hint=f"at most {_DNS_LABEL_MAX} characters of a-z, 0-9 and '-', starting and ending "
        f"with a letter or digit, e.g. {flag} {example}",
    )


def pool_names(pools: Sequence[Mapping[str, Any]]) -> list[str]:
    """A distinct DNS label per exported node-pool release (a shared name gets arch, then GPU)."""
    names = [dns_label(p["name"]) for p in pools]
    for extra in ("arch", "gpuGeneration"):
        dupes = {n for n in names if names.count(n) > 1}
        names = [
            dns_label(f"{n}-{p.get(extra) or ''}") if n in dupes else n
            for n, p in zip(names, pools, strict=True)
        ]
    if len(set(names)) != len(names):
        raise UsageError("node-pool releases do not have distinct names for Cluster API")
    return names


def image_annotations(image: str | None, repository: str | None) -> dict[str, str]:
    """``nvkr.dev/machine-image`` (digest or ``none``) and, with a repository, its reference."""
    annotations = {ANN_MACHINE_IMAGE: image or "none"}
    if image and repository:
        annotations[ANN_MACHINE_IMAGE_REF] = f"{repository}@{image}"
    return annotations
