"""nvkr.agent_labels: the labels the node agent prints after its readiness line, read from the
console lines of a boot test and checked against that line."""

from __future__ import annotations

import pytest

from nvkr import agent_labels
from nvkr.errors import BootTestError

READY = "[    9.2] node-agent[222]: nvkr-node-agent: ready gpus=0 product=none generation=none"
LABELS = [
    "[    9.3] node-agent[286]: {",
    '[    9.3] node-agent[286]:   "nvidia.com/gpu.count": "0",',
    "[    9.3] systemd[1]: interleaved line",
    '[    9.3] node-agent[286]:   "nvidia.com/gpu.present": "false"',
    "[    9.3] node-agent[286]: }",
]


def test_agent_labels_are_read_from_the_console_and_checked():
    assert agent_labels.check_agent_labels(READY, [READY, *LABELS]) == {
        "nvidia.com/gpu.count": "0",
        "nvidia.com/gpu.present": "false",
    }
    hopper = READY.replace("gpus=0", "gpus=8").replace("generation=none", "generation=hopper")
    with pytest.raises(BootTestError, match=r"gpu.count='0' \(expected '8'\)"):
        agent_labels.check_agent_labels(hopper, [hopper, *LABELS])
    with pytest.raises(BootTestError, match="printed no JSON object"):
        agent_labels.check_agent_labels(READY, [READY, "[ 9.3] node-agent[286]: }"])
