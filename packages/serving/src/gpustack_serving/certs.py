"""The serving pair of a secure port, the names it carries, and its rotation from disk.

Both daemons serve HTTPS with either a throwaway certificate minted at start
(:func:`gpustack_kube.certs.self_signed`) or a ``--cert-dir`` pair that cert-manager may rotate at
any time. A rotation is loaded without a restart or a dropped connection, and one that fails to
load keeps the previous certificate and is logged — a half-written pair must not take the port
down.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

import trio

from gpustack_kube.certs import CERT_FILE, KEY_FILE, self_signed

log = logging.getLogger("gpustack.certs")

RELOAD_INTERVAL = 10.0
"""How often ``--cert-dir`` is checked for a rotated pair (seconds)."""
WILDCARDS = frozenset({"0.0.0.0", "::"})
"""Bind addresses that name no address of their own (so none goes into the certificate)."""


def serving_hosts(names: Sequence[str], bind_address: str) -> list[str]:
    """A self-signed certificate's names: ``names`` first, then this host and its Pod IP.

    ``POD_IP`` (the downward API's ``status.podIP``) is the address Prometheus, the worker and
    the aggregator dial; a specific bind address is named too. Empty names and repeats go.
    """
    hosts = [*names, socket.gethostname(), os.environ.get("POD_IP", "")]
    if bind_address not in WILDCARDS:
        hosts.append(bind_address)
    return list(dict.fromkeys(h for h in hosts if h))


def serving_pair(
    cert_dir: Path | None, hosts: Callable[[], Sequence[str]], *, organization: str
) -> tuple[Path, Path]:
    """``cert_dir``'s ``tls.crt``/``tls.key``, else a self-signed pair minted for ``hosts()``."""
    if cert_dir is not None:
        return cert_dir / CERT_FILE, cert_dir / KEY_FILE
    return self_signed(hosts(), organization=organization)


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
