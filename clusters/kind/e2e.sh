#!/usr/bin/env bash
# The kind end-to-end run (`just e2e-kind`): create a kind cluster, build the image and load it
# into the nodes, install the chart in simulation mode, wait for the APIService to be Available
# and every Device Manager DaemonSet to be Ready, run tests/e2e/kind against the cluster, collect
# logs when anything failed, and delete the cluster.
#
# Needs: a container engine (docker, or podman with KIND_EXPERIMENTAL_PROVIDER=podman), kind,
# kubectl, helm (v3.8+ or v4; `just tools-helm` caches one under .tools/helm), and the repo's
# .venv (`just setup`; the recipe does it).
#
# Environment:
#   GPUSTACK_KIND_CLUSTER   cluster name (default gpustack-e2e)
#   GPUSTACK_KIND_KEEP=1    keep the cluster afterwards (kubeconfig: .e2e-kind/kubeconfig)
#   GPUSTACK_E2E_ARTIFACTS  where logs go on failure (default .e2e-kind/artifacts)
#   KIND_NODE_IMAGE         kindest/node image to run (default: kind's own)
#   CONTAINER_ENGINE        docker or podman (default: docker if present, else podman)
#   HELM                    helm binary (default: helm on PATH, else .tools/helm/helm)
#   PYTEST_ARGS             extra arguments for pytest (e.g. "-x -k rbac")
set -euo pipefail

repo=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

cluster=${GPUSTACK_KIND_CLUSTER:-gpustack-e2e}
state="$repo/.e2e-kind"
artifacts=${GPUSTACK_E2E_ARTIFACTS:-$state/artifacts}
namespace=gpustack-system
release=gpustack-operator
# Fully qualified, so it is the same reference under docker and podman: podman names a short
# `gpustack-operator` image `localhost/gpustack-operator`, which is not what a short reference
# in the Pod resolves to on the kind nodes (containerd reads it as docker.io/library/...).
image_repo=localhost/gpustack-operator
image_tag=e2e
image="$image_repo:$image_tag"

log() { printf 'e2e-kind: %s\n' "$*" >&2; }
die() {
    log "$*"
    exit 1
}

# -- tools ----------------------------------------------------------------------------------

engine=${CONTAINER_ENGINE:-}
if [ -z "$engine" ]; then
    if command -v docker >/dev/null 2>&1; then
        engine=docker
    elif command -v podman >/dev/null 2>&1; then
        engine=podman
    else
        die "no container engine: install docker or podman (kind runs its nodes as containers)"
    fi
fi
if [ "$engine" = podman ]; then
    export KIND_EXPERIMENTAL_PROVIDER=podman
fi
"$engine" info >/dev/null 2>&1 || die "$engine is installed but its engine does not answer ($engine info failed)"

helm=${HELM:-}
if [ -z "$helm" ]; then
    if command -v helm >/dev/null 2>&1; then
        helm=$(command -v helm)
    elif [ -x "$repo/.tools/helm/helm" ]; then
        helm="$repo/.tools/helm/helm"
    else
        die "helm not found: set HELM, put helm on PATH, or run \`just tools-helm\`"
    fi
fi
for tool in kind kubectl uv; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found on PATH"
done

mkdir -p "$state"
export KUBECONFIG="$state/kubeconfig"

# -- cleanup and logs -----------------------------------------------------------------------

collect_logs() {
    log "collecting logs into $artifacts"
    mkdir -p "$artifacts"
    kubectl get nodes -o wide --show-labels >"$artifacts/nodes.txt" 2>&1 || true
    kubectl get all,apiservices,networkpolicies,instances.worker.gpustack.ai -A -o wide \
        >"$artifacts/objects.txt" 2>&1 || true
    kubectl get apiservice v1.worker.gpustack.ai -o yaml >"$artifacts/apiservice.yaml" 2>&1 || true
    kubectl get events -A --sort-by=.lastTimestamp >"$artifacts/events.txt" 2>&1 || true
    local ns pod
    for ns in "$namespace" team-a team-b team-c; do
        kubectl -n "$ns" describe pods >"$artifacts/describe-$ns.txt" 2>&1 || true
    done
    for pod in $(kubectl -n "$namespace" get pods -o name 2>/dev/null); do
        kubectl -n "$namespace" logs "$pod" --all-containers --prefix --timestamps \
            >"$artifacts/logs-${pod#pod/}.txt" 2>&1 || true
        kubectl -n "$namespace" logs "$pod" --all-containers --prefix --timestamps --previous \
            >"$artifacts/logs-${pod#pod/}-previous.txt" 2>/dev/null || true
    done
    "$helm" status "$release" -n "$namespace" >"$artifacts/helm-status.txt" 2>&1 || true
    kind export logs "$artifacts/kind" --name "$cluster" >/dev/null 2>&1 || true
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    if [ "$status" -ne 0 ]; then
        log "failed (exit $status)"
        collect_logs
    fi
    if [ -n "${GPUSTACK_KIND_KEEP:-}" ]; then
        log "keeping cluster $cluster (KUBECONFIG=$KUBECONFIG; delete: kind delete cluster --name $cluster)"
    else
        log "deleting cluster $cluster"
        kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- cluster --------------------------------------------------------------------------------

if kind get clusters 2>/dev/null | grep -x "$cluster" >/dev/null; then
    log "deleting a leftover cluster $cluster"
    kind delete cluster --name "$cluster"
fi
log "creating cluster $cluster"
create=(kind create cluster --name "$cluster" --config clusters/kind/cluster.yaml
    --kubeconfig "$KUBECONFIG" --wait 180s)
if [ -n "${KIND_NODE_IMAGE:-}" ]; then
    create+=(--image "$KIND_NODE_IMAGE")
fi
"${create[@]}"
kubectl get nodes --show-labels

# -- image ----------------------------------------------------------------------------------

log "building $image with $engine"
"$engine" build -f clusters/image/Containerfile -t "$image" .
log "loading $image into the nodes"
if [ "$engine" = docker ]; then
    kind load docker-image "$image" --name "$cluster"
else
    archive="$state/image.tar"
    "$engine" save -o "$archive" "$image"
    kind load image-archive "$archive" --name "$cluster"
    rm -f "$archive"
fi

# -- chart ----------------------------------------------------------------------------------

install=("$helm" upgrade --install "$release" clusters/chart --namespace "$namespace"
    --create-namespace -f clusters/kind/values-simulate.yaml --set "image.repository=$image_repo"
    --set "image.tag=$image_tag")
# A Hygon node is labelled in the kind config; it gets a Device Manager once a recording exists.
hygon=$(find recordings/hygon -name '*.yaml' 2>/dev/null | sort | head -n 1 || true)
if [ -n "$hygon" ]; then
    install+=(--set "simulate.hygon.recording=${hygon#recordings/}")
else
    log "no recordings/hygon/*.yaml: the hygon node runs no Device Manager"
fi
log "installing the chart: ${install[*]}"
"${install[@]}"

log "waiting for the worker"
kubectl -n "$namespace" rollout status deployment/gpustack-operator-worker --timeout=180s
log "waiting for APIService v1.worker.gpustack.ai to be Available"
kubectl wait --for=condition=Available apiservice/v1.worker.gpustack.ai --timeout=180s

daemonsets=$(kubectl -n "$namespace" get daemonsets -l app.kubernetes.io/component=device-manager \
    -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
[ -n "$daemonsets" ] || die "the chart rendered no Device Manager DaemonSet"
for ds in $daemonsets; do
    log "waiting for daemonset/$ds"
    kubectl -n "$namespace" rollout status "daemonset/$ds" --timeout=180s
    # A DaemonSet whose nodeSelector matches no node "rolls out" with nothing: refuse that.
    scheduled=$(kubectl -n "$namespace" get daemonset "$ds" -o jsonpath='{.status.desiredNumberScheduled}')
    ready=$(kubectl -n "$namespace" get daemonset "$ds" -o jsonpath='{.status.numberReady}')
    if [ "${scheduled:-0}" -lt 1 ] || [ "$ready" != "$scheduled" ]; then
        die "daemonset/$ds: $ready of $scheduled Pods Ready (expected at least one)"
    fi
done

# -- the e2e assertions ---------------------------------------------------------------------

log "running tests/e2e/kind"
# With GPUSTACK_E2E_KIND_KUBECONFIG set the suite does not skip: it runs or fails.
# shellcheck disable=SC2086
GPUSTACK_E2E_KIND_KUBECONFIG="$KUBECONFIG" GPUSTACK_E2E_KIND_IMAGE="$image" \
    uv run --frozen --no-sync pytest tests/e2e/kind -p no:cacheprovider -ra ${PYTEST_ARGS:-}

log "running tests/contract against the kind API server"
# The client contract suite the stand-in passes locally, now against a real kube-apiserver:
# every verb, patch type, 409, status subresource, GC and watch resume.
# shellcheck disable=SC2086
GPUSTACK_CONTRACT_KUBECONFIG="$KUBECONFIG" \
    uv run --frozen --no-sync pytest tests/contract -p no:cacheprovider -ra ${PYTEST_ARGS:-}
log "passed"
