"""The ``node-image`` builder."""
