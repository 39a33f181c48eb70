"""The grace webhook: a mutating admission webhook on pod CREATE that raises
``spec.terminationGracePeriodSeconds`` to the pod's declared checkpoint time plus a margin, so
that a preemption which deletes the pod with its own grace period (Kueue, Volcano, KAI,
kube-scheduler) leaves time for the checkpoint on SIGTERM. ``grace`` answers the reviews through
``policies.disruption.grace_period``; ``app/cmd_grace.py`` serves them with the eviction gate's
HTTPS server (``controller/gate/gate_server.py``, at ``/mutate``).

It reads and writes nothing on the API server: no client, no RBAC. May import: ``core`` and
``policies`` (no Kubernetes client, no ``kube``, no ``writes``: pyproject.toml's contracts).
"""
