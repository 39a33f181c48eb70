"""The kube-scheduler extender: filter, prioritize and bind verbs (``extender_verbs``) on a watched
cluster model (``extender_model``), NVLink clique scoring (``extender_cliques``) and its HTTP
server (``extender``).

May import: ``kube``, ``core`` and ``policies``. Binds through the scheduler's call only.
"""
