"""The ``release-set`` builder."""
