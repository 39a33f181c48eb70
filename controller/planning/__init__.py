"""The leader's reconcile pass: ``reconcile`` advances every stored plan (``advance``), picks the
pending preemptors in queue order (``preemptors``), plans for them and stores the plans
(``plans``); early warning on disrupted nodes (``disruption``) and the EvictionRequest API
probe (``disruption_api``) run in the same pass.

May import: ``health``, ``writes``, ``kube``, ``core`` and ``policies``.
"""
