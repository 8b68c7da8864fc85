"""Cluster scenarios, ``cluster-scenario/v1``: a small cluster stated once, served everywhere.

The daemons under test read an API server (Nodes, Pods, Instances, reviews), a kubelet's stats
summary, metrics.k8s.io and, through a Device Manager, a vendor library and a host ``/proc``.
A scenario states what all of those would answer in a compact authoring form, and
:func:`expand` turns it into the exact JSON each one returns. The authoring form is small so a
scenario stays reviewable; the expansion happens in one place so the stand-ins cannot disagree
with each other: a Pod's allocation annotation, its container IDs, the cgroup lines of its
processes and the kubelet entry that measures it all come from one declaration.

Everything a scenario names is checked against what it names: nodes, recordings, devices and
PIDs. An error names the file, the JSON path and the field, so a broken scenario is fixed from
the message alone. See ``docs/scenarios.md``.
"""

from __future__ import annotations

from gpustack_simulator.scenario.builders import (
    cgroup_line,
    container_ids,
)
from gpustack_simulator.scenario.expanded import (
    Expanded,
)
from gpustack_simulator.scenario.expansion import (
    expand,
)
from gpustack_simulator.scenario.loading import (
    SCENARIOS_DIR,
    find_scenario,
    is_scenario,
    load_scenario,
    parse_scenario,
    recordings_for,
)
from gpustack_simulator.scenario.rbac import (
    allowed,
    builtin_users,
)
from gpustack_simulator.scenario.schema import (
    APP_START,
    APPLY_KINDS,
    COMPONENT_LABEL,
    DEFAULT_EPOCH,
    DEVICE_MANAGER_PORT,
    INSTANCE_API_VERSION,
    MANUFACTURER_LABEL,
    MASTERS,
    MAX_FIGURE,
    MAX_OFFSET,
    MAX_PID,
    MIG_MEMORY_SLICES,
    RECORDINGS_DIR,
    SCHEMA,
    SHARES_PER_CARD,
    SYSTEM_NAMESPACE,
    ContainerDoc,
    DeviceManagerDoc,
    DeviceManagerSpec,
    Fault,
    FaultDoc,
    GrantDoc,
    InstanceDoc,
    NodeDoc,
    NonNegative,
    Percent,
    Pid,
    PodDoc,
    Quantity,
    Rule,
    Scenario,
    ScenarioDocument,
    UsagePoint,
    UserDoc,
    UserSpec,
    token_for,
)
from gpustack_simulator.scenario.summary import (
    SYSTEM_CPU_NANOCORES,
    SYSTEM_MEMORY_BYTES,
    SYSTEM_STORAGE_BYTES,
)
from gpustack_simulator.scenario.validation import (
    check,
)

__all__ = [
    "APPLY_KINDS",
    "APP_START",
    "COMPONENT_LABEL",
    "DEFAULT_EPOCH",
    "DEVICE_MANAGER_PORT",
    "INSTANCE_API_VERSION",
    "MANUFACTURER_LABEL",
    "MASTERS",
    "MAX_FIGURE",
    "MAX_OFFSET",
    "MAX_PID",
    "MIG_MEMORY_SLICES",
    "RECORDINGS_DIR",
    "SCENARIOS_DIR",
    "SCHEMA",
    "SHARES_PER_CARD",
    "SYSTEM_CPU_NANOCORES",
    "SYSTEM_MEMORY_BYTES",
    "SYSTEM_NAMESPACE",
    "SYSTEM_STORAGE_BYTES",
    "ContainerDoc",
    "DeviceManagerDoc",
    "DeviceManagerSpec",
    "Expanded",
    "Fault",
    "FaultDoc",
    "GrantDoc",
    "InstanceDoc",
    "NodeDoc",
    "NonNegative",
    "Percent",
    "Pid",
    "PodDoc",
    "Quantity",
    "Rule",
    "Scenario",
    "ScenarioDocument",
    "UsagePoint",
    "UserDoc",
    "UserSpec",
    "allowed",
    "builtin_users",
    "cgroup_line",
    "check",
    "container_ids",
    "expand",
    "find_scenario",
    "is_scenario",
    "load_scenario",
    "parse_scenario",
    "recordings_for",
    "token_for",
]
