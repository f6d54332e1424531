"""The ``sbom`` builder."""
