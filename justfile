# Every recipe bootstraps what it needs: `uv sync` creates .venv from uv.lock (frozen, so CI
# and a new machine get exactly the locked versions). Run through ./dev on a fresh machine.

set shell := ["bash", "-euo", "pipefail", "-c"]

export UV_PYTHON_DOWNLOADS := "never"

# List the recipes.
default:
    @just --list

# Create .venv with every workspace package and the dev tools, exactly as locked.
setup:
    uv sync --all-packages --frozen --quiet

# The main job on its embedded default: the simulator cluster up, its figures live (--once: print once).
demo *args: setup
    uv run --frozen --no-sync gpustack-operator demo {{args}}

# The whole gate CI runs: lint, types, then the test suite.
test *args: lint
    uv run --frozen --no-sync pytest {{args}}

# ruff (lint + format check) and mypy --strict on packages/ and simulator/.
lint: setup
    uv run --frozen --no-sync ruff check .
    uv run --frozen --no-sync ruff format --check .
    uv run --frozen --no-sync mypy

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
