"""gpustack_devicemanager: the per-node, per-manufacturer Device Manager daemon."""
