"""gpustack_core: the wire contracts and the pure calculation both daemons share.

Nothing here performs I/O. The worker's subresource and the Device Manager's exporter call the
same functions, so the two surfaces report the same figures with the same meaning.
"""

__version__ = "0.1.0"
