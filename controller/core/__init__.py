"""What every part of the controller shares: its configuration (``config``), which resources count
as GPUs (``gpu_resources``), the Event reasons it writes (``events``), its Prometheus metrics
(``metrics``) and its one retry policy (``backoff``).

May import: ``policies`` and libraries. Nothing else in ``controller`` (the lowest layer).
"""
