"""Booting machine images: QEMU started as the host allows (:mod:`~nvkr.machine.qemu`) and the
boot test that watches a guest's console until the node agent is ready (:mod:`~nvkr.machine.boot`).
"""
