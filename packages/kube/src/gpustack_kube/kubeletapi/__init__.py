"""The kubelet's gRPC APIs: device plugin v1beta1 and PodResources v1.

``*_pb2*.py`` are protoc's output from ``packages/kube/proto`` (regenerate with
``just proto``; a test fails when they are stale). Import the typed doors in :mod:`.api`.
They live in the client package, not the Device Manager's, because two sides speak them: the
Device Manager's plugin servers and the simulator's fake kubelet (which may not import a
daemon).
"""
