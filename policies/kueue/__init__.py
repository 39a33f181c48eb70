"""Kueue's victim order from unsaved work: the priority-boost a Workload should carry
(``boost``). Purely computational: frozen values in, frozen values out, no I/O, no clock.

May import: ``planner`` (its cost function) and ``model``.
"""
