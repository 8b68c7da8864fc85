"""gpustack_vendors: one backend per manufacturer, each handed its binding module."""
