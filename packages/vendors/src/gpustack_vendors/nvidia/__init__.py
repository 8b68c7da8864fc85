"""NVIDIA: the calls its backend makes (:mod:`.surface`), its binding, its backend.

The binding is the official ``pynvml`` (nvidia-ml-py). How the real library is opened and the
backend built from it is this manufacturer's entry in :mod:`gpustack_vendors.registry`.
"""

from gpustack_vendors.nvidia.backend import NvidiaBackend, NvmlCallError

__all__ = ["NvidiaBackend", "NvmlCallError"]
