"""A stand-in for OVN-Kubernetes' git repository, with the upstream's shape.

GitHub is not reachable from the test machines, so tests build a local repository laid out as
upstream is where nvkr looks: the Go module ``github.com/ovn-org/ovn-kubernetes/go-controller`` in
the ``go-controller/`` subdirectory (no go.mod at the root), its dependencies committed under
``go-controller/vendor/`` (with ``vendor/modules.txt``), the ``ovnkube`` command in
``cmd/ovnkube`` and the variables upstream's ``hack/build-go.sh`` stamps with ``-X`` in
``pkg/config`` (``Commit``, ``Branch``, ``BuildUser``, ``BuildDate``), and the CNI plugin in
``cmd/ovn-k8s-cni-overlay``. Its ``ovnkube`` prints the vendored dependency's greeting and what
it was stamped with; ``ovnkube --version`` prints upstream's version lines.

:func:`make_upstream` commits it twice: the good commit, then one whose go.mod requires a
dependency version its vendor tree lacks (a ``go mod vendor`` forgotten), for the error path.
Commits have fixed authors and dates, so their ids are the same on every machine.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NamedTuple

#: upstream's module path and where the stamped variables live
MODULE = "github.com/ovn-org/ovn-kubernetes/go-controller"
CONFIG = f"{MODULE}/pkg/config"
UPSTREAM = "https://github.com/ovn-org/ovn-kubernetes"
COMMIT_TIME = 1_780_000_000  # 2026-05-28T20:26:40Z
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Upstream",
    "GIT_AUTHOR_EMAIL": "upstream@example.invalid",
    "GIT_COMMITTER_NAME": "Upstream",
    "GIT_COMMITTER_EMAIL": "upstream@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_DATE": f"@{COMMIT_TIME} +0000",
    "GIT_COMMITTER_DATE": f"@{COMMIT_TIME} +0000",
}

MAIN = f"""package main

import (
\t"fmt"
\t"os"

\t"example.org/dep"
\t"{CONFIG}"
)

func main() {{
\tif len(os.Args) > 1 && os.Args[1] == "--version" {{
\t\tfmt.Printf("Version: %s\\nGit commit: %s\\nBuild date: %s\\n", "stand-in", config.Commit, config.BuildDate)
\t\treturn
\t}}
\tfmt.Println(dep.Greeting(), config.Commit, config.BuildDate)
}}
"""

FILES = {
    "README.md": "OVN-Kubernetes (stand-in)\n",
    "docs/index.md": "no Go module here\n",
    "go-controller/go.mod": f"module {MODULE}\n\ngo 1.22\n\nrequire example.org/dep v1.2.3\n",
    "go-controller/vendor/modules.txt": "# example.org/dep v1.2.3\n## explicit; go 1.22\n"
    "example.org/dep\n",
    "go-controller/vendor/example.org/dep/dep.go": "package dep\n\n"
    'func Greeting() string { return "vendored dep v1.2.3" }\n',
    "go-controller/pkg/config/config.go": "package config\n\n"
    'var (\n\tCommit    = "unset"\n\tBranch    = "unset"\n\tBuildUser = "unset"\n'
    '\tBuildDate = "unset"\n)\n',
    "go-controller/cmd/ovnkube/main.go": MAIN,
    # the CNI plugin the kubelet runs: here it only says what it is
    "go-controller/cmd/ovn-k8s-cni-overlay/main.go": "package main\n\n"
    'import "fmt"\n\nfunc main() { fmt.Println("ovn-k8s-cni-overlay stand-in") }\n',
}


class Upstream(NamedTuple):
    """The stand-in repository: ``repo`` (a work tree, ``repo.as_uri()`` is its URL), ``good``
    (the commit that builds) and ``stale`` (go.mod ahead of vendor/)."""

    repo: Path
    good: str
    stale: str


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with the fixed identity and dates; returns its stdout, stripped."""
    env = {**os.environ, **GIT_ENV}
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


def make_upstream(repo: Path) -> Upstream:
    """Create the stand-in repository at ``repo`` (a new directory) and commit it twice."""
    repo.mkdir(parents=True)
    git(repo, "-c", "init.defaultBranch=master", "init", "-q")
    for name, text in FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "vendored module in go-controller/")
    good = git(repo, "rev-parse", "HEAD")
    gomod = repo / "go-controller" / "go.mod"
    gomod.write_text(gomod.read_text().replace("v1.2.3", "v1.2.4"))  # vendor/ not refreshed
    git(repo, "commit", "-qam", "bump dep without go mod vendor")
    stale = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", good)
    return Upstream(repo, good, stale)
