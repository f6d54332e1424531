"""The ``rootfs`` builder."""
