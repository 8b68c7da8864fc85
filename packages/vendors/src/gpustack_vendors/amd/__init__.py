"""AMD: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is the official ``amdsmi``, and our ROCm SMI binding, which Hygon's extends
(:mod:`gpustack_vendors.bindings.rocm_smi`). How the real library is opened and the backend
built from it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.amd.backend import AmdBackend, AmdCallError

__all__ = ["AmdBackend", "AmdCallError"]
