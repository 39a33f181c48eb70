"""The deployed service: watch the cluster, plan preemptions with ``policies``, drain and evict.

Subpackages, lowest first (import-linter enforces the order; docs/architecture.md draws it):
``core`` (configuration, GPU resource names, Event reasons, metrics, backoff), ``kube`` (the
watch cache and cluster model; reads only), ``writes`` (every API write, through
``writes.actions.Actions``), ``health``, ``gate``, ``extender`` and ``agent`` (one process or
concern each), ``planning`` (the reconcile pass), ``explain`` and ``app`` (the command line).
"""
