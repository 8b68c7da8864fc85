"""The control plane's PKI, laid out as kubeadm lays out ``/etc/kubernetes/pki``.

One cluster CA signs the API server's serving certificate, every client certificate (the
admin, kube-controller-manager, kube-scheduler, the API server's client to kubelets, each
node's ``system:node:<name>``) and each node agent's kubelet serving certificate; a separate
front-proxy CA signs the aggregator's client certificate, exactly the split a kubeadm cluster
has (an extension API server trusts ``X-Remote-User`` only from the front-proxy CA). The
ServiceAccount token signing key is its own key pair. Every key file is ``0600``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

SERVICE_IP = "10.96.0.1"
"""The first address of ``--service-cluster-ip-range``: the ``kubernetes`` Service's."""
FRONT_PROXY_CN = "front-proxy-client"


@dataclass(frozen=True)
class Pair:
    """A certificate (chain) and its key, as separate PEM files."""

    cert: Path
    key: Path


def _write(directory: Path, name: str, leaf: trustme.LeafCert) -> Pair:
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(str(pair.key))
    pair.key.chmod(0o600)
    return pair


def _client(ca: trustme.CA, directory: Path, name: str, user: str, *groups: str) -> Pair:
    """A client certificate: CN is the user, O the groups (one O per group)."""
    leaf = ca.issue_cert(
        f"{name}.client.invalid",
        common_name=user,
        organization_name=groups[0] if groups else None,
    )
    if len(groups) > 1:  # trustme writes one O; more groups need more than it offers
        raise ValueError(f"{name}: one group at most in a client certificate here")
    return _write(directory, name, leaf)


@dataclass(frozen=True)
class ControlPlanePKI:
    """Every PEM the control plane, the node agents and the clients read."""

    directory: Path
    ca: Path
    ca_key: Path
    apiserver: Pair
    apiserver_kubelet_client: Pair
    front_proxy_ca: Path
    front_proxy_client: Pair
    service_account_key: Path
    service_account_pub: Path
    admin: Pair
    controller_manager: Pair
    scheduler: Pair

    @classmethod
    def create(cls, directory: Path, apiserver_addresses: list[str]) -> ControlPlanePKI:
        """Mint the CAs, the service-account key pair and every control-plane leaf."""
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA(organization_name="gpustack control plane CA")
        front = trustme.CA(organization_name="gpustack front-proxy CA")
        names = [
            *apiserver_addresses,
            "127.0.0.1",
            "localhost",
            SERVICE_IP,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ]
        serving = ca.issue_cert(*dict.fromkeys(names), common_name="kube-apiserver")
        ca_path, ca_key = directory / "ca.crt", directory / "ca.key"
        ca.cert_pem.write_to_path(str(ca_path))
        ca.private_key_pem.write_to_path(str(ca_key))
        ca_key.chmod(0o600)
        front_ca = directory / "front-proxy-ca.crt"
        front.cert_pem.write_to_path(str(front_ca))
        sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
        key = ec.generate_private_key(ec.SECP256R1())
        sa_key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        sa_key.chmod(0o600)
        sa_pub.write_bytes(
            key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return cls(
            directory=directory,
            ca=ca_path,
            ca_key=ca_key,
            apiserver=_write(directory, "apiserver", serving),
            apiserver_kubelet_client=_client(
                ca,
                directory,
                "apiserver-kubelet-client",
                "kube-apiserver-kubelet-client",
                "system:masters",
            ),
            front_proxy_ca=front_ca,
            front_proxy_client=_write(
                directory,
                "front-proxy-client",
                front.issue_cert("front-proxy-client.invalid", common_name=FRONT_PROXY_CN),
            ),
            service_account_key=sa_key,
            service_account_pub=sa_pub,
            admin=_client(ca, directory, "admin", "kubernetes-admin", "system:masters"),
            controller_manager=_client(
                ca, directory, "controller-manager", "system:kube-controller-manager"
            ),
            scheduler=_client(ca, directory, "scheduler", "system:kube-scheduler"),
        )

    def ca_object(self) -> trustme.CA:
        """The cluster CA, loaded back from its files, to issue node and user certificates."""
        return trustme.CA.from_pem(self.ca.read_bytes(), self.ca_key.read_bytes())

    def node_client(self, node: str) -> Pair:
        """``system:node:<node>`` in ``system:nodes``: what the Node authorizer recognises."""
        return _client(self.ca_object(), self.directory, f"node-{node}", f"system:node:{node}",
                       "system:nodes")  # fmt: skip

    def kubelet_serving(self, node: str, address: str) -> Pair:
        """The node agent's HTTPS certificate for its address (the API server verifies it)."""
        leaf = self.ca_object().issue_cert(address, node, common_name=f"system:node:{node}")
        return _write(self.directory, f"kubelet-{node}", leaf)

    def user_client(self, user: str, group: str | None = None) -> Pair:
        """A person's client certificate (``kubectl`` contexts other than admin)."""
        return _client(self.ca_object(), self.directory, f"user-{user}", user,
                       *([group] if group else []))  # fmt: skip
