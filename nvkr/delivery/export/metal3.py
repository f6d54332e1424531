"""The Metal3 infrastructure templates of a Cluster API export (``--infrastructure metal3``).

With ``infrastructure="metal3"`` :func:`nvkr.delivery.export.capi.export_capi` also writes the
infrastructure templates that boot the machine images on bare metal through Metal3 (CAPM3,
https://book.metal3.io): one ``Metal3MachineTemplate`` (``infrastructure.cluster.x-k8s.io/v1beta2``,
CAPM3 1.13 and later, or ``v1beta1`` for CAPM3 1.12) per node-pool release, named like its
MachineDeployment, and one for the control plane, named like the KubeadmControlPlane; each
``spec.template.spec.image`` is ``{url, checksum: <sha256 hex of the QCOW2 disk>, checksumType:
sha256, diskFormat: qcow2}`` (v1beta1: ``format``). The URL comes from :class:`ImageUrls`: a
web server's base (``{base}/{hex}.qcow2``) or the registry's blob endpoint. Same release set and
options, same bytes: nothing is read from the clock, the environment or the network.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from nvkr.delivery.export.document import find_artifact
from nvkr.errors import IntegrityError, UsageError
from nvkr.oci import mediatypes as mt

#: Infrastructure providers whose machine templates :func:`export_capi` writes itself.
INFRASTRUCTURES: Final = ("metal3",)
METAL3_API_VERSION: Final = "infrastructure.cluster.x-k8s.io/v1beta1"
METAL3_MACHINE_TEMPLATE: Final = "Metal3MachineTemplate"
#: Machine image disk media type → Metal3 ``image.format`` (CAPM3 enum raw;qcow2;vdi;vmdk;live-iso).
_METAL3_FORMATS: Final = {mt.NVKR_QCOW2: "qcow2"}
_SHA256: Final = re.compile(r"^sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class ImageUrls:
    """Where Ironic downloads a machine image's disk: ``prefix + <sha256 hex> + suffix``.

    Build it with :meth:`from_base_url` or :meth:`from_registry`; :meth:`url` maps a disk digest.
    """

    prefix: str
    suffix: str = ""
    #: ``oci://``: the URL names the machine image's per-arch manifest, not its disk blob
    oci: bool = False

    @classmethod
    def from_base_url(cls, base: str) -> ImageUrls:
        """``{base}/{hex}.qcow2``: a web server holding the QCOW2 disks under their sha256.

        Raises:
            UsageError: ``base`` is not an absolute ``http://`` or ``https://`` URL, or has a
                query or fragment (the file name is appended to the path).
        """
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise UsageError(
                f"image base URL {base!r} is not an absolute http:// or https:// URL",
                hint="e.g. --image-base-url https://images.example/nvkr (Ironic downloads "
                "{base}/<sha256 hex>.qcow2)",
            )
        if parts.query or parts.fragment:
            raise UsageError(
                f"image base URL {base!r} has a query or fragment; <hex>.qcow2 is appended to "
                "its path",
                hint="give the directory URL only",
            )
        return cls(prefix=base.rstrip("/") + "/", suffix=".qcow2")

    @classmethod
    def from_registry(cls, registry: str, repository: str, *, insecure: bool = False) -> ImageUrls:
        """The registry's blob endpoint, ``https://REGISTRY/v2/REPO/blobs/sha256:<hex>``
        (distribution-spec v1.1 "Pulling blobs": ``GET /v2/<name>/blobs/<digest>``).

        Plain ``http://`` for ``insecure`` and loopback registries, as
        :class:`nvkr.oci.registry.RegistryClient` talks to them. Ironic sends no credentials and
        does no token handshake: this only works on registries that serve blobs anonymously.
        """
        from nvkr.oci.session import LOOPBACK

        host = urlsplit("//" + registry).hostname or registry
        scheme = "http" if insecure or host in LOOPBACK else "https"
        return cls(prefix=f"{scheme}://{registry}/v2/{repository}/blobs/sha256:")

    @classmethod
    def from_oci(cls, registry: str, repository: str) -> ImageUrls:
        """``oci://REGISTRY/REPO@sha256:<hex>``: Ironic (29.0 and later, experimental) pulls the
        image manifest of that digest (an image manifest, not an index, whose ``artifactType``
        is set or whose config is the empty descriptor: nvkr's machine images) and deploys its
        ``layers[0]``, checking it against that layer's digest. baremetal-operator takes such
        URLs from 0.12 (pull secrets from 0.13), CAPM3 from 1.14 (no checksum fields; no pull
        secret: anonymous pulls only)."""
        return cls(prefix=f"oci://{registry}/{repository}@sha256:", oci=True)

    def url(self, disk_digest: str) -> str:
        """The URL of the disk with digest ``sha256:<hex>``.

        Raises:
            IntegrityError: ``disk_digest`` is not ``sha256:<64 hex>``.
        """
        return f"{self.prefix}{_sha256_hex(disk_digest, 'disk digest')}{self.suffix}"


def _sha256_hex(digest: Any, what: str) -> str:
    match = _SHA256.match(digest) if isinstance(digest, str) else None
    if match is None:
        raise IntegrityError(
            f"release set metadata: {what} {digest!r} is not sha256:<64 hex>",
            hint="the metadata is damaged or from another tool; rebuild the release set",
        )
    return match.group(1)


def metal3_image(
    metadata: Mapping[str, Any],
    pool: Mapping[str, Any],
    label: str,
    urls: ImageUrls,
    *,
    v1beta2: bool = True,
) -> dict[str, str]:
    """Metal3 ``image`` of a node-pool release's machine image (CAPM3 ``Image``, see below).

    Raises:
        UsageError: the machine image's disk is not a format Metal3 boots here (QCOW2).
        IntegrityError: the metadata names an artifact it does not hold, or a bad digest.
    """
    art = find_artifact(metadata, pool["machineImage"], pool.get("variant"))
    primary = art.get("primary") or {}
    media_type = primary.get("mediaType")
    fmt = _METAL3_FORMATS.get(str(media_type))
    if fmt is None:
        raise UsageError(
            f"node-pool release {label}: machine image {art['name']!r} has disk media type "
            f"{media_type!r}; Metal3 export expects a QCOW2 disk ({mt.NVKR_QCOW2})",
            hint="name a node-image artifact as the pool's machineImage in the recipe",
        )
    hexdigest = _sha256_hex(primary.get("digest"), f"machine image {art['name']!r} disk digest")
    disk_format = "diskFormat" if v1beta2 else "format"
    if urls.oci:
        # The per-arch machine image manifest; Ironic checks the disk against its layer digest
        # and CAPM3 1.14 refuses checksum fields beside an oci:// URL.
        manifest = (art.get("manifest") or {}).get("digest")
        what = f"machine image {art['name']!r} manifest digest"
        return {"url": urls.prefix + _sha256_hex(manifest, what), disk_format: fmt}
    # cluster-api-provider-metal3 api/v1beta1/common_types.go, type Image: url; checksum "a
    # md5sum value or a URL to retrieve one" (the value itself here: the webhook parses it as a
    # URL only when it starts with http:// or https://); checksumType enum md5;sha256;sha512
    # (baremetal-operator: "If missing, MD5 is used", so it is always set); format (json tag of
    # DiskFormat) enum raw;qcow2;vdi;vmdk;live-iso. api/v1beta2/common_types.go renamed the
    # json tag to diskFormat (same enum).
    return {
        "url": urls.url(primary["digest"]),
        "checksum": hexdigest,
        "checksumType": "sha256",
        disk_format: fmt,
    }


def metal3_template(
    metadata: dict[str, Any],
    image: dict[str, str],
    match_labels: dict[str, str] | None,
    *,
    api_version: str = METAL3_API_VERSION,
    data_template: str | None = None,
) -> dict[str, Any]:
    """A Metal3MachineTemplate booting ``image``, selecting hosts by ``match_labels``, its
    machines' metadata from the Metal3DataTemplate ``data_template`` (in the template's
    namespace)."""
    # cluster-api-provider-metal3 api/v1beta1: Metal3MachineTemplate spec.template.spec is a
    # Metal3MachineSpec, whose `image` is the Image type (see metal3_image), whose
    # `hostSelector` (HostSelector: matchLabels, matchExpressions) filters BareMetalHosts by
    # label and whose `dataTemplate` (corev1.ObjectReference) names the Metal3DataTemplate.
    spec: dict[str, Any] = {"image": dict(image)}
    if data_template is not None:
        # v1beta2's Metal3ObjectRef{name, namespace} counts as set (IsDefined) only with both
        spec["dataTemplate"] = {"name": data_template}
        if api_version.endswith("/v1beta2"):
            spec["dataTemplate"]["namespace"] = metadata["namespace"]
    if match_labels:
        spec["hostSelector"] = {"matchLabels": dict(match_labels)}
    return {
        "apiVersion": api_version,
        "kind": METAL3_MACHINE_TEMPLATE,
        "metadata": metadata,
        "spec": {"template": {"spec": spec}},
    }


def metal3_cluster(
    metadata: dict[str, Any], api_version: str, host: str, port: int
) -> dict[str, Any]:
    """The Metal3Cluster: the control-plane endpoint (bare metal has no load balancer to ask
    for one: a VIP the user runs, e.g. kube-vip or keepalived), and ``cloudProviderEnabled:
    false``: CAPM3's webhook defaults it to true when unset, and then waits for an external
    cloud provider to set each Node's providerID instead of reading the ``metal3.io/uuid``
    label every node of the export carries (:data:`~.capi.names.LABEL_METAL3_UUID`)."""
    # CAPM3 api/v1beta1/metal3cluster_types.go: Metal3ClusterSpec{controlPlaneEndpoint
    # APIEndpoint{host, port}, noCloudProvider (deprecated, gone in v1beta2; when both are set
    # they must agree), cloudProviderEnabled}; the webhook requires host and port.
    return {
        "apiVersion": api_version,
        "kind": "Metal3Cluster",
        "metadata": metadata,
        "spec": {
            "controlPlaneEndpoint": {"host": host, "port": port},
            "cloudProviderEnabled": False,
        },
    }


def metal3_data_template(
    metadata: dict[str, Any], api_version: str, cluster_name: str
) -> dict[str, Any]:
    """The Metal3DataTemplate whose meta data gives each node its name: ``name``,
    ``local-hostname`` and ``local_hostname`` from the Machine's name (the node image bakes no
    hostname in; cloud-init reads it from the config drive Ironic writes)."""
    # CAPM3 api/v1beta1/metal3datatemplate_types.go: Metal3DataTemplateSpec{clusterName
    # (required), metaData *MetaData{strings, objectNames [{key, object: machine|
    # metal3machine|baremetalhost}], ...}, networkData}.
    names = [{"key": k, "object": "machine"} for k in ("name", "local-hostname", "local_hostname")]
    return {
        "apiVersion": api_version,
        "kind": "Metal3DataTemplate",
        "metadata": metadata,
        "spec": {"clusterName": cluster_name, "metaData": {"objectNames": names}},
    }


#: Kubernetes label key: optional DNS-subdomain prefix and "/", then a name of at most 63
#: characters, alphanumeric at both ends, "-", "_", "." inside (k8s.io/apimachinery
#: validation.IsQualifiedName).
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_label_key(key: str, what: str) -> None:
    """Raise :class:`UsageError` unless ``key`` is a Kubernetes label key (``[prefix/]name``)."""
    prefix, slash, name = key.rpartition("/")
    if _LABEL_NAME.fullmatch(name) and (
        not slash or (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix))
    ):
        return
    raise UsageError(
        f"{what} {key!r} is not a Kubernetes label key",
        hint="[DNS subdomain prefix/]name, the name at most 63 characters of [A-Za-z0-9-_.] "
        "starting and ending alphanumeric, e.g. kubernetes.io/arch",
    )


def check_infrastructure(
    infrastructure: str | None,
    image_urls: ImageUrls | None,
    control_plane_pool: str | None,
    kind: str,
    api_version: str | None,
    metal3_api_version: str = METAL3_API_VERSION,
) -> ImageUrls | None:
    """``image_urls`` when Metal3 templates are written, else None; rejects what
    :func:`export_capi` says it rejects (``api_version`` None: the one ``--metal3-api-version``
    gives, ``metal3_api_version``)."""
    if infrastructure is None:
        if image_urls is not None or control_plane_pool is not None:
            raise UsageError(
                "image URLs and the control-plane pool are for the infrastructure templates, "
                "which only --infrastructure writes",
                hint="add --infrastructure metal3",
            )
        return None
    if infrastructure not in INFRASTRUCTURES:
        raise UsageError(
            f"infrastructure {infrastructure!r} is not one nvkr writes templates for",
            hint="one of: " + ", ".join(INFRASTRUCTURES),
        )
    if kind != METAL3_MACHINE_TEMPLATE or api_version not in (None, metal3_api_version):
        raise UsageError(
            f"--infrastructure metal3 writes {METAL3_MACHINE_TEMPLATE} "
            f"({metal3_api_version}), not {kind} ({api_version or metal3_api_version})",
            hint="leave out --infrastructure-kind and --infrastructure-api-version (choose "
            "CAPM3's version with --metal3-api-version)",
        )
    if image_urls is not None and image_urls.oci and not metal3_api_version.endswith("v1beta2"):
        raise UsageError(
            "--image-url-oci: only CAPM3 v1beta2 (1.14 and later) takes oci:// image URLs, "
            f"not {metal3_api_version}",
            hint="use --metal3-api-version v1beta2 (the default), or give --image-base-url",
        )
    if image_urls is None:
        raise UsageError(
            "--infrastructure metal3 needs a URL Ironic downloads each machine image from",
            hint="give --image-base-url URL (a web server with <sha256 hex>.qcow2 files), "
            "--image-url-from-registry (the registry's blob URLs; anonymous registries only) or "
            "--image-url-oci (oci:// URLs: Ironic 29.0+, CAPM3 1.14+)",
        )
    return image_urls
