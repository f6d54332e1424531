"""A loopback mirror of the Kubernetes release downloads, with the upstream URL layout.

dl.k8s.io and GitHub are not reachable from the test machines, so tests serve small stand-ins on
127.0.0.1 under the same paths and point nvkr at them with ``--mirror`` (recipes keep the real
URLs; :meth:`K8sMirror.mirror_args` gives the options):

- ``/release/v{ver}/bin/linux/{arch}/{kubelet,kubeadm,kubectl}`` with sibling ``.sha256`` and
  ``.sha512`` files holding the bare lower-case hex digest and no newline, as dl.k8s.io
  publishes them (the Kubernetes docs check them with ``echo "$(cat kubectl.sha256)  kubectl"``);
- ``/kubernetes-sigs/cri-tools/releases/download/v{ver}/crictl-v{ver}-linux-{arch}.tar.gz``
  (a GitHub release asset) with ``.sha256`` and ``.sha512`` siblings. cri-tools' release script
  (``hack/release.sh``: ``sha256sum -b FILE | ... | awk '{print $1}' | tee FILE.sha256``) has
  written the bare hex digest and a newline since v1.26 (older releases had ``HASH *PATH``);
  this mirror writes that current form: ``"<hex>\\n"``;
- ``/redirect/<path>`` answers ``302 Found`` with ``Location: /<path>`` (dl.k8s.io itself
  redirects to its CDN), for tests of redirect handling.

Payloads are tiny POSIX shell scripts (``#!/bin/sh`` ... ``echo "kubelet v1.36.3"``), different per
arch, so they run anywhere, a VM included. The crictl archive is a deterministic tar.gz (member
``crictl``, mode 0755, uid/gid 0, mtime 0, gzip mtime 0): the same bytes on every run.

Use the ``k8s_mirror`` fixture (releases ``1.36.3``, crictl ``1.36.0``, amd64 and arm64), or
:func:`serve_k8s_mirror` for other releases.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import http.server
import io
import json
import shutil
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

KUBE_BINARIES = ("kubeadm", "kubectl", "kubelet")
DEFAULT_RELEASES = ("1.36.3",)
DEFAULT_CRICTL = "1.36.0"
DEFAULT_ARCHES = ("amd64", "arm64")
#: Upstream URL prefixes the mirror stands in for (``--mirror PREFIX=<mirror URL>/``).
UPSTREAMS = ("https://dl.k8s.io/", "https://github.com/")


@dataclass(frozen=True)
class MirrorFile:
    """One payload the mirror serves.

    ``path`` is the URL path (``/release/v1.36.3/bin/linux/amd64/kubelet``); ``sha256`` and
    ``sha512`` are lower-case hex digests of ``data`` (what the sibling checksum files hold).
    """

    path: str
    data: bytes
    sha256: str
    sha512: str

    @property
    def filename(self) -> str:
        return self.path.rsplit("/", 1)[1]

    @property
    def size(self) -> int:
        return len(self.data)


def kube_payload(name: str, version: str, arch: str) -> bytes:
    """The stand-in for a Kubernetes binary: a shell script printing ``"<name> v<version>"``."""
    return f'#!/bin/sh\n# {name} v{version} linux/{arch} (nvkr test payload)\necho "{name} v{version}"\n'.encode()


#: Where the recording stand-ins (:func:`recording_kubeadm_payload`,
#: :func:`recording_kubelet_payload`) leave what they were given, in the machine that ran them.
RECORD_DIR = "/var/lib/nvkr-test"
#: kubeadm's arguments, one per line, and a copy of its ``--config``.
KUBEADM_ARGS = f"{RECORD_DIR}/kubeadm.args"
KUBEADM_CONFIG = f"{RECORD_DIR}/kubeadm-config.yaml"
#: kubelet's arguments (one per line), a copy of the file its ``--config`` named when it started,
#: and its node labels: every ``--node-labels`` merged as kubelet's MapStringString flag merges
#: them (each occurrence adds, a later value of a key wins), one ``key=value`` a line, sorted.
KUBELET_ARGS = f"{RECORD_DIR}/kubelet.args"
KUBELET_CONFIG = f"{RECORD_DIR}/kubelet-config.yaml"
KUBELET_LABELS = f"{RECORD_DIR}/kubelet.labels"
#: The static pod manifests the kubeadm stand-in's ``init`` writes (kubeadm's control plane).
STATIC_PODS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")

#: The kubeadm stand-in proper (Python 3 with PyYAML: the node images that run cloud-init have
#: both). ``init``/``join --config FILE``: the kubelet's files as kubeadm's kubelet-start phase
#: writes them, then a restart of kubelet and a wait for it (kubeadm's kubelet-check).
_KUBEADM_PY = r"""
import os, re, shutil, subprocess, sys, time, yaml

RECORD, VERSION = sys.argv[1], sys.argv[2]
argv = sys.argv[3:]
os.makedirs(RECORD, exist_ok=True)
with open(RECORD + "/kubeadm.args", "w") as f:
    f.writelines(a + "\n" for a in argv)
config = argv[argv.index("--config") + 1] if "--config" in argv else None
docs = []
if config:
    shutil.copyfile(config, RECORD + "/kubeadm-config.yaml")
    with open(config) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
phase = argv[0]
kind = {"init": "InitConfiguration", "join": "JoinConfiguration"}[phase]
mine = next((d for d in docs if d.get("kind") == kind), {})
registration = mine.get("nodeRegistration") or {}
extra = registration.get("kubeletExtraArgs") or {}
if isinstance(extra, list):  # kubeadm v1beta4: [{name, value}]
    extra = {a["name"]: a["value"] for a in extra}
# kubeadm-flags.env: kubeadm's own flags, then nodeRegistration.kubeletExtraArgs (which win)
flags = {"container-runtime-endpoint": registration.get("criSocket") or
         "unix:///var/run/containerd/containerd.sock"}
flags.update(extra)
# /var/lib/kubelet/config.yaml: kubeadm's defaults for the kubelet's component config, then a
# KubeletConfiguration document given with the configuration (init's)
kubelet = {
    "apiVersion": "kubelet.config.k8s.io/v1beta1",
    "kind": "KubeletConfiguration",
    "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                       "x509": {"clientCAFile": "/etc/kubernetes/pki/ca.crt"}},
    "authorization": {"mode": "Webhook"},
    "cgroupDriver": "systemd",
    "clusterDNS": ["10.96.0.10"],
    "clusterDomain": "cluster.local",
    "rotateCertificates": True,
    "staticPodPath": "/etc/kubernetes/manifests",
}
for d in docs:
    if d.get("kind") == "KubeletConfiguration":
        kubelet.update({k: v for k, v in d.items() if k not in ("apiVersion", "kind")})
# patches.directory: kubeadm (1.25+) applies the "kubeletconfiguration" target's patches
# (target[suffix][+patchtype].extension, in name order) to the configuration it writes. For a
# KubeletConfiguration (no list merge keys) a strategic merge is a JSON merge patch: maps merge
# recursively, null deletes, anything else replaces.
def merge(base, patch):
    if not isinstance(patch, dict) or not isinstance(base, dict):
        return patch
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out
patches = (mine.get("patches") or {}).get("directory")
if patches and os.path.isdir(patches):
    name_re = re.compile(r"^kubeletconfiguration[^+]*(\+(strategic|merge|json))?\.(yaml|json)$")
    for name in sorted(os.listdir(patches)):
        m = name_re.match(name)
        if not m:
            continue
        if m.group(2) == "json":
            sys.exit("kubeadm stand-in: JSON patches (%s) are not implemented" % name)
        with open(os.path.join(patches, name)) as f:
            kubelet = merge(kubelet, yaml.safe_load(f) or {})
        print("[patches] Applied patch of type %s to target \"kubeletconfiguration\"" %
              ("application/merge-patch+json" if m.group(2) == "merge"
               else "application/strategic-merge-patch+json"))
os.makedirs("/etc/kubernetes/pki", exist_ok=True)
os.makedirs("/var/lib/kubelet", exist_ok=True)
kubeconfig = "apiVersion: v1\nkind: Config\n# kubeadm " + VERSION + " stand-in\n"
if phase == "init":
    os.makedirs("/etc/kubernetes/manifests", exist_ok=True)
    for name in (%STATIC_PODS%):
        with open("/etc/kubernetes/manifests/%s.yaml" % name, "w") as f:
            yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": "kube-system",
                "labels": {"component": name, "tier": "control-plane"}}, "spec": {
                "hostNetwork": True, "containers": [{"name": name,
                "image": "registry.k8s.io/%s:v%s" % (name, VERSION)}]}}, f, sort_keys=True)
    for conf in ("admin.conf", "kubelet.conf", "controller-manager.conf", "scheduler.conf"):
        with open("/etc/kubernetes/" + conf, "w") as f:
            f.write(kubeconfig)
else:
    with open("/etc/kubernetes/bootstrap-kubelet.conf", "w") as f:
        f.write(kubeconfig)
# kubeadm uses a CA it finds (CABPK writes the cluster's for an init or a control-plane join)
if not os.path.exists("/etc/kubernetes/pki/ca.crt"):
    with open("/etc/kubernetes/pki/ca.crt", "w") as f:
        f.write("# the cluster CA (kubeadm stand-in)\n")
with open("/var/lib/kubelet/config.yaml", "w") as f:
    yaml.safe_dump(kubelet, f, sort_keys=True)
with open("/var/lib/kubelet/kubeadm-flags.env", "w") as f:
    f.write('KUBELET_KUBEADM_ARGS="%s"\n' % " ".join(
        "--%s=%s" % (k, flags[k]) for k in sorted(flags)))
# [kubelet-start] restarts the kubelet; [kubelet-check] waits for it to come up
for stale in ("kubelet.args", "kubelet-config.yaml", "kubelet.labels"):
    if os.path.exists(RECORD + "/" + stale):
        os.unlink(RECORD + "/" + stale)
subprocess.run(["systemctl", "restart", "kubelet"], check=True)
deadline = time.monotonic() + 120
while not os.path.exists(RECORD + "/kubelet.args"):
    if time.monotonic() > deadline:
        sys.exit("kubeadm stand-in: the kubelet did not start within 120 s")
    time.sleep(0.5)
print("kubeadm v%s (stand-in): %s done, kubelet started" % (VERSION, phase))
""".replace("%STATIC_PODS%", ", ".join(repr(n) for n in STATIC_PODS))


def recording_kubeadm_payload(version: str, arch: str) -> bytes:
    """A kubeadm stand-in for boot tests: ``kubeadm version`` (or no argument) prints
    ``"kubeadm v<version>"`` as :func:`kube_payload`'s does; ``init`` or ``join --config FILE``
    writes its arguments (one per line) to :data:`KUBEADM_ARGS`, copies FILE to
    :data:`KUBEADM_CONFIG`, then does what kubeadm's kubelet-start phase does for the kubelet:
    ``/var/lib/kubelet/config.yaml`` (kubeadm's defaults for the kubelet configuration, among
    them ``staticPodPath: /etc/kubernetes/manifests``, updated from a KubeletConfiguration
    document in FILE, then patched with the ``kubeletconfiguration`` patches of the init or join
    configuration's ``patches.directory``: strategic and merge patches, applied as the
    recursive map merge they are for a KubeletConfiguration, in name order),
    ``/var/lib/kubelet/kubeadm-flags.env`` (``KUBELET_KUBEADM_ARGS``:
    ``--container-runtime-endpoint`` from ``nodeRegistration.criSocket``, then
    ``nodeRegistration.kubeletExtraArgs``, sorted by name), ``/etc/kubernetes/pki/ca.crt`` (unless
    there is one: CABPK writes the CA for an init or a control-plane join), for
    ``join`` ``bootstrap-kubelet.conf``, for ``init`` the kubeconfigs (``kubelet.conf``...) and
    the static pod manifests of :data:`STATIC_PODS` in ``/etc/kubernetes/manifests``; then
    ``systemctl restart kubelet`` and waits (120 s) for the kubelet stand-in's record, exiting 0
    (what a kubeadm that succeeded returns). It needs python3 with PyYAML in the machine (the
    cloud-init images have them). It cannot tell whether a real kubeadm would accept the
    configuration; it has no certificates, API server or etcd."""
    return f"""#!/bin/sh
# kubeadm v{version} linux/{arch} (nvkr test payload: records its arguments, writes the kubelet's files)
case "${{1:-version}}" in version) echo "kubeadm v{version}"; exit 0 ;; esac
exec python3 - {RECORD_DIR} {version} "$@" <<'NVKR_KUBEADM'
{_KUBEADM_PY.strip()}
NVKR_KUBEADM
""".encode()


def recording_kubelet_payload(version: str, arch: str) -> bytes:
    """A kubelet stand-in for boot tests: ``kubelet --version`` (or no argument) prints
    ``"kubelet v<version>"``; else it records its arguments to :data:`KUBELET_ARGS` (last, so
    that file appearing means all three are there), the file after ``--config`` to
    :data:`KUBELET_CONFIG` and its merged node labels to :data:`KUBELET_LABELS`, then stays
    alive as a service does."""
    return f"""#!/bin/sh
# kubelet v{version} linux/{arch} (nvkr test payload: records its arguments and configuration)
case "${{1:---version}}" in --version|version) echo "kubelet v{version}"; exit 0 ;; esac
mkdir -p {RECORD_DIR}
config= labels= prev=
for arg in "$@"; do
    case "$prev" in
        --config) config=$arg ;;
        --node-labels) labels="$labels,$arg" ;;
    esac
    case "$arg" in
        --config=*) config=${{arg#--config=}} ;;
        --node-labels=*) labels="$labels,${{arg#--node-labels=}}" ;;
    esac
    prev=$arg
done
if [ -n "$config" ] && [ -f "$config" ]; then cp "$config" {KUBELET_CONFIG}; fi
# kubelet's MapStringString: every occurrence adds its pairs, a later value of a key wins
merged=
IFS=,
for kv in $labels; do
    [ -n "$kv" ] || continue
    merged=$(printf '%s\\n' "$merged" | while IFS= read -r line; do
        [ -z "$line" ] || [ "${{line%%=*}}" = "${{kv%%=*}}" ] || printf '%s\\n' "$line"
    done; printf '%s\\n' "$kv")
done
unset IFS
printf '%s\\n' "$merged" | grep -v '^$' | LC_ALL=C sort > {KUBELET_LABELS} || true
printf '%s\\n' "$@" > {KUBELET_ARGS}.tmp
mv {KUBELET_ARGS}.tmp {KUBELET_ARGS}
echo "kubelet v{version} (stand-in): recorded $*"
exec sleep infinity
""".encode()


def crictl_archive(version: str, arch: str) -> bytes:
    """``crictl-v{version}-linux-{arch}.tar.gz``: a deterministic tar.gz with one member, ``crictl``
    (a shell script printing ``"crictl version v{version}"``, mode 0755)."""
    script = f'#!/bin/sh\n# crictl v{version} linux/{arch} (nvkr test payload)\necho "crictl version v{version}"\n'.encode()
    return deterministic_tar_gz({"crictl": (script, 0o755)})


def deterministic_tar_gz(members: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar.gz of ``members`` (name -> (bytes, mode)) and their parent directories (0755),
    GNU format, uid/gid 0, no owner names, mtime 0, gzip mtime 0: the same bytes on every run."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for d in sorted({str(Path(name).parent) for name in members} - {"."}):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for name, (data, mode) in sorted(members.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def kube_path(version: str, arch: str, name: str) -> str:
    """URL path of a Kubernetes binary, e.g. ``/release/v1.36.3/bin/linux/amd64/kubelet``."""
    return f"/release/v{version}/bin/linux/{arch}/{name}"


def crictl_path(version: str, arch: str) -> str:
    """URL path of a crictl release asset (GitHub's ``/OWNER/REPO/releases/download/TAG/NAME``)."""
    return f"/kubernetes-sigs/cri-tools/releases/download/v{version}/crictl-v{version}-linux-{arch}.tar.gz"


def _file(path: str, data: bytes) -> MirrorFile:
    return MirrorFile(
        path, data, hashlib.sha256(data).hexdigest(), hashlib.sha512(data).hexdigest()
    )


def write_k8s_tree(
    root: Path,
    *,
    releases: tuple[str, ...] = DEFAULT_RELEASES,
    arches: tuple[str, ...] = DEFAULT_ARCHES,
    crictl_version: str = DEFAULT_CRICTL,
    recording_kubeadm: bool = False,
    recording_kubelet: bool = False,
) -> dict[str, MirrorFile]:
    """Write every payload and checksum file under ``root`` (the served directory).

    Returns the payloads by URL path. Checksum files: Kubernetes binaries get bare hex without a
    newline, crictl archives bare hex with one (see the module docstring). With
    ``recording_kubeadm`` kubeadm is :func:`recording_kubeadm_payload`, with
    ``recording_kubelet`` kubelet :func:`recording_kubelet_payload`.
    """
    files: dict[str, MirrorFile] = {}
    for arch in arches:
        for version in releases:
            for name in KUBE_BINARIES:
                if recording_kubeadm and name == "kubeadm":
                    data = recording_kubeadm_payload(version, arch)
                elif recording_kubelet and name == "kubelet":
                    data = recording_kubelet_payload(version, arch)
                else:
                    data = kube_payload(name, version, arch)
                f = _file(kube_path(version, arch, name), data)
                files[f.path] = f
        f = _file(crictl_path(crictl_version, arch), crictl_archive(crictl_version, arch))
        files[f.path] = f
    for f in files.values():
        target = root / f.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.data)
        target.chmod(0o755 if not f.path.endswith(".tar.gz") else 0o644)
        newline = "\n" if f.path.endswith(".tar.gz") else ""
        for algo in ("sha256", "sha512"):
            (root / f"{f.path.lstrip('/')}.{algo}").write_text(getattr(f, algo) + newline)
    return files


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files, ``/redirect/<path>`` → 302 ``/<path>``, every request path recorded."""

    def __init__(self, *args: object, directory: str, requests: list[str], **kw: object) -> None:
        self._requests = requests
        super().__init__(*args, directory=directory, **kw)  # type: ignore[arg-type]

    def send_head(self):  # type: ignore[no-untyped-def]
        self._requests.append(self.path)
        if self.path.startswith("/redirect/"):
            self.send_response(302)
            self.send_header("Location", self.path[len("/redirect") :])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class K8sMirror:
    """A running mirror: ``url`` is ``http://127.0.0.1:<port>`` (no trailing slash).

    ``files`` maps URL paths to payloads; ``requests`` lists every path asked for (in order).
    """

    root: Path
    url: str
    releases: tuple[str, ...]
    arches: tuple[str, ...]
    crictl_version: str
    files: dict[str, MirrorFile]
    requests: list[str] = field(default_factory=list)
    _server: http.server.ThreadingHTTPServer | None = None

    # -- what is served ----------------------------------------------------------------------
    def kube(self, name: str, arch: str, version: str | None = None) -> MirrorFile:
        """The payload of Kubernetes binary ``name`` (default: the first release)."""
        return self.files[kube_path(version or self.releases[0], arch, name)]

    def crictl(self, arch: str) -> MirrorFile:
        """The crictl archive for ``arch``."""
        return self.files[crictl_path(self.crictl_version, arch)]

    def mirror_args(self) -> list[str]:
        """``["--mirror", "https://dl.k8s.io/=<url>/", "--mirror", "https://github.com/=<url>/"]``."""
        args: list[str] = []
        for upstream in UPSTREAMS:
            args += ["--mirror", f"{upstream}={self.url}/"]
        return args

    def redirect_url(self, path: str) -> str:
        """A URL answering 302 to ``path`` on this mirror."""
        return f"{self.url}/redirect{path}"

    # -- breaking it ---------------------------------------------------------------------------
    def tamper(self, path: str, data: bytes | None = None) -> None:
        """Serve other bytes at ``path`` (default: the payload with one byte more) while the
        checksum files still describe the original."""
        original = self.files[path].data
        (self.root / path.lstrip("/")).write_bytes(data if data is not None else original + b"#")

    def write_checksum(self, path: str, algo: str, text: str) -> None:
        """Replace the ``.{algo}`` checksum file of ``path`` with ``text``."""
        (self.root / f"{path.lstrip('/')}.{algo}").write_text(text)

    def __enter__(self) -> K8sMirror:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving (idempotent); the files stay under ``root``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def serve_k8s_mirror(
    root: Path,
    *,
    releases: tuple[str, ...] = DEFAULT_RELEASES,
    arches: tuple[str, ...] = DEFAULT_ARCHES,
    crictl_version: str = DEFAULT_CRICTL,
    recording_kubeadm: bool = False,
    recording_kubelet: bool = False,
) -> K8sMirror:
    """Write the tree under ``root`` (created if missing) and serve it on 127.0.0.1 (a free port,
    a daemon thread). Close it with :meth:`K8sMirror.close` or use it as a context manager.
    ``recording_kubeadm``, ``recording_kubelet``: see :func:`write_k8s_tree`."""
    root.mkdir(parents=True, exist_ok=True)
    files = write_k8s_tree(
        root,
        releases=releases,
        arches=arches,
        crictl_version=crictl_version,
        recording_kubeadm=recording_kubeadm,
        recording_kubelet=recording_kubelet,
    )
    requests: list[str] = []
    handler = functools.partial(_Handler, directory=str(root), requests=requests)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return K8sMirror(
        root=root,
        url=f"http://127.0.0.1:{server.server_address[1]}",
        releases=releases,
        arches=arches,
        crictl_version=crictl_version,
        files=files,
        requests=requests,
        _server=server,
    )


@pytest.fixture
def k8s_mirror(tmp_path: Path) -> Iterator[K8sMirror]:
    """A mirror of Kubernetes 1.36.3 (kubelet, kubeadm, kubectl) and crictl 1.36.0 for amd64 and
    arm64, under ``tmp_path / "k8s-mirror"``; stopped at teardown."""
    mirror = serve_k8s_mirror(tmp_path / "k8s-mirror")
    try:
        yield mirror
    finally:
        mirror.close()
        shutil.rmtree(mirror.root, ignore_errors=True)


# -- upstream release listings (for `nvkr lock --update`) -------------------------------------------
#: The GitHub API's upstream prefix; the mirror serves it under ``/api.github.com/``.
GITHUB_API = "https://api.github.com/"


@dataclass(frozen=True)
class GithubRelease:
    """One entry of a GitHub ``/repos/OWNER/REPO/releases`` listing (tag ``v{version}``)."""

    version: str
    prerelease: bool = False
    draft: bool = False


def stable_path(line: str) -> str:
    """``/release/stable-1.36.txt``: dl.k8s.io's newest release of a line (``v1.36.4``)."""
    return f"/release/stable-{line}.txt"


def latest_path(line: str) -> str:
    """``/release/latest-1.36.txt``: the newest build of a line, pre-releases included."""
    return f"/release/latest-{line}.txt"


def github_releases_path(owner: str = "kubernetes-sigs", repo: str = "cri-tools") -> str:
    """Where the mirror serves ``https://api.github.com/repos/OWNER/REPO/releases``."""
    return f"/api.github.com/repos/{owner}/{repo}/releases"


def _release_key(version: str) -> tuple[tuple[int, int, int], int, str]:
    core, _, pre = version.partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    return (major, minor, patch), 0 if pre else 1, pre


def _add_files(mirror: K8sMirror, files: list[MirrorFile]) -> None:
    for f in files:
        mirror.files[f.path] = f
        target = mirror.root / f.path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.data)
        newline = "\n" if f.path.endswith(".tar.gz") else ""
        for algo in ("sha256", "sha512"):
            (mirror.root / f"{f.path.lstrip('/')}.{algo}").write_text(getattr(f, algo) + newline)


def add_kube_release(mirror: K8sMirror, version: str) -> None:
    """Serve kubelet, kubeadm and kubectl ``version`` for every arch of the mirror (checksum files
    as :func:`write_k8s_tree` writes them); the listings are left as they are."""
    _add_files(
        mirror,
        [
            _file(kube_path(version, arch, name), kube_payload(name, version, arch))
            for arch in mirror.arches
            for name in KUBE_BINARIES
        ],
    )


def add_crictl_release(mirror: K8sMirror, version: str) -> None:
    """Serve the crictl archives of ``version`` for every arch of the mirror."""
    _add_files(
        mirror,
        [
            _file(crictl_path(version, arch), crictl_archive(version, arch))
            for arch in mirror.arches
        ],
    )


def write_listings(
    mirror: K8sMirror,
    kube_versions: tuple[str, ...],
    crictl_releases: tuple[GithubRelease, ...],
) -> None:
    """Write dl.k8s.io's ``stable-X.Y.txt`` (the newest release of each line: ``v1.36.4``, no
    newline, as dl.k8s.io serves it) and ``latest-X.Y.txt`` (the newest, pre-releases included)
    for the lines of ``kube_versions``, and the cri-tools releases JSON (newest first, as GitHub
    lists them)."""
    lines: dict[str, list[str]] = {}
    for version in kube_versions:
        lines.setdefault(".".join(version.split("-")[0].split(".")[:2]), []).append(version)
    for line, versions in lines.items():
        ordered = sorted(versions, key=_release_key)
        finals = [v for v in ordered if "-" not in v]
        if finals:
            target = mirror.root / stable_path(line).lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"v{finals[-1]}")
        (mirror.root / latest_path(line).lstrip("/")).write_text(f"v{ordered[-1]}")
    listing = [
        {
            "tag_name": f"v{r.version}",
            "name": f"v{r.version}",
            "draft": r.draft,
            "prerelease": r.prerelease,
            "assets": [],
        }
        for r in sorted(crictl_releases, key=lambda r: _release_key(r.version), reverse=True)
    ]
    target = mirror.root / github_releases_path().lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(listing, indent=1))


def serve_k8s_upstream(
    root: Path,
    *,
    releases: tuple[str, ...] = ("1.36.3", "1.36.4"),
    prereleases: tuple[str, ...] = ("1.36.5-rc.0",),
    crictl_releases: tuple[GithubRelease, ...] = (
        GithubRelease("1.36.0"),
        GithubRelease("1.36.1"),
        GithubRelease("1.36.2-rc.1", prerelease=True),
        GithubRelease("1.36.3", draft=True),
        GithubRelease("1.37.0"),
    ),
    arches: tuple[str, ...] = DEFAULT_ARCHES,
) -> K8sMirror:
    """:func:`serve_k8s_mirror` of ``releases`` plus the upstream listings ``nvkr lock --update``
    reads: every Kubernetes release and pre-release, every crictl release (drafts too, whose
    assets a draft would not have publicly, so tests can show they are never picked) with
    ``stable-*.txt``, ``latest-*.txt`` and the cri-tools releases JSON. Point nvkr at it with
    :func:`upstream_mirror_args`."""
    crictl = [r.version for r in crictl_releases]
    mirror = serve_k8s_mirror(
        root,
        releases=releases,
        arches=arches,
        crictl_version=crictl[0] if crictl else DEFAULT_CRICTL,
    )
    for version in prereleases:
        add_kube_release(mirror, version)
    for version in crictl[1:]:
        add_crictl_release(mirror, version)
    write_listings(mirror, (*releases, *prereleases), crictl_releases)
    return mirror


def upstream_mirror_args(mirror: K8sMirror) -> list[str]:
    """:meth:`K8sMirror.mirror_args` plus ``--mirror https://api.github.com/=<url>/api.github.com/``."""
    return [*mirror.mirror_args(), "--mirror", f"{GITHUB_API}={mirror.url}/api.github.com/"]
