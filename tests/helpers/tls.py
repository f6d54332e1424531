"""TLS for loopback test servers: a self-signed certificate and a server socket wrapped with it.

:func:`self_signed` writes a certificate (its own CA, ``subjectAltName`` 127.0.0.1, 127.0.0.2 and
localhost unless told other names) and its key; a client trusts it through ``REQUESTS_CA_BUNDLE``
(requests reads it with ``trust_env``, as nvkr's sessions keep). :func:`serve_tls` wraps a
``socketserver`` server's listening socket, so every connection it accepts speaks TLS.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path
from typing import Any

DEFAULT_NAMES = ("127.0.0.1", "127.0.0.2", "localhost")


def self_signed(directory: Path, names: tuple[str, ...] = DEFAULT_NAMES) -> tuple[Path, Path]:
    """``(cert.pem, key.pem)`` in ``directory``: a P-256 certificate for ``names`` (IP addresses
    or DNS names), valid from yesterday to tomorrow, that is its own CA."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alt: list[Any] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def serve_tls(server: Any, cert: Path, key: Path) -> None:
    """Make ``server`` (not yet serving) accept TLS connections only, with ``cert``/``key``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
