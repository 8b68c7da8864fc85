"""The Devices ledger, recomputed independently from the annotations the test writes.

Each Pod's annotation is built here as JSON; the expected ``allocated``/``remaining`` per card
is summed by the test from the same numbers (one whole card is 1,600,000 units, a share is
160,000), never read back from the module.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import msgspec

from gpustack_core.allocation import ANNOTATION, read_allocation
from gpustack_core.decoding import ContractError
from gpustack_core.devices import (
    AcceleratorSpec,
    AcceleratorStatus,
    GroupSpec,
    PhysicalProfile,
    PhysicalSliced,
)
from gpustack_core.ledger import PodAllocation, build_ledger

WHOLE = 1_600_000
SHARE = WHOLE // 10
CARDS = [f"GPU-{i}" for i in range(4)]
MIG = PhysicalSliced(
    profiles=(
        PhysicalProfile(name="3g.40gb", memory_mib=40448, count=1),
        PhysicalProfile(name="1g.10gb", memory_mib=9856, count=2),
    ),
    count=3,
)
GROUP = GroupSpec(
    id="h100-80gb-hbm3",
    manufacturer="nvidia",
    name="NVIDIA H100 80GB HBM3",
    accelerators=tuple(
        AcceleratorSpec(
            id=card,
            index=i,
            status=AcceleratorStatus(physical_sliced=MIG if i == 3 else None),
        )
        for i, card in enumerate(CARDS)
    ),
)


def entry(card: str, mode: int, allocated: int | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": card, "index": CARDS.index(card), "mode": mode, **extra}
    if allocated is not None:
        body["allocated"] = allocated
    return body


def annotation(**containers: list[dict[str, Any]]) -> str:
    return json.dumps(
        {
            name: {
                "devices": {
                    "groups": [
                        {"id": "h100-80gb-hbm3", "manufacturer": "nvidia", "accelerators": a}
                    ]
                },
                "deviceIDs": [],
            }
            for name, a in containers.items()
        }
    )


def read_pod(namespace: str, name: str, phase: str, text: str | None) -> PodAllocation:
    """The ledger's input as the Device Manager builds it: the Pod's annotation read once."""
    annotations = {} if text is None else {ANNOTATION: text}
    try:
        read = read_allocation(annotations, pod=f"{namespace}/{name}")
    except ContractError as exc:
        return PodAllocation(namespace, name, phase, (), str(exc))
    return PodAllocation(namespace, name, phase, read.grants)


def pod(name: str, text: str | None, phase: str = "Running") -> PodAllocation:
    return read_pod("team-a", name, phase, text)


EXCLUSIVE = pod("exclusive", annotation(main=[entry("GPU-0", 1, WHOLE)]))
SHARED = [pod(f"shared-{i}", annotation(main=[entry("GPU-1", 2, SHARE)])) for i in range(3)]
SLICED = [
    pod("sliced-20", annotation(main=[entry("GPU-2", 3, 320_000)], sshd=[entry("GPU-2", 5)])),
    pod("sliced-35", annotation(main=[entry("GPU-2", 3, 560_000)])),
]
PARTITIONED = pod(
    "partitioned",
    annotation(
        main=[
            entry(
                "GPU-3",
                4,
                800_000,
                allocatedPhysicalProfile="3g.40gb",
                allocatedPhysicalPlacements=[{"start": 0, "length": 4}],
                allocatedPhysicalID="MIG-1",
            )
        ]
    ),
)
ALL = [EXCLUSIVE, *SHARED, *SLICED, PARTITIONED]


def rows(pods: list[PodAllocation]) -> dict[str, tuple[int, int, int]]:
    ledger = build_ledger([GROUP], pods)
    (group,) = ledger.groups
    assert (group.id, group.manufacturer) == ("h100-80gb-hbm3", "nvidia")
    return {a.id: (a.mode, a.allocated, a.remaining) for a in group.accelerators}


def test_every_mode_on_one_node() -> None:
    sliced = 320_000 + 560_000
    assert rows(ALL) == {
        "GPU-0": (1, WHOLE, 0),
        "GPU-1": (2, 3 * SHARE, WHOLE - 3 * SHARE),
        "GPU-2": (3, sliced, WHOLE - sliced),
        "GPU-3": (4, 800_000, WHOLE - 800_000),
    }


def test_partition_profiles_held_and_remaining() -> None:
    (group,) = build_ledger([GROUP], ALL).groups
    card = group.accelerators[3]
    assert [(p.name, p.count) for p in card.allocated_profiles] == [("3g.40gb", 1)]
    assert [(p.name, p.count) for p in card.remaining_profiles] == [
        ("1g.10gb", 2),
        ("3g.40gb", 0),
    ]


def test_no_pods_every_card_whole() -> None:
    assert rows([]) == dict.fromkeys(CARDS, (0, 0, WHOLE))


def test_a_deleted_pod_returns_its_units() -> None:
    without = [p for p in ALL if p.name != "sliced-35"]
    assert rows(without)["GPU-2"] == (3, 320_000, WHOLE - 320_000)
    assert rows([p for p in ALL if p is not EXCLUSIVE])["GPU-0"] == (0, 0, WHOLE)


def test_terminated_pods_release_all_but_partitions() -> None:
    done = [
        dataclasses.replace(p, phase="Succeeded" if i % 2 else "Failed") for i, p in enumerate(ALL)
    ]
    assert rows(done) == {
        "GPU-0": (0, 0, WHOLE),
        "GPU-1": (0, 0, WHOLE),
        "GPU-2": (0, 0, WHOLE),
        "GPU-3": (4, 800_000, WHOLE - 800_000),
    }


def test_an_unparseable_annotation_skips_that_pod_only() -> None:
    broken = pod("broken", '{"main": {"devices": {"groups": [{"manufacturer": 7}]}}}')
    not_json = pod("not-json", "{oops")
    ledger = build_ledger([GROUP], [*ALL, broken, not_json])
    assert len(ledger.skipped) == 2
    assert "pod team-a/broken" in ledger.skipped[0]
    assert "pod team-a/not-json" in ledger.skipped[1]
    assert all("\n" not in reason for reason in ledger.skipped)
    assert rows([*ALL, broken, not_json]) == rows(ALL)


def test_visibility_and_foreign_cards_are_not_charged() -> None:
    sidecar = pod("sidecar", annotation(sshd=[entry("GPU-0", 5)]))
    foreign = pod(
        "foreign",
        json.dumps(
            {
                "main": {
                    "devices": {
                        "groups": [
                            {
                                "manufacturer": "amd",
                                "accelerators": [
                                    {"id": "0000:03:00.0", "mode": 1, "allocated": WHOLE}
                                ],
                            }
                        ]
                    }
                }
            }
        ),
    )
    assert rows([sidecar, foreign]) == dict.fromkeys(CARDS, (0, 0, WHOLE))


def test_wire_form_matches_the_walkthrough_shape() -> None:
    (group,) = build_ledger([GROUP], []).groups
    body = msgspec.to_builtins(group.accelerators[0])
    assert body == {"id": "GPU-0", "index": 0, "mode": 0, "remaining": WHOLE}
