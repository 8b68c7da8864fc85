"""Finding the API server: kubeconfig parsing, the lookup order, in-cluster, TLS settings."""

from __future__ import annotations

import base64
import os
import ssl
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from gpustack_kube.config import KubeConfig, KubeConfigError, load_config, parse_kubeconfig

CA = trustme.CA()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    return path


def kubeconfig(
    *,
    cluster: dict[str, Any] | None = None,
    user: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    current: str | None = "main",
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "other", "cluster": {"server": "https://other.example"}},
            {"name": "c", "cluster": cluster or {"server": "https://api.example:6443"}},
        ],
        "users": [
            {"name": "nobody", "user": {}},
            {"name": "u", "user": user if user is not None else {"token": "secret"}},
        ],
        "contexts": [
            {"name": "main", "context": context or {"cluster": "c", "user": "u"}},
            {"name": "anonymous", "context": {"cluster": "other"}},
        ],
    }
    if current is not None:
        document["current-context"] = current
    return document


# -- parsing ------------------------------------------------------------------------------------


def test_token_and_ca_data_from_the_current_context(tmp_path: Path) -> None:
    ca = CA.cert_pem.bytes()
    path = write(
        tmp_path / "config",
        kubeconfig(
            cluster={"server": "https://api.example:6443/", "certificate-authority-data": b64(ca)},
            context={"cluster": "c", "user": "u", "namespace": "gpustack-system"},
        ),
    )
    config = parse_kubeconfig(path)
    assert config == KubeConfig(
        server="https://api.example:6443",
        token="secret",
        ca_data=ca,
        client_cert=None,
        insecure=False,
        namespace="gpustack-system",
    )


def test_named_context_overrides_current_and_namespace_defaults(tmp_path: Path) -> None:
    path = write(tmp_path / "config", kubeconfig())
    config = parse_kubeconfig(path, context="anonymous")
    assert (config.server, config.token, config.namespace) == (
        "https://other.example",
        None,
        "default",
    )


def test_relative_files_resolve_against_the_kubeconfig_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "conf"
    cert = CA.issue_cert("client")
    write(folder / "pki" / "ca.pem", CA.cert_pem.bytes().decode())
    write(folder / "pki" / "client.pem", cert.cert_chain_pems[0].bytes().decode())
    write(folder / "pki" / "client.key", cert.private_key_pem.bytes().decode())
    write(folder / "token", "from-file\n")
    path = write(
        folder / "config",
        kubeconfig(
            cluster={"server": "https://api.example", "certificate-authority": "pki/ca.pem"},
            user={
                "tokenFile": "token",
                "client-certificate": "pki/client.pem",
                "client-key": "pki/client.key",
            },
        ),
    )
    monkeypatch.chdir(tmp_path)  # not the kubeconfig's folder: resolution must not use the cwd
    config = parse_kubeconfig(path)
    assert config.ca_data == CA.cert_pem.bytes()
    assert config.token == "from-file"
    assert config.token_file == folder / "token"
    assert config.client_cert == (
        cert.cert_chain_pems[0].bytes(),
        cert.private_key_pem.bytes(),
    )


def test_inline_token_wins_over_token_file(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config", kubeconfig(user={"token": "inline", "tokenFile": "/nonexistent"})
    )
    config = parse_kubeconfig(path)
    assert (config.token, config.token_file) == ("inline", None)


def test_data_wins_over_file(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        kubeconfig(
            cluster={
                "server": "https://api.example",
                "certificate-authority-data": b64(b"inline"),
                "certificate-authority": "/nonexistent/ca.pem",
            }
        ),
    )
    assert parse_kubeconfig(path).ca_data == b"inline"


def test_insecure_skip_verify(tmp_path: Path) -> None:
    path = write(
        tmp_path / "config",
        kubeconfig(cluster={"server": "https://api.example", "insecure-skip-tls-verify": True}),
    )
    assert parse_kubeconfig(path).insecure is True


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (kubeconfig(current=None), "current-context: not set and no context was given"),
        (kubeconfig(current="missing"), "context 'missing' not found"),
        (kubeconfig(context={"cluster": "gone", "user": "u"}), "cluster 'gone' not found"),
        (kubeconfig(context={"cluster": "c", "user": "gone"}), "user 'gone' not found"),
        (kubeconfig(user={"token": 42}), "users[1].user.token: expected a string"),
        (kubeconfig(cluster={"certificate-authority-data": "x"}), "clusters[1].cluster.server"),
        (
            kubeconfig(cluster={"server": "https://a", "certificate-authority-data": "!!"}),
            "clusters[1].cluster.certificate-authority-data: not valid base64",
        ),
        (
            kubeconfig(cluster={"server": "https://a", "insecure-skip-tls-verify": "yes"}),
            "clusters[1].cluster.insecure-skip-tls-verify: expected true or false",
        ),
        (
            kubeconfig(
                cluster={
                    "server": "https://a",
                    "insecure-skip-tls-verify": True,
                    "certificate-authority-data": b64(b"ca"),
                }
            ),
            "cannot be combined with a certificate authority",
        ),
        (
            kubeconfig(user={"exec": {"apiVersion": "client.authentication.k8s.io/v1"}}),
            "users[1].user.exec.command: missing",
        ),
        (
            kubeconfig(user={"exec": {"command": "aws"}}),
            "users[1].user.exec.apiVersion: None is not one of",
        ),
        (
            kubeconfig(
                user={
                    "exec": {
                        "command": "x",
                        "apiVersion": "client.authentication.k8s.io/v1alpha1",
                    }
                }
            ),
            "users[1].user.exec.apiVersion: 'client.authentication.k8s.io/v1alpha1' is not",
        ),
        (
            kubeconfig(user={"auth-provider": {"name": "gcp", "config": {}}}),
            "users[1].user.auth-provider: gcp is no longer supported by Kubernetes clients; "
            "use the gke-gcloud-auth-plugin exec plugin",
        ),
        (
            kubeconfig(user={"auth-provider": {"name": "azure"}}),
            "use the kubelogin (Azure/kubelogin) exec plugin",
        ),
        (
            kubeconfig(user={"client-certificate-data": b64(b"cert")}),
            "users[1].user.client-key: missing",
        ),
        (
            kubeconfig(user={"client-certificate": "missing.pem", "client-key": "k.pem"}),
            "users[1].user.client-certificate: cannot read",
        ),
        (
            kubeconfig(user={"tokenFile": "missing-token"}),
            "users[1].user.tokenFile: cannot read",
        ),
        ({"contexts": "main", "current-context": "main"}, "contexts: expected a list"),
        ({"contexts": [["main"]], "current-context": "main"}, "contexts[0]: expected a mapping"),
        ("- just\n- a list\n", "(document): expected a mapping"),
        ("clusters: [unclosed\n", "not valid YAML"),
    ],
)
def test_malformed_kubeconfig_names_file_and_field(
    tmp_path: Path, document: Any, message: str
) -> None:
    path = write(tmp_path / "config", document)
    with pytest.raises(KubeConfigError) as excinfo:
        parse_kubeconfig(path)
    assert str(excinfo.value).startswith(f"{path}: ")
    assert message in str(excinfo.value)


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="cannot read"):
        load_config(tmp_path / "absent", environ={})


# -- lookup order -------------------------------------------------------------------------------


@pytest.fixture
def service_account(tmp_path: Path) -> Path:
    folder = tmp_path / "sa"
    write(folder / "token", "sa-token\n")
    write(folder / "ca.crt", CA.cert_pem.bytes().decode())
    write(folder / "namespace", "gpustack-system")
    return folder


IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_explicit_path_beats_the_environment(tmp_path: Path, service_account: Path) -> None:
    explicit = write(tmp_path / "explicit", kubeconfig())
    other = write(tmp_path / "other", kubeconfig(current="anonymous"))
    environ = {"KUBECONFIG": str(other), **IN_CLUSTER}
    config = load_config(explicit, environ=environ, service_account_dir=service_account)
    assert config is not None
    assert config.server == "https://api.example:6443"


def test_kubeconfig_variable_uses_the_first_file_of_the_list(
    tmp_path: Path, service_account: Path
) -> None:
    first = write(tmp_path / "first", kubeconfig())
    second = write(tmp_path / "second", kubeconfig(current="anonymous"))
    listed = os.pathsep.join(["", str(first), str(second)])
    config = load_config(
        environ={"KUBECONFIG": listed, **IN_CLUSTER}, service_account_dir=service_account
    )
    assert config is not None
    assert (config.server, config.token) == ("https://api.example:6443", "secret")
    named = load_config(context="anonymous", environ={"KUBECONFIG": listed})
    assert named is not None
    assert named.server == "https://other.example"


def test_in_cluster_service_account(service_account: Path) -> None:
    config = load_config(environ=IN_CLUSTER, service_account_dir=service_account)
    assert config == KubeConfig(
        server="https://10.96.0.1:443",
        token="sa-token",
        ca_data=CA.cert_pem.bytes(),
        client_cert=None,
        insecure=False,
        namespace="gpustack-system",
        token_file=service_account / "token",
    )


def test_in_cluster_ipv6_host_and_default_namespace(service_account: Path) -> None:
    (service_account / "namespace").unlink()
    environ = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}
    config = load_config(environ=environ, service_account_dir=service_account)
    assert config is not None
    assert (config.server, config.namespace) == ("https://[fd00::1]:6443", "default")


def test_in_cluster_without_a_token_is_an_error(service_account: Path) -> None:
    (service_account / "token").unlink()
    with pytest.raises(KubeConfigError) as excinfo:
        load_config(environ=IN_CLUSTER, service_account_dir=service_account)
    assert str(service_account / "token") in str(excinfo.value)


def test_standalone_ignores_the_home_kubeconfig(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, service_account: Path
) -> None:
    home = tmp_path / "home"
    write(home / ".kube" / "config", kubeconfig())
    monkeypatch.setenv("HOME", str(home))
    assert load_config(environ={"HOME": str(home)}, service_account_dir=service_account) is None
    only_host = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert load_config(environ=only_host, service_account_dir=service_account) is None


# -- TLS ----------------------------------------------------------------------------------------


def base_config(**changes: Any) -> KubeConfig:
    fields: dict[str, Any] = {
        "server": "https://api.example",
        "token": None,
        "ca_data": None,
        "client_cert": None,
        "insecure": False,
        "namespace": "default",
        **changes,
    }
    return KubeConfig(**fields)


def test_ssl_context_trusts_the_given_ca_only() -> None:
    context = base_config(ca_data=CA.cert_pem.bytes()).ssl_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname is True
    (trusted,) = context.get_ca_certs()  # the system roots are not added
    assert "trustme" in str(trusted["subject"])


def test_ssl_context_insecure() -> None:
    context = base_config(insecure=True).ssl_context()
    assert (context.verify_mode, context.check_hostname) == (ssl.CERT_NONE, False)


def test_ssl_context_client_certificate_and_mismatch() -> None:
    cert = CA.issue_cert("client")
    good = (cert.cert_chain_pems[0].bytes(), cert.private_key_pem.bytes())
    base_config(client_cert=good).ssl_context()  # loads without error
    other_key = CA.issue_cert("other").private_key_pem.bytes()
    with pytest.raises(KubeConfigError, match="client certificate/key"):
        base_config(client_cert=(good[0], other_key)).ssl_context()


def test_ssl_context_rejects_garbage_ca() -> None:
    with pytest.raises(KubeConfigError, match="certificate authority"):
        base_config(ca_data=b"not a certificate").ssl_context()
