"""Where the daemons find the Kubernetes API, and with which credentials.

The kubeconfig is parsed here rather than by the official client's loader because that loader
drags the whole synchronous client in, and because its errors do not say which field of which
file is wrong — the first thing an operator needs when a daemon refuses to start.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpustack_kube.files import NotUtf8Error, read_capped, read_text_capped

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_NAMESPACE = "default"
KUBECONFIG_LIMIT = 4 << 20
"""The most a kubeconfig, or a file it names (a token, a certificate), is read: a kubeconfig of
many contexts with embedded certificates is tens of KiB; ``/dev/zero`` named there is refused."""


class KubeConfigError(Exception):
    """A kubeconfig (or the in-cluster files) cannot be used; the message names file and field."""


EXEC_API_VERSIONS = frozenset(
    {"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"}
)
"""The ExecCredential versions spoken; v1alpha1 was removed from client-go in 1.24."""

AUTH_PROVIDER_REPLACEMENTS = {
    "gcp": "gke-gcloud-auth-plugin",
    "azure": "kubelogin (Azure/kubelogin)",
    "oidc": "kubelogin (int128/kubelogin, kubectl oidc-login)",
}
"""What replaced each in-tree auth provider removed from client-go (1.26)."""


@dataclass(frozen=True)
class ExecConfig:
    """A ``users[].user.exec`` entry: a command that prints an ExecCredential.

    Kept as given (command resolved against the kubeconfig's folder when it names a relative
    path, as client-go does) so the client can run it again whenever the credential expires
    or is refused.
    """

    command: str
    api_version: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    install_hint: str | None = None
    provide_cluster_info: bool = False
    interactive_mode: str = "IfAvailable"


@dataclass(frozen=True)
class KubeConfig:
    """One API server and the identity to present to it.

    ``token_file`` is kept beside ``token`` because bound service-account tokens expire
    (about an hour) and the kubelet rewrites the file: a daemon that read the token once would
    start failing with 401 mid-run. The client rereads the file; ``token`` is what it held at
    load time.
    """

    server: str
    token: str | None
    ca_data: bytes | None
    client_cert: tuple[bytes, bytes] | None
    insecure: bool
    namespace: str
    token_file: Path | None = None
    exec: ExecConfig | None = None
    """A credential plugin; its token or certificate is added to (and wins over) the above."""

    def ssl_context(self, client_cert: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
        """The TLS settings the kubeconfig asks for.

        With CA data only that CA is trusted, as client-go does: a cluster's private CA must
        not be widened to every public CA. Without it the system roots apply, as for a managed
        cluster's public endpoint.
        """
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostname check and CERT_REQUIRED
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif self.ca_data is None:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        else:
            try:
                context.load_verify_locations(cadata=self.ca_data.decode("ascii"))
            except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
                raise KubeConfigError(
                    f"certificate authority: not a PEM certificate: {exc}"
                ) from exc
        cert = client_cert if client_cert is not None else self.client_cert
        if cert is not None:
            _load_client_cert(context, *cert)
        return context


def _load_client_cert(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """Load an in-memory certificate and key.

    ``ssl`` reads certificate chains only from files, so the PEM goes through a private
    directory that is removed at once.
    """
    with tempfile.TemporaryDirectory(prefix="gpustack-kube-") as folder:
        cert_path, key_path = Path(folder) / "client.crt", Path(folder) / "client.key"
        for path, data in ((cert_path, cert), (key_path, key)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        try:
            context.load_cert_chain(str(cert_path), str(key_path))
        except ssl.SSLError as exc:
            raise KubeConfigError(f"client certificate/key: cannot be loaded: {exc}") from exc


def load_config(
    kubeconfig: Path | None = None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> KubeConfig | None:
    """Find the API server: explicit file, then ``KUBECONFIG``, then in-cluster, else ``None``.

    ``None`` means standalone: the caller runs without Kubernetes. ``~/.kube/config`` is
    deliberately not consulted: a daemon started by hand on a workstation would otherwise
    attach silently to whatever cluster the operator's kubectl points at — talking to a
    cluster must be asked for, by a file, the variable, or running in a Pod.
    """
    if kubeconfig is not None:
        return parse_kubeconfig(kubeconfig, context=context)
    listed = environ.get("KUBECONFIG", "")
    first = next((p for p in listed.split(os.pathsep) if p), None)
    if first is not None:
        return parse_kubeconfig(Path(first), context=context)
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    port = environ.get("KUBERNETES_SERVICE_PORT", "")
    if host and port:
        return in_cluster(host, port, service_account_dir)
    return None


def in_cluster(host: str, port: str, service_account_dir: Path) -> KubeConfig:
    """The Pod's own service account.

    A missing token is an error, not standalone: the variables say we run in a Pod, and
    silently dropping the cluster would make a mis-mounted account look like a healthy node.
    """
    token_file = service_account_dir / "token"
    token = _mounted(token_file, "token").decode().strip()
    ca_file = service_account_dir / "ca.crt"
    ca_data = _mounted(ca_file, "CA") if ca_file.is_file() else None
    namespace_file = service_account_dir / "namespace"
    namespace = (
        _mounted(namespace_file, "namespace").decode().strip() if namespace_file.is_file() else ""
    ) or DEFAULT_NAMESPACE
    server_host = f"[{host}]" if ":" in host else host
    return KubeConfig(
        server=f"https://{server_host}:{port}",
        token=token,
        ca_data=ca_data,
        client_cert=None,
        insecure=False,
        namespace=namespace,
        token_file=token_file,
    )


def _mounted(path: Path, what: str) -> bytes:
    """One file of the mounted service account (UTF-8 checked but returned as bytes)."""
    try:
        data = read_capped(path, KUBECONFIG_LIMIT, f"service-account {what} file")
        data.decode()
    except OSError as exc:
        raise KubeConfigError(f"{path}: in-cluster {what} cannot be read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise KubeConfigError(
            f"{path}: in-cluster {what} is not UTF-8 (byte {exc.start} cannot be decoded)"
        ) from exc
    return data


class _Reader:
    """Typed access into the YAML document, each failure naming the file and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.folder = path.parent

    def error(self, field: str, problem: str) -> KubeConfigError:
        return KubeConfigError(
            f"{self.path}: {field}: {problem}" if field else f"{self.path}: {problem}"
        )

    def mapping(self, value: Any, field: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(field, "expected a mapping")
        return value

    def string(self, value: Any, field: str) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(field, "expected a string")
        return value

    def boolean(self, value: Any, field: str) -> bool:
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.error(field, "expected true or false")
        return value

    def named(
        self, document: dict[str, Any], section: str, name: str
    ) -> tuple[str, dict[str, Any]]:
        """The entry called ``name`` in ``clusters``/``users``/``contexts``, and its field path."""
        entries = document.get(section)
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise self.error(section, "expected a list")
        inner = section[:-1]  # clusters[i].cluster, users[i].user, contexts[i].context
        for index, raw in enumerate(entries):
            field = f"{section}[{index}]"
            entry = self.mapping(raw, field)
            if self.string(entry.get("name"), f"{field}.name") == name:
                return f"{field}.{inner}", self.mapping(entry.get(inner), f"{field}.{inner}")
        raise self.error("", f"{inner} {name!r} not found")

    def base64(self, value: Any, field: str) -> bytes | None:
        text = self.string(value, field)
        if text is None:
            return None
        try:
            return base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise self.error(field, f"not valid base64: {exc}") from exc

    def file(self, value: Any, field: str) -> bytes | None:
        name = self.string(value, field)
        if name is None:
            return None
        path = self.resolve(name)
        try:
            return read_capped(path, KUBECONFIG_LIMIT, "file a kubeconfig names")
        except OSError as exc:
            raise self.error(field, f"cannot read {path}: {exc.strerror}") from exc

    def resolve(self, name: str) -> Path:
        """Relative paths are relative to the kubeconfig's folder, as kubectl resolves them."""
        path = Path(name).expanduser()
        return path if path.is_absolute() else self.folder / path

    def data_or_file(self, section: dict[str, Any], field: str, key: str) -> bytes | None:
        """``<key>-data`` wins over ``<key>`` when both are set, as in client-go."""
        data = self.base64(section.get(f"{key}-data"), f"{field}.{key}-data")
        if data is not None:
            return data
        return self.file(section.get(key), f"{field}.{key}")


def parse_kubeconfig(path: Path, *, context: str | None = None) -> KubeConfig:
    """Read one kubeconfig file and resolve ``context`` (default: its current-context)."""
    reader = _Reader(path)
    try:
        text = read_text_capped(path, KUBECONFIG_LIMIT, "kubeconfig")
    except OSError as exc:
        raise reader.error("", f"cannot read: {exc.strerror}") from exc
    except NotUtf8Error as exc:
        raise reader.error("", exc.problem) from exc
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise reader.error("", f"not valid YAML: {exc}") from exc
    document = reader.mapping(loaded, "(document)")

    name = context or reader.string(document.get("current-context"), "current-context")
    if not name:
        raise reader.error("current-context", "not set and no context was given")
    context_field, context_entry = reader.named(document, "contexts", name)
    cluster_name = reader.string(context_entry.get("cluster"), f"{context_field}.cluster")
    if not cluster_name:
        raise reader.error(f"{context_field}.cluster", "missing")
    user_name = reader.string(context_entry.get("user"), f"{context_field}.user")
    namespace = (
        reader.string(context_entry.get("namespace"), f"{context_field}.namespace")
        or DEFAULT_NAMESPACE
    )

    cluster_field, cluster = reader.named(document, "clusters", cluster_name)
    server = reader.string(cluster.get("server"), f"{cluster_field}.server")
    if not server:
        raise reader.error(f"{cluster_field}.server", "missing")
    insecure = reader.boolean(
        cluster.get("insecure-skip-tls-verify"), f"{cluster_field}.insecure-skip-tls-verify"
    )
    ca_data = reader.data_or_file(cluster, cluster_field, "certificate-authority")
    if insecure and ca_data is not None:
        # kubectl refuses this pair too: one of the two is a mistake, and guessing which would
        # either trust anything or fail later with a less helpful message.
        raise reader.error(
            f"{cluster_field}.insecure-skip-tls-verify",
            "cannot be combined with a certificate authority",
        )

    token, token_file, client_cert, exec_config = (
        _credentials(reader, document, user_name) if user_name else (None, None, None, None)
    )

    return KubeConfig(
        server=server.rstrip("/"),
        token=token,
        ca_data=ca_data,
        client_cert=client_cert,
        insecure=insecure,
        namespace=namespace,
        token_file=token_file,
        exec=exec_config,
    )


def _exec(reader: _Reader, user: dict[str, Any], field: str) -> ExecConfig | None:
    """The ``exec`` entry, checked here so a bad one fails at start, not at the first request."""
    raw = user.get("exec")
    if raw is None:
        return None
    section = reader.mapping(raw, field)
    command = reader.string(section.get("command"), f"{field}.command")
    if not command:
        raise reader.error(f"{field}.command", "missing")
    api_version = reader.string(section.get("apiVersion"), f"{field}.apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise reader.error(
            f"{field}.apiVersion",
            f"{api_version!r} is not one of {', '.join(sorted(EXEC_API_VERSIONS))}",
        )
    args_raw = section.get("args") or []
    if not isinstance(args_raw, list) or not all(isinstance(a, str) for a in args_raw):
        raise reader.error(f"{field}.args", "expected a list of strings")
    env_raw = section.get("env") or []
    if not isinstance(env_raw, list):
        raise reader.error(f"{field}.env", "expected a list")
    env: list[tuple[str, str]] = []
    for index, item in enumerate(env_raw):
        entry = reader.mapping(item, f"{field}.env[{index}]")
        name = reader.string(entry.get("name"), f"{field}.env[{index}].name")
        value = reader.string(entry.get("value"), f"{field}.env[{index}].value")
        if not name or value is None:
            raise reader.error(f"{field}.env[{index}]", "needs a name and a value")
        env.append((name, value))
    mode = reader.string(section.get("interactiveMode"), f"{field}.interactiveMode")
    if mode not in {None, "Never", "IfAvailable", "Always"}:
        raise reader.error(
            f"{field}.interactiveMode", f"{mode!r} is not Never, IfAvailable or Always"
        )
    # A command naming a path relative to the kubeconfig is run from there; a bare name is
    # looked up on PATH when it runs.
    resolved = str(reader.resolve(command)) if "/" in command else command
    return ExecConfig(
        command=resolved,
        api_version=api_version,
        args=tuple(args_raw),
        env=tuple(env),
        install_hint=reader.string(section.get("installHint"), f"{field}.installHint"),
        provide_cluster_info=reader.boolean(
            section.get("provideClusterInfo"), f"{field}.provideClusterInfo"
        ),
        interactive_mode=mode or "IfAvailable",
    )


def _credentials(
    reader: _Reader, document: dict[str, Any], user_name: str
) -> tuple[str | None, Path | None, tuple[bytes, bytes] | None, ExecConfig | None]:
    """Token (with its file), client certificate and exec plugin of one ``users`` entry.

    ``auth-provider`` is refused rather than ignored: client-go dropped the in-tree providers,
    and ignoring one would send anonymous requests whose 401s point nowhere near the cause.
    """
    user_field, user = reader.named(document, "users", user_name)
    provider = user.get("auth-provider")
    if provider is not None:
        name = provider.get("name") if isinstance(provider, dict) else None
        replacement = AUTH_PROVIDER_REPLACEMENTS.get(name if isinstance(name, str) else "")
        instead = f"use the {replacement} exec plugin" if replacement else "use an exec plugin"
        raise reader.error(
            f"{user_field}.auth-provider",
            f"{name or 'auth-provider'} is no longer supported by Kubernetes clients; {instead}",
        )
    exec_config = _exec(reader, user, f"{user_field}.exec")
    token = reader.string(user.get("token"), f"{user_field}.token") or None
    token_file_name = reader.string(user.get("tokenFile"), f"{user_field}.tokenFile")
    token_file: Path | None = None
    if token is None and token_file_name:
        token_file = reader.resolve(token_file_name)
        try:
            token = read_text_capped(token_file, KUBECONFIG_LIMIT, "token file").strip()
        except OSError as exc:
            raise reader.error(
                f"{user_field}.tokenFile", f"cannot read {token_file}: {exc.strerror}"
            ) from exc
        except NotUtf8Error as exc:
            raise reader.error(f"{user_field}.tokenFile", exc.problem) from exc
    cert = reader.data_or_file(user, user_field, "client-certificate")
    key = reader.data_or_file(user, user_field, "client-key")
    if cert is None and key is None:
        return token, token_file, None, exec_config
    if cert is None or key is None:
        missing = "client-key" if key is None else "client-certificate"
        raise reader.error(f"{user_field}.{missing}", "missing: certificate and key go together")
    return token, token_file, (cert, key), exec_config
