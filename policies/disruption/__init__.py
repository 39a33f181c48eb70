"""Checkpoints before other people's evictions: the eviction gate's decision (``eviction_gate``)
and the node signals that start early warning (``disruption_signals``).

May import: ``lifecycle`` and ``model``.
"""
