"""The ``gpustack-node-devices`` AdmissionCheck: its controller and the per-card fit labels."""
