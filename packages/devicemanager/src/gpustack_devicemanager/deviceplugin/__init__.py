"""The Device Manager as the node's kubelet device plugin, one gRPC server per mode.

``plugin`` answers the DevicePlugin service, ``allocate`` identifies the container and writes
the annotation, ``injection`` holds every vendor's injection facts, ``inventory`` turns
detection into the allocator's view, ``manager`` runs, registers and re-registers the servers.
"""
