#!/usr/bin/env python3
"""``nvkr publish`` vs ``skopeo copy`` of the same OCI layout to the same registry, in one run.

Starts CNCF distribution (``/usr/bin/docker-registry``) on 127.0.0.1 with a temp storage dir, then
for each of ``--runs`` rounds pushes the same layout to two fresh repositories: one with
``skopeo copy --all --preserve-digests --dest-tls-verify=false oci:LAYOUT:NAME docker://...``,
one with ``nvkr publish LAYOUT REGISTRY/REPO`` (both as the CLI processes a user runs, start-up
included), and then publishes again to show that a re-publish uploads 0 bytes. Prints the
medians in seconds and the ratio nvkr / skopeo.

The layout compared is a two-arch OCI image index, because skopeo 1.9.3 cannot copy a release
set: containers/image refuses an index nested in an index (containers/image#2076). By default it
is synthetic (``--mib`` MiB of incompressible layers over both arches); ``--release-set DIR``
takes the image index out of a built release set instead (e.g. dist/nvkr-default-k8s1.36) and
also times ``nvkr publish`` of the whole set, which only nvkr can push.

Usage: .venv/bin/python benchmarks/publish.py [--runs N] [--mib N] [--release-set DIR]
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


def image_layout_from(release_set: Path, layout: Path) -> None:
    """The first image index of a release set, on its own in ``layout`` (tagged ``bench``)."""
    reader = LayoutReader(release_set)
    root = reader.index["manifests"][0]
    entries = json.loads(reader.read_blob(root))["manifests"]
    image = next((m for m in entries if m["mediaType"] == mt.OCI_INDEX), None)
    if image is None:
        sys.exit(f"{release_set} holds no image index")
    desc = {k: image[k] for k in ("mediaType", "digest", "size")}
    for blob in reader.walk(desc, deep=False):
        write_blob(layout, reader.blob_path(blob.digest).read_bytes())
    top = {**desc, "annotations": {mt.ANN_REF_NAME: NAME}}
    (layout / "index.json").write_bytes(index_bytes(image_index([top])))
    (layout / "oci-layout").write_bytes(layout_file_bytes())


def timed(argv: list[str]) -> tuple[float, str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv[:3])} ... failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed, proc.stdout


def nvkr_publish(layout: Path, ref: str) -> tuple[float, dict[str, object]]:
    seconds, out = timed([sys.executable, "-m", "nvkr", "publish", str(layout), ref, "--json"])
    return seconds, json.loads(out.strip().splitlines()[-1])


def skopeo_copy(layout: Path, ref: str) -> float:
    seconds, _ = timed(
        [
            "skopeo",
            "--insecure-policy",
            "copy",
            "--all",
            "--preserve-digests",
            "--quiet",
            "--dest-tls-verify=false",
            f"oci:{layout}:{NAME}",
            f"docker://{ref}",
        ]
    )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds to take the median of")
    parser.add_argument("--mib", type=int, default=256, help="synthetic image size in MiB")
    parser.add_argument("--release-set", type=Path, help="a built release set layout to use")
    args = parser.parse_args()
    if not shutil.which("skopeo"):
        sys.exit("skopeo is missing: run ./install.sh")
    with tempfile.TemporaryDirectory(prefix="nvkr-bench-publish-") as tmp:
        base = Path(tmp)
        layout = base / "layout"
        if args.release_set:
            image_layout_from(args.release_set, layout)
            what = f"image index of {args.release_set}"
        else:
            synthetic_layout(layout, args.mib)
            what = f"synthetic two-arch image index, {args.mib} MiB"
        size = sum(p.stat().st_size for p in (layout / "blobs").rglob("*") if p.is_file())
        skopeo_times, nvkr_times, again_times, again_bytes = [], [], [], []
        full = None
        for n in range(args.runs):
            # a fresh registry (new port, empty storage) per round: skopeo's blob info cache
            # (/var/lib/containers/cache) remembers where it pushed a blob and would mount it
            # from there instead of uploading, which nvkr is not asked to do here
            proc, host = start_registry(base / f"registry{n}")
            try:
                # alternate who goes first, so neither always meets a warmer page cache
                for who in ("skopeo", "nvkr") if n % 2 == 0 else ("nvkr", "skopeo"):
                    if who == "skopeo":
                        skopeo_times.append(skopeo_copy(layout, f"{host}/skopeo:{NAME}"))
                    else:
                        t, report = nvkr_publish(layout, f"{host}/nvkr")
                        assert report["blobsSkipped"] == 0, report
                        nvkr_times.append(t)
                t, report = nvkr_publish(layout, f"{host}/nvkr")
                again_times.append(t)
                again_bytes.append(int(str(report["bytesUploaded"])))
                if args.release_set and full is None:
                    full = nvkr_publish(args.release_set, f"{host}/release-set")
            finally:
                proc.terminate()
                proc.wait(10)
            shutil.rmtree(base / f"registry{n}", ignore_errors=True)
    skopeo_s, nvkr_s = statistics.median(skopeo_times), statistics.median(nvkr_times)
    print(f"layout                              {what} ({size / (1 << 20):.1f} MiB of blobs)")
    print(f"skopeo copy --all (median of {args.runs})     {skopeo_s:8.2f} s   {skopeo_times}")
    print(f"nvkr publish (median of {args.runs})          {nvkr_s:8.2f} s   {nvkr_times}")
    print(f"ratio nvkr / skopeo                 {nvkr_s / skopeo_s:8.2f}   (target <= 1.25)")
    print(
        f"nvkr re-publish (median)            {statistics.median(again_times):8.2f} s   "
        f"bytes uploaded: {again_bytes}"
    )
    if full is not None:
        print(
            f"nvkr publish of the whole set       {full[0]:8.2f} s   "
            f"({full[1]['blobs']} blobs, {full[1]['manifests']} manifests; skopeo cannot copy it)"
        )


if __name__ == "__main__":
    main()
