"""A small strict reader of DER (ITU-T X.690), for the PKCS#7 structures Secure Boot uses.

:class:`Der` walks one level of TLVs (tag, length, value): definite lengths only, every length
checked against what holds it, and a tag that is not the one expected refused with where it
was found. It reads the few structures of kernel module signatures (:mod:`.modsig`) and
Authenticode (:mod:`.authenticode`); it is no general ASN.1 decoder (single-byte tags only,
which is all those use).
"""

from __future__ import annotations

from nvkr.errors import IntegrityError


class Der:
    """A cursor over DER bytes: :meth:`next` reads one TLV (definite lengths only)."""

    def __init__(self, data: bytes, what: str) -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def done(self) -> bool:
        return self.pos >= len(self.data)

    def next(self, tag: int | None = None) -> tuple[int, bytes, bytes]:
        """(tag, content, the whole TLV); ``tag`` when given must match."""
        d, start = self.data, self.pos
        if start + 2 > len(d):
            raise IntegrityError(f"{self.what}: DER ends inside a tag at byte {start}")
        t, n = d[start], d[start + 1]
        pos = start + 2
        if n & 0x80:
            k = n & 0x7F
            if k == 0 or k > 4 or pos + k > len(d):
                raise IntegrityError(f"{self.what}: bad DER length at byte {start}")
            n = int.from_bytes(d[pos : pos + k], "big")
            pos += k
        if pos + n > len(d):
            raise IntegrityError(
                f"{self.what}: a DER value at byte {start} claims {n} bytes, {len(d) - pos} remain"
            )
        if tag is not None and t != tag:
            raise IntegrityError(
                f"{self.what}: expected DER tag 0x{tag:02x} at byte {start}, found 0x{t:02x}"
            )
        self.pos = pos + n
        return t, d[pos : pos + n], d[start : pos + n]

    def peek(self) -> int | None:
        return self.data[self.pos] if self.pos < len(self.data) else None

    def end(self, what: str) -> None:
        """Refuse bytes left after the last TLV read (``what`` names the structure)."""
        if not self.done():
            raise IntegrityError(
                f"{self.what}: {len(self.data) - self.pos} unexpected bytes at the end of {what}"
            )


def oid(content: bytes) -> str:
    """The dotted form of an OBJECT IDENTIFIER's content."""
    if not content:
        return ""
    parts = [content[0] // 40, content[0] % 40]
    value = 0
    for b in content[1:]:
        value = (value << 7) | (b & 0x7F)
        if not b & 0x80:
            parts.append(value)
            value = 0
    return ".".join(map(str, parts))


def algorithm(tlv: bytes, what: str) -> str:
    """The OID of an AlgorithmIdentifier SEQUENCE's content."""
    return oid(Der(tlv, what).next(0x06)[1])
