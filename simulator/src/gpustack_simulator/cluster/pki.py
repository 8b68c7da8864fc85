"""The stand-in's throwaway PKI: a serving CA and a front-proxy CA, as a cluster has.

The serving certificate is what kubectl and the daemons verify (its CA goes into the written
kubeconfig). The front-proxy client certificate is what the stand-in presents to the worker when
it acts as the kube-aggregator; its CA is published in ``kube-system/
extension-apiserver-authentication`` exactly where a real cluster publishes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

FRONT_PROXY_CN = "front-proxy-client"


@dataclass(frozen=True)
class ClusterPKI:
    """Paths of the PEM files under the state directory."""

    ca: Path
    server: Path
    """Key and certificate chain in one PEM, as hypercorn accepts."""
    front_proxy_ca: Path
    front_proxy_ca_key: Path
    """The front-proxy CA's key, as kubeadm keeps it: tests mint client certs it signs."""
    front_proxy_client: Path
    """Key and certificate of the aggregator's client identity."""

    @classmethod
    def create(cls, directory: Path) -> ClusterPKI:
        """Mint both CAs and their leaf certificates into ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        serving = trustme.CA(organization_name="gpustack stand-in serving CA")
        server = serving.issue_cert("127.0.0.1", "localhost", "::1")
        front = trustme.CA(organization_name="gpustack stand-in front-proxy CA")
        client = front.issue_cert("front-proxy-client.invalid", common_name=FRONT_PROXY_CN)
        pki = cls(
            ca=directory / "ca.crt",
            server=directory / "server.pem",
            front_proxy_ca=directory / "front-proxy-ca.crt",
            front_proxy_ca_key=directory / "front-proxy-ca.key",
            front_proxy_client=directory / "front-proxy-client.pem",
        )
        serving.cert_pem.write_to_path(str(pki.ca))
        server.private_key_and_cert_chain_pem.write_to_path(str(pki.server))
        front.cert_pem.write_to_path(str(pki.front_proxy_ca))
        front.private_key_pem.write_to_path(str(pki.front_proxy_ca_key))
        client.private_key_and_cert_chain_pem.write_to_path(str(pki.front_proxy_client))
        for path in (pki.server, pki.front_proxy_client, pki.front_proxy_ca_key):
            path.chmod(0o600)
        return pki
