"""The command lines of etcd, kube-apiserver, kube-controller-manager and kube-scheduler.

Flags follow what kubeadm writes into its static Pods and what envtest and kwok start
outside a cluster, checked on this machine against v1.37. Everything listens on loopback
except the API server, which listens on the network namespace's host end (:mod:`.netns`) so
the node agents inside the namespace reach it; nothing listens on every interface.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpustack_simulator.controlplane.pki import FRONT_PROXY_CN, ControlPlanePKI

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"


@dataclass(frozen=True)
class Ports:
    """Every port the control plane listens on (picked free at start)."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int


def etcd(binary: Path, data: Path, ports: Ports) -> list[str]:
    """A single-member etcd on loopback; fsync off (a test cluster's data is throwaway)."""
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync",
        "--log-level=warn",
        "--listen-metrics-urls=",
    ]


def apiserver(
    binary: Path,
    pki: ControlPlanePKI,
    ports: Ports,
    address: str,
    token_file: Path,
    audit: Path | None = None,
) -> list[str]:
    """kube-apiserver with RBAC and Node authorization, the front proxy, and webhooks on.

    ``--kubelet-preferred-address-types=InternalIP``: a node's address is the namespace's; the
    default tries the host name first, which nothing here resolves. The kubelet's serving
    certificate is verified against the cluster CA, as a cluster with serving-cert rotation does.
    """
    command = [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--secure-port={ports.apiserver}",
        f"--bind-address={address}",
        f"--advertise-address={address}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca}",
        f"--token-auth-file={token_file}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
        f"--proxy-client-key-file={pki.front_proxy_client.key}",
        f"--requestheader-client-ca-file={pki.front_proxy_ca}",
        f"--requestheader-allowed-names={FRONT_PROXY_CN}",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        f"--kubelet-certificate-authority={pki.ca}",
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ]
    if audit is not None:
        command += [f"--audit-log-path={audit}", "--audit-log-maxsize=50"]
    return command


def controller_manager(
    binary: Path, pki: ControlPlanePKI, ports: Ports, kubeconfig: Path
) -> list[str]:
    """kube-controller-manager with each controller on its own ServiceAccount's credentials.

    ``--use-service-account-credentials``: the garbage collector, the endpoint controllers and
    the rest act as ``system:serviceaccount:kube-system:<controller>``, through RBAC, as on a
    kubeadm cluster. Node IPAM is left out (no Pod network here).
    """
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--root-ca-file={pki.ca}",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--cluster-signing-cert-file={pki.ca}",
        f"--cluster-signing-key-file={pki.ca_key}",
        "--use-service-account-credentials=true",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        "--leader-elect=false",
        "--controllers=*,-nodeipam,-bootstrapsigner,-tokencleaner",
        "--profiling=false",
    ]


def scheduler(binary: Path, ports: Ports, kubeconfig: Path) -> list[str]:
    """kube-scheduler with its own identity (``system:kube-scheduler``)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        "--leader-elect=false",
        "--profiling=false",
    ]
