"""gpustack_worker: the aggregated API server and the Instance metrics subresource."""
