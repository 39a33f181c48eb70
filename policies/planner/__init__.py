"""The checkpoint-aware planner: ``preemption.plan`` drives the node-level ``search`` over eviction
``units`` and their exact ``cover``, sharing one ``candidates`` driver and one ``plan_cache``
per pass; ``cost`` prices lost work, ``bound`` is the starvation bound, ``shrink`` elastic
gangs, ``gang_joint`` joint gang plans and ``timing`` when to evict.

May import: ``placement`` and ``model``.
"""
