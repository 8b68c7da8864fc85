"""A real Kubernetes control plane on this machine, built from the Go modules.

``simulator up --control-plane real`` runs the daemons against it instead of the stand-in:
etcd, kube-apiserver, kube-controller-manager, kube-scheduler and Kueue as local processes
(binaries from ``clusters/controlplane``), and a node agent of ours (:mod:`.nodeagent`) that
plays each scenario node's kubelet — registration, Lease, ``stats/summary`` through the node
proxy, PodResources and the device-plugin Registration, ``Allocate`` at admission, Pods moved
to Running and finished when deleted. No container runs: there is no runtime here.

Where it differs from a cluster, and why:

- Node addresses live in a network namespace the run creates (:mod:`.netns`), because the API
  server refuses to proxy to loopback; nothing else is ever a target, and the namespace goes
  when the run ends (also on Ctrl-C and on failure).
- The worker and the Webhooks are reached through ``ExternalName`` Services naming the
  loopback address the worker listens on (no kube-proxy, no cluster IPs are routable here).
- The daemons authenticate with ServiceAccount tokens minted by the TokenRequest API for the
  chart's ServiceAccounts, and the chart's RBAC is applied as rendered: what they may do is
  decided by the real RBAC authorizer.
"""
