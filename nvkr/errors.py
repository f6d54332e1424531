"""Error types with a stable code, the place they concern and a hint.

Every failure a user can cause or meet is raised as an :class:`NvkrError` subclass. The CLI catches
them once, at the top, prints ``error[CODE]: message`` plus the hint on one or two lines and exits
with the class's exit code (0 ok, 1 build failure, 2 usage or invalid recipe, 3 integrity failure,
130 interrupted, 143 terminated). Tracebacks are shown only with ``--debug``.
"""

from __future__ import annotations

from nvkr.redact import redact_text


class NvkrError(Exception):
    """Base of all nvkr errors.

    Args:
        message: what went wrong, naming the file, line, field, source or artifact concerned.
        hint: what the user can do about it (optional).
    Attributes:
        code: stable reference such as ``NVKR-E-CHECKSUM``; documented in README.md.
        exit_code: process exit status the CLI uses.
    """

    code = "NVKR-E-INTERNAL"
    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        # credentials never leave (nvkr.redact): a URL's user info is stripped from every message
        message = redact_text(message)
        super().__init__(message)
        self.message = message
        self.hint = None if hint is None else redact_text(hint)

    def __str__(self) -> str:
        return redact_text(self.message)

    def render(self) -> str:
        """One line ``error[CODE]: message``, plus an indented ``hint:`` line when there is one
        (the user info of every URL in them stripped, :mod:`nvkr.redact`)."""
        text = f"error[{self.code}]: {self.message}"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return redact_text(text)


class UsageError(NvkrError):
    """Bad command-line usage (unknown variant value, bad option value)."""

    code = "NVKR-E-USAGE"
    exit_code = 2


class LimitError(UsageError):
    """An input is over one of nvkr's bounds (:mod:`nvkr.bounds`): a file's size, a YAML
    document's values once its aliases are expanded, a template's string, format width, steps or
    output. The message names the file (and field) and the limit; nothing more of the input was
    read or rendered."""

    code = "NVKR-E-LIMIT"


class RecipeError(NvkrError):
    """The recipe (or a file it extends) is invalid: YAML syntax, schema, templates, references."""

    code = "NVKR-E-RECIPE"
    exit_code = 2


class RecipeReferenceError(RecipeError):
    """An artifact or release set names a source or artifact that does not exist, or refs form a cycle."""

    code = "NVKR-E-REF"


class UnknownBuilderError(RecipeError):
    """An artifact names a builder nvkr does not have."""

    code = "NVKR-E-BUILDER"


class LockError(NvkrError):
    """The lockfile is missing, malformed or does not match the recipe (``--locked``)."""

    code = "NVKR-E-LOCK"
    exit_code = 2


class ChecksumError(NvkrError):
    """Fetched or stored bytes do not match their pinned digest.

    The message names the source, the URL, the expected and the actual digest. Nothing is left in
    the store.
    """

    code = "NVKR-E-CHECKSUM"
    exit_code = 3
    #: the ``sha256:<hex>`` of the bytes that were received, when they were hashed whole
    actual: str | None = None


class IntegrityError(NvkrError):
    """A stored blob, lockfile or layout fails an integrity check other than a source checksum."""

    code = "NVKR-E-INTEGRITY"
    exit_code = 3


class DowngradeError(IntegrityError):
    """An https URL redirected to plain http (:mod:`nvkr.origin`): refused before anything was
    sent there. The message names the URL asked for and the http one."""


class FetchError(NvkrError):
    """A source could not be downloaded (unreachable URL, HTTP error, empty body, HTML error page)."""

    code = "NVKR-E-FETCH"
    exit_code = 1


class NotServedError(FetchError):
    """The server answered that it does not have the file: HTTP 404 or 410 (``status``), or a
    ``file://`` path that does not exist (``status`` None). An apt source's locked .deb that
    its mirror no longer serves is then fetched from a snapshot archive
    (:mod:`nvkr.fetch.snapshots`); every other caller sees a FetchError."""

    def __init__(self, message: str, hint: str | None = None, *, status: int | None) -> None:
        super().__init__(message, hint)
        self.status = status


class OfflineError(FetchError):
    """``--offline`` and the store lacks what the build needs."""

    code = "NVKR-E-OFFLINE"


class ToolError(NvkrError):
    """An external tool is missing or failed (exit 127 becomes "tool X not found")."""

    code = "NVKR-E-TOOL"
    exit_code = 1


class BuildError(NvkrError):
    """An action failed; the message carries the action, its builder and the tail of its log."""

    code = "NVKR-E-BUILD"
    exit_code = 1


class Interrupted(NvkrError):
    """nvkr was stopped by a signal: Ctrl-C (SIGINT, exit 130) or SIGTERM (exit 143, as a CI
    system cancels a job); finished actions stay cached. ``signum`` sets the exit code
    (128 + signum)."""

    code = "NVKR-E-INTERRUPTED"
    exit_code = 130

    def __init__(self, message: str, hint: str | None = None, *, signum: int = 2) -> None:
        super().__init__(message, hint)
        self.signum = signum
        self.exit_code = 128 + signum


class RegistryError(NvkrError):
    """An OCI registry refused or failed a request (unreachable, HTTP error, bad credentials).

    The message names the registry URL and the operation; ``status`` is the HTTP status when there
    was an answer (None for a connection failure). A registry that answers other bytes or another
    digest than asked for raises :class:`IntegrityError` instead (exit 3).
    """

    code = "NVKR-E-REGISTRY"
    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, *, status: int | None = None) -> None:
        super().__init__(message, hint)
        self.status = status


class AptError(NvkrError):
    """An apt repository or package set cannot be resolved: Release signature, missing package or
    version, unsatisfiable dependencies. The message names the repository or package."""

    code = "NVKR-E-APT"
    exit_code = 1


class DiskError(NvkrError):
    """A disk image cannot be assembled: tree too large for the disk size (both sizes named),
    missing kernel or bootloader files in the tree, a disk tool failing."""

    code = "NVKR-E-DISK"
    exit_code = 1


class ImagePathError(NvkrError):
    """A path ``nvkr image`` is asked for is not in the machine image's root file system, or is
    of the wrong kind (a directory given to ``cat``); the message names the path and the image."""

    code = "NVKR-E-IMAGE-PATH"
    exit_code = 1


class BootTestError(NvkrError):
    """A boot test failed: the image did not reach the expected console line within the time
    limit, or printed a not-ready line; the message ends with the last console lines."""

    code = "NVKR-E-BOOT"
    exit_code = 1


class DriftError(NvkrError):
    """A generated file (a CI pipeline) differs from what its recorded command writes now."""

    code = "NVKR-E-DRIFT"
    exit_code = 1


class RegistryLimitError(RegistryError):
    """A registry's answer exceeds what nvkr reads of it (a manifest, index, referrers list, tag
    list or token larger than 4 MiB): refused after reading at most the limit; the message names
    the URL and the limit. Exit 2 and code ``NVKR-E-LIMIT``, as :class:`LimitError` for every
    other untrusted input over its bound (retrying will not shrink it); a ``RegistryError`` so
    that every registry caller's ``except`` still sees it."""

    code = "NVKR-E-LIMIT"
    exit_code = 2
