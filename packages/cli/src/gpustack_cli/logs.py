"""Logging for the daemons: plain lines for people, JSON lines for log pipelines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message (and the exception, if any)."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line."""
        document = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document)


def configure(level: str, *, json_logs: bool) -> None:
    """Send every log line to stderr (stdout carries command output, like YAML)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if json_logs
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(LEVELS[level])
    # One line per outgoing request (every API call, every snapshot read) drowns the daemons'
    # own messages; those clients' lines are for debugging.
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.DEBUG if level == "debug" else logging.WARNING)
