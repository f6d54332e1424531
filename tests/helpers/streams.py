"""The small recipe the event-stream tests build (tests/unit/monitor/): a URL source, a
kube-packages action and a scratch container image; ``RECIPE`` is a format string taking the
loopback ``base`` URL and the tool's ``sha``."""

RECIPE = """\
apiVersion: nvkr.dev/v1alpha1
kind: Recipe
metadata: {{name: small}}
epoch: "1700000000"
matrix:
  gpu: [hopper]
  kubernetes: ["1.36"]
  arch: [amd64]
sources:
  tool:
    url: "{base}/tool"
    sha256: "{sha}"
artifacts:
  pkgs: {{builder: kube-packages, binaries: {{tool: tool}}}}
  image:
    builder: container-image
    base: scratch
    files: {{/usr/bin/tool: {{source: tool, mode: "0755"}}, /opt/pkgs.tar: pkgs}}
    entrypoint: ["/usr/bin/tool"]
releaseSet:
  name: small
  clusterRelease: {{kubernetes: "1.36.4", images: [image]}}
"""

TOOL = b"#!/bin/sh\necho the golden tool\n"
