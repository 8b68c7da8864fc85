"""Annotation grants against the kubelet's record: what stands, and the reason for what does not."""

from __future__ import annotations

import json

import msgspec
from test_sample import FALLBACK, MEASURED, NOW, nvidia_snapshot, pod_object

from gpustack_core.allocation import grants, parse_allocation
from gpustack_core.confirm import Verdict, confirm
from gpustack_core.pods import pod_from_object
from gpustack_core.sample import instance_sample
from gpustack_core.snapshot import ConfirmedGrant


def entry(mode: int, card: str, ids: list[str], container: str = "main") -> dict[str, object]:
    return {
        container: {
            "devices": {"groups": [{"id": "h100", "manufacturer": "nvidia",
                                    "accelerators": [{"id": card, "index": 0, "mode": mode,
                                                      "allocated": 160000}]}]},
            "deviceIDs": ids,
        }
    }  # fmt: skip


def check(
    annotation: dict[str, object], assigned: dict[tuple[str, str, str], frozenset[str]]
) -> Verdict:
    parsed = parse_allocation(json.dumps(annotation))
    ids = {name: e.device_ids for name, e in parsed.items()}
    return confirm("team-a", "p", grants(parsed), ids, assigned)


MAIN = ("team-a", "p", "main")


def test_a_grant_the_kubelet_assigned_stands() -> None:
    verdict = check(entry(2, "GPU-1", ["h100:GPU-1:0003"]), {MAIN: frozenset({"h100:GPU-1:0003"})})
    assert [g.accelerator.id for g in verdict.kept] == ["GPU-1"]
    assert verdict.dropped == ()


def test_a_claim_with_no_device_ids_is_dropped() -> None:
    verdict = check(entry(1, "GPU-1", []), {MAIN: frozenset({"h100:GPU-1:0000"})})
    assert verdict.kept == ()
    (reason,) = verdict.dropped
    assert "pod team-a/p container 'main'" in reason
    assert "with no device IDs" in reason


def test_ids_the_kubelet_gave_another_container_are_not_believed() -> None:
    """A copied entry: the victim's IDs, which the kubelet assigned to the victim."""
    victim = ("team-b", "victim", "main")
    verdict = check(
        entry(1, "GPU-1", ["h100:GPU-1:0000"]), {victim: frozenset({"h100:GPU-1:0000"})}
    )
    assert verdict.kept == ()
    assert "did not assign it h100:GPU-1:0000" in verdict.dropped[0]


def test_a_card_bound_grant_must_be_the_card_its_ids_name() -> None:
    """Own IDs for card 1, claimed against card 2 (a hand-edited id)."""
    verdict = check(entry(1, "GPU-2", ["h100:GPU-1:0000"]), {MAIN: frozenset({"h100:GPU-1:0000"})})
    assert verdict.kept == ()
    assert "name no GPU-2" in verdict.dropped[0]


def test_a_partition_is_confirmed_by_its_ids_alone() -> None:
    """Partition IDs are fungible counts: the plugin picks the card, so any card may be named."""
    verdict = check(entry(4, "GPU-2", ["h100:GPU-1:0001"]), {MAIN: frozenset({"h100:GPU-1:0001"})})
    assert [g.accelerator.id for g in verdict.kept] == ["GPU-2"]


def test_the_worker_drops_what_the_manager_did_not_confirm() -> None:
    allocation = {"main": {"devices": {"groups": [{"manufacturer": "nvidia", "accelerators": [
        {"id": "GPU-0", "index": 0, "mode": 1, "allocated": 1600000}]}]}}}  # fmt: skip
    pod = pod_from_object(pod_object(allocation=allocation))
    checked = msgspec.structs.replace(nvidia_snapshot(), grants=())  # checked: nothing stands
    result = instance_sample(pod=pod, fallback=FALLBACK, usage=MEASURED,
                             snapshots={"nvidia": checked}, now=NOW)  # fmt: skip
    assert result.sample.accelerators == []
    assert any("not confirmed by its Device Manager" in n for n in result.notes)
    confirmed = msgspec.structs.replace(
        nvidia_snapshot(), grants=(ConfirmedGrant(pod_uid="pod-1", container="main",
                                                  device_id="GPU-0"),)
    )  # fmt: skip
    kept = instance_sample(pod=pod, fallback=FALLBACK, usage=MEASURED,
                           snapshots={"nvidia": confirmed}, now=NOW)  # fmt: skip
    assert [a.id for a in kept.sample.accelerators or []] == ["GPU-0"]
    unchecked = instance_sample(pod=pod, fallback=FALLBACK, usage=MEASURED,
                                snapshots={"nvidia": nvidia_snapshot()}, now=NOW)  # fmt: skip
    assert [a.id for a in unchecked.sample.accelerators or []] == ["GPU-0"]  # older managers
