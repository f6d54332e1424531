"""CI pipelines generated from the fan-out: GitHub Actions, GitLab CI, Argo Workflows.

The last step of the fan-out's data flow: recipe → plan → units (:mod:`nvkr.fanout`) → jobs
within the platform's limits (:mod:`nvkr.ci.jobs`) → one YAML file per platform
(:mod:`nvkr.ci.github`, :mod:`nvkr.ci.gitlab`, :mod:`nvkr.ci.argo`). Every job runs in one
container image holding nvkr and its tools, pinned by digest (action keys include the host's
tool versions: only runners on the same image share cache hits), privileged (root
filesystems and disks need root, foreign arches binfmt). Unit jobs build their actions with the
remote action cache (``--cache-from``/``--cache-to``, ``--cache-mode max``: a later job on
another runner needs every result); the final job assembles the release sets from the caches
(``--cached-only``), signs them and publishes them.

Pull requests (GitLab: merge requests) read the default branch's cache and write a repository
of their own, ``<cache>-pr-<number>``, signed with a PR key; the default branch never reads
that repository and never trusts that key, so a pull request's fan-out works and cannot poison
the default branch. Pushes to the default branch write the main cache with the key of a
protected secret. Variables the pipelines set are named ``NVKR_PIPELINE_*``, apart from nvkr's
own ``NVKR_*`` settings.

Every generated file starts with :func:`header`, naming the command that wrote it, which
``nvkr ci check`` (:mod:`nvkr.ci.check`) runs again to find drift.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from nvkr.errors import UsageError

PLATFORMS = ("github", "gitlab", "argo")
ARCH_KEYS = ("amd64", "arm64", "any")
#: Runner labels when ``--runner-label`` names none: GitHub-hosted runners (arm64 since 2025),
#: GitLab.com's hosted runners (privileged, so binfmt can be enabled), Kubernetes node arches.
DEFAULT_LABELS: dict[str, dict[str, str]] = {
    "github": {"amd64": "ubuntu-24.04", "arm64": "ubuntu-24.04-arm"},
    "gitlab": {"amd64": "saas-linux-medium-amd64", "arm64": "saas-linux-medium-arm64"},
    "argo": {"amd64": "amd64", "arm64": "arm64"},
}
#: Public keys the pipelines trust (committed to the repository: they are not secrets).
DEFAULT_TRUST = "ci/keys/nvkr-cache.pub"
DEFAULT_PR_TRUST = "ci/keys/nvkr-cache-pr.pub"
#: GitHub Actions' own checkout action, pinned by commit (v4.2.2).
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"
_SAFE_ARG = re.compile(r"^[A-Za-z0-9@%+=:,./_-]+$")
_DIGEST_REF = re.compile(r"^[a-z0-9][a-z0-9.:-]*(/[a-z0-9._-]+)+@sha256:[0-9a-f]{64}$")
_REPO_REF = re.compile(r"^[a-z0-9][a-z0-9.:-]*(/[a-z0-9._-]+)+$")


@dataclass(frozen=True)
class CiOptions:
    """What ``nvkr ci generate`` takes besides the platform and recipes.

    ``cache``: the main cache repository (``REGISTRY/REPO``); ``push``: where the final job
    publishes (None: it signs, publishes nothing); ``with_sources``: it pushes each set's source
    closure too, ``--build-env`` the CI image; ``image``: the CI image by digest; ``by``:
    ``variant`` or ``action``; ``labels``: runner label per arch (``amd64``, ``arm64``,
    ``any``); ``trust``/``pr_trust``: public key files in the repository; ``max_needs``: the
    GitLab instance's cap on ``needs`` (50 on GitLab.com); ``max_matrix``: jobs per matrix
    (None: the platform's); ``default_branch``: the branch whose pushes write the main cache
    and publish (GitHub's ``on.push`` filter; GitLab asks ``$CI_DEFAULT_BRANCH``); ``out``: the
    file written (recorded in the header).
    """

    cache: str
    image: str
    push: str | None = None
    with_sources: bool = False
    by: str = "variant"
    labels: dict[str, str] = field(default_factory=dict)
    trust: str = DEFAULT_TRUST
    pr_trust: str = DEFAULT_PR_TRUST
    max_needs: int = 50
    max_matrix: int | None = None
    default_branch: str = "main"
    out: str | None = None

    def label(self, platform: str, arch: str | None) -> str:
        """The runner label of ``arch`` (None or ``any``: the ``any`` label, else amd64's)."""
        labels = {**DEFAULT_LABELS[platform], **self.labels}
        if arch is None or arch == "any":
            return labels.get("any") or labels["amd64"]
        return labels[arch]

    def declared_labels(self, platform: str) -> list[str]:
        labels = {**DEFAULT_LABELS[platform], **self.labels}
        return sorted(set(labels.values()))


def check_options(options: CiOptions) -> None:
    """Refuse what no pipeline can use.

    Raises:
        UsageError: an image not pinned by digest, a cache or push reference that is not
            ``REGISTRY/REPO`` (a tag or digest in it), a label for an unknown arch.
    """
    if not _DIGEST_REF.match(options.image):
        raise UsageError(
            f"--image {options.image!r} is not REGISTRY/REPO@sha256:<hex>",
            hint="every job runs this exact image; its digest is the index digest of the "
            "nvkr-ci release set's image (`nvkr release-set show dist/nvkr-ci`), "
            "or give --image-from DIR",
        )
    for flag, ref in (("--cache", options.cache), ("--push", options.push)):
        if ref is not None and not _REPO_REF.match(ref):
            raise UsageError(
                f"{flag} {ref!r} is not REGISTRY/REPO (lower case, no tag or digest)",
                hint="e.g. ghcr.io/example/nvkr-cache",
            )
    if options.with_sources and options.push is None:
        raise UsageError(
            "--with-sources: the final job pushes sources with the release sets: give --push",
            hint="e.g. --push ghcr.io/example/releases --with-sources",
        )
    for arch in options.labels:
        if arch not in ARCH_KEYS:
            raise UsageError(
                f"--runner-label {arch}=...: the arch is amd64, arm64 or any",
                hint="e.g. --runner-label arm64=ubuntu-24.04-arm",
            )


def shell_args(argv: Sequence[str], unit: str) -> str:
    """``argv`` for a shell line: every argument must need no quoting (refs, variant ids and
    paths do), so a matrix can pass them in one variable.

    Raises:
        UsageError: an argument with a space, quote or glob character (naming the unit).
    """
    for arg in argv:
        if not _SAFE_ARG.match(arg):
            raise UsageError(
                f"unit {unit}: argument {arg!r} needs shell quoting, which a CI matrix "
                "variable cannot carry",
                hint="rename the recipe file (or directory) without spaces and quotes",
            )
    return " ".join(argv)


def header(command: Sequence[str]) -> str:
    """The comment every generated file starts with; ``command`` is the argv that wrote it."""
    return (
        "# Generated by nvkr: do not edit. Regenerate with:\n"
        f"#   {shlex.join(command)}\n"
        "# `nvkr ci check` fails when this file differs from what that command writes now.\n"
    )


def recorded_command(text: str) -> list[str] | None:
    """The command a generated file's header names (None: no nvkr header)."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("# Generated by nvkr"):
        return None
    line = lines[1]
    if not line.startswith("#   nvkr ci generate "):
        return None
    return shlex.split(line[4:])


def pr_cache(cache: str, number: str) -> str:
    """The PR-scoped repository of pull request ``number`` (a shell or CI expression)."""
    return f"{cache}-pr-{number}"


def dump(doc: object) -> str:
    """``doc`` as block YAML in insertion order: multi-line strings as literal blocks (``|``),
    strings quoted wherever a YAML 1.1, 1.2 or go-yaml reader would not read them back as
    strings (:class:`nvkr.yamlemit.Dumper`), no line folding."""
    import yaml

    from nvkr.yamlemit import Dumper

    class _Dumper(Dumper):
        def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
            # lists indented under their key, as GitHub's and GitLab's own examples write them
            super().increase_indent(flow, False)

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        if "\n" in value:
            return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
        return dumper.represent_str(value)

    _Dumper.add_representer(str, text)
    out: str = yaml.dump(
        doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 16
    )
    return out
