"""An InstanceType's status and its table cells, against the walkthrough's rows.

Rows are ``shared/spec/instancetype-walkthrough.md``'s ``kubectl get instancetypes`` tables, the
A10G's status its §1 YAML (``walkthrough_expected``); the one documented difference is SH's
once-max, in cards under the current shared reading (the walkthrough's ``10/10`` is ``1/10``, its
``40/50`` is ``4/50``).
"""

from __future__ import annotations

import msgspec

from gpustack_core.instancetype import UnitResources
from gpustack_core.typestatus import accelerator_text, cpu_text, instancetype_status, unit_text
from gpustack_core.views import View, Views
from walkthrough_expected import A10G_TYPE

A10G = Views(exclusive=View(1, 1, 1), shared=View(10, 1, 10), sliced=View(100, 100, 100))
T4 = Views(exclusive=View(5, 4, 5), shared=View(50, 4, 50), sliced=View(500, 100, 500))
A10G_UNIT = UnitResources(cpu="8", ram="64Gi", local_storage="100Gi")

A10G_STATUS = {
    **A10G_TYPE["status"],
    # The walkthrough's 10 (SHARED_READING): shares then, cards now.
    "acceleratorShared": {**A10G_TYPE["status"]["acceleratorShared"], "onceMaxRequest": "1"},
    # What the walkthrough's trimmed status leaves out: the CPU view and the summary cells.
    "cpu": {"capacity": "0", "onceMaxRequest": "0", "remaining": "0"},
    "summary": {"unit": "8/64Gi/100Gi", "accelerator": "1/1 1/10 100/100 0/0", "cpu": "0/0"},
}


def test_the_a10g_status() -> None:
    status = instancetype_status(
        unit=A10G_UNIT,
        views=A10G,
        cpu=View(),
        entrance=A10G_TYPE["status"]["entrance"],
        phase="Active",
    )
    assert msgspec.json.decode(msgspec.json.encode(status)) == A10G_STATUS


def test_the_walkthroughs_cells() -> None:
    assert unit_text(A10G_UNIT) == "8/64Gi/100Gi"
    assert unit_text(UnitResources(cpu="1", ram="2Gi", local_storage="100Gi")) == "1/2Gi/100Gi"
    assert unit_text(UnitResources(cpu="12", ram="128Gi", local_storage="200Gi")) == (
        "12/128Gi/200Gi"
    )
    assert accelerator_text(T4) == "4/5 4/50 100/500 0/0"
    assert accelerator_text(Views(sliced=View(100, 80, 80))) == "0/0 0/0 80/80 0/0"  # §3
    assert accelerator_text(Views()) == "0/0 0/0 0/0 0/0"
    assert cpu_text(View(72_000, 48_000, 72_000)) == "48/72"
    assert cpu_text(View(68_000, 48_000, 68_000)) == "48/68"


def test_an_absent_unit_figure_is_not_zero() -> None:
    assert unit_text(UnitResources(cpu="4")) == "4/-/-"


def test_fractional_cpu_is_spelt_as_a_quantity() -> None:
    assert cpu_text(View(4_000, 2_500, 2_500)) == "2500m/2500m"


def test_every_offered_profile_is_written() -> None:
    views = Views(partitioned=View(3, 1, 1), remaining_profiles=(("1g.10gb", 1), ("3g.40gb", 0)))
    status = instancetype_status(
        unit=A10G_UNIT, views=views, cpu=View(), entrance="e", phase="Active"
    )
    written = msgspec.json.decode(msgspec.json.encode(status))["acceleratorPartitioned"]
    assert written["remainingProfiles"] == [
        {"name": "1g.10gb", "count": 1},
        {"name": "3g.40gb", "count": 0},
    ]
