"""Hygon: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is ours: Hygon's ROCm SMI fork (:mod:`.rocm_smi`, over the shared ROCm SMI binding)
and ``libhydmi_mig`` (:mod:`.hydmi`). How the real library is opened and the backend built from
it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.hygon.backend import HygonBackend, HygonCallError

__all__ = ["HygonBackend", "HygonCallError"]
