"""Properties of the checkpoint-aware planner on random small clusters, and of the parsers.

Every check recomputes what it needs from the Snapshot itself, never from planner internals.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.baselines import kube_default, oracle
from ckpt_preempt.policies.model import annotations as ann
from ckpt_preempt.policies.model.annotations import Limits, parse_pod_fields
from ckpt_preempt.policies.model.gangs import CONVENTIONS
from ckpt_preempt.policies.model.model import (
    CheckpointMode,
    Node,
    NvlinkNeed,
    Plan,
    Pod,
    PodDisruptionBudget,
    PodHold,
    RejectReason,
    Resources,
    UnknownCheckpoint,
)
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.model.topology import NodeTopology
from ckpt_preempt.policies.planner import cost, preemption

NOW = 1_796_202_000.0
EXAMPLES = settings(
    max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
PRIORITIES = (0, 10, 20, 30)
BITS = st.integers(0, 2**48)
UNKNOWN = (UnknownCheckpoint(), UnknownCheckpoint(kind="cluster-median"),
           UnknownCheckpoint(kind="assume", seconds=600.0))
PENALTY = preemption.PlannerConfig().fairness_penalty_seconds
EXCLUSIONS = [RejectReason.NODE_SELECTOR, RejectReason.NODE_TAINT, RejectReason.NODE_HELD]


# --- random clusters -----------------------------------------------------------------------------

@st.composite
def topologies(draw, gpus: int) -> NodeTopology | None:
    kind = draw(st.sampled_from(["unknown", "one", "islands"]))
    if kind == "unknown":
        return None
    if kind == "one" or gpus == 1:
        return NodeTopology(gpu_count=gpus, domains=(frozenset(range(gpus)),))
    cuts = sorted(draw(st.sets(st.integers(1, gpus - 1), min_size=1, max_size=3)))
    bounds = [0, *cuts, gpus]
    return NodeTopology(
        gpu_count=gpus,
        domains=tuple(frozenset(range(a, b)) for a, b in itertools.pairwise(bounds)),
    )


class _Bits:
    """Decode many small choices from one drawn integer: one draw per pod keeps generation fast,
    and shrinking the integer to 0 shrinks every choice to its first option."""

    def __init__(self, value: int) -> None:
        self.value = value

    def pick(self, options):
        self.value, i = divmod(self.value, len(options))
        return options[i]

    def below(self, n: int) -> int:
        self.value, i = divmod(self.value, n)
        return i


def running_pod(bits: int, uid: str, node: str, gpus: int, gang: str | None,
                priority: int, ties: bool = False) -> Pod:
    b = _Bits(bits)
    age = b.pick([3600.0, 30.0, 300.0, 1800.0, 4 * 3600.0])
    # few, whole-second values make cost ties common and exact (0: checkpointed just now;
    # age + 300: a checkpoint older than the start, which must not count)
    ckpt = b.pick([0.0, 0.0, 60.0] if ties else [None, 0.0, 60.0, 600.0, 1800.0, age + 300.0])
    return Pod(
        uid=uid, name=uid, priority=priority,
        requests=Resources(cpu_milli=b.pick([0, 500, 2000]), memory_mib=1, gpus=gpus),
        node=node,
        start_time=NOW - age,
        checkpoint=b.pick(list(CheckpointMode)),
        last_checkpoint=None if ckpt is None else NOW - ckpt,
        checkpoint_seconds=b.pick([None, 10.0, 120.0, 900.0]),
        min_runtime=b.pick([0.0, 0.0, 0.0, 600.0]),
        preemptible=b.pick([True, True, True, False]),
        gang=gang,
        terminating=b.below(20) == 19,
        labels=b.pick([{}, {}, {"app": "a"}, {"app": "b"}]),
        checkpoint_malformed=ckpt is None and b.below(4) == 3,
        held=b.pick([None] * 8 + list(PodHold)),
    )


@dataclass(frozen=True)
class Case:
    snap: Snapshot
    preemptor: tuple[Pod, ...]

    @property
    def priority(self) -> int:
        return min(p.priority for p in self.preemptor)


@st.composite
def cases(draw, max_pods: int = 8, sizes=(1, 1, 2, 3), ties: bool = False) -> Case:
    """``ties``: one or two full nodes of small pods that mostly lost nothing, so equal-cost
    covers compete on PDB violations and victim counts."""
    nodes, pods = [], []
    pod_priorities = PRIORITIES[:1] if ties else PRIORITIES
    gangs = [f"default/seed/g{i}" for i in range(2)]
    gang_priority = {g: draw(st.sampled_from(PRIORITIES[:3])) for g in gangs}
    for i in range(draw(st.integers(1, 2 if ties else 6))):
        gpus = draw(st.integers(2, 4) if ties else st.integers(1, 8))
        cpu = draw(st.sampled_from([4000, 96_000]))
        name = f"n{i}"
        nodes.append(Node(
            name=name, allocatable=Resources(cpu_milli=cpu, memory_mib=1 << 20, gpus=gpus),
            topology=draw(topologies(gpus)), unschedulable=draw(st.integers(0, 9)) == 0,
        ))
        left, cpu_left = gpus, cpu
        while left and len(pods) < max_pods and (ties or draw(st.integers(0, 3))):
            g = draw(st.integers(1, min(left, 2) if ties else left))
            gang = draw(st.sampled_from([None, None, *gangs]))
            prio = gang_priority[gang] if gang else draw(st.sampled_from(pod_priorities))
            pod = running_pod(draw(BITS), f"p{len(pods)}", name, g, gang, prio, ties)
            if pod.requests.cpu_milli > cpu_left:
                continue
            left -= g
            cpu_left -= pod.requests.cpu_milli
            pods.append(pod)
    size = draw(st.sampled_from(sizes))
    prio = draw(st.sampled_from(PRIORITIES[1:]))
    gpus = draw(st.integers(1, 3 if ties else 8))
    nvlink = draw(st.sampled_from(list(NvlinkNeed)))
    key = "default/seed/new" if size > 1 else None
    preemptor = tuple(
        Pod(uid=f"new-{k}", name=f"new-{k}", priority=prio, gang=key,
            requests=Resources(cpu_milli=draw(st.sampled_from([0, 1000])), memory_mib=1,
                               gpus=gpus),
            nvlink=nvlink)
        for k in range(size)
    )
    pdbs = tuple(
        PodDisruptionBudget(name=f"pdb-{app}", namespace="default", match_labels={"app": app},
                            disruptions_allowed=draw(st.integers(0, 3)))
        for app in ("a", "b") if draw(st.booleans())
    )
    b = _Bits(draw(st.integers(0, 2**64)))  # one draw for the rest keeps generation fast
    recent = {w: b.pick([0, 0, 0, 1, 2, 3]) for w in sorted({p.workload for p in pods})}
    nodes = [replace(n, excluded=b.pick([None] * 6 + EXCLUSIONS)) for n in nodes]
    return Case(snap=Snapshot(now=NOW, nodes=tuple(nodes), pods=tuple(pods), pdbs=pdbs,
                              recent_preemptions={w: n for w, n in recent.items() if n},
                              unknown_checkpoint=b.pick(UNKNOWN)),
                preemptor=preemptor)


def _plan(case: Case) -> Plan:
    return preemption.plan(case.snap, case.preemptor)


def _victim_pods(case: Case, plan: Plan) -> list[Pod]:
    return [case.snap.pod_by_uid[v.uid] for v in plan.victims]


# --- the planner's invariants ------------------------------------------------------------------
# One generated case feeds every check (generation dominates the run time); each check is a
# named function, so a failure says which property broke.

def _check_priority(case: Case, plan: Plan) -> None:
    """No victim has priority equal to or above the preemptor's (every member's)."""
    for v in _victim_pods(case, plan):
        assert v.priority < case.priority
        assert all(v.priority < p.priority for p in case.preemptor)


def _check_gangs_whole(case: Case, plan: Plan) -> None:
    """A gang is evicted whole (every bound member) or not at all; nobody twice."""
    victims = {v.uid for v in plan.victims}
    assert len(victims) == len(plan.victims)
    for v in _victim_pods(case, plan):
        if v.gang is not None:
            bound = {p.uid for p in case.snap.pods if p.gang == v.gang and p.node is not None}
            assert bound <= victims
    for group in plan.victim_groups:
        assert {case.snap.pod_by_uid[v.uid].gang for v in group.victims} == {group.gang}


def _needs_gpus(pod: Pod, node: Node, free: int) -> bool:
    if pod.nvlink is not NvlinkNeed.REQUIRED or pod.gpus <= 1:
        return free >= pod.gpus
    return node.topology is not None and node.topology.nvlink_fits(free, pod.gpus)


def _check_gangs_fit_their_pdbs(case: Case, plan: Plan) -> None:
    """No PDB covering a victim gang member allows fewer disruptions than the plan's victims
    it covers: the Eviction API could refuse part of the gang."""
    victims = _victim_pods(case, plan)
    for b in case.snap.pdbs:
        covered = [v for v in victims if b.covers(v)]
        if any(v.gang for v in covered):
            assert len(covered) <= b.disruptions_allowed
    assert preemption.gang_pdb_problem(case.snap, [v.uid for v in plan.victims]) is None


def _check_fits(case: Case, plan: Plan) -> None:
    """Every preemptor member fits on its node once the victims are gone (NVLink included)."""
    if not plan.feasible:
        assert not plan.placements and not plan.victims
        return
    s = case.snap
    gone = {v.uid for v in plan.victims}
    free = {
        n.name: n.allocatable - sum(
            (p.requests for p in s.pods if p.node == n.name and p.uid not in gone), Resources()
        )
        for n in s.nodes
    }
    assert sorted(p.pod_uid for p in plan.placements) == sorted(p.uid for p in case.preemptor)
    by_uid = {p.uid: p for p in case.preemptor}
    for placement in plan.placements:
        pod, node = by_uid[placement.pod_uid], s.node_by_name[placement.node]
        f = free[node.name]
        assert not node.unschedulable and node.excluded is None
        assert pod.requests.cpu_milli <= f.cpu_milli and pod.requests.memory_mib <= f.memory_mib
        assert _needs_gpus(pod, node, f.gpus)
        free[node.name] = f - pod.requests
    for v in plan.victims:
        assert s.pod_by_uid[v.uid].node == v.node


def _check_protected(case: Case, plan: Plan) -> None:
    """Opted-out, within-min-runtime, terminating and held pods are never victims."""
    for v in _victim_pods(case, plan):
        assert v.preemptible
        assert not v.terminating and v.held is None
        assert NOW - v.start_time >= v.min_runtime


def _check_costs(case: Case, plan: Plan) -> None:
    """Each victim costs what the cost model says; groups, penalties and the deadline add up."""
    cfg = preemption.PlannerConfig()
    s = case.snap
    for group in plan.victim_groups:
        total = penalty = 0.0
        for v in group.victims:
            pod = s.pod_by_uid[v.uid]
            lost, drained = cost.lost_gpu_seconds(
                pod, NOW, drain=cfg.drain, max_checkpoint_seconds=cfg.max_checkpoint_seconds,
                unknown_age=s.unknown_checkpoint_age,
            )
            assert v.lost_gpu_seconds == pytest.approx(lost) and v.drain is drained
            assert lost <= pod.gpus * (NOW - pod.start_time) + 1e-6
            assert v.workload == pod.workload
            total += lost
            penalty += pod.gpus * PENALTY * s.recent_preemptions.get(pod.workload, 0)
        assert group.lost_gpu_seconds == pytest.approx(total)
        assert group.penalty_gpu_seconds == pytest.approx(penalty)
    if plan.feasible and plan.victims:
        drains = [v.checkpoint_seconds for v in plan.victims if v.drain]
        assert plan.drain_deadline == NOW + max(drains, default=0.0)


CHECKS = (_check_priority, _check_gangs_whole, _check_gangs_fit_their_pdbs, _check_fits,
          _check_protected, _check_costs)


@EXAMPLES
@given(cases())
def test_planner_invariants(case):
    plan = _plan(case)
    for check in CHECKS:
        check(case, plan)
    assert _plan(case) == plan  # deterministic: no hidden state, no randomness


@EXAMPLES
@given(cases(), st.data())
def test_restricted_snapshot_is_the_same_as_one_built_from_scratch(case, data):
    """What ``Snapshot.restricted`` patches into the parent's index equals a fresh index, and
    both planners plan on it exactly as on a snapshot built with those flags set."""
    snap = case.snap
    closed = data.draw(st.dictionaries(
        st.sampled_from([n.name for n in snap.nodes] + ["gone"]), st.sampled_from(EXCLUSIONS)))
    held = data.draw(st.dictionaries(
        st.sampled_from([p.uid for p in snap.pods] + ["gone"]), st.sampled_from(list(PodHold))))
    snap.pods_on_node  # noqa: B018 - the parent is indexed first, as in a controller cycle
    got = snap.restricted(closed=closed, held=held)
    want = Snapshot(
        now=snap.now, pdbs=snap.pdbs, recent_preemptions=snap.recent_preemptions,
        unknown_checkpoint=snap.unknown_checkpoint,
        nodes=tuple(replace(n, excluded=closed[n.name])
                    if n.name in closed and n.closed is None else n for n in snap.nodes),
        pods=tuple(replace(p, held=held[p.uid])
                   if p.uid in held and not p.terminating and p.held is None else p
                   for p in snap.pods),
    )
    assert got == want
    assert got.pods_on_node == want.pods_on_node
    assert got.free_by_node == want.free_by_node and got.gangs == want.gangs
    assert got.largest_allocatable == want.largest_allocatable
    assert got.free_gpus_index == want.free_gpus_index
    assert got.pod_by_uid == want.pod_by_uid and got.node_by_name == want.node_by_name
    assert got.unknown_checkpoint_age == want.unknown_checkpoint_age
    assert got.pdbs_by_namespace == want.pdbs_by_namespace
    for key in got.gangs:
        assert got.gang_pods(key) == want.gang_pods(key)
    assert preemption.plan(got, case.preemptor) == preemption.plan(want, case.preemptor)
    assert kube_default.plan(got, case.preemptor) == kube_default.plan(want, case.preemptor)
    assert snap.restricted() == snap and snap.restricted().pods_on_node == snap.pods_on_node


@EXAMPLES
@given(cases())
def test_kube_default_invariants(case):
    """The baseline obeys priority and fit too; it is only blind to checkpoints and gangs."""
    plain = Case(snap=case.snap, preemptor=tuple(
        replace(p, nvlink=NvlinkNeed.NONE) for p in case.preemptor))  # it ignores NVLink
    plan = kube_default.plan(plain.snap, plain.preemptor)
    _check_priority(plain, plan)
    _check_fits(plain, plan)
    for v in _victim_pods(plain, plan):
        assert not v.terminating and v.held is None
    for placement in plan.placements:
        assert plain.snap.node_by_name[placement.node].closed is None


@EXAMPLES
@given(cases(max_pods=7))
def test_planner_never_beats_the_oracle(case):
    plan = _plan(case)
    try:
        best = oracle.solve(case.snap, case.preemptor, max_sets=4000)
    except oracle.OracleLimit:
        assume(False)
    if plan.feasible:
        assert best.feasible  # the oracle is exhaustive: no plan it missed
        assert plan.lost_gpu_seconds + plan.penalty_gpu_seconds >= best.cost - 1e-6
    if best.feasible:  # the oracle obeys the gang PDB rule too
        victims = [p.uid for p in case.snap.pods
                   if p.node is not None and (p.gang or p.uid) in best.unit_ids]
        assert preemption.gang_pdb_problem(case.snap, victims) is None
    if len(case.preemptor) == 1:  # <= 100 nodes: every node is a candidate
        assert plan.feasible == best.feasible


def _violations(victims: list[Pod], pdbs) -> int:
    """Victims beyond each budget (each generated pod is covered by at most one PDB)."""
    return sum(max(0, sum(b.covers(p) for p in victims) - b.disruptions_allowed) for b in pdbs)


def _brute_force(case: Case) -> tuple[float, int, int] | None:
    """Least (lost work + fairness penalty, PDB violations, victims) over every set of whole
    eligible units that no PDB covering a gang in it would refuse in part."""
    s, pod = case.snap, case.preemptor[0]
    groups: dict[str, list[Pod]] = {}
    for p in s.pods:
        if p.node is not None:
            groups.setdefault(p.gang or p.uid, []).append(p)
    eligible = [g for g in groups.values()
                if all(cost.ineligibility(p, pod.priority, NOW) is None for p in g)]
    best = None
    for mask in range(1 << len(eligible)):
        victims = [p for i, g in enumerate(eligible) if mask >> i & 1 for p in g]
        if any(any(v.gang for v in covered) and len(covered) > b.disruptions_allowed
               for b in s.pdbs for covered in [[v for v in victims if b.covers(v)]]):
            continue
        gone = {p.uid for p in victims}
        fits = False
        for n in s.nodes:
            if n.closed is not None:
                continue
            f = n.allocatable - sum(
                (p.requests for p in s.pods if p.node == n.name and p.uid not in gone),
                Resources(),
            )
            if pod.requests.cpu_milli <= f.cpu_milli and pod.requests.memory_mib <= f.memory_mib \
                    and _needs_gpus(pod, n, f.gpus):
                fits = True
                break
        if not fits:
            continue
        lost = sum(cost.lost_gpu_seconds(p, NOW, drain=True, max_checkpoint_seconds=600.0,
                                         unknown_age=s.unknown_checkpoint_age)[0]
                   + p.gpus * PENALTY * s.recent_preemptions.get(p.workload, 0)
                   for p in victims)
        key = (lost, _violations(victims, s.pdbs), len(victims))
        best = key if best is None or key < best else best
    return best


@EXAMPLES
@given(st.booleans().flatmap(lambda ties: cases(max_pods=7, sizes=(1,), ties=ties)))
def test_single_pod_plan_is_the_least_lost_work_then_pdb_then_victims(case):
    """For one pod on <= 100 nodes every node is evaluated and each search is exact."""
    plan = _plan(case)
    best = _brute_force(case)
    assert plan.feasible == (best is not None)
    if best is not None:
        got = (plan.lost_gpu_seconds + plan.penalty_gpu_seconds, plan.pdb_violations,
               len(plan.victims))
        assert got == pytest.approx(best)


# --- malformed annotations never lower a pod's cost ------------------------------------------

GARBAGE = st.one_of(
    st.text(max_size=12),
    st.sampled_from([
        "", " ", "\n", "on_request", "ON-REQUEST", "periodic!", "-1", "0", "0s", "1e3", "nan",
        "inf", "-inf", "1h-5m", "٣٠", "true ", "yes", "no", "1", "2026-12-02",
        "2026-12-02T09:00:00",
        "2099-01-01T00:00:00Z", "2026-12-02T09:05:00Z", "9" * 400, "-job", "job/", "0", "08",
    ]),
)


def _rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).isoformat().replace("+00:00", "Z")


@st.composite
def valid_annotations(draw) -> dict[str, str]:
    out: dict[str, str] = {}
    if draw(st.booleans()):
        out[ann.CHECKPOINT] = draw(st.sampled_from([m.value for m in CheckpointMode]))
    if draw(st.booleans()):
        out[ann.LAST_CHECKPOINT] = _rfc3339(NOW - draw(st.integers(-60, 10 * 3600)))
    if draw(st.booleans()):
        out[ann.CHECKPOINT_SECONDS] = draw(st.sampled_from(["30", "90s", "5m", "1h", "0.5"]))
    if draw(st.booleans()):
        out[ann.MIN_RUNTIME] = draw(st.sampled_from(["0", "10m", "2h", "30s"]))
    if draw(st.booleans()):
        out[ann.PREEMPTIBLE] = draw(st.sampled_from(["true", "false", "True"]))
    if draw(st.booleans()):
        out[ann.NVLINK] = draw(st.sampled_from([n.value for n in NvlinkNeed]))
    return out


KEYS = [ann.CHECKPOINT, ann.LAST_CHECKPOINT, ann.CHECKPOINT_SECONDS, ann.MIN_RUNTIME,
        ann.PREEMPTIBLE, ann.NVLINK] + [c.name_key for c in CONVENTIONS] + [
        c.total_key for c in CONVENTIONS if c.total_key]
LIMITS = Limits(max_checkpoint_seconds=600.0, max_min_runtime=3600.0)


def _pod(fields, *, age: float, gpus: int) -> Pod:
    return Pod(
        uid="u", name="u", priority=0, requests=Resources(gpus=gpus), node="n",
        start_time=NOW - age, checkpoint=fields.checkpoint,
        last_checkpoint=fields.last_checkpoint, checkpoint_seconds=fields.checkpoint_seconds,
        min_runtime=fields.min_runtime, preemptible=fields.preemptible, gang=fields.gang,
        checkpoint_malformed=fields.checkpoint_malformed,
    )


def _parse(meta: dict[str, str], limits: Limits = LIMITS):
    # gang keys go in as annotations: the label-or-annotation choice is covered in test_gangs
    return parse_pod_fields(
        namespace="ns", labels={}, annotations=meta, now=NOW, limits=limits
    )


@EXAMPLES
@given(
    base=valid_annotations(),
    key=st.sampled_from(KEYS),
    garbage=GARBAGE,
    age=st.sampled_from([60.0, 3600.0, 8 * 3600.0]),
    gpus=st.integers(1, 8),
)
def test_malformed_annotations_never_lower_a_pods_cost(base, key, garbage, age, gpus):
    if key in (c.total_key for c in CONVENTIONS):
        conv = next(c for c in CONVENTIONS if c.total_key == key)
        base = {**base, conv.name_key: "job"}  # a total only counts next to its name
    bad = _parse({**base, key: garbage})
    reported = [p for p in bad.problems if p.key == key]
    assume(reported)  # the garbage happened to be a valid value: nothing to compare
    absent = _parse({k: v for k, v in base.items() if k != key})

    pod_bad, pod_absent = _pod(bad, age=age, gpus=gpus), _pod(absent, age=age, gpus=gpus)
    for unknown_age in (None, 60.0, 1800.0):  # every unknown-checkpoint policy
        for drain in (False, True):
            lost_bad, lost_absent = (cost.lost_gpu_seconds(
                pod, NOW, drain=drain, max_checkpoint_seconds=LIMITS.max_checkpoint_seconds,
                unknown_age=unknown_age)[0] for pod in (pod_bad, pod_absent))
            assert lost_bad >= lost_absent - 1e-9
    # ...and it acts as if absent: no protection from it, no other field changed
    assert (bad.preemptible, bad.min_runtime, bad.nvlink, bad.gang, bad.gang_total) == (
        absent.preemptible, absent.min_runtime, absent.nvlink, absent.gang, absent.gang_total)
    if key in (ann.CHECKPOINT, ann.LAST_CHECKPOINT, ann.CHECKPOINT_SECONDS):
        # except that a bad checkpoint drops all checkpoint information: charged from start
        assert (bad.checkpoint, bad.last_checkpoint, bad.checkpoint_seconds) == (
            CheckpointMode.NONE, None, None)
        assert bad.checkpoint_malformed
        assert cost.work_since_checkpoint(pod_bad, NOW, 60.0) == pytest.approx(age)
    else:
        assert (bad.checkpoint, bad.last_checkpoint, bad.checkpoint_seconds) == (
            absent.checkpoint, absent.last_checkpoint, absent.checkpoint_seconds)


@EXAMPLES
@given(base=valid_annotations(), age=st.sampled_from([60.0, 3600.0]), gpus=st.integers(1, 8))
def test_valid_annotations_parse_without_problems_and_cost_at_most_the_full_loss(base, age, gpus):
    fields = _parse(base, replace(LIMITS, opt_out_namespaces=frozenset({"ns"})))
    assert fields.problems == ()
    pod = _pod(fields, age=age, gpus=gpus)
    for drain in (False, True):
        lost, _ = cost.lost_gpu_seconds(
            pod, NOW, drain=drain, max_checkpoint_seconds=LIMITS.max_checkpoint_seconds)
        assert 0.0 <= lost <= gpus * age + 1e-9
    no_ckpt = replace(pod, checkpoint=CheckpointMode.NONE, last_checkpoint=None,
                      checkpoint_seconds=None)
    assert cost.work_since_checkpoint(pod, NOW) <= cost.work_since_checkpoint(no_ckpt, NOW)
