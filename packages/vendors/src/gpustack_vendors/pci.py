"""PCI bus id spelling shared by every backend: ``dddd:bb:dd.f``, lower case.

One spelling for every source: NVML's ``00000000:3B:00.0``, AMD SMI's ``0000:3b:00.0`` and ROCm
SMI's packed BDFID (decoded by the binding's ``pci_address``, then passed through here), so a
card named by two libraries compares equal as a plain string.
"""

from __future__ import annotations

import re

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def normalize_bus_id(text: str) -> str:
    """``00000000:3B:00.0`` (NVML) and ``0000:3b:00.0`` (AMD) are the same device.

    Unrecognized text is returned as it came, so nothing is lost, only left unnormalized.
    """
    match = _BUS_ID.match(text.strip())
    if match is None:
        return text.strip()
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{bus.lower()}:{device.lower()}.{function}"
