"""MetaX: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is ours: MXSML (:mod:`.mxsml`). How the real library is opened and the backend built
from it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.metax.backend import MetaxBackend, MxsmlCallError

__all__ = ["MetaxBackend", "MxsmlCallError"]
