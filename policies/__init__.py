"""Pure decision logic for checkpoint-safe preemption.

Contract: a frozen ``snapshot.Snapshot`` (with ``now`` as data) goes in, a ``model.Plan`` comes out.
Nothing here performs I/O, reads a clock, or uses unseeded randomness; import-linter and
``tests/policies/test_purity.py`` hold the line.

Modules: ``model`` (dataclasses) and ``snapshot`` (the cluster at one instant, with its indexes),
``annotations`` and ``gangs`` (strict parsing of pod metadata, and ``annotations.build_pod``, the
one builder from a pod's metadata to ``model.Pod``), ``topology`` (hwprobe's NVLink domains),
``cost`` (lost work and eligibility), ``units`` (eviction units) and ``cover`` (the PDB rule for
gangs and the exact within-node search), ``preemption`` (the checkpoint-aware planner) and
``search`` (its node-level search), ``kube_default`` (kube-scheduler's DefaultPreemption),
``oracle`` (exact optimum for small instances), ``snapshot_io`` (documents ↔ model),
``lifecycle`` (the plan's state machine), ``plan_record`` (the stored plan and its formats) and
``sim`` (the trace replay).

Errors are values where a caller must decide: "no plan" is a ``Plan`` with a reason, malformed
annotations are ``annotations.AnnotationProblem`` values. Exceptions are raised only for inputs
that cannot be used at all, each a ``ValueError`` subclass naming the field:
``gangs.GangError``, ``topology.TopologyError``, ``snapshot_io.SnapshotError``,
``sim.trace.TraceError``; ``oracle.OracleLimit`` (a ``RuntimeError``) when an instance is too
large to search exhaustively.
"""
