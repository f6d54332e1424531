"""Console lines as boot-test reads them: escape sequences and control characters removed."""

from __future__ import annotations

import pytest

from nvkr.machine.boot import console_text

READY = "[   23.075484] node-agent[335]: nvkr-node-agent: ready gpus=0"


@pytest.mark.parametrize(
    "raw",
    [
        # systemd 257 (Debian 13) resets the palette before its status lines: OSC 104, BEL
        b"\x1b]104\x07" + READY.encode(),
        b"\x1b]104\x07\x1b]104\x07" + READY.encode(),
        # the same class: an OSC ended by ST (ESC \\), a DCS, a window title
        b"\x1b]0;node: boot\x1b\\" + READY.encode(),
        b"\x1bP1$r0m\x1b\\" + READY.encode(),
        # what was stripped before: CSI colours, SeaBIOS's ESC c, a carriage return
        b"\x1b[0;1;32m\x1bc" + READY.encode() + b"\x1b[0m\r",
    ],
)
def test_escape_sequences_leave_nothing_in_the_line(raw: bytes) -> None:
    """The readiness line a Debian 13 guest prints came out as ``104[   23.07...]``: the OSC's
    introducer was dropped and its parameter kept. Every string sequence goes whole."""
    assert console_text(raw) == READY


def test_an_unterminated_string_sequence_keeps_the_text_after_it() -> None:
    """A sequence cut off (its end in the next chunk, or never sent) must not swallow the
    readiness text: only its introducer goes, as before."""
    assert console_text(b"\x1b]104" + READY.encode()).endswith(READY)
