"""The ``go-binary`` builder."""
