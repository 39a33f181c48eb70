"""``ckpt-preempt explain``: why a pod is or is not preempting. ``explain_live`` reads the cluster
and the stored plans once; ``explain_format`` turns the answer into text.

May import: ``planning``, ``health``, ``kube``, ``core`` and ``policies``; writes nothing.
"""
