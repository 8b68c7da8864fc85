"""The daemons' self-signed serving certificates, minted with ``cryptography``.

Checked the way a client uses them: the standard library's TLS stack, trusting only the written
``ca.crt`` and checking the host name, completes a handshake for every DNS name and IP address
given and refuses any other; the fields a verifier relies on are read back with
``cryptography``'s parser.
"""

from __future__ import annotations

import ssl
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from gpustack_kube.certs import CA_FILE, self_signed

HOSTS = ["gpustack-operator-worker.gpustack-system.svc", "worker-7d9f", "10.244.1.7", "fd00::7"]


def _handshake(cert: Path, key: Path, ca: Path, server_hostname: str) -> None:
    """A full TLS handshake in memory; raises ``ssl.SSLCertVerificationError`` on refusal."""
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(cert), str(key))
    client_context = ssl.create_default_context(cafile=str(ca))
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_context.wrap_bio(c_in, c_out, server_hostname=server_hostname)
    server = server_context.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, end, outgoing, incoming in (
            ("client", client, c_out, s_in),
            ("server", server, s_out, c_in),
        ):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
            incoming.write(outgoing.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not complete")


def test_every_given_name_and_address_verifies_against_the_written_ca(tmp_path: Path) -> None:
    cert, key = self_signed(HOSTS, tmp_path)
    for host in HOSTS:
        _handshake(cert, key, tmp_path / CA_FILE, host)


def test_another_name_is_refused(tmp_path: Path) -> None:
    cert, key = self_signed(HOSTS, tmp_path)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(cert, key, tmp_path / CA_FILE, "gpustack-operator-worker.other.svc")


def test_a_second_certificates_ca_does_not_verify_the_first(tmp_path: Path) -> None:
    cert, key = self_signed(HOSTS, tmp_path / "a")
    self_signed(HOSTS, tmp_path / "b")
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(cert, key, tmp_path / "b" / CA_FILE, HOSTS[0])


def test_the_fields_a_verifier_relies_on(tmp_path: Path) -> None:
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    cert_path, key_path = self_signed(HOSTS, tmp_path, organization="gpustack worker", now=now)
    leaf = x509.load_pem_x509_certificate(cert_path.read_bytes())
    ca = x509.load_pem_x509_certificate((tmp_path / CA_FILE).read_bytes())
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == HOSTS[:2]
    assert [str(a) for a in san.get_values_for_type(x509.IPAddress)] == HOSTS[2:]
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert (constraints.ca, constraints.path_length) == (True, 0)
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    assert leaf.issuer == ca.subject
    # Valid from a little before "now" for a year; both halves of the pair share the window.
    assert leaf.not_valid_before_utc == now - timedelta(minutes=5)
    assert leaf.not_valid_after_utc == now + timedelta(days=365)
    assert (ca.not_valid_before_utc, ca.not_valid_after_utc) == (
        leaf.not_valid_before_utc,
        leaf.not_valid_after_utc,
    )
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob("*ca*.key"))  # the CA's key is never written


def test_no_host_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one host"):
        self_signed([], tmp_path)
