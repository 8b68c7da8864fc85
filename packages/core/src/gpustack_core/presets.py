"""The unit resources a derived InstanceType is stamped with: one accelerator's CPU and RAM.

A derived type's ``spec.unitResources`` is chosen once, at creation, and is immutable after
(``shared/reference/instancetypes.md``, "Unit presets"). It is not derived from the nodes'
capacity: it is the default request of one Instance per accelerator, so it follows what hosts of
that accelerator are published with, tiered by the accelerator's VRAM:

========  =====================  ========  ========
tier      VRAM band              unit CPU  unit RAM
========  =====================  ========  ========
fallback  any product not listed 4         16Gi
small     ≤ 16 GiB               8         32Gi
medium    > 16, ≤ 48 GiB         8         64Gi
large     > 48, ≤ 96 GiB         12        128Gi
xlarge    > 96 GiB               12        192Gi
========  =====================  ========  ========

A family's tier starts from its band and may be lowered to what its smallest published
multi-accelerator host gives (910B is ``medium``), so the tier is a table of families, not a
function of the memory label: an accelerator whose family is not listed gets ``fallback``
whatever its VRAM. ``localStorage`` is always 100Gi; a CPU-only derived type is 1 CPU / 2Gi.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from gpustack_core.instancetype import UnitResources

LOCAL_STORAGE: Final = "100Gi"


class Tier(StrEnum):
    """A preset tier; its unit CPU and RAM are :data:`TIER_UNITS`."""

    FALLBACK = "fallback"
    SMALL = "small"
    MEDIUM = "medium"
    LARGE = "large"
    XLARGE = "xlarge"


TIER_UNITS: Final[dict[Tier, tuple[str, str]]] = {
    Tier.FALLBACK: ("4", "16Gi"),
    Tier.SMALL: ("8", "32Gi"),
    Tier.MEDIUM: ("8", "64Gi"),
    Tier.LARGE: ("12", "128Gi"),
    Tier.XLARGE: ("12", "192Gi"),
}
CPU_ONLY_UNITS: Final = ("1", "2Gi")

_S, _M, _L, _X = Tier.SMALL, Tier.MEDIUM, Tier.LARGE, Tier.XLARGE
FAMILIES: Final[dict[str, Tier]] = {
    # NVIDIA
    **dict.fromkeys(
        (
            "nvidia-b200", "nvidia-b300", "nvidia-gb200", "nvidia-gb300", "nvidia-h100",
            "nvidia-h200", "nvidia-h800", "nvidia-gh200",
        ),
        _X,
    ),
    **dict.fromkeys(("nvidia-a100-80gb", "nvidia-a800-80gb", "nvidia-l40s"), _L),
    **dict.fromkeys(
        (
            "nvidia-a100", "nvidia-a100-40gb", "nvidia-a800", "nvidia-a800-40gb", "nvidia-a10",
            "nvidia-a10g", "nvidia-l40", "nvidia-v100-32gb", "nvidia-rtx-4090", "nvidia-rtx-5090",
        ),
        _M,
    ),
    **dict.fromkeys(
        (
            "nvidia-gb10", "nvidia-a30", "nvidia-l4", "nvidia-t4", "nvidia-v100", "nvidia-v100s",
            "nvidia-rtx-pro-4500", "nvidia-rtx-6000", "nvidia-rtx-4000", "nvidia-rtx-a6000",
            "nvidia-rtx-a5000", "nvidia-rtx-a4000", "nvidia-rtx-3090",
        ),
        _S,
    ),
    # Ascend: 910B held a tier below its band (a 64 GB-per-card host); the 910 A3 parts xlarge.
    **dict.fromkeys(
        (
            "ascend-310p", "ascend-310p1", "ascend-310p2", "ascend-310p3", "ascend-310p4",
            "ascend-310p5", "ascend-310p7", "ascend-910b", "ascend-910b1", "ascend-910b2",
            "ascend-910b2c", "ascend-910b3", "ascend-910b4",
        ),
        _M,
    ),
    **dict.fromkeys(
        (
            "ascend-910-9362", "ascend-910-9363", "ascend-910-9372", "ascend-910-9381",
            "ascend-910-9382", "ascend-910-9391", "ascend-910-9392", "ascend-950",
            "ascend-950pr", "ascend-950dt",
        ),
        _X,
    ),
    # AMD
    **dict.fromkeys(
        ("amd-mi300x", "amd-mi308x", "amd-mi325x", "amd-mi350x", "amd-mi355x"), _X
    ),
    **dict.fromkeys(("amd-mi250", "amd-mi250x"), _M),
    "amd-mi210": _L,
    # Cambricon, Hygon, MetaX, MThreads, Iluvatar, T-Head
    **dict.fromkeys(("cambricon-mlu370", "cambricon-mlu590"), _M),
    **dict.fromkeys(("hygon-z100", "hygon-z100l"), _S),
    **dict.fromkeys(("hygon-k100", "hygon-bw100"), _L),
    "hygon-bw1000": _X,
    "metax-mxc500": _M,
    **dict.fromkeys(("metax-mxc550", "metax-mxc588", "metax-mxc600"), _L),
    **dict.fromkeys(("mthreads-mtt-s4000", "mthreads-mtt-s5000"), _M),
    **dict.fromkeys(
        ("iluvatar-bi-v100", "iluvatar-bi-v150", "iluvatar-mr-v50", "iluvatar-mr-v100"), _M
    ),
    **dict.fromkeys(("thead-ppu-zw810e", "thead-ppu-zwm890"), _M),
}  # fmt: skip
"""Accelerator family → tier (the reference operator's published table, by family key)."""

MARKETING_WORDS: Final = frozenset(
    {"tesla", "geforce", "quadro", "sxm", "sxm2", "sxm3", "sxm4", "sxm5", "pcie", "nvl", "hgx"}
)
"""Words in an accelerator key that name a brand line or form factor, not the family:
``nvidia-tesla-t4`` is the family ``nvidia-t4``, ``nvidia-a100-sxm4-80gb`` ``nvidia-a100-80gb``."""


def family_key(accelerator_key: str) -> str:
    """The accelerator key without brand-line and form-factor words: the preset table's key.

    ``_`` and ``.`` separate words as ``-`` does (Hygon's ``K100_AI`` is ``k100-ai``).
    """
    spelled = accelerator_key.lower().replace("_", "-").replace(".", "-")
    words = [w for w in spelled.split("-") if w and w not in MARKETING_WORDS]
    return "-".join(words)


def tier_of(accelerator_key: str) -> Tier:
    """The tier of an accelerator key: its family's, else ``fallback``.

    The longest listed family that is the key's family or a whole-word prefix of it wins:
    ``nvidia-h100-80gb-hbm3`` is ``nvidia-h100``, ``nvidia-rtx-4090-d`` ``nvidia-rtx-4090``; a
    prefix must end at a word, so ``nvidia-l4`` never claims ``nvidia-l40s``.
    """
    words = family_key(accelerator_key).split("-")
    for end in range(len(words), 0, -1):
        tier = FAMILIES.get("-".join(words[:end]))
        if tier is not None:
            return tier
    return Tier.FALLBACK


def unit_preset(accelerator_key: str | None) -> UnitResources:
    """The ``spec.unitResources`` a derived type is created with.

    ``None`` (or empty) is a CPU-only type: 1 CPU / 2Gi. Every preset stores 100Gi.
    """
    if not accelerator_key:
        cpu, ram = CPU_ONLY_UNITS
    else:
        cpu, ram = TIER_UNITS[tier_of(accelerator_key)]
    return UnitResources(cpu=cpu, ram=ram, local_storage=LOCAL_STORAGE)
