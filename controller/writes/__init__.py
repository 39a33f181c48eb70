"""Every write the controller makes to the API server: ``actions.Actions`` (plan ConfigMaps, drain
annotations, Events, evictions, bindings, nominations), the bodies it sends (``write_bodies``),
the lanes that run writes for different plans concurrently (``write_lanes``) and leader
election (``leader``).

May import: ``kube``, ``core`` and ``policies``.
"""
