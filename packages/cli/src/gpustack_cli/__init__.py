"""The ``gpustack-operator`` console script."""
