"""prom-label-proxy in front of a Prometheus: query-time tenant isolation, from its Go module.

prom-label-proxy (``github.com/prometheus-community/prom-label-proxy``, built by
``clusters/controlplane/build.py prom-label-proxy``) rewrites every PromQL expression it proxies
so that each selector carries ``namespace="<tenant>"``; series without that label are invisible.
With the flags :func:`command` passes (v0.11.1):

- ``-label namespace``: the label enforced; the tenant's value is read from the ``namespace``
  query (or form) parameter (``-query-param`` defaults to the label's name);
- ``-enable-label-apis``: ``/api/v1/labels`` and ``/api/v1/label/<name>/values`` get the matcher
  too (Prometheus ≥ 2.24 honours ``match[]`` there), instead of being refused;
- ``-error-on-replace``: a query that already names the label with another value or operator
  (``namespace!="a"``, ``namespace=~".+"``) is answered 400 instead of silently rewritten, so a
  tenant learns it was refused rather than reading a different query's answer.

It trusts its ``namespace`` parameter and takes the *union* of several. It therefore listens on
loopback only, behind the gateway (``gpustack_worker.metricsgateway``) that authenticates the
caller, authorizes the one namespace it names, and refuses a second one
(docs/multi-tenant-metrics.md).
"""

from __future__ import annotations

from pathlib import Path

LABEL = "namespace"


def command(binary: Path, upstream: str, port: int, host: str = "127.0.0.1") -> list[str]:
    """prom-label-proxy's command line: ``namespace`` enforced on every API it knows."""
    return [
        str(binary),
        f"-label={LABEL}",
        f"-upstream={upstream}",
        f"-insecure-listen-address={host}:{port}",
        "-enable-label-apis",
        "-error-on-replace",
    ]
