"""Exec credential plugins: the way EKS, GKE and AKS (and OIDC) kubeconfigs authenticate.

The kubeconfig names a command (``aws eks get-token``, ``gke-gcloud-auth-plugin``,
``kubelogin``); it prints an ``ExecCredential`` with a token or a client certificate and,
usually, when that expires. The credential is cached until then and fetched again after it,
and also whenever the API server answers 401 — a plugin's token can be revoked before its
stated expiry, and client-go re-runs the plugin in that case too.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

import trio

from gpustack_kube.config import ExecConfig

EXEC_TIMEOUT = 60.0
"""Seconds a plugin may run; one that hangs (waiting for a browser login) must not hang us."""
STDERR_LIMIT = 2000
"""How much of a failing plugin's stderr goes into the error message."""


class ExecPluginError(Exception):
    """The plugin could not be run or did not print a usable ExecCredential."""


@dataclass(frozen=True)
class ExecCredential:
    """What a plugin returned: a token, a client certificate, or both, and until when."""

    token: str | None
    client_cert: tuple[bytes, bytes] | None
    expires: datetime | None


class ExecAuthenticator:
    """Runs one exec plugin and caches its credential until it expires or is refused.

    Concurrent requests that find the cache empty share one run of the plugin (a lock), so a
    burst at start or after a 401 does not fork the plugin once per request.
    """

    def __init__(
        self,
        config: ExecConfig,
        *,
        server: str,
        ca_data: bytes | None = None,
        insecure: bool = False,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.config = config
        self.server = server
        self.ca_data = ca_data
        self.insecure = insecure
        self.environ = environ
        self.clock = clock
        self.runs = 0
        self._cached: ExecCredential | None = None
        self._lock = trio.Lock()

    async def credential(self) -> ExecCredential:
        """The cached credential while it is valid, otherwise a fresh one from the plugin."""
        async with self._lock:
            cached = self._cached
            if cached is None or (cached.expires is not None and self.clock() >= cached.expires):
                cached = self._cached = await self._run()
            return cached

    def invalidate(self, refused: ExecCredential) -> None:
        """Forget ``refused`` (the server answered 401 to it); the next request re-runs.

        Only that credential is dropped: another request may already have fetched a newer one.
        """
        if self._cached is refused:
            self._cached = None

    def _exec_info(self) -> str:
        cluster: dict[str, object] = {"server": self.server}
        if self.ca_data is not None:
            cluster["certificate-authority-data"] = _b64(self.ca_data)
        if self.insecure:
            cluster["insecure-skip-tls-verify"] = True
        spec: dict[str, object] = {"interactive": False}
        if self.config.provide_cluster_info:
            spec["cluster"] = cluster
        return json.dumps(
            {"apiVersion": self.config.api_version, "kind": "ExecCredential", "spec": spec}
        )

    async def _run(self) -> ExecCredential:
        env = dict(os.environ if self.environ is None else self.environ)
        env.update(self.config.env)
        env["KUBERNETES_EXEC_INFO"] = self._exec_info()
        argv = [self.config.command, *self.config.args]
        if self.config.interactive_mode == "Always":
            # client-go refuses the same way: the plugin would wait for a terminal we lack.
            raise ExecPluginError(
                f"exec plugin {argv[0]!r} requires an interactive terminal "
                "(interactiveMode: Always); a daemon has none"
            )
        self.runs += 1
        hint = f" ({self.config.install_hint.strip()})" if self.config.install_hint else ""
        try:
            with trio.fail_after(EXEC_TIMEOUT):
                done = await trio.run_process(
                    argv,
                    env=env,
                    stdin=subprocess.DEVNULL,  # non-interactive: a daemon has no terminal
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
        except FileNotFoundError as exc:
            raise ExecPluginError(f"exec plugin {argv[0]!r} not found{hint}") from exc
        except OSError as exc:
            raise ExecPluginError(f"exec plugin {argv[0]!r} cannot run: {exc}{hint}") from exc
        except trio.TooSlowError as exc:
            raise ExecPluginError(
                f"exec plugin {argv[0]!r} did not finish in {EXEC_TIMEOUT:.0f}s"
            ) from exc
        if done.returncode != 0:
            stderr = done.stderr.decode("utf-8", "replace").strip()[:STDERR_LIMIT]
            raise ExecPluginError(
                f"exec plugin {argv[0]!r} exited with {done.returncode}: {stderr}"
            )
        return parse_exec_credential(done.stdout, self.config.api_version, argv[0])


def parse_exec_credential(stdout: bytes, api_version: str, command: str) -> ExecCredential:
    """Decode a plugin's output; the apiVersion must be the one the kubeconfig asked for."""
    try:
        document = json.loads(stdout)
    except ValueError as exc:
        raise ExecPluginError(f"exec plugin {command!r}: output is not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
        raise ExecPluginError(f"exec plugin {command!r}: output is not an ExecCredential")
    if document.get("apiVersion") != api_version:
        raise ExecPluginError(
            f"exec plugin {command!r}: returned apiVersion {document.get('apiVersion')!r}, "
            f"the kubeconfig asked for {api_version!r}"
        )
    status = document.get("status")
    if not isinstance(status, dict):
        raise ExecPluginError(f"exec plugin {command!r}: ExecCredential has no status")
    token = status.get("token")
    cert = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    if token is not None and not isinstance(token, str):
        raise ExecPluginError(f"exec plugin {command!r}: status.token is not a string")
    if (cert is None) != (key is None) or not all(
        v is None or isinstance(v, str) for v in (cert, key)
    ):
        raise ExecPluginError(
            f"exec plugin {command!r}: clientCertificateData and clientKeyData go together"
        )
    client_cert = (cert.encode(), key.encode()) if isinstance(cert, str) and key else None
    if not token and client_cert is None:
        raise ExecPluginError(f"exec plugin {command!r}: returned neither token nor certificate")
    expires: datetime | None = None
    stamp = status.get("expirationTimestamp")
    if stamp is not None:
        try:
            expires = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
        except ValueError as exc:
            raise ExecPluginError(
                f"exec plugin {command!r}: expirationTimestamp {stamp!r} is not RFC 3339"
            ) from exc
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=UTC)
    return ExecCredential(token or None, client_cert, expires)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
