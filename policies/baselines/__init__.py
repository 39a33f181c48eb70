"""What the planner is measured against: kube-scheduler's DefaultPreemption (``kube_default``) and
workload-aware preemption (``kube_workload``, placing gangs with ``kube_placement``), the
GPU × time ``cost_aware`` baseline and the exact ``oracle`` for small instances.

May import: ``planner``, ``placement`` and ``model``.
"""
