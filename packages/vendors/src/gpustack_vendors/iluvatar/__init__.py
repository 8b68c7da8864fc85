"""Iluvatar: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is ours: IXML (:mod:`.ixml`). How the real library is opened and the backend built
from it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.iluvatar.backend import IluvatarBackend, IxmlCallError

__all__ = ["IluvatarBackend", "IxmlCallError"]
