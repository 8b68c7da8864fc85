"""Serving certificates of the in-cluster daemons: self-signed at start, or rotated from disk.

Both daemons serve HTTPS on a secure port with either a throwaway certificate (consumers skip
verification of the Device Manager's by design; the worker's is pinned by the ``APIService``'s
``caBundle`` when one is given) or a ``--cert-dir`` pair that cert-manager may rotate at any
time. A rotation is loaded without a restart or a dropped connection, and one that fails to load
keeps the previous certificate and is logged — a half-written pair must not take the port down.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import trio
import trustme

log = logging.getLogger("gpustack.certs")

RELOAD_INTERVAL = 10.0
"""How often ``--cert-dir`` is checked for a rotated pair (seconds)."""
CERT_FILE, KEY_FILE, CA_FILE = "tls.crt", "tls.key", "ca.crt"


def self_signed(
    hosts: Sequence[str], directory: Path | None = None, *, organization: str = "gpustack"
) -> tuple[Path, Path]:
    """A throwaway certificate for ``hosts``, written as ``tls.crt``/``tls.key``.

    Its one-off CA is written beside them as ``ca.crt``: what a client pins (an
    ``APIService``'s ``caBundle``, a test) to verify the daemon rather than skip verification.
    """
    folder = directory or Path(tempfile.mkdtemp(prefix="gpustack-tls-"))
    ca = trustme.CA(organization_name=f"{organization} self-signed")
    leaf = ca.issue_cert(*hosts)
    cert, key = folder / CERT_FILE, folder / KEY_FILE
    ca.cert_pem.write_to_path(str(folder / CA_FILE))
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    for extra in leaf.cert_chain_pems[1:]:
        extra.write_to_path(str(cert), append=True)
    leaf.private_key_pem.write_to_path(str(key))
    key.chmod(0o600)
    return cert, key


def _digest(cert: Path, key: Path) -> str:
    return hashlib.sha256(cert.read_bytes() + b"\0" + key.read_bytes()).hexdigest()


class CertReloader:
    """Watches a cert/key pair and hands a changed one to ``apply``.

    ``apply`` loads the pair into whatever serves it and raises if it does not load; the
    reloader then keeps the previous certificate and retries on the next change.
    """

    def __init__(
        self,
        apply: Callable[[Path, Path], None],
        cert: Path,
        key: Path,
        interval: float = RELOAD_INTERVAL,
    ) -> None:
        self.apply = apply
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
            self.apply(self.cert, self.key)
        except Exception as exc:  # whatever the TLS library raises: keep serving the old pair
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
