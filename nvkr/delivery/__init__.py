"""A release set's life after the build: pushed to a registry (:mod:`~nvkr.delivery.publish`),
pulled back by digest and verified (:mod:`~nvkr.delivery.pull`), shown and exported for
management systems (:mod:`~nvkr.delivery.export`, Cluster API and a versioned JSON document).
"""
