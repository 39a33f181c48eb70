"""Pure decision logic for checkpoint-safe preemption.

Contract: a frozen ``snapshot.Snapshot`` (with ``now`` as data) goes in, a ``model.Plan`` comes out.
Nothing here performs I/O, reads a clock, or uses unseeded randomness; import-linter and
``tests/policies/test_purity.py`` hold the line.

Subpackages, lowest first (import-linter enforces the order): ``model`` (the frozen
dataclasses, ``Snapshot`` and its document form, strict annotation and gang parsing, topology,
GPU use and health), ``lifecycle`` (the stored plan and its state machine), ``placement`` (the
placement scorer), ``disruption`` (the eviction gate's and early warning's rules), ``planner``
(the checkpoint-aware planner, from ``planner.preemption.plan``), ``baselines``
(kube-scheduler's DefaultPreemption and workload-aware preemption, cost-aware, the oracle) and
``sim`` (the trace replay).

Errors are values where a caller must decide: "no plan" is a ``Plan`` with a reason, malformed
annotations are ``annotations.AnnotationProblem`` values. Exceptions are raised only for inputs
that cannot be used at all, each a ``ValueError`` subclass naming the field:
``gangs.GangError``, ``topology.TopologyError``, ``snapshot_io.SnapshotError``,
``sim.trace.TraceError``; ``oracle.OracleLimit`` (a ``RuntimeError``) when an instance is too
large to search exhaustively.
"""
