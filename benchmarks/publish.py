#!/usr/bin/env python3
"""``nvkr publish`` vs ``skopeo copy`` of the same OCI layout to the same registry, in one run.

Starts CNCF distribution (``/usr/bin/docker-registry``) on 127.0.0.1 with a temp storage dir (a
fresh one per round), pushes the same layout to fresh repositories with each tool, as the CLI
processes a user runs (start-up included), then publishes again with nvkr to show that a
re-publish uploads 0 bytes. Prints the medians in seconds and the ratio nvkr / skopeo.

Two layouts:

- default: a synthetic two-arch OCI image index of ``--mib`` MiB of incompressible layers, which
  ``skopeo copy --all --preserve-digests oci:LAYOUT:bench docker://...`` copies in one go;
- ``--release-set DIR`` (e.g. dist/nvkr-default-k8s1.36): a whole release set, QCOW2 machine
  images and all. skopeo 1.9.3 cannot copy a release set (containers/image refuses an index
  nested in an index, containers/image#2076), so skopeo copies every child of the release set
  index, each ``skopeo copy`` its own process: one after the other (what a script would do) and
  ``--jobs`` at a time (the parallelism nvkr uses); the ratio is against the faster. nvkr pushes
  strictly more: the same children, then the release set index and its tag.

Usage: .venv/bin/python benchmarks/publish.py [--runs N] [--mib N] [--release-set DIR] [--jobs N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nvkr.canonical import canonical_json  # noqa: E402
from nvkr.oci import mediatypes as mt  # noqa: E402
from nvkr.oci.layout import (  # noqa: E402
    LayoutReader,
    descriptor,
    image_index,
    index_bytes,
    layout_file_bytes,
)

NAME = "bench"


def start_registry(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{s.getsockname()[1]}"
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\nlog: {level: error, accesslog: {disabled: true}}\n"
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}}}\nhttp: {{addr: {host}}}\n"
    )
    if not Path("/usr/bin/docker-registry").is_file():
        sys.exit("/usr/bin/docker-registry is missing: run ./install.sh")
    proc = subprocess.Popen(
        ["/usr/bin/docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            conn = http.client.HTTPConnection(host, timeout=1)
            conn.request("GET", "/v2/")
            if conn.getresponse().status == 200:
                return proc, host
        except OSError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("docker-registry did not start")


def write_blob(layout: Path, data: bytes) -> None:
    path = layout / "blobs" / "sha256" / descriptor(mt.OCTET_STREAM, data)["digest"][7:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def synthetic_layout(layout: Path, mib: int, layers_per_arch: int = 4) -> None:
    """A two-arch image index, ``mib`` MiB of random layers in all, tagged ``bench``."""
    manifests = []
    size = max(1, (mib << 20) // (2 * layers_per_arch))
    for arch in ("amd64", "arm64"):
        layers = []
        for _ in range(layers_per_arch):
            data = os.urandom(size)
            write_blob(layout, data)
            layers.append(descriptor(mt.OCI_LAYER_TAR_GZIP, data))
        config = canonical_json(
            {
                "architecture": arch,
                "os": "linux",
                "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layers]},
            }
        )
        write_blob(layout, config)
        manifest = canonical_json(
            {
                "schemaVersion": 2,
                "mediaType": mt.OCI_MANIFEST,
                "config": descriptor(mt.OCI_IMAGE_CONFIG, config),
                "layers": layers,
            }
        )
        write_blob(layout, manifest)
        manifests.append(
            descriptor(mt.OCI_MANIFEST, manifest, platform={"os": "linux", "architecture": arch})
        )
    index = index_bytes(image_index(manifests))
    write_blob(layout, index)
    top = descriptor(mt.OCI_INDEX, index, annotations={mt.ANN_REF_NAME: NAME})
    (layout / "index.json").write_bytes(index_bytes(image_index([top])))
    (layout / "oci-layout").write_bytes(layout_file_bytes())


def children_layout(release_set: Path, layout: Path) -> list[str]:
    """``layout`` lists every child of ``release_set``'s index under its own ref.name (``c0``,
    ``c1``, ...), blobs hard-linked (copied across file systems): what skopeo can copy. Returns
    the names."""
    reader = LayoutReader(release_set)
    root = reader.index["manifests"][0]
    children = json.loads(reader.read_blob(root))["manifests"]
    for blob in reader.walk(root, deep=True):
        dest = layout / "blobs" / "sha256" / blob.digest[7:]
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(reader.blob_path(blob.digest), dest)
        except OSError:
            shutil.copyfile(reader.blob_path(blob.digest), dest)
    names = [f"c{i}" for i in range(len(children))]
    tops = [
        {**{k: c[k] for k in ("mediaType", "digest", "size")}, "annotations": {mt.ANN_REF_NAME: n}}
        for n, c in zip(names, children, strict=True)
    ]
    (layout / "index.json").write_bytes(index_bytes(image_index(tops)))
    (layout / "oci-layout").write_bytes(layout_file_bytes())
    return names


def timed(argv: list[str]) -> tuple[float, str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv[:3])} ... failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed, proc.stdout


def nvkr_publish(layout: Path, ref: str, jobs: int = 4) -> tuple[float, dict[str, object]]:
    argv = [sys.executable, "-m", "nvkr", "publish", str(layout), ref, "--json", f"--jobs={jobs}"]
    seconds, out = timed(argv)
    return seconds, json.loads(out.strip().splitlines()[-1])


def skopeo_copy(layout: Path, ref: str, name: str = NAME) -> float:
    seconds, _ = timed(
        [
            "skopeo",
            "--insecure-policy",
            "copy",
            "--all",
            "--preserve-digests",
            "--quiet",
            "--dest-tls-verify=false",
            f"oci:{layout}:{name}",
            f"docker://{ref}",
        ]
    )
    return seconds


def skopeo_children(layout: Path, repo: str, names: list[str], jobs: int) -> float:
    """Wall-clock seconds for ``skopeo copy`` of every name, ``jobs`` processes at a time."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(lambda n: skopeo_copy(layout, f"{repo}:{n}", n), names))
    return time.perf_counter() - t0


def fmt(times: list[float]) -> str:
    return f"{statistics.median(times):8.2f} s   [{', '.join(f'{t:.2f}' for t in times)}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds to take the median of")
    parser.add_argument("--mib", type=int, default=256, help="synthetic image size in MiB")
    parser.add_argument("--release-set", type=Path, help="a built release set (dist/<name>)")
    parser.add_argument("--jobs", type=int, default=4, help="parallel uploads (both tools)")
    args = parser.parse_args()
    if not shutil.which("skopeo"):
        sys.exit("skopeo is missing: run ./install.sh")
    with tempfile.TemporaryDirectory(
        prefix="nvkr-bench-publish-", dir=os.environ.get("TMPDIR")
    ) as tmp:
        base = Path(tmp)
        layout = base / "layout"
        names: list[str] = []
        if args.release_set:
            names = children_layout(args.release_set, layout)
            source = args.release_set
            what = f"release set {args.release_set} ({len(names)} children)"
            contenders = ["skopeo, one child after the other", f"skopeo, {args.jobs} at a time"]
        else:
            synthetic_layout(layout, args.mib)
            source = layout
            what = f"synthetic two-arch image index, {args.mib} MiB"
            contenders = ["skopeo copy --all"]
        size = sum(p.stat().st_size for p in (layout / "blobs").rglob("*") if p.is_file())
        times: dict[str, list[float]] = {c: [] for c in [*contenders, "nvkr publish"]}
        again_times, again_bytes = [], []
        for n in range(args.runs):
            # rotate who goes first, so no one always meets a warmer page cache
            order = list(times)[n % len(times) :] + list(times)[: n % len(times)]
            for i, who in enumerate(order):
                # a fresh registry (new port, empty storage) for each push: skopeo's blob info
                # cache (/var/lib/containers/cache) remembers where it pushed a blob and mounts
                # it from there instead of uploading, which nvkr is not asked to do here
                proc, host = start_registry(base / f"registry{n}-{i}")
                try:
                    repo = f"{host}/bench"
                    if who == "nvkr publish":
                        t, report = nvkr_publish(source, repo, args.jobs)
                        assert report["blobsSkipped"] == 0, report
                        times[who].append(t)
                        t, report = nvkr_publish(source, repo, args.jobs)
                        again_times.append(t)
                        again_bytes.append(int(str(report["bytesUploaded"])))
                    elif not names:
                        times[who].append(skopeo_copy(layout, f"{repo}:{NAME}"))
                    else:
                        jobs = 1 if who == contenders[0] else args.jobs
                        times[who].append(skopeo_children(layout, repo, names, jobs))
                finally:
                    proc.terminate()
                    proc.wait(10)
                shutil.rmtree(base / f"registry{n}-{i}", ignore_errors=True)
    print(f"layout: {what}, {size / (1 << 20):.1f} MiB of blobs; medians of {args.runs} rounds")
    for who, ts in times.items():
        print(f"  {who:<36}{fmt(ts)}")
    best = min(statistics.median(times[c]) for c in contenders)
    ratio = statistics.median(times["nvkr publish"]) / best
    print(f"  {'ratio nvkr / skopeo (the faster)':<36}{ratio:8.2f}     (target <= 1.25)")
    print(f"  {'nvkr re-publish':<36}{fmt(again_times)}   bytes uploaded: {again_bytes}")


if __name__ == "__main__":
    main()
