"""Fleet scenarios: many nodes and Instances, generated instead of written by hand.

A hand-written scenario is a reviewable story about one node; the scale figures (a thousand
nodes, ten thousand Instances) need a cluster nobody would write or read line by line. The
generator emits the same ``cluster-scenario/v1`` authoring form as ``recordings/scenarios/``,
so the file goes through the unchanged checks and expansion, and ``simulator up --scenario``
runs it like any other. Output is deterministic (no randomness: a given command line always
writes the same file), so a figure taken on it can be re-taken on the same cluster.

Each node runs one Device Manager replaying a recording (round-robin over ``recordings``); the
Instances are dealt to nodes round-robin, and ``mix`` says in what proportion they hold a whole
card (``exclusive``), a share of one (``shared``) or no accelerator (``none``). A node grants
what its recording's cards allow: an Exclusive Instance beyond the free cards takes a share
instead, and one beyond every card's ten shares runs without an accelerator.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpustack_simulator.recording import load_recording
from gpustack_simulator.replay.backends import replay_backend
from gpustack_simulator.scenario import RECORDINGS_DIR, SCHEMA, SHARES_PER_CARD
from gpustack_simulator.synth.timeline import VirtualClock

DEFAULT_RECORDING = "nvidia/h100-8x.yaml"
MODES = ("exclusive", "shared", "none")
DEFAULT_MIX = "exclusive=1,shared=3,none=1"
NAMESPACES = 10
"""Instances are spread over ``team-0`` … ``team-9``, as a real cluster has several tenants."""

_MIX_PART = re.compile(r"^\s*(\w+)\s*[=:]\s*(\d+)\s*$")


class FleetError(ValueError):
    """A generator argument that cannot describe a fleet (the message says which)."""


@dataclass(frozen=True)
class Mix:
    """Integer weights per mode: ``exclusive=1,shared=3,none=1`` is 1 in 5 Exclusive."""

    weights: tuple[tuple[str, int], ...]

    @classmethod
    def parse(cls, text: str) -> Mix:
        """Read ``mode=weight,…``; an unknown mode, a bad weight or all zeros is refused."""
        weights: dict[str, int] = {}
        for part in text.split(","):
            if not part.strip():
                continue
            match = _MIX_PART.match(part)
            if match is None:
                raise FleetError(f"--mix {text!r}: {part.strip()!r} is not MODE=WEIGHT")
            mode, weight = match[1].lower(), int(match[2])
            if mode not in MODES:
                raise FleetError(f"--mix {text!r}: mode {mode!r} is not one of {', '.join(MODES)}")
            weights[mode] = weights.get(mode, 0) + weight
        if not any(weights.values()):
            raise FleetError(f"--mix {text!r}: every weight is zero")
        return cls(tuple((m, weights[m]) for m in MODES if weights.get(m)))

    def deal(self, count: int) -> list[str]:
        """``count`` modes in these proportions, interleaved (smooth weighted round-robin).

        Interleaving, not blocks: every node then gets a share of each mode, whatever the
        node count, instead of the first nodes taking every Exclusive Instance.
        """
        total = sum(w for _, w in self.weights)
        credit = dict.fromkeys((m for m, _ in self.weights), 0)
        dealt = []
        for _ in range(count):
            for mode, weight in self.weights:
                credit[mode] += weight
            chosen = max(credit, key=lambda m: credit[m])  # first listed wins a tie
            credit[chosen] -= total
            dealt.append(chosen)
        return dealt


@functools.lru_cache(maxsize=32)
def cards_of(recording: str, base: Path = RECORDINGS_DIR) -> tuple[str, ...]:
    """The card ids a Device Manager replaying ``recording`` reports, in index order.

    Detected through the replayed backend, as the scenario checks do, so a generated grant
    names only a device the Device Manager will report, by the id it reports it under.
    """
    backend = replay_backend(load_recording(base / recording), clock=VirtualClock())
    try:
        devices = sorted(backend.detect().devices, key=lambda d: d.index)
        return tuple(d.id for d in devices)
    finally:
        backend.close()


def node_name(index: int, width: int) -> str:
    """``fleet-node-0007``: zero-padded so names sort the way they were generated."""
    return f"fleet-node-{index:0{width}d}"


def _internal_ip(index: int) -> str:
    """Node ``index``'s InternalIP in 10.0.0.0/8: 10.0.0.1 …, never a ``.0`` or ``.255``."""
    block, host = divmod(index, 254)
    return f"10.{(block >> 8) & 255}.{block & 255}.{host + 1}"


def _grants(modes: Sequence[str], cards: Sequence[str]) -> list[tuple[str, str] | None]:
    """Each Instance's (mode, card) on one node, or ``None`` for no accelerator.

    Exclusive Instances take whole cards from the first one up, keeping at least one card for
    shares when any Instance on the node wants a share; shares cycle over the cards left.
    """
    wanted = sum(m == "exclusive" for m in modes)
    shared_wanted = any(m != "exclusive" for m in modes if m != "none")
    whole = min(wanted, max(0, len(cards) - (1 if shared_wanted or wanted > len(cards) else 0)))
    pool = list(cards[whole:])
    held: dict[str, int] = dict.fromkeys(pool, 0)
    out: list[tuple[str, str] | None] = []
    next_whole = 0
    next_share = 0
    for mode in modes:
        if mode == "exclusive" and next_whole < whole:
            out.append(("Exclusive", cards[next_whole]))
            next_whole += 1
            continue
        if mode == "none" or not pool:
            out.append(None)
            continue
        # A share (asked for, or an Exclusive Instance the node had no whole card left for).
        for _ in range(len(pool)):
            card = pool[next_share % len(pool)]
            next_share += 1
            if held[card] < SHARES_PER_CARD:
                held[card] += 1
                out.append(("Shared", card))
                break
        else:
            out.append(None)  # every card's shares are taken
    return out


def generate(
    *,
    nodes: int,
    instances: int,
    mix: Mix | str = DEFAULT_MIX,
    recordings: Sequence[str] = (DEFAULT_RECORDING,),
    base: Path = RECORDINGS_DIR,
) -> dict[str, Any]:
    """A ``cluster-scenario/v1`` document for ``nodes`` nodes and ``instances`` Instances."""
    if nodes < 1:
        raise FleetError("--nodes must be at least 1")
    if instances < 0:
        raise FleetError("--instances must not be negative")
    if not recordings:
        raise FleetError("at least one recording is needed")
    if isinstance(mix, str):
        mix = Mix.parse(mix)
    for recording in recordings:
        manufacturer = recording.split("/", 1)[0]
        if "/" not in recording or not (base / recording).is_file():
            raise FleetError(f"recording {recording!r} is not a file under {base}")
        if not cards_of(recording, base):
            raise FleetError(f"recording {recording!r} ({manufacturer}) reports no cards")
    width = max(4, len(str(nodes)))
    modes = mix.deal(instances)
    per_node: dict[int, list[int]] = {}
    for j in range(instances):
        per_node.setdefault(j % nodes, []).append(j)
    node_docs: list[dict[str, Any]] = []
    instance_docs: list[dict[str, Any]] = []
    for i in range(nodes):
        recording = recordings[i % len(recordings)]
        name = node_name(i, width)
        node_docs.append(
            {
                "name": name,
                "addresses": {"InternalIP": _internal_ip(i)},
                "deviceManagers": [
                    {"manufacturer": recording.split("/", 1)[0], "recording": recording}
                ],
            }
        )
        members = per_node.get(i, [])
        grants = _grants([modes[j] for j in members], cards_of(recording, base))
        for j, grant in zip(members, grants, strict=True):
            instance_docs.append(_instance(j, name, grant))
    share = ", ".join(f"{mode} {weight}" for mode, weight in mix.weights)
    return {
        "schema": SCHEMA,
        "description": (
            f"Generated fleet: {nodes} nodes ({', '.join(recordings)}), {instances} Instances "
            f"(weights: {share})"
        ),
        "nodes": node_docs,
        "instances": instance_docs,
    }


def _instance(j: int, node: str, grant: tuple[str, str] | None) -> dict[str, Any]:
    """Instance ``j``: modest limits, a steady load, its grant if any."""
    container: dict[str, Any] = {"name": "main"}
    if grant is not None:
        container["accelerators"] = [{"device": grant[1], "mode": grant[0]}]
    return {
        "name": f"inst-{j:05d}",
        "namespace": f"team-{j % NAMESPACES}",
        "node": node,
        "resources": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "20Gi"},
        "pod": {
            "containers": [container],
            "usage": [
                {
                    "t": 0,
                    "cpu": f"{100 + (j * 37) % 1800}m",
                    "memory": f"{1 + j % 7}Gi",
                    "storage": "1Gi",
                }
            ],
        },
    }


def to_yaml(document: Mapping[str, Any]) -> str:
    """The document as YAML, one Instance per few lines (flow style inside each)."""
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml: ~3x faster at 10k
    text: str = yaml.dump(
        dict(document), Dumper=dumper, sort_keys=False, default_flow_style=None, width=200
    )
    return text


__all__ = [
    "DEFAULT_MIX",
    "DEFAULT_RECORDING",
    "MODES",
    "FleetError",
    "Mix",
    "cards_of",
    "generate",
    "node_name",
    "to_yaml",
]
