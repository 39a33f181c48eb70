"""GPU health from dcgm-exporter through Prometheus: the PromQL rules (``health_promql``) and the
watcher that reads them each pass and asks a failing node's pods to checkpoint (``health``).

May import: ``writes``, ``kube``, ``core`` and ``policies``.
"""
