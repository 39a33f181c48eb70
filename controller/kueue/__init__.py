"""``ckpt-preempt kueue-boost``: keeps each Kueue Workload's ``kueue.x-k8s.io/priority-boost``
from its pods' unsaved work (the rule: ``policies.kueue.boost``), so that Kueue, with its
``PriorityBoost`` gate on, preempts the Workload that loses least first among equal priorities.

``workloads``: discovery of the Workload CRD, the trimmed records and their informers;
``booster``: one pass (pods to Workloads within a namespace, the rule, the writes through
``controller.writes.actions.Actions.set_priority_boost``) and the loop that runs it.

May import: ``writes``, ``kube``, ``core`` and ``policies``.
"""
