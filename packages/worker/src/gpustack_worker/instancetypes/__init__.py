"""The InstanceType chain over Kueue, derived from the nodes (issue #30).

``controller``: the leader-elected controller; ``desired``, ``observed`` and ``status``: the
pure decisions it makes, each testable alone.
"""
