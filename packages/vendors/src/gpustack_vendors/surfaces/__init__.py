"""Surfaces shared by several manufacturers (ROCm SMI's, :mod:`.rocm_smi`, for AMD and Hygon).

Each manufacturer's own *surface* — the library calls its backend makes, as a
``typing.Protocol`` — is ``gpustack_vendors.<vendor>.surface``, next to its binding and backend.

A backend is typed against its surface, never against ``Any``: the real binding (official
``pynvml``/``amdsmi``, or our ctypes binding) and the simulator's replay stand-in are both handed
to the same constructor, so ``mypy --strict`` checks a stand-in against the calls the backend
declares. A surface lists exactly the calls its backend makes (``tests/unit/vendors/
test_surfaces.py`` checks the replay stand-ins have each one, with the same parameters).

Where the library is ours (the ctypes bindings), the surface uses the binding's own argument
and return types (its structs). Where it is not (``pynvml``, ``amdsmi``, shipped untyped), it
states what the backend reads of each answer with a small Protocol or TypedDict, and opaque
handles as ``object``.
"""
