"""The InstanceType walkthrough's expected data, once, for every test that replays a part of it.

Copied from ``shared/spec/instancetype-walkthrough.md`` (never produced by the code under test):
§1's objects (the A10G and CPU ResourceFlavors, the A10G ClusterQueue, the A10G InstanceType with
its status, the A10G catalog flavor, node-a10g's Node and Devices), §4's custom type, §5's aware
ClusterQueue, the ``kubectl get`` rows of each section, the catalog rows and the flavor names.
The YAML is the walkthrough's, comments and all, parsed once; a test that needs another shape (a
set, an ``apiVersion`` to create it, a part of an object) makes it where it uses it and copies
before it changes anything: these objects are shared by every test of a session.

The walkthrough predates two rules of this project, so two documented differences (and one known
gap) are spelt here, each once, for the tests to apply where they show (``docs/instancetypes.md``):

- "The shared view": SH's once-max counts cards, not shares (:data:`SHARED_READING`);
- "The entrance hash": a custom type's entrance is the FNV-1a of its own name
  (:data:`CUSTOM_ENTRANCE`), not the older hash §4 shows (:data:`RECORDED_CUSTOM_ENTRANCE`);
  :func:`current_reading` turns a recorded row into the current one for both;
- "Known gaps": the derived type's ``logicalSliced.coresPercentageOvercommit``
  (:func:`without_overcommit`).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

# -- kubectl get instancetypes (NAME and the printer columns, AGE left out, blanks collapsed) -----

TYPES_HEADER = "NAME ENTRANCE UNIT(CPU/RAM)/STORAGE ACCELERATOR(EX/SH/SL/PT) CPU PHASE"
_GENERIC = "gpustack--generic-linux-amd64 gpustack-fnv64-3b93966fd73eb9ec 1/2Gi/100Gi "
_A10G = "gpustack--nvidia-a10g-linux-amd64 gpustack-fnv64-c4680bb149644f1c 8/64Gi/100Gi "
_T4 = "gpustack--nvidia-tesla-t4-linux-amd64 gpustack-fnv64-6b371caa2da0b799 8/32Gi/100Gi "
_CUSTOM = "a10g-12c128g gpustack-fnv64-8cf5b3114035c84a 12/128Gi/200Gi "
_AWARE_A10G = (
    "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64 gpustack-fnv64-029fd9550e0c70bd 8/64Gi/100Gi "
)

SECTION_1_ROWS = [
    _GENERIC + "0/0 0/0 0/0 0/0 48/72 Active",
    _A10G + "1/1 10/10 100/100 0/0 0/0 Active",
    _T4 + "4/5 40/50 100/500 0/0 0/0 Active",
]
"""§1's table; §2's Before and re-admitted, §3's after the delete and §4's after the type's
delete print the same rows."""
SECTION_2_ROWS = [
    _GENERIC + "0/0 0/0 0/0 0/0 48/68 Active",
    _A10G + "0/0 0/0 0/0 0/0 0/0 Active",
    _T4 + "4/5 40/50 100/500 0/0 0/0 Active",
]
"""§2's After: node-a10g unmanaged."""
SECTION_3_ROWS = [
    _GENERIC + "0/0 0/0 0/0 0/0 48/72 Active",
    _A10G + "0/0 0/0 80/80 0/0 0/0 Active",
    _T4 + "4/5 40/50 100/500 0/0 0/0 Active",
]
"""§3: sliced-demo holds 20 % of the A10G."""
SECTION_4_ROWS = [_CUSTOM + "1/1 10/10 100/100 0/0 0/0 Active", *SECTION_1_ROWS]
"""§4: a10g-12c128g applied, a sibling of the derived A10G type."""
SECTION_4_RUNNING_ROWS = [
    _CUSTOM + "0/0 0/0 0/0 0/0 0/0 Active",
    _GENERIC + "0/0 0/0 0/0 0/0 48/72 Active",
    _A10G + "0/0 0/0 0/0 0/0 0/0 Active",
    _T4 + "4/5 40/50 100/500 0/0 0/0 Active",
]
"""§4: custom-demo Ready on the custom type."""
SECTION_5_ROWS = [
    "gpustack--amd-epyc-7r13-linux-amd64 gpustack-fnv64-8dde992f64a17a2f 1/2Gi/100Gi "
    "0/0 0/0 0/0 0/0 16/16 Active",
    _AWARE_A10G + "1/1 10/10 100/100 0/0 0/0 Active",
    "gpustack--amd-epyc-7r32-linux-amd64 gpustack-fnv64-d3390f10cd57a632 1/2Gi/100Gi "
    "0/0 0/0 0/0 0/0 4/4 Active",
    _GENERIC + "0/0 0/0 0/0 0/0 48/72 Active",
    "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64 "
    "gpustack-fnv64-5b59e508edc027b7 8/32Gi/100Gi 4/5 40/50 100/500 0/0 0/0 Active",
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64 gpustack-fnv64-c6aee2b7b5c4dc6b "
    "1/2Gi/100Gi 0/0 0/0 0/0 0/0 48/52 Active",
    _A10G + "1/1 10/10 100/100 0/0 0/0 Active",
    _T4 + "4/5 40/50 100/500 0/0 0/0 Active",
]
"""§5: CPU-manufacturer awareness on, the aware types beside the collapsed ones."""
SECTION_5_REPOINTED_ROWS = [
    _AWARE_A10G + "0/0 0/0 0/0 0/0 0/0 Active",
    _A10G + "0/0 0/0 0/0 0/0 0/0 Active",
]
"""§5: custom-demo re-pointed at the aware A10G type (the walkthrough prints these two rows)."""


def names(rows: list[str]) -> list[str]:
    """The NAME column of ``rows``."""
    return [row.split()[0] for row in rows]


# -- kubectl get instancetypeflavor ---------------------------------------------------------------

CATALOG_HEADER = (
    "NAME GENERALGROUP ACCELERATORGROUP ACCELERATABLE MANUFACTURER PRODUCT MEMORY CORES SLICEABLE"
)
CatalogCells = tuple[str, str, str, bool, str, str, str, str, bool | None]
"""A catalog row cell by cell, in the header's order: an absent cell is ``""`` (SLICEABLE:
``None``), which kubectl prints blank."""

SECTION_1_CATALOG: list[CatalogCells] = [
    ("gpustack--generic", "generic", "", False, "generic", "", "", "", None),
    ("gpustack--nvidia-a10g", "", "nvidia-a10g", True, "nvidia", "NVIDIA-A10G", "24Gi", "10240",
     True),
    ("gpustack--nvidia-tesla-t4", "", "nvidia-tesla-t4", True, "nvidia", "Tesla-T4", "16Gi",
     "2560", True),
]  # fmt: skip
SECTION_5_CATALOG: list[CatalogCells] = [
    ("gpustack--amd-epyc-7r13", "amd-epyc-7r13", "", False, "amd", "AMD EPYC 7R13 Processor", "",
     "", None),
    ("gpustack--amd-epyc-7r32", "amd-epyc-7r32", "", False, "amd", "AMD EPYC 7R32", "", "", None),
    ("gpustack--intel-xeon-platinum-8259cl", "intel-xeon-platinum-8259cl", "", False, "intel",
     "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "", "", None),
    ("gpustack--amd-epyc-7r32--nvidia-a10g", "amd-epyc-7r32", "nvidia-a10g", True, "nvidia",
     "NVIDIA-A10G", "24Gi", "10240", True),
    ("gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4", "intel-xeon-platinum-8259cl",
     "nvidia-tesla-t4", True, "nvidia", "Tesla-T4", "16Gi", "2560", True),
]  # fmt: skip
"""§5's catalog, in the order the walkthrough prints it (CPU pools first)."""


def catalog_rows(catalog: list[CatalogCells]) -> list[str]:
    """The rows as ``kubectl get instancetypeflavor`` prints them, blanks collapsed: a boolean
    as ``true``/``false``, an absent cell as nothing."""

    def text(cell: str | bool | None) -> str:
        if isinstance(cell, bool):
            return "true" if cell else "false"
        return cell or ""

    return [" ".join(" ".join(text(c) for c in cells).split()) for cells in catalog]


# -- kubectl get resourceflavor / clusterqueue ----------------------------------------------------

SECTION_1_FLAVORS = [
    "gpustack--amd-epyc-7r13-linux-amd64-16c",
    "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
    "gpustack--amd-epyc-7r32-linux-amd64-4c",
    "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-1d",
    "gpustack--intel-xeon-platinum-8259cl--nvidia-tesla-t4-linux-amd64-4d",
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64-48c",
    "gpustack--intel-xeon-platinum-8259cl-linux-amd64-4c",
]
"""§1's seven flavors, as kubectl lists them; §5's are the same seven."""
NODE_A10G_FLAVORS = frozenset(
    {
        "gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d",
        "gpustack--amd-epyc-7r32-linux-amd64-4c",
    }
)
"""§2: the two flavors node-a10g alone forms, retired while it is unmanaged."""
SECTION_1_QUEUE_ROWS = [  # NAME COHORT PENDING WORKLOADS
    "gpustack--generic-linux-amd64 0",
    "gpustack--nvidia-a10g-linux-amd64 0",
    "gpustack--nvidia-tesla-t4-linux-amd64 0",
]

# -- §1's objects ---------------------------------------------------------------------------------

NODE_A10G: dict[str, Any] = yaml.safe_load("""
kind: Node
metadata:
  name: node-a10g
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    gpustack.ai/managed: "true"
    general.feature.gpustack.ai/amd: "true"
    general.feature.gpustack.ai/amd-epyc-7r32: "true"
    general.feature.gpustack.ai/amd-epyc-7r32.count: "4"
    acceleratable.feature.gpustack.ai/nvidia: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g.count: "1"
    acceleratable.feature.gpustack.ai/nvidia-a10g.memory: "24Gi"
    acceleratable.feature.gpustack.ai/nvidia-a10g.cores: "10240"
    acceleratable.feature.gpustack.ai/nvidia-a10g.family: "Ampere"
    acceleratable.feature.gpustack.ai/nvidia-a10g.product: "NVIDIA-A10G"
    acceleratable.feature.gpustack.ai/nvidia-a10g.comcap: "8.6"
    acceleratable.feature.gpustack.ai/nvidia.driver-version: "580.159.03"
    acceleratable.feature.gpustack.ai/nvidia.runtime-version: "13.0"
""")
DEVICES_A10G: dict[str, Any] = yaml.safe_load("""
kind: Devices
metadata:
  name: node-a10g
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    gpustack.ai/managed: "true"
    general.feature.gpustack.ai/amd-epyc-7r32: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g: "true"
status:
  groups:
  - id: a10g
    manufacturer: nvidia
    accelerators:
    - id: GPU-e0587d2e-127c-4fb8-e2c1-6e517529f575
      index: 0
      mode: 0
      remaining: 1600000 # per-accelerator credit ledger the AdmissionCheck reads
""")
A10G_FLAVOR: dict[str, Any] = yaml.safe_load("""
kind: ResourceFlavor
metadata:
  name: gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    feature.gpustack.ai/acceleratable: "true"
    general.feature.gpustack.ai/amd-epyc-7r32: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g.count: "1" # per-node accelerator count
    acceleratable.feature.gpustack.ai/nvidia-a10g.capacity: "1" # pooled capacity (nodes × count)
    resource.gpustack.ai/type: nodes # operator-owned marker
spec:
  nodeLabels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    gpustack.ai/managed: "true"
    general.feature.gpustack.ai/amd-epyc-7r32: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g.count: "1"
""")
CPU_FLAVOR: dict[str, Any] = yaml.safe_load("""
kind: ResourceFlavor
metadata:
  name: gpustack--amd-epyc-7r13-linux-amd64-16c
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    feature.gpustack.ai/acceleratable: "false"
    general.feature.gpustack.ai/amd-epyc-7r13: "true"
    general.feature.gpustack.ai/amd-epyc-7r13.count: "16"
    general.feature.gpustack.ai/amd-epyc-7r13.capacity: "16"
    resource.gpustack.ai/type: nodes
spec:
  nodeLabels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    gpustack.ai/managed: "true"
    general.feature.gpustack.ai/amd-epyc-7r13: "true"
    general.feature.gpustack.ai/amd-epyc-7r13.count: "16"
""")
A10G_QUEUE: dict[str, Any] = yaml.safe_load("""
kind: ClusterQueue
metadata:
  name: gpustack--nvidia-a10g-linux-amd64
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    feature.gpustack.ai/acceleratable: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g: "true"
    resource.gpustack.ai/type: instancetypes
spec:
  admissionChecksStrategy:
    admissionChecks:
    - name: gpustack-node-devices
  resourceGroups:
  - coveredResources:
    - credits.gpustack.ai/nvidia
    flavors:
    - name: gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64-1d
      resources:
      - name: credits.gpustack.ai/nvidia
        nominalQuota: 1600k
""")
A10G_TYPE: dict[str, Any] = yaml.safe_load("""
kind: InstanceType
metadata:
  name: gpustack--nvidia-a10g-linux-amd64
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    feature.gpustack.ai/acceleratable: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g: "true"
    schedule.gpustack.ai/derived-from-node: "true"
    schedule.gpustack.ai/queue-entrance: gpustack-fnv64-c4680bb149644f1c
spec:
  acceleratable: true
  acceleratorGroup: nvidia-a10g
  generalGroup: generic # collapsed — awareness is off
  os: linux
  arch: amd64
  manufacturer: nvidia
  product: NVIDIA-A10G
  family: Ampere
  memory: 24Gi
  cores: "10240"
  feature:
    logicalSliced:
      maxSize: 128
      coresPercentageOvercommit: true
      memoryPercentageStep: 1
    physicalSliced:
      maxSize: 0
  unitResources: # the nvidia-a10g preset, not a fixed default
    cpu: "8"
    ram: 64Gi
    localStorage: 100Gi
status:
  phase: Active
  accelerator:
    capacity: "1"
    onceMaxRequest: "1"
    remaining: "1"
  acceleratorShared:
    capacity: "10"
    onceMaxRequest: "10"
    remaining: "10"
  acceleratorSliced:
    capacity: "100"
    onceMaxRequest: "100"
    remaining: "100"
  acceleratorPartitioned: # no accelerator here is in a partitioning mode
    capacity: "0"
    onceMaxRequest: "0"
    remaining: "0"
  entrance: gpustack-fnv64-c4680bb149644f1c
""")
"""The derived A10G type, status as recorded: SH's once-max ``10`` is in shares
(:data:`SHARED_READING`); the trimmed status has no ``cpu`` view nor ``summary``."""
CATALOG_A10G: dict[str, Any] = yaml.safe_load("""
kind: InstanceTypeFlavor
metadata:
  name: gpustack--nvidia-a10g
spec:
  acceleratable: true
  acceleratorGroup: nvidia-a10g
  manufacturer: nvidia
  product: NVIDIA-A10G
  memory: 24Gi
  cores: "10240"
  sliceable: true
""")

# -- §4's custom type, §5's aware queue -----------------------------------------------------------

CUSTOM_TYPE: dict[str, Any] = yaml.safe_load("""
kind: InstanceType
metadata:
  name: a10g-12c128g
spec:
  acceleratable: true
  acceleratorGroup: nvidia-a10g # references the gpustack--nvidia-a10g catalog flavor
  os: linux
  arch: amd64
  unitResources:
    cpu: "12"
    ram: 128Gi
    localStorage: 200Gi
""")
"""As §4 writes it: no ``apiVersion`` (``worker.gpustack.ai/v1alpha1``), which a test that
creates it adds."""
AWARE_QUEUE: dict[str, Any] = yaml.safe_load("""
kind: ClusterQueue
metadata:
  name: gpustack--amd-epyc-7r32--nvidia-a10g-linux-amd64
  labels:
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    feature.gpustack.ai/acceleratable: "true"
    acceleratable.feature.gpustack.ai/nvidia-a10g: "true"
    general.feature.gpustack.ai/amd-epyc-7r32: "true" # <-- CPU key added when aware
    resource.gpustack.ai/type: instancetypes
""")

# -- the documented differences -------------------------------------------------------------------

SHARED_READING = {"10/10": "1/10", "40/50": "4/50"}
"""The walkthrough's SH cells (once-max in shares) as the current reading spells them: once-max
in cards (docs/instancetypes.md, "The shared view"). Remaining and capacity are unchanged."""
RECORDED_CUSTOM_ENTRANCE = "gpustack-fnv64-8cf5b3114035c84a"
"""``a10g-12c128g``'s entrance as §4 prints it."""
CUSTOM_ENTRANCE = "gpustack-fnv64-d4c0e6cd72686015"
"""``a10g-12c128g``'s entrance by the current rule (docs/instancetypes.md, "The entrance hash");
the walkthrough's §4 shows an older hash no spelling of the name reproduces."""


def current_reading(row: str) -> str:
    """A walkthrough row with its SH cell read the current way and §4's entrance the current
    one; every other cell as recorded."""
    name, entrance, unit, ex, sh, *rest = row.split()
    if entrance == RECORDED_CUSTOM_ENTRANCE:
        entrance = CUSTOM_ENTRANCE
    return " ".join([name, entrance, unit, ex, SHARED_READING.get(sh, sh), *rest])


def current(rows: list[str]) -> list[str]:
    """``rows`` read the current way, sorted as a ``kubectl get`` table is."""
    return sorted(current_reading(r) for r in rows)


def without_overcommit(spec: dict[str, Any]) -> dict[str, Any]:
    """The walkthrough's type spec with ``coresPercentageOvercommit: false``: a KNOWN GAP.

    The derived type's ``feature`` is read from the cards' ``Devices`` (``derive.feature_of``),
    and this project's Device Manager never states ``logicalSliced.coresPercentageOvercommit``
    (``gpustack_core.features`` writes the slice count only), so the A10G's reads ``false``
    where the reference's Devices make it ``true`` (docs/instancetypes.md, "Known gaps").
    Everything else is as recorded.
    """
    copied = copy.deepcopy(spec)
    copied["feature"]["logicalSliced"]["coresPercentageOvercommit"] = False
    return copied
