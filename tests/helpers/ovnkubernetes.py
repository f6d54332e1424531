"""A stand-in for OVN-Kubernetes' git repository, with the upstream's shape (at 51b98b91, the
facts in recipes/network/ovn-kubernetes.yaml).

GitHub is not reachable from the test machines, so tests build a local repository laid out as
upstream is where nvkr looks: the Go module ``github.com/ovn-org/ovn-kubernetes/go-controller`` in
the ``go-controller/`` subdirectory (no go.mod at the root; it requires ``k8s.io/client-go
v0.34.1``), its dependencies committed under ``go-controller/vendor/`` (with
``vendor/modules.txt``), the commands upstream's Makefile builds (:data:`COMMANDS`: ``ovnkube``,
the CNI plugin ``ovn-k8s-cni-overlay``, ``hybrid-overlay-node`` under ``hybrid-overlay/cmd/``, ...)
and the variables upstream's ``hack/build-go.sh`` stamps with ``-X`` in ``pkg/config``
(``Commit``, ``Branch``, ``BuildUser``, ``BuildDate``); the image's scripts in ``dist/images/``
(``ovnkube.sh``, dispatching on its first argument, and ``ovndb-raft-functions.sh``); and the
chart ``helm/ovn-kubernetes``: an umbrella chart (version 1.2.0) of local subcharts switched by
``tags``, no root values.yaml but one values file per mode, its ``crds/`` symlinks to
``../../../dist/templates/k8s.ovn.org_*.yaml.j2`` (outside the chart) beside a
monitoring.coreos.com CRD, and templates that read ``k8sAPIServer``, ``podNetwork``,
``serviceNetwork``, ``mtu``, ``global.image`` (printed as ``repository:tag``) and skip their
``lookup`` when ``skipCallToK8s`` is true. Its ``ovnkube`` prints the vendored dependency's
greeting and what it was stamped with; ``ovnkube --version`` prints upstream's version lines.

Its libovsdb models (``go-controller/pkg/{nbdb,sbdb}/model.go``) embed the schemas upstream's
do at 51b98b91 (:data:`SCHEMAS`), which rule ``ovn-kubernetes.ovn-schema`` reads.

:func:`make_upstream` commits it three times: the good commit, then one whose go.mod requires a
dependency version its vendor tree lacks (a ``go mod vendor`` forgotten), for the error path, and
beside it one whose Northbound models are generated from a newer schema than Debian 13's OVN.
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

#: upstream's Makefile ``all`` target: the commands under go-controller/, by binary name
COMMANDS = {
    "ovnkube": "cmd/ovnkube",
    "ovn-k8s-cni-overlay": "cmd/ovn-k8s-cni-overlay",
    "ovn-kube-util": "cmd/ovn-kube-util",
    "hybrid-overlay-node": "hybrid-overlay/cmd/hybrid-overlay-node",
    "ovndbchecker": "cmd/ovndbchecker",
    "ovnkube-trace": "cmd/ovnkube-trace",
    "ovnkube-identity": "cmd/ovnkube-identity",
    "ovnkube-observ": "cmd/ovnkube-observ",
}
CLIENT_GO = "v0.34.1"
CHART = "helm/ovn-kubernetes"
#: the CRDs of the stand-in's crds/ that are symlinks out of the chart
LINKED_CRDS = ("k8s.ovn.org_egressips.yaml", "k8s.ovn.org_adminpolicybasedexternalroutes.yaml")


def _crd(group: str, kind: str, plural: str) -> str:
    return (
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        f"metadata:\n  name: {plural}.{group}\nspec:\n  group: {group}\n"
        f"  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, "
        f"singular: {kind.lower()}}}\n  scope: Namespaced\n  versions:\n  - name: v1\n"
        "    served: true\n    storage: true\n    schema:\n"
        "      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n"
    )


_IMAGE = '"{{ .Values.global.image.repository }}:{{ .Values.global.image.tag }}"'


def _subchart(name: str, kind: str, containers: tuple[str, ...]) -> dict[str, str]:
    """A local subchart whose workload runs ``containers`` of the global image, with the host's
    CNI directories mounted (how an export recognises a CNI)."""
    spec = "".join(
        f"      - name: {c}\n        image: {_IMAGE}\n"
        f'        command: ["/root/ovnkube.sh", "{c}"]\n'
        "        volumeMounts: [{name: cni-conf, mountPath: /etc/cni/net.d}]\n"
        for c in containers
    )
    return {
        f"{CHART}/charts/{name}/Chart.yaml": f"apiVersion: v2\nname: {name}\nversion: 1.2.0\n",
        f"{CHART}/charts/{name}/templates/{name}.yaml": (
            f"apiVersion: apps/v1\nkind: {kind}\nmetadata:\n  name: {name}\n"
            "  namespace: {{ .Release.Namespace }}\n"
            f"spec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n"
            f"    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      hostNetwork: true\n"
            "      volumes: [{name: cni-conf, hostPath: {path: /etc/cni/net.d}}]\n"
            f"      containers:\n{spec}"
        ),
    }


CHART_FILES = {
    f"dist/templates/{LINKED_CRDS[0]}.j2": _crd("k8s.ovn.org", "EgressIP", "egressips"),
    f"dist/templates/{LINKED_CRDS[1]}.j2": _crd(
        "k8s.ovn.org", "AdminPolicyBasedExternalRoute", "adminpolicybasedexternalroutes"
    ),
    f"{CHART}/crds/monitoring.coreos.com_servicemonitors.yaml": _crd(
        "monitoring.coreos.com", "ServiceMonitor", "servicemonitors"
    ),
    f"{CHART}/Chart.yaml": (
        "apiVersion: v2\nname: ovn-kubernetes\ndescription: OVN-Kubernetes (stand-in)\n"
        "type: application\nversion: 1.2.0\nappVersion: 1.2.0\ndependencies:\n"
        + "".join(
            f"  - {{name: {n}, version: 1.2.0, tags: [{n}]}}\n"
            for n in ("ovnkube-single-node-zone", "ovnkube-control-plane", "ovs-node")
        )
    ),
    f"{CHART}/values-single-node-zone.yaml": (
        "# interconnect: every node its own zone\n"
        "k8sAPIServer: https://172.25.0.2:6443\npodNetwork: 10.244.0.0/16/24\n"
        "serviceNetwork: 10.96.0.0/16\nmtu: 1400\nskipCallToK8s: false\n"
        "global:\n  image:\n    repository: ghcr.io/ovn-kubernetes/ovn-kubernetes/ovn-kube-ubuntu\n"
        "    tag: master\n  skipCallToK8s: false\n"
        "tags:\n  ovnkube-single-node-zone: true\n  ovnkube-control-plane: true\n"
        "  ovs-node: true\n"
    ),
    f"{CHART}/values-no-ic.yaml": "tags:\n  ovnkube-single-node-zone: false\n",
    f"{CHART}/templates/ovnkube-config.yaml": (
        "{{- if not .Values.skipCallToK8s }}\n"
        '{{- $ns := lookup "v1" "Namespace" "" .Release.Namespace }}\n'
        "{{- end }}\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ovnkube-config\n"
        "  namespace: {{ .Release.Namespace }}\ndata:\n"
        "  k8s_apiserver: {{ .Values.k8sAPIServer | quote }}\n"
        "  net_cidr: {{ .Values.podNetwork | quote }}\n"
        "  svc_cidr: {{ .Values.serviceNetwork | quote }}\n"
        "  mtu: {{ .Values.mtu | quote }}\n"
    ),
    f"{CHART}/templates/ovnkube-monitor.yaml": (
        "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata:\n"
        "  name: ovnkube\n  namespace: {{ .Release.Namespace }}\n"
        "spec:\n  selector: {matchLabels: {app: ovnkube-single-node-zone}}\n"
        "  endpoints: [{port: metrics}]\n"
    ),
    **_subchart(
        "ovnkube-single-node-zone",
        "DaemonSet",
        ("nb-ovsdb", "sb-ovsdb", "ovn-northd", "ovnkube-controller", "ovn-controller"),
    ),
    **_subchart("ovnkube-control-plane", "Deployment", ("ovnkube-cluster-manager",)),
    **_subchart("ovs-node", "DaemonSet", ("ovs-daemons",)),
    "dist/images/ovnkube.sh": (
        '#!/bin/bash\n# stand-in of upstream\'s entrypoint\ncase "$1" in\n'
        "  local-nb-ovsdb|local-sb-ovsdb|run-ovn-northd|ovnkube-controller-with-node|"
        'ovn-controller) echo "ovnkube.sh: $1" ;;\n'
        '  *) echo "ovnkube.sh: unknown command $1" >&2; exit 1 ;;\nesac\n'
    ),
    "dist/images/ovndb-raft-functions.sh": "# stand-in: functions ovnkube.sh sources\n",
}


#: the OVSDB schemas the models at 51b98b91 were generated from (as Debian 13's ovn-central
#: 25.03.0-1 ships them: /usr/share/ovn/ovn-{nb,sb}.ovsschema)
SCHEMAS = {"nbdb": ("OVN_Northbound", "7.11.0"), "sbdb": ("OVN_Southbound", "20.41.0")}
#: the newer Northbound schema of the ``newer`` commit (a stand-in value: a schema with an
#: addition the image's OVN lacks, as tag v1.2.0's models for OVN 25.09 are)
NEWER_NB = "7.12.0"


def model_go(package: str, database: str, version: str) -> str:
    """A libovsdb modelgen ``model.go`` as upstream's: the package, its generated header and
    the schema it was generated from embedded as JSON (here without its tables)."""
    return (
        '// Code generated by "libovsdb.modelgen"\n// DO NOT EDIT.\n\n'
        f"package {package}\n\n"
        f'var schema = `{{\n  "name": "{database}",\n  "version": "{version}",\n'
        '  "tables": {}\n}`\n'
    )


def _main(name: str) -> str:
    return f'package main\n\nimport "fmt"\n\nfunc main() {{ fmt.Println("{name} stand-in") }}\n'


FILES = {
    "README.md": "OVN-Kubernetes (stand-in)\n",
    "docs/index.md": "no Go module here\n",
    "go-controller/go.mod": f"module {MODULE}\n\ngo 1.22\n\nrequire (\n\texample.org/dep v1.2.3\n"
    f"\tk8s.io/client-go {CLIENT_GO}\n)\n",
    "go-controller/vendor/modules.txt": "# example.org/dep v1.2.3\n## explicit; go 1.22\n"
    f"example.org/dep\n# k8s.io/client-go {CLIENT_GO}\n## explicit; go 1.22\nk8s.io/client-go\n",
    "go-controller/vendor/example.org/dep/dep.go": "package dep\n\n"
    'func Greeting() string { return "vendored dep v1.2.3" }\n',
    "go-controller/vendor/k8s.io/client-go/doc.go": "package clientgo\n\n"
    f'const Version = "{CLIENT_GO}"\n',
    "go-controller/pkg/config/config.go": "package config\n\n"
    'var (\n\tCommit    = "unset"\n\tBranch    = "unset"\n\tBuildUser = "unset"\n'
    '\tBuildDate = "unset"\n)\n',
    "go-controller/cmd/ovnkube/main.go": MAIN,
    **{
        f"go-controller/pkg/{pkg}/model.go": model_go(pkg, db, version)
        for pkg, (db, version) in SCHEMAS.items()
    },
    # the other commands (the CNI plugin the kubelet runs, ...): each only says what it is
    **{
        f"go-controller/{path}/main.go": _main(name)
        for name, path in COMMANDS.items()
        if name != "ovnkube"
    },
    **CHART_FILES,
}


class Upstream(NamedTuple):
    """The stand-in repository: ``repo`` (a work tree, ``repo.as_uri()`` is its URL), ``good``
    (the commit that builds), ``stale`` (go.mod ahead of vendor/) and ``newer`` (the good
    commit with Northbound models generated from a newer schema, :data:`NEWER_NB`)."""

    repo: Path
    good: str
    stale: str
    newer: str


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` with the fixed identity and dates; returns its stdout, stripped."""
    env = {**os.environ, **GIT_ENV}
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    return out.stdout.decode().strip()


def make_upstream(repo: Path) -> Upstream:
    """Create the stand-in repository at ``repo`` (a new directory) and commit it three times
    (see the module)."""
    repo.mkdir(parents=True)
    git(repo, "-c", "init.defaultBranch=master", "init", "-q")
    for name, text in FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    (repo / "dist" / "images" / "ovnkube.sh").chmod(0o755)
    for crd in LINKED_CRDS:  # as upstream: the chart's CRDs are links out of the chart
        os.symlink(f"../../../dist/templates/{crd}.j2", repo / CHART / "crds" / crd)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "vendored module in go-controller/")
    good = git(repo, "rev-parse", "HEAD")
    gomod = repo / "go-controller" / "go.mod"
    gomod.write_text(gomod.read_text().replace("v1.2.3", "v1.2.4"))  # vendor/ not refreshed
    git(repo, "commit", "-qam", "bump dep without go mod vendor")
    stale = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", good)
    db, _ = SCHEMAS["nbdb"]
    model = repo / "go-controller" / "pkg" / "nbdb" / "model.go"
    model.write_text(model_go("nbdb", db, NEWER_NB))
    git(repo, "commit", "-qam", "models regenerated for a newer OVN schema")
    newer = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", good)
    return Upstream(repo, good, stale, newer)
