"""Cambricon: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is ours: CNDev (:mod:`.cndev`). How the real library is opened and the backend built
from it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.cambricon.backend import CambriconBackend, CndevCallError

__all__ = ["CambriconBackend", "CndevCallError"]
