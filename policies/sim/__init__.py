"""A discrete-event what-if simulator: replay a GPU trace under several preemption policies.

Pure like the rest of ``policies``: it takes parsed trace rows, a seeded generator and an
optional clock for measuring plan latency, and returns results as data.
"""
