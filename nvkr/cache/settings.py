"""Where a build's remote cache settings come from: the command line, the environment, the config.

``nvkr build`` takes ``--cache-from``, ``--cache-to``, ``--cache-mode``, ``--cache-salt``,
``--cache-sign-key``, ``--cache-trust`` and ``--cache-trust-unsigned``; each (but the last) also
comes from an environment variable (``NVKR_CACHE_FROM``, ``NVKR_CACHE_TO``, ``NVKR_CACHE_MODE``,
``NVKR_CACHE_SALT``, ``NVKR_CACHE_SIGN_KEY``, ``NVKR_CACHE_TRUST``; lists separated by whitespace
or commas) and from the ``cache:`` map of the config file::

    cache:
      from: [registry.example/nvkr/cache]     # or one string
      to: registry.example/nvkr/cache
      salt: "2026-01"
      mode: min                               # or max
      trust: [keys/ci-cache.pub]              # relative to the config file
      signKey: env://NVKR_CACHE_KEY           # a PEM file (relative to the config file) or env://

Per setting, the command line beats the environment, which beats the config file. Everything is
checked here, before anything is built: a malformed reference, an unknown mode, an unreadable
key, ``--cache-to`` without a signing key, ``--cache-from`` with nothing to trust.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from nvkr.errors import UsageError

if TYPE_CHECKING:
    from nvkr.oci.reference import Reference
    from nvkr.sign import PrivateKey, PublicKey

MODES: Final = ("min", "max")
_CONFIG_KEYS: Final = ("from", "to", "salt", "mode", "trust", "signKey")
_SPLIT = re.compile(r"[\s,]+")


@dataclass(frozen=True)
class CacheSettings:
    """A build's remote cache settings, checked. ``sources`` are the ``--cache-from``
    repositories in order, ``target`` the ``--cache-to`` one; ``trust`` the public keys entries
    must be signed by (the signing key's own public key among them), ``sign_key`` the key
    entries are signed with."""

    sources: tuple[Reference, ...] = ()
    target: Reference | None = None
    mode: str = "min"
    salt: str = ""
    sign_key: PrivateKey | None = None
    trust: tuple[PublicKey, ...] = ()
    trust_unsigned: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.sources or self.target)


def _split(value: str) -> list[str]:
    return [v for v in _SPLIT.split(value.strip()) if v]


def config_section(path: Path | None) -> tuple[dict[str, Any], Path | None]:
    """The ``cache:`` map of the config file at ``path`` (missing file or key: empty), read as
    every reader of the config reads it (:func:`nvkr.fetch.mirrors.read_config`), and the file
    that relative key paths start from (None: no file).

    Raises:
        UsageError: unreadable, not UTF-8, not YAML or not a map; ``cache`` not a map, unknown
            keys, wrong types.
    """
    from nvkr.fetch.mirrors import read_config

    if path is None:
        return {}, None
    data, _ = read_config(path)
    if data.get("cache") is None:
        return {}, path if path.exists() else None
    section = data["cache"]
    if not isinstance(section, dict):
        raise UsageError(f"nvkr config {path}: 'cache' must be a map", hint=_CONFIG_HINT)
    unknown = sorted(str(k) for k in section if k not in _CONFIG_KEYS)
    if unknown:
        raise UsageError(
            f"nvkr config {path}: cache.{unknown[0]} is not a cache setting",
            hint="cache settings: " + ", ".join(_CONFIG_KEYS),
        )
    for key, value in section.items():
        if key in ("from", "trust"):
            ok = isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value)
            )
        else:
            ok = isinstance(value, str)
        if not ok:
            kind = "a string or a list of strings" if key in ("from", "trust") else "a string"
            raise UsageError(
                f"nvkr config {path}: cache.{key} must be {kind}, not {type(value).__name__}",
                hint=_CONFIG_HINT,
            )
    return dict(section), path


_CONFIG_HINT = "e.g. cache: {from: [registry.example/nvkr/cache], to: registry.example/nvkr/cache}"


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _relative(value: str, base: Path | None) -> str:
    """A key path from the config file, relative to the config file's directory."""
    if base is None or value.startswith("env://") or os.path.isabs(value):
        return value
    return str(base.parent / value)


def repository_reference(text: str, option: str) -> Reference:
    """``text`` as a repository reference (no tag, no digest) for ``option``'s messages.

    Raises:
        UsageError: malformed, or a tag or digest is given.
    """
    from nvkr.oci.reference import Reference

    ref = Reference.parse(text)
    if ref.tag or ref.digest:
        raise UsageError(
            f"{option} {text}: a cache is a repository, without :tag or @digest",
            hint=f"write {option} {ref.registry}/{ref.repository}",
        )
    return ref


def resolve_settings(
    *,
    cache_from: Sequence[str] = (),
    cache_to: str | None = None,
    mode: str | None = None,
    salt: str | None = None,
    sign_key: str | None = None,
    trust: Sequence[str] = (),
    trust_unsigned: bool = False,
    env: Mapping[str, str] | None = None,
    config: Path | None = None,
) -> CacheSettings:
    """Merge the command line (the arguments), ``env`` (default ``os.environ``) and the
    ``cache:`` map of the config file ``config`` (module docstring) into checked settings.

    Raises:
        UsageError: a malformed repository, an unknown mode, ``--cache-to`` without a signing
            key, ``--cache-from`` with neither a key to trust nor ``--cache-trust-unsigned``,
            an invalid config section.
        IntegrityError, UsageError: a key that cannot be read (as :mod:`nvkr.sign` raises).
    """
    from nvkr.sign import load_private_key, load_public_key

    env = os.environ if env is None else env
    section, base = config_section(config)

    def pick_list(cli: Sequence[str], var: str, key: str) -> tuple[list[str], bool]:
        if cli:
            return [v for c in cli for v in _split(c)], False
        if env.get(var, "").strip():
            return _split(env[var]), False
        return _listed(section.get(key)), True

    def pick(cli: str | None, var: str, key: str) -> tuple[str | None, bool]:
        if cli is not None:
            return cli, False
        if env.get(var):
            return env[var], False
        value = section.get(key)
        return (str(value), True) if value is not None else (None, False)

    sources_text, _ = pick_list(cache_from, "NVKR_CACHE_FROM", "from")
    target_text, _ = pick(cache_to, "NVKR_CACHE_TO", "to")
    mode_text, _ = pick(mode, "NVKR_CACHE_MODE", "mode")
    salt_text, _ = pick(salt, "NVKR_CACHE_SALT", "salt")
    key_text, key_from_config = pick(sign_key, "NVKR_CACHE_SIGN_KEY", "signKey")
    trust_text, trust_from_config = pick_list(trust, "NVKR_CACHE_TRUST", "trust")

    sources = tuple(dict.fromkeys(repository_reference(s, "--cache-from") for s in sources_text))
    target = repository_reference(target_text, "--cache-to") if target_text else None
    chosen_mode = (mode_text or "min").strip()
    if chosen_mode not in MODES:
        raise UsageError(
            f"--cache-mode {chosen_mode!r}: expected min or max",
            hint="min pushes what the release sets reference and slow actions; max pushes "
            "every action",
        )
    private = None
    if key_text:
        private = load_private_key(_relative(key_text, base) if key_from_config else key_text)
    trusted: list[PublicKey] = []
    for text in trust_text:
        path = _relative(text, base) if trust_from_config else text
        trusted.append(load_public_key(path))
    if private is not None:  # what this build signs, it trusts
        trusted.append(private.public_key())
    if target is not None and private is None:
        raise UsageError(
            f"--cache-to {target}: every entry written to a cache is signed, and no signing "
            "key is given",
            hint="pass --cache-sign-key KEY (a PEM file or env://NAME, from `nvkr keys "
            "generate`), or NVKR_CACHE_SIGN_KEY, or cache.signKey in the config file",
        )
    if sources and not trusted and not trust_unsigned:
        raise UsageError(
            f"--cache-from {sources[0]}: no key to check its entries with",
            hint="pass --cache-trust PUB (the public key of whoever writes the cache), or "
            "--cache-trust-unsigned to use entries nobody signed",
        )
    return CacheSettings(
        sources=sources,
        target=target,
        mode=chosen_mode,
        salt=salt_text or "",
        sign_key=private,
        trust=tuple(trusted),
        trust_unsigned=trust_unsigned,
    )
