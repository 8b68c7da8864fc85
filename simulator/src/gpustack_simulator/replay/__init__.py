"""Replay stand-ins: vendor libraries answered from a recording instead of hardware."""
