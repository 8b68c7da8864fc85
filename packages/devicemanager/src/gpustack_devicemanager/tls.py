"""The secure port's certificate: self-signed at start, or ``--cert-dir`` files hot-reloaded.

Hypercorn builds its ``SSLContext`` once; loading a new chain into that same context changes
what every *later* handshake presents, so a rotated certificate (cert-manager writing
``tls.crt``/``tls.key``) takes effect without a restart or a dropped connection. A rotation
that fails to load keeps the previous certificate and is logged — a half-written pair must not
take the port down.
"""

from __future__ import annotations

import hashlib
import logging
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

import trio
import trustme
from hypercorn.config import Config

log = logging.getLogger("gpustack.devicemanager.tls")

RELOAD_INTERVAL = 10.0
"""How often ``--cert-dir`` is checked for a rotated pair (seconds)."""


class ReloadableConfig(Config):
    """A hypercorn config that remembers the SSL contexts it creates, so they can be reloaded."""

    def __init__(self) -> None:
        super().__init__()
        self.ssl_contexts: list[ssl.SSLContext] = []

    def create_ssl_context(self) -> ssl.SSLContext | None:
        """Hypercorn's context, TLS ≥ 1.2 and ALPN as configured, kept for later reloads."""
        context = super().create_ssl_context()
        if context is not None:
            self.ssl_contexts.append(context)
        return context


def self_signed(hosts: Sequence[str], directory: Path | None = None) -> tuple[Path, Path]:
    """A throwaway certificate for ``hosts``: consumers skip verification of it by design."""
    folder = directory or Path(tempfile.mkdtemp(prefix="gpustack-dm-tls-"))
    ca = trustme.CA(organization_name="gpustack device-manager self-signed")
    leaf = ca.issue_cert(*hosts)
    cert, key = folder / "tls.crt", folder / "tls.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    for extra in leaf.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    leaf.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    return cert, key


def _digest(cert: Path, key: Path) -> str:
    return hashlib.sha256(cert.read_bytes() + b"\0" + key.read_bytes()).hexdigest()


class CertReloader:
    """Watches a cert/key pair and loads a changed one into every live context."""

    def __init__(
        self, config: ReloadableConfig, cert: Path, key: Path, interval: float = RELOAD_INTERVAL
    ) -> None:
        self.config = config
        self.cert = cert
        self.key = key
        self.interval = interval
        self.loaded = _digest(cert, key)
        self.reloads = 0
        self.failures = 0

    def check(self) -> bool:
        """Reload if the pair changed and loads cleanly; return whether it did."""
        try:
            digest = _digest(self.cert, self.key)
        except OSError as exc:
            self.failures += 1
            log.warning(
                "cannot read %s / %s, keeping the current certificate: %s", self.cert, self.key, exc
            )
            return False
        if digest == self.loaded:
            return False
        try:
            probe = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            probe.load_cert_chain(self.cert, self.key)  # validate before touching live contexts
            for context in self.config.ssl_contexts:
                context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as exc:
            self.failures += 1
            log.warning(
                "new certificate in %s does not load, keeping the current one: %s",
                self.cert.parent,
                exc,
            )
            return False
        self.loaded = digest
        self.reloads += 1
        log.info("serving certificate reloaded from %s", self.cert.parent)
        return True

    async def run(self) -> None:
        """Check every ``interval`` seconds, for ever."""
        while True:
            await trio.sleep(self.interval)
            self.check()
