"""kubeconfig files for the control plane's components and its users."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def kubeconfig(
    server: str,
    ca: Path,
    users: dict[str, dict[str, str]],
    current: str,
) -> dict[str, Any]:
    """One cluster, one context per user (named as the user), ``current`` selected.

    ``users`` maps a name to its kubeconfig ``user`` entry (``client-certificate`` and
    ``client-key`` paths, or a ``token``).
    """
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gpustack", "cluster": {"server": server,
                                                      "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": entry} for name, entry in users.items()],
        "contexts": [
            {"name": name, "context": {"cluster": "gpustack", "user": name}} for name in users
        ],
        "current-context": current,
    }  # fmt: skip


def write(path: Path, document: dict[str, Any]) -> Path:
    """Write a kubeconfig readable by its owner only (it carries credentials)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path


def cert_user(cert: Path, key: Path) -> dict[str, str]:
    """A kubeconfig ``user`` authenticating by client certificate."""
    return {"client-certificate": str(cert), "client-key": str(key)}
