"""T-Head: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is ours: HGML (:mod:`.hgml`). How the real library is opened and the backend built
from it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.thead.backend import HgmlCallError, TheadBackend

__all__ = ["HgmlCallError", "TheadBackend"]
