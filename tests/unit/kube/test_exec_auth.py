"""Exec credential plugins: a real plugin process, a scripted API server, a controlled clock.

The plugin is a small script in the test's folder that counts its runs in a file, so the
counts asserted here are what actually ran, not what the client believes it ran.
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trustme
import yaml

from gpustack_kube.auth import ExecPluginError, parse_exec_credential
from gpustack_kube.client import AuthenticationError, KubeClient, Unauthorized
from gpustack_kube.config import parse_kubeconfig

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"
EXPIRY = datetime(2030, 1, 1, tzinfo=UTC)
SERVER = "https://api.test:6443"

PLUGIN = """#!{python}
import json, os, pathlib, sys
folder = pathlib.Path(__file__).parent
counter = folder / "runs"
runs = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(runs))
(folder / f"seen-{{runs}}.json").write_text(json.dumps({{
    "argv": sys.argv[1:],
    "region": os.environ.get("AWS_REGION"),
    "info": json.loads(os.environ["KUBERNETES_EXEC_INFO"]),
}}))
print(json.dumps({{
    "apiVersion": "{api_version}",
    "kind": "ExecCredential",
    "status": {{"token": f"tok-{{runs}}", "expirationTimestamp": "2030-01-01T00:00:00Z"}},
}}))
"""


def write_plugin(folder: Path, api_version: str) -> Path:
    script = folder / "plugin.py"
    script.write_text(PLUGIN.format(python=sys.executable, api_version=api_version))
    script.chmod(0o755)
    return script


def write_kubeconfig(folder: Path, exec_entry: dict[str, Any]) -> Path:
    path = folder / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": SERVER}}],
                "users": [{"name": "u", "user": {"exec": exec_entry}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2029, 12, 31, 23, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


class Server:
    """Accepts any token not in ``revoked``; records the tokens it saw."""

    def __init__(self) -> None:
        self.tokens: list[str] = []
        self.revoked: set[str] = set()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.tokens.append(token)
        if token in self.revoked:
            refusal = {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "no"}
            return httpx.Response(401, json=refusal)
        return httpx.Response(200, json={"kind": "Pod"})


def runs(folder: Path) -> int:
    return int((folder / "runs").read_text())


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
async def test_plugin_reruns_after_expiry_and_after_401(tmp_path: Path, api_version: str) -> None:
    write_plugin(tmp_path, api_version)
    config = parse_kubeconfig(
        write_kubeconfig(
            tmp_path,
            {
                "apiVersion": api_version,
                "command": "./plugin.py",  # relative to the kubeconfig's folder
                "args": ["eks", "get-token", "--cluster-name", "prod"],
                "env": [{"name": "AWS_REGION", "value": "eu-west-1"}],
                "provideClusterInfo": True,
                "interactiveMode": "Never",
            },
        )
    )
    clock, server = Clock(), Server()
    async with KubeClient(config, transport=httpx.MockTransport(server), clock=clock) as client:
        await client.get("/api/v1/pods")
        await client.get("/api/v1/pods")
        assert runs(tmp_path) == 1  # cached: the expiry is an hour away
        assert server.tokens == ["tok-1", "tok-1"]

        clock.now = EXPIRY + timedelta(seconds=1)
        await client.get("/api/v1/pods")
        assert runs(tmp_path) == 2  # expired: run again
        assert server.tokens[-1] == "tok-2"

        clock.now = datetime(2029, 12, 31, tzinfo=UTC)  # tok-3 will look valid
        server.revoked.add("tok-2")
        await client.get("/api/v1/pods")  # 401 → re-run → the same request again
        assert runs(tmp_path) == 3
        assert server.tokens[-2:] == ["tok-2", "tok-3"]

        server.revoked.add("tok-4")
        server.revoked.add("tok-3")
        with pytest.raises(Unauthorized):
            await client.get("/api/v1/pods")  # retried once, not for ever
        assert runs(tmp_path) == 4
        assert server.tokens[-2:] == ["tok-3", "tok-4"]

    seen = json.loads((tmp_path / "seen-1.json").read_text())
    assert seen["argv"] == ["eks", "get-token", "--cluster-name", "prod"]
    assert seen["region"] == "eu-west-1"
    assert seen["info"] == {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False, "cluster": {"server": SERVER}},
    }


async def test_missing_plugin_names_the_install_hint(tmp_path: Path) -> None:
    config = parse_kubeconfig(
        write_kubeconfig(
            tmp_path,
            {
                "apiVersion": V1BETA1,
                "command": "gke-gcloud-auth-plugin-not-installed-here",
                "installHint": "Install gke-gcloud-auth-plugin for use with kubectl",
            },
        )
    )
    async with KubeClient(config, transport=httpx.MockTransport(Server())) as client:
        with pytest.raises(AuthenticationError, match=r"not found.*Install gke-gcloud-auth-plugin"):
            await client.get("/api/v1/pods")


async def test_interactive_only_plugin_is_refused_without_running(tmp_path: Path) -> None:
    write_plugin(tmp_path, V1)
    config = parse_kubeconfig(
        write_kubeconfig(
            tmp_path, {"apiVersion": V1, "command": "./plugin.py", "interactiveMode": "Always"}
        )
    )
    async with KubeClient(config, transport=httpx.MockTransport(Server())) as client:
        with pytest.raises(AuthenticationError, match="interactive terminal"):
            await client.get("/api/v1/pods")
    assert not (tmp_path / "runs").exists()


async def test_failing_plugin_reports_its_stderr(tmp_path: Path) -> None:
    script = tmp_path / "fail.sh"
    script.write_text("#!/bin/sh\necho 'token expired, run aws sso login' >&2\nexit 3\n")
    script.chmod(0o755)
    config = parse_kubeconfig(
        write_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script)})
    )
    async with KubeClient(config, transport=httpx.MockTransport(Server())) as client:
        with pytest.raises(AuthenticationError, match="exited with 3: token expired"):
            await client.get("/api/v1/pods")


@pytest.mark.parametrize(
    "entry",
    [
        {  # EKS, as `aws eks update-kubeconfig` writes it
            "apiVersion": V1BETA1,
            "command": "aws",
            "args": ["--region", "us-east-1", "eks", "get-token", "--cluster-name", "prod"],
            "env": [{"name": "AWS_PROFILE", "value": "ops"}],
        },
        {  # GKE, as `gcloud container clusters get-credentials` writes it
            "apiVersion": V1BETA1,
            "command": "gke-gcloud-auth-plugin",
            "installHint": "Install gke-gcloud-auth-plugin for use with kubectl by following\n"
            "https://cloud.google.com/kubernetes-engine/docs/how-to/cluster-access-for-kubectl",
            "provideClusterInfo": True,
            "interactiveMode": "IfAvailable",
        },
        {  # AKS, after `kubelogin convert-kubeconfig -l azurecli`
            "apiVersion": V1BETA1,
            "command": "kubelogin",
            "args": ["get-token", "--login", "azurecli", "--server-id", "6dae42f8"],
            "env": None,
        },
    ],
)
def test_managed_cluster_kubeconfigs_load(tmp_path: Path, entry: dict[str, Any]) -> None:
    config = parse_kubeconfig(write_kubeconfig(tmp_path, entry))
    assert config.exec is not None
    assert config.exec.command == entry["command"]  # a bare name is left to PATH
    assert list(config.exec.args) == entry.get("args", [])
    assert dict(config.exec.env) == {e["name"]: e["value"] for e in entry.get("env") or []}


def test_plugin_may_return_a_client_certificate() -> None:
    output = json.dumps(
        {
            "apiVersion": V1,
            "kind": "ExecCredential",
            "status": {"clientCertificateData": "CERT", "clientKeyData": "KEY"},
        }
    ).encode()
    credential = parse_exec_credential(output, V1, "plugin")
    assert (credential.token, credential.client_cert, credential.expires) == (
        None,
        (b"CERT", b"KEY"),
        None,
    )


@pytest.mark.parametrize(
    ("output", "problem"),
    [
        (b"not json", "not JSON"),
        (b'{"kind": "Status"}', "not an ExecCredential"),
        (json.dumps({"kind": "ExecCredential", "apiVersion": V1BETA1}).encode(), "asked for"),
        (json.dumps({"kind": "ExecCredential", "apiVersion": V1, "status": {}}).encode(),
         "neither token nor certificate"),
        (json.dumps({"kind": "ExecCredential", "apiVersion": V1,
                     "status": {"token": "t", "expirationTimestamp": "soon"}}).encode(),
         "not RFC 3339"),
        (json.dumps({"kind": "ExecCredential", "apiVersion": V1,
                     "status": {"clientCertificateData": "C"}}).encode(),
         "go together"),
    ],
)  # fmt: skip
def test_unusable_plugin_output_is_refused(output: bytes, problem: str) -> None:
    with pytest.raises(ExecPluginError, match=problem):
        parse_exec_credential(output, V1, "plugin")


# -- a plugin's client certificate, presented over real TLS ------------------------------------


CERT_PLUGIN = """#!/bin/sh
n=$(cat "$(dirname "$0")/runs" 2>/dev/null || echo 0); n=$((n + 1))
echo "$n" > "$(dirname "$0")/runs"
cat "$(dirname "$0")/cred-$n.json"
"""


async def serve_mtls(ca: trustme.CA, seen: list[str], task_status: Any) -> None:
    """A one-route HTTPS server that requires a client certificate and records its CN."""
    server_cert = ca.issue_cert("127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(context)
    ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED

    async def handle(stream: trio.SSLStream[trio.SocketStream]) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            if not chunk:
                return
            data += chunk
        peer = stream.getpeercert()
        subject = dict(item[0] for item in peer["subject"]) if peer else {}
        seen.append(str(subject.get("commonName", "")))
        body = b'{"kind":"Pod"}'
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await stream.aclose()

    listeners = await trio.open_ssl_over_tcp_listeners(0, context, host="127.0.0.1")
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, handle, listeners)
        task_status.started(listeners[0].transport_listener.socket.getsockname()[1])


async def test_plugin_certificate_is_presented_and_rotated(tmp_path: Path) -> None:
    ca = trustme.CA()
    for run, (name, expiry) in enumerate(
        [("first", "2000-01-01T00:00:00Z"), ("second", "2999-01-01T00:00:00Z")], start=1
    ):
        leaf = ca.issue_cert(f"{name}@example.test", common_name=name)
        status = {
            "clientCertificateData": leaf.cert_chain_pems[0].bytes().decode(),
            "clientKeyData": leaf.private_key_pem.bytes().decode(),
            "expirationTimestamp": expiry,
        }
        (tmp_path / f"cred-{run}.json").write_text(
            json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": status})
        )
    script = tmp_path / "cert-plugin.sh"
    script.write_text(CERT_PLUGIN)
    script.chmod(0o755)
    seen: list[str] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_mtls, ca, seen)
        path = write_kubeconfig(tmp_path, {"apiVersion": V1, "command": str(script)})
        document = yaml.safe_load(path.read_text())
        document["clusters"][0]["cluster"] = {
            "server": f"https://127.0.0.1:{port}",
            "certificate-authority-data": base64.b64encode(ca.cert_pem.bytes()).decode(),
        }
        path.write_text(yaml.safe_dump(document))
        async with KubeClient(parse_kubeconfig(path)) as client:
            await client.get("/api/v1/pods")  # the first certificate, already expired after use
            await client.get("/api/v1/pods")  # so the plugin runs again: the second one
            await client.get("/api/v1/pods")  # valid until 2999: reused
        nursery.cancel_scope.cancel()
    assert seen == ["first", "second", "second"]
    assert runs(tmp_path) == 2
