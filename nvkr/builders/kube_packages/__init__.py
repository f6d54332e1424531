"""The ``kube-packages`` builder."""
