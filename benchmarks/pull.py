#!/usr/bin/env python3
"""``nvkr pull`` with one download at a time vs a pool of workers, in one run.

Builds a release set shaped like a default one — ``--blobs`` machine images of ``--mib`` MiB of
random bytes each (as QCOW2 disks would be, incompressible) next to their small manifests,
provenance and metadata — starts CNCF distribution (``/usr/bin/docker-registry``) on 127.0.0.1
the way the tests do (:func:`tests.helpers.registry.run_registry`), publishes the set with
:func:`nvkr.delivery.publish.publish_layout`, then for each of ``--runs`` rounds pulls it by digest with
``workers=1`` and ``workers=--workers`` (alternating who goes first), each pull in a fresh Python
process into a fresh directory. Prints the median pull time of each (the report's ``seconds``:
the whole pull, from the first manifest to the layout in place), the ratio, and the peak RSS of
the pulling process (downloads stream to temp files: it must not grow with the blobs), and a
pull into an earlier pull's directory (every blob reused after hashing: how long that takes and
how many bytes it still downloads).

On loopback the registry, the hashing and the disk share the machine's cores, so the gain is
bounded by CPU. ``--throttle MIB_S`` puts a proxy in front of the registry that serves each
connection at most MIB_S MiB/s, as a remote registry or CDN does per stream; there parallel
downloads pay off in full.

Usage: .venv/bin/python benchmarks/pull.py [--runs N] [--blobs N] [--mib N] [--workers N]
       [--throttle MIB_S]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The pull, in its own process. Its peak RSS is VmHWM (this process image's high-water mark):
# getrusage's ru_maxrss survives execve and would report the benchmark's own peak after fork.
_CHILD = """
import json, sys
from pathlib import Path
from nvkr.oci.registry import RegistryClient
from nvkr.delivery.pull import pull_release_set
ref, target, workers = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
with RegistryClient(ref.split("/", 1)[0]) as client:
    report = pull_release_set(ref, target, client, workers=workers)
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))  # KiB
print(json.dumps({"seconds": report.seconds, "blobs": report.blobs, "bytes": report.bytes,
                  "downloaded": report.downloaded_bytes, "reused": report.reused_bytes,
                  "maxrss_kib": peak}))
"""


class _Throttled(BaseHTTPRequestHandler):
    """Forward GET/HEAD to the registry; send each response body at most ``rate`` bytes/s."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else every small answer waits for a delayed ACK (40 ms)
    server: _ThrottleServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        upstream = http.client.HTTPConnection(self.server.upstream, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
            upstream.request(self.command, self.path, headers=headers)
            resp = upstream.getresponse()
            self.send_response(resp.status)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "keep-alive", "transfer-encoding"):
                    self.send_header(k, v)
            self.end_headers()
            if self.command == "HEAD":
                return
            rate, sent, started = self.server.rate, 0, time.monotonic()
            while chunk := resp.read(64 << 10):
                self.wfile.write(chunk)
                sent += len(chunk)
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        finally:
            upstream.close()

    do_HEAD = do_GET


class _ThrottleServer(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    rate: float


@contextlib.contextmanager
def throttled(upstream: str, mib_s: float) -> Iterator[str]:
    """A proxy in front of ``upstream`` serving each connection at ``mib_s`` MiB/s; its host."""
    server = _ThrottleServer(("127.0.0.1", 0), _Throttled)
    server.upstream, server.rate = upstream, mib_s * (1 << 20)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def pull(ref: str, target: Path, workers: int, keep: bool = False) -> dict[str, float]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, ref, str(target), str(workers)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"pull with workers={workers} failed ({proc.returncode}):\n{proc.stderr}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    if not keep:
        shutil.rmtree(target)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds to take the median of")
    parser.add_argument("--blobs", type=int, default=4, help="machine images in the set")
    parser.add_argument("--mib", type=int, default=64, help="MiB per machine image")
    parser.add_argument("--workers", type=int, default=4, help="the parallel pull's workers")
    parser.add_argument(
        "--throttle", type=float, default=0.0, help="MiB/s per connection (0: straight to it)"
    )
    args = parser.parse_args()

    from nvkr.delivery.publish import publish_layout
    from nvkr.oci.registry import RegistryClient
    from tests.helpers.machine_sets import make_machine_image_set
    from tests.helpers.registry import run_registry

    with tempfile.TemporaryDirectory(prefix="nvkr-bench-pull-") as tmp:
        base = Path(tmp)
        t0 = time.perf_counter()
        layout = make_machine_image_set(
            base / "set", count=args.blobs, size=args.mib << 20, seed=None
        )
        made = time.perf_counter() - t0
        shutil.rmtree(base / "set" / "store")  # the layout's blobs are hard links: keep them
        with run_registry(base / "registry") as reg:
            with RegistryClient(reg.host) as client:
                published = publish_layout(layout, f"{reg.host}/bench/set", client)
            shutil.rmtree(base / "set")
            with contextlib.ExitStack() as stack:
                host = reg.host
                if args.throttle > 0:
                    host = stack.enter_context(throttled(reg.host, args.throttle))
                ref = f"{host}/bench/set@{published.digest}"
                times: dict[int, list[float]] = {1: [], args.workers: []}
                peaks: dict[int, int] = {1: 0, args.workers: 0}
                result: dict[str, float] = {}
                for n in range(args.runs):
                    # alternate who goes first, so neither always meets a warmer page cache
                    order = (1, args.workers) if n % 2 == 0 else (args.workers, 1)
                    for workers in order:
                        result = pull(ref, base / f"pulled-{n}-{workers}", workers)
                        times[workers].append(round(result["seconds"], 3))
                        peaks[workers] = max(peaks[workers], int(result["maxrss_kib"]))
                # a second pull into an earlier pull's DIR: every blob reused, each re-hashed
                pull(ref, base / "again", args.workers, keep=True)
                again = pull(ref, base / "again", args.workers)
    one, many = statistics.median(times[1]), statistics.median(times[args.workers])
    mib = result["bytes"] / (1 << 20)
    where = f"throttled to {args.throttle:g} MiB/s per connection" if args.throttle else "direct"
    print(
        f"release set        {args.blobs} machine images x {args.mib} MiB "
        f"({int(result['blobs'])} blobs, {mib:.1f} MiB), made in {made:.1f} s"
    )
    print(f"registry           distribution 2.8 on loopback, {where}; {os.cpu_count()} CPUs")
    for workers, median in ((1, one), (args.workers, many)):
        print(
            f"pull workers={workers:<3}    median of {args.runs}: {median:7.2f} s  "
            f"({mib / median:7.1f} MiB/s)  runs {times[workers]}  peak RSS "
            f"{peaks[workers] / 1024:.0f} MiB"
        )
    print(f"speed-up           workers=1 / workers={args.workers}: {one / many:.2f}x")
    print(
        f"pull into its DIR  again, workers={args.workers}: {again['seconds']:.2f} s, "
        f"{again['downloaded'] / (1 << 20):.1f} MiB downloaded, "
        f"{again['reused'] / (1 << 20):.1f} MiB reused (hashed, hard-linked)"
    )


if __name__ == "__main__":
    main()
