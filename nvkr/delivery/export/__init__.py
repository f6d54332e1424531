"""Export a release set for management systems: a versioned JSON document
(:mod:`~nvkr.delivery.export.document`), or Cluster API YAML (:mod:`~nvkr.delivery.export.capi`)
with Metal3 templates booting the machine images (:mod:`~nvkr.delivery.export.metal3`);
:mod:`~nvkr.delivery.export.release` runs ``nvkr release-set export`` end to end.

The public surface::

    doc = export_json(metadata, digest, repository="registry.example/sets")
    yaml_text = dump_yaml(export_capi(metadata, digest, image_urls=ImageUrls.from_base_url(url)))
"""

from nvkr.delivery.export.capi import ANN_MACHINE_IMAGE, dns_label, dump_yaml, export_capi
from nvkr.delivery.export.capi.names import ApiVersions, parse_endpoint
from nvkr.delivery.export.document import (
    EXPORT_SCHEMA_VERSION,
    cloud_kernels,
    export_json,
    machine_image_sboms,
    missing_for_kubeadm,
)
from nvkr.delivery.export.metal3 import METAL3_MACHINE_TEMPLATE, ImageUrls, check_label_key

__all__ = [
    "ANN_MACHINE_IMAGE",
    "EXPORT_SCHEMA_VERSION",
    "METAL3_MACHINE_TEMPLATE",
    "ApiVersions",
    "ImageUrls",
    "check_label_key",
    "cloud_kernels",
    "dns_label",
    "dump_yaml",
    "export_capi",
    "export_json",
    "machine_image_sboms",
    "missing_for_kubeadm",
    "parse_endpoint",
]
