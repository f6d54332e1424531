"""``nvkr verify``: check a release set's integrity, provenance, signatures, policy and rebuild.

The consumer's end of the data flow (docs/architecture.md, "The data flow", step 9): a release set
on disk (``dist/<name>/``, an OCI image layout written by :func:`nvkr.releaseset.materialize` and
signed by :func:`nvkr.releaseset.signing.sign_release_set`) is checked by :func:`verify_release_set`
(:mod:`.check`: closure, metadata, provenance, signatures), against a :class:`Policy`
(:mod:`.policy`), and optionally rebuilt from its recipe and lockfile and compared artifact by
artifact (:mod:`.rebuild`, with :mod:`.archive` naming the first differing member of an archive).
Every result lands in a :class:`VerifyReport` (:mod:`.report`). ``--attest KEY`` signs the
run's result as a SLSA verification summary attestation (:mod:`.vsa` the statement, :mod:`.attest`
the signer), kept beside the layout or as a referrer of the index (:mod:`.attestations`); a
policy's ``attestations`` rule counts those by distinct trusted keys (:mod:`.gate`).
"""

from nvkr.verify.check import verify_release_set
from nvkr.verify.policy import Policy, apply_policy, load_policy
from nvkr.verify.rebuild import compare, rebuild
from nvkr.verify.report import ArtifactReport, Problem, SignatureReport, VerifyReport

__all__ = [
    "ArtifactReport",
    "Policy",
    "Problem",
    "SignatureReport",
    "VerifyReport",
    "apply_policy",
    "compare",
    "load_policy",
    "rebuild",
    "verify_release_set",
]
