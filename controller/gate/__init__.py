"""The eviction gate: a validating webhook on pods/eviction that holds an eviction until its
victim has checkpointed or its deadline passed (``gate`` decides through
``policies.disruption.eviction_gate``, ``gate_cache`` reads pods from a watch, ``gate_server``
serves TLS).

May import: ``writes``, ``kube``, ``core`` and ``policies``.
"""
