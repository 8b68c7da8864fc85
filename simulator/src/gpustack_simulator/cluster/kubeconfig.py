"""The kubeconfig the stand-in writes, so real kubectl and the daemons can reach it."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

CLUSTER = "gpustack-standin"


def kubeconfig(url: str, ca: Path, users: Sequence[tuple[str, str]], current: str) -> str:
    """One cluster, one user and one context per ``(name, token)``, contexts named as users."""
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER,
                "cluster": {
                    "server": url,
                    "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": token}} for name, token in users],
        "contexts": [
            {"name": name, "context": {"cluster": CLUSTER, "user": name}} for name, _ in users
        ],
        "current-context": current,
        "preferences": {},
    }
    text: str = yaml.safe_dump(document, sort_keys=False)
    return text


def write_kubeconfig(path: Path, text: str) -> None:
    """Write atomically with owner-only permissions: it holds bearer tokens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(text)
    partial.chmod(0o600)
    partial.replace(path)
