"""OCI: media types, descriptors, image layouts and the registry client.

:mod:`nvkr.oci.mediatypes` names what nvkr writes; :mod:`nvkr.oci.layout` turns descriptors,
manifests and indexes into canonical bytes and reads a layout on disk back, checking every blob.
"""
