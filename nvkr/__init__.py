"""nvkr: reproducible artifact builds for GPU Kubernetes infrastructure.

A declarative recipe is loaded and expanded into variants, resolved into a lockfile, planned as a
graph of actions keyed by the hash of their inputs, executed against a content-addressed store and
assembled into a release set (an OCI image layout). See README.md (what it does) and
docs/architecture.md (where each part lives).
"""

__version__ = "0.1.0"
