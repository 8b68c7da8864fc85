"""hypercorn's settings for a secure port, the same in both daemons."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TypeVar

from hypercorn.config import Config

GRACEFUL_TIMEOUT = 2.0
"""Seconds open requests get to finish once shutdown begins."""
ALPN = ("h2", "http/1.1")
"""The protocols a secure port offers, HTTP/2 preferred."""

C = TypeVar("C", bound=Config)


def hypercorn_config(config: C, errorlog: str) -> C:
    """``config`` with no access log and a 2 s graceful close, logging through ``errorlog``.

    hypercorn's own messages go to that logger, so through our logging and its JSON format,
    not a second handler.
    """
    config.accesslog = None
    config.errorlog = logging.getLogger(errorlog)
    config.graceful_timeout = GRACEFUL_TIMEOUT
    return config


def terminate_tls(config: C, address: str, port: int, cert: Path, key: Path) -> C:
    """``config`` listening on ``address:port`` with hypercorn terminating TLS for the pair."""
    config.bind = [f"{address}:{port}"]
    config.certfile, config.keyfile = str(cert), str(key)
    config.alpn_protocols = list(ALPN)
    return config
