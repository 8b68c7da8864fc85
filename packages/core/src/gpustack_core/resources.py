"""Extended-resource names an accelerator request is spelled with, per manufacturer base.

One function family spells every name the webhook, the device plugin, the Instance controller
and the metrics readers use (``nvidia.com/gpu.sliced.memory-percentage``), so a name written by
one component is the name read by the next. The suffixes are the reference operator's contract
(``shared/reference/operator-half.md``, "Resource names").
"""

from __future__ import annotations

from dataclasses import dataclass

from gpustack_core.manufacturers import resource_base, rows
from gpustack_core.modes import AllocationMode

SHARES_PER_ACCELERATOR = 10
"""``<base>.shared`` splits one card into this many shares (160,000 units each)."""
VISIBILITY_TOKENS = 512
"""The Visibility pool's size: an SSH sidecar sees its sibling's cards, never a card of its own."""


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Every extended-resource name of one manufacturer, derived from its base."""

    base: str
    """``nvidia.com/gpu``: also the Exclusive resource itself."""
    manufacturer: str

    @classmethod
    def of(cls, manufacturer: str, base: str | None = None) -> ResourceNames:
        """Names for ``manufacturer``; ``base`` overrides (``GPUSTACK_<MFR>_RESOURCE_NAME``).

        Raises ``ValueError`` naming the manufacturer when it has no default base and none is
        given.
        """
        if base is None:
            base = resource_base(manufacturer)
            if base is None:
                raise ValueError(
                    f"manufacturer {manufacturer!r} has no default resource name; "
                    "configure one explicitly"
                )
        return cls(base=base, manufacturer=manufacturer)

    @property
    def exclusive(self) -> str:
        """``<base>``: N whole cards."""
        return self.base

    @property
    def shared(self) -> str:
        """``<base>.shared``: N distinct cards, one share of each."""
        return f"{self.base}.shared"

    @property
    def sliced(self) -> str:
        """``<base>.sliced``: always 1; the slice's size is in the companion requests."""
        return f"{self.base}.sliced"

    @property
    def sliced_units(self) -> str:
        """Written by the webhook from the memory request; never set by a user."""
        return f"{self.base}.sliced.units"

    @property
    def sliced_cores_percentage(self) -> str:
        """The slice's compute cap (default 100)."""
        return f"{self.base}.sliced.cores-percentage"

    @property
    def sliced_memory_percentage(self) -> str:
        """The slice's memory as a share of the card (xor MiB)."""
        return f"{self.base}.sliced.memory-percentage"

    @property
    def sliced_memory_mib(self) -> str:
        """The slice's memory in MiB (xor percentage)."""
        return f"{self.base}.sliced.memory-mib"

    @property
    def partitioned(self) -> str:
        """``<base>.partitioned``: always 1; the profile is a companion request."""
        return f"{self.base}.partitioned"

    @property
    def partitioned_units(self) -> str:
        """Written by the webhook from the profile's memory; never set by a user."""
        return f"{self.base}.partitioned.units"

    def partitioned_profile(self, kind: str, profile: str) -> str:
        """``nvidia.com/gpu.partitioned.mig-1g.10gb`` for kind ``mig``, profile ``1g.10gb``."""
        return f"{self.base}.partitioned.{kind}-{profile}"

    @property
    def partitioned_profile_prefix(self) -> str:
        """Every ``.partitioned.<kind>-<profile>`` name starts with this."""
        return f"{self.base}.partitioned."

    @property
    def visibility(self) -> str:
        """An SSH sidecar's view of its sibling's cards (no grant of its own)."""
        return f"device.gpustack.ai/{self.manufacturer}.visibility"

    def plugin_resource(self, mode: AllocationMode) -> str:
        """The resource one device-plugin server advertises for ``mode``."""
        return {
            AllocationMode.EXCLUSIVE: self.exclusive,
            AllocationMode.SHARED: self.shared,
            AllocationMode.SLICED: self.sliced,
            AllocationMode.PARTITIONED: self.partitioned,
            AllocationMode.VISIBILITY: self.visibility,
        }[mode]


def default_names() -> tuple[ResourceNames, ...]:
    """Every manufacturer's names at its default base, in table order.

    Read from :mod:`gpustack_core.manufacturers` at the call, never kept from import, so a row
    added later (a test's fixture manufacturer) counts everywhere a caller passes no names.
    Configured bases are :func:`gpustack_core.resourceconfig.names_with`'s.
    """
    return tuple(ResourceNames.of(row.name) for row in rows())
