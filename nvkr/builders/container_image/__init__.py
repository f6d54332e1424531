"""The ``container-image`` builder."""
