"""gpustack_simulator: vendor replay, recorder and cluster stand-in."""
