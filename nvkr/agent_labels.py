"""The node agent's labels on a booted image's console, checked against its readiness line.

:func:`nvkr.machine.boot.boot_test` waits for the agent's readiness line and then (``then=``) for the
last line of the labels it prints next; :func:`check_agent_labels` reads those labels from the
console lines the boot test returns and checks them against the readiness line.
"""

from __future__ import annotations

import json
import re

from nvkr.errors import BootTestError

#: The last line of the agent's labels (``node-agent --print-labels``, indented JSON, run by its
#: unit after the readiness line; journald prefixes each line with ``node-agent[PID]:``).
AGENT_LABELS = r"node-agent\[\d+\]: \}\s*$"
_READY_FIELDS = re.compile(r"\bgpus=(\d+)\b.*\bgeneration=(\S+)")
_AGENT_LINE = re.compile(r"node-agent\[(\d+)\]: (.*)$")


def _printed_json(lines: list[str]) -> str:
    """The JSON text of the last ``node-agent[PID]:`` block from ``{`` to ``}`` in ``lines``."""
    end = max((i for i, ln in enumerate(lines) if re.search(AGENT_LABELS, ln)), default=-1)
    if end < 0:
        return ""
    m = _AGENT_LINE.search(lines[end])
    assert m is not None
    pid, body = m.group(1), []
    for line in reversed(lines[: end + 1]):
        m = _AGENT_LINE.search(line)
        if m is None or m.group(1) != pid:
            continue
        body.append(m.group(2))
        if m.group(2).strip() == "{":
            break
    return "\n".join(reversed(body))


def check_agent_labels(ready: str, lines: list[str]) -> dict[str, str]:
    """The labels the agent printed (an indented JSON object on the console ``lines``, ending
    with the line :data:`AGENT_LABELS` matches), checked against its readiness line:
    ``nvidia.com/gpu.count`` is its ``gpus=N``, ``nvidia.com/gpu.present`` is ``N > 0``, and
    ``nvkr.dev/gpu-generation`` its ``generation=`` when that is not ``none``.

    Raises:
        BootTestError: no JSON object of strings was printed, or a label disagrees.
    """
    text = _printed_json(lines)
    try:
        labels = json.loads(text) if text else None
    except ValueError:
        labels = None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise BootTestError(f"the agent printed no JSON object of labels: {text!r}")
    m = _READY_FIELDS.search(ready)
    if m is None:
        raise BootTestError(f"the readiness line names no gpus=/generation=: {ready!r}")
    gpus, generation = int(m.group(1)), m.group(2)
    want = {"nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.present": str(gpus > 0).lower()}
    if generation != "none":
        want["nvkr.dev/gpu-generation"] = generation
    wrong = {k: (labels.get(k), v) for k, v in want.items() if labels.get(k) != v}
    if wrong:
        detail = ", ".join(f"{k}={got!r} (expected {exp!r})" for k, (got, exp) in wrong.items())
        raise BootTestError(f"the agent's labels disagree with its readiness line: {detail}")
    return {str(k): str(v) for k, v in labels.items()}
