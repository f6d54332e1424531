"""The ``helm-chart`` builder."""
