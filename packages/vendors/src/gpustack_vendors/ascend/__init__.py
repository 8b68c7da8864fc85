"""Ascend: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is ours: DCMI (:mod:`.dcmi`). How the real library is opened and the backend built
from it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.ascend.backend import AscendBackend, DcmiCallError

__all__ = ["AscendBackend", "DcmiCallError"]
