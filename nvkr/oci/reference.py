"""Registry references: ``REGISTRY/REPOSITORY[:TAG][@DIGEST]`` split and checked, and referrers tags.

Names enter here from the command line (``nvkr publish REF``, ``nvkr build --push REF``) before
anything is sent: :meth:`Reference.parse` checks them against the OCI distribution-spec v1.1
("Pulling manifests") and names the part that is wrong. The checked :class:`Reference` then gives
:class:`nvkr.oci.registry.RegistryClient` its registry host and :mod:`nvkr.delivery.publish` its
repository, tag and digest; :func:`fallback_tag` names the tag that stands in for the referrers
API on registries without one ("Referrers Tag Schema").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nvkr.errors import UsageError

# distribution-spec "Pulling manifests": <name> path components and <reference> tags
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = re.compile(rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?")
_NAME_MAX = 255  # distribution's reference package: registry + "/" + repository


@dataclass(frozen=True)
class Reference:
    """``REGISTRY/REPOSITORY[:TAG][@sha256:<hex>]``, checked against the distribution spec."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """Split and check ``text``; nothing is sent anywhere.

        The registry is the first path component and must look like a host (a dot, a port or
        ``localhost``); repository components match ``[a-z0-9]+((\\.|_|__|-+)[a-z0-9]+)*``
        (distribution-spec "Pulling manifests", lower case only), registry plus repository are at
        most 255 characters; a tag matches ``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``; a digest is
        ``sha256:<64 hex>`` or ``sha512:<128 hex>``.

        Raises:
            UsageError: naming the part that is wrong, with a corrected form where there is one.
        """
        hint = "write REGISTRY/REPOSITORY[:TAG], e.g. registry.example.org/gpu/node-release:v1"
        name, _, digest = text.partition("@")
        if digest and not _DIGEST.fullmatch(digest):
            raise UsageError(f"reference {text!r}: {digest!r} is not a sha256:<64 hex> digest")
        registry, slash, rest = name.partition("/")
        if not slash or not rest:
            raise UsageError(f"reference {text!r} names no repository", hint=hint)
        if not _HOST.fullmatch(registry) or not (
            "." in registry or ":" in registry or registry == "localhost"
        ):
            raise UsageError(f"reference {text!r}: {registry!r} is not a registry host", hint=hint)
        tag = None
        if ":" in rest.rsplit("/", 1)[-1]:
            rest, tag = rest.rsplit(":", 1)
            if not _TAG.fullmatch(tag):
                why = f" ({len(tag)} characters, at most 128)" if len(tag) > 128 else ""
                raise UsageError(
                    f"reference {text!r}: tag {tag!r} is not valid{why}",
                    hint="a tag is 1 to 128 of A-Z a-z 0-9 _ . - and starts with a letter, "
                    "digit or _ (distribution-spec)",
                )
        for part in rest.split("/"):
            if not _COMPONENT.fullmatch(part):
                lower = " (lower case: " + repr(part.lower()) + ")" if part != part.lower() else ""
                raise UsageError(
                    f"reference {text!r}: repository component {part!r} is not valid{lower}",
                    hint="repository components are lower-case letters and digits, joined by "
                    "'.', '_', '__' or dashes (distribution-spec)",
                )
        if len(registry) + 1 + len(rest) > _NAME_MAX:
            raise UsageError(f"reference {text!r}: the name is longer than {_NAME_MAX} characters")
        return cls(registry, rest, tag, digest or None)

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.registry}/{self.repository}{tag}{digest}"


def fallback_tag(digest: str) -> str:
    """The referrers tag of ``digest`` (distribution-spec "Referrers Tag Schema"): ``sha256-<hex>``
    (the algorithm cut to 32 characters, the hex to 64)."""
    alg, _, hexpart = digest.partition(":")
    return f"{alg[:32]}-{hexpart[:64]}"
