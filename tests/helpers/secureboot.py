"""The default recipe with Secure Boot on, as a project: a leaf written for the tests that
extends recipes/default.yaml with recipes/secureboot/debian-13.yaml and names a test owner's
certificate (made here with openssl, RSA 2048; its key beside the project, never in it). The
session's default build makes it and builds its hopper/amd64 variant with the key
(tests/conftest.py: the set its ``verify --rebuild`` rebuilds without the key), which
tests/integration/test_secure_boot.py boots."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: the leaf, in the project
REL = "recipes/default-secureboot.yaml"
#: its release set (the default recipe's name)
SET = "nvkr-default-k8s1.36"
#: the owner's certificate, in the project (the leaf's path source ``secure-boot-owner``)
CERT = "keys/owner.crt"
#: the test owner's common name (the signer that modinfo and verify name)
OWNER_CN = "nvkr test owner"
LEAF = """apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {name: default-secureboot}
extends: [default.yaml, secureboot/debian-13.yaml]
sources:
  secure-boot-owner: {path: ../keys}
"""


def make_project(clone: Path, dest: Path) -> tuple[Path, Path]:
    """(project, key): a copy of ``clone`` (without its ``dist*``) at ``dest`` with the leaf,
    the test owner's certificate in keys/ and the leaf's lockfile (the default one: ``nvkr
    lock`` adds the certificate's path source); the owner's private key beside it."""
    shutil.copytree(clone, dest, ignore=shutil.ignore_patterns("dist*", "__pycache__"))
    (dest / "keys").mkdir()
    (dest / REL).write_text(LEAF)
    shutil.copyfile(
        dest / "lockfiles/default.lock.json", dest / "lockfiles/default-secureboot.lock.json"
    )
    key = dest.parent / f"{dest.name}-owner.key"
    make_owner(key, dest / CERT)
    return dest, key


def make_owner(key: Path, cert: Path, common_name: str = OWNER_CN) -> None:
    """A test owner's key pair: ``key`` (RSA 2048, PKCS#1 v1.5 signatures: deterministic, as
    nvkr requires) and its self-signed certificate ``cert`` (PEM, CN ``common_name``)."""
    subprocess.run(
        ["openssl", "req", "-new", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
         "-days", "3650", "-subj", f"/CN={common_name}/", "-keyout", key, "-out", cert],
        check=True, capture_output=True,
    )  # fmt: skip
