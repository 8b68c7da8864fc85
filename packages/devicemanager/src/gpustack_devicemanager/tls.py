"""The secure port's hypercorn configuration, whose SSL contexts a rotated certificate reaches.

Hypercorn builds its ``SSLContext`` once; loading a new chain into that same context changes
what every *later* handshake presents, so a rotated certificate (cert-manager writing
``tls.crt``/``tls.key``) takes effect without a restart or a dropped connection. Watching the
files is :class:`gpustack_serving.certs.CertReloader`'s job; this module only loads.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from hypercorn.config import Config


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

    def load(self, cert: Path, key: Path) -> None:
        """Load a new pair into every live context, after proving it loads on its own."""
        probe = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        probe.load_cert_chain(cert, key)  # validate before touching live contexts
        for context in self.ssl_contexts:
            context.load_cert_chain(cert, key)
