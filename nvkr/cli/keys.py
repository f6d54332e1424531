"""``nvkr keys generate``: a signing key pair for ``nvkr build --sign`` and ``nvkr verify --key``.

Writes ``PREFIX.key`` (PKCS#8 PEM, mode 0600, encrypted when ``NVKR_KEY_PASSPHRASE`` is set) and
``PREFIX.pub`` (SubjectPublicKeyInfo PEM, the format cosign's ``--key`` reads) with
:func:`nvkr.sign.generate_key`; prints the paths and the key id, never the key.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from nvkr.cli import App


@click.group("keys")
def command() -> None:
    """Make signing keys."""


@command.command("generate")
@click.option(
    "--type",
    "kind",
    type=click.Choice(["ecdsa-p256", "ed25519"]),
    default="ecdsa-p256",
    show_default=True,
    help="Key type (ecdsa-p256 is cosign's default).",
)
@click.option(
    "--out",
    "prefix",
    required=True,
    metavar="PREFIX",
    type=click.Path(path_type=Path),
    help="Writes PREFIX.key (private, 0600) and PREFIX.pub (public).",
)
@click.pass_obj
def generate(app: App, kind: str, prefix: Path) -> None:
    """Generate a key pair; the private key is encrypted with $NVKR_KEY_PASSPHRASE when set."""
    from nvkr.sign import PASSPHRASE_ENV, generate_key

    passphrase = os.environ.get(PASSPHRASE_ENV) or None
    made = generate_key(
        "ed25519" if kind == "ed25519" else "ecdsa-p256",
        prefix,
        passphrase.encode() if passphrase else None,
    )
    state = f"encrypted with ${PASSPHRASE_ENV}" if made.encrypted else "not encrypted"
    click.echo(f"private key {made.private_path} (PKCS#8 PEM, mode 0600, {state})")
    click.echo(f"public key  {made.public_path} (give it to `nvkr verify --key`)")
    click.echo(f"key id      {made.keyid}")
