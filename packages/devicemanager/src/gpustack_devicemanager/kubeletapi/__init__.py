"""The kubelet's gRPC APIs: device plugin v1beta1 and PodResources v1.

``*_pb2*.py`` are protoc's output from ``packages/devicemanager/proto`` (regenerate with
``just proto``; a test fails when they are stale). Import the typed doors in :mod:`.api`.
"""
