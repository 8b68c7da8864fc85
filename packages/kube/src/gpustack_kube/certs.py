"""Serving certificates of the in-cluster daemons: the file names, and a self-signed pair.

Both daemons serve HTTPS on a secure port with either a throwaway certificate (consumers skip
verification of the Device Manager's by design; the worker's is pinned by the ``APIService``'s
``caBundle`` when one is given) or a ``--cert-dir`` pair that cert-manager may rotate at any
time. Choosing between them and reloading a rotated pair is :mod:`gpustack_serving.certs`'s job;
the simulator's stand-in and the tests mint pairs here too.
"""

from __future__ import annotations

import ipaddress
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"


CERT_LIFETIME = timedelta(days=365)
"""How long a self-signed serving certificate is valid. It is minted afresh at every start, so
a daemon that runs longer than this must be restarted, or given ``--cert-dir`` (rotated by
cert-manager and reloaded without a restart); consumers skip verification of it or pin the
one-off CA, so the lifetime only has to outlast the process."""
BACKDATE = timedelta(minutes=5)
"""``notBefore`` is set this far in the past, so a peer whose clock lags still accepts it."""


def _name(common_name: str, organization: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(host: str) -> x509.GeneralName:
    """An IP address SAN for a literal address (a Pod IP), a DNS SAN for anything else."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def self_signed(
    hosts: Sequence[str],
    directory: Path | None = None,
    *,
    organization: str = "gpustack",
    now: datetime | None = None,
) -> tuple[Path, Path]:
    """A throwaway serving certificate for ``hosts``, written as ``tls.crt``/``tls.key``.

    Minted with ``cryptography`` directly (a test-CA library has no place in a daemon): a
    one-off CA (P-256, ``CA:TRUE, pathlen:0``, signing certificates only) issues one leaf for
    ``hosts``, each a DNS or an IP address SAN (Service DNS names, the Pod IP), with the
    ``serverAuth`` usage only, valid for :data:`CERT_LIFETIME`. The CA is written beside them as
    ``ca.crt``: what a client pins (an ``APIService``'s ``caBundle``, a test) to verify the
    daemon rather than skip verification. Its key is never written: nothing else is signed.
    """
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name or address")
    folder = directory or Path(tempfile.mkdtemp(prefix="gpustack-tls-"))
    folder.mkdir(parents=True, exist_ok=True)
    start = (now or datetime.now(UTC)) - BACKDATE
    end = start + BACKDATE + CERT_LIFETIME
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"{organization} self-signed CA", f"{organization} self-signed")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0], organization))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.SubjectAlternativeName([_san(h) for h in dict.fromkeys(hosts)]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(leaf_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert, key = folder / CERT_FILE, folder / KEY_FILE
    (folder / CA_FILE).write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key.touch(mode=0o600)
    key.chmod(0o600)
    key.write_bytes(_pem_key(leaf_key))
    return cert, key
