"""The data the decisions work on: the frozen dataclasses (``model``), a cluster at one instant
with its indexes (``snapshot``) and its document form (``snapshot_io``), strict parsing of pod
metadata (``annotations``, ``gangs``, ``native_gangs``), NVLink topology (``topology``,
``cliques``), GPU use (``gpu_use``) and GPU health (``health``).

May import: nothing else in ``policies`` (the lowest layer).
"""
