"""The planner's caches carried from one cycle to the next (``PlanCache.carried``).

The next cycle's snapshot differs by time and by random changes: pods checkpointing, going,
arriving or changing priority, nodes cordoned, workloads preempted more or less often
(recently, and within the bound's window, which report parity's floor reads), PDBs
changing, the clock moving (sometimes backwards). The property plans the next cycle's queue
with the carried cache and without, and requires identical plans; the unit tests pin down
each reason to drop an entry.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import CheckpointMode, PodDisruptionBudget
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.planner import preemption
from ckpt_preempt.policies.planner.plan_cache import PlanCache, changed_nodes
from tests.policies import builders
from tests.policies.builders import gpu_node, make_pod, pending, workload_of
from tests.policies.test_plan_cache import _plan_cycle, cycles


def _same(a: list, b: list) -> bool:
    """Equal plans. A carried bound may be lower than a fresh one (time passed), so the carried
    planner may evaluate more nodes on its way to the same choice, and a node it rejects as
    costlier may say so with another figure."""
    def choice(p):
        return replace(p, nodes_evaluated=0, rejections=tuple(sorted(
            (r.node, r.reason) for r in p.rejections)))
    return [choice(p) for p in a] == [choice(p) for p in b]


CARRY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def next_cycles(draw, snap: Snapshot) -> Snapshot:
    """``snap`` some time later, with random changes."""
    now = snap.now + draw(st.sampled_from([0.0, 1.0, 300.0, 900.0, 7200.0, -60.0]))
    pods = []
    for p in snap.pods:
        what = draw(st.sampled_from(["keep"] * 6 + ["checkpoint", "gone", "priority"]))
        if p.node is None or what == "keep":
            pods.append(p)
        elif what == "checkpoint":
            pods.append(replace(p, last_checkpoint=min(now, snap.now)))
        elif what == "priority":
            pods.append(replace(p, priority=p.priority + 1))
    if draw(st.booleans()) and snap.nodes:  # a new pod on some node
        node = draw(st.sampled_from(snap.nodes))
        pods.append(make_pod("late", node=node.name, gpus=1, age=draw(st.sampled_from([
            10.0, 3600.0])), priority=draw(st.sampled_from([0, 10]))))
    nodes = [replace(n, unschedulable=not n.unschedulable)
             if draw(st.integers(0, 9)) == 0 else n for n in snap.nodes]
    if draw(st.integers(0, 3)) == 0:  # a node comes, somewhere in the list
        nodes.insert(draw(st.integers(0, len(nodes))), gpu_node("n-late", 4))
    if len(nodes) > 1 and draw(st.integers(0, 3)) == 0:  # a node goes, with its pods
        gone = nodes.pop(draw(st.integers(0, len(nodes) - 1))).name
        pods = [p for p in pods if p.node != gone]
    nodes = tuple(nodes)
    recent = {w: n + draw(st.sampled_from([-1, 0, 0, 1])) for w, n in
              snap.recent_preemptions.items()}
    recent = {w: n for w, n in recent.items() if n > 0}
    if draw(st.booleans()) and pods:
        recent[draw(st.sampled_from(pods)).workload] = 1
    history = {w: n + draw(st.sampled_from([-1, 0, 0, 1])) for w, n in
               snap.preemption_history.items()}
    history = {w: n for w, n in history.items() if n > 0}
    if draw(st.booleans()) and pods:
        history[draw(st.sampled_from(pods)).workload] = draw(st.integers(1, 2))
    pdbs = snap.pdbs
    if draw(st.integers(0, 3)) == 0:
        pdbs = (*pdbs, PodDisruptionBudget(name="late", namespace="default",
                                           match_labels={"app": "a"}, disruptions_allowed=0))
    elif pdbs and draw(st.integers(0, 3)) == 0:
        pdbs = (replace(pdbs[0], disruptions_allowed=1 - min(1, pdbs[0].disruptions_allowed)),
                *pdbs[1:])
    return Snapshot(now=now, nodes=nodes, pods=tuple(pods), pdbs=pdbs,
                    recent_preemptions=recent, preemption_history=history,
                    unknown_checkpoint=snap.unknown_checkpoint)


@CARRY
@given(cycle=cycles(), data=st.data())
def test_a_carried_cache_plans_the_next_cycle_as_a_fresh_one(cycle, data):
    snap, queue, cfg, extra = cycle
    cache = PlanCache(snap)
    if data.draw(st.booleans()):  # worked ahead while no preemptor was due
        preemption.warm(cache, cfg, data.draw(st.integers(1, 9)))
    assert _plan_cycle(snap, queue, cfg, extra, cache) == _plan_cycle(
        snap, queue, cfg, extra, None)
    later = data.draw(next_cycles(snap))
    carried = PlanCache.carried(cache, later, changed_nodes(snap, later))
    if data.draw(st.booleans()):
        preemption.warm(carried, cfg, data.draw(st.integers(1, 9)))
    assert _same(_plan_cycle(later, queue, cfg, extra, carried),
                 _plan_cycle(later, queue, cfg, extra, None))
    # and once more, a cycle after that with nothing changed but time
    then = replace(later, now=later.now + 600.0)
    again = PlanCache.carried(carried, then, changed_nodes(later, then))
    assert _same(_plan_cycle(then, queue, cfg, extra, again),
                 _plan_cycle(then, queue, cfg, extra, None))


# --- what is kept and what is dropped ------------------------------------------------------

def _cluster(**young) -> Snapshot:
    return builders.snapshot([gpu_node(f"n{i}", 8) for i in range(1, 4)], [
        make_pod("cheap", node="n1", gpus=8, age=600, **young),
        make_pod("dear", node="n2", gpus=8, age=7200),
        make_pod("dearer", node="n3", gpus=8, age=9000),
    ])


def _warm(snap: Snapshot) -> PlanCache:
    cache = PlanCache(snap)
    preemption.plan(snap, [pending("hi", gpus=8)], preemption.PlannerConfig(
        record_rejections=False), cache)
    return cache


def test_entries_of_unchanged_nodes_are_kept_and_changed_ones_dropped():
    snap = _cluster()
    cache = _warm(snap)
    later = replace(snap, now=snap.now + 60)
    carried = PlanCache.carried(cache, later, {"n2"})
    (table,) = [t for k, t in carried._tables.items() if k[0] == "evictable"]
    assert set(table) == {"n1", "n3"}
    assert carried.carried_nodes == 2


def test_nothing_is_kept_when_changes_are_unknown_or_time_went_back():
    snap = _cluster()
    cache = _warm(snap)
    assert PlanCache.carried(cache, snap, None).carried_nodes == 0
    back = replace(snap, now=snap.now - 1)
    assert PlanCache.carried(cache, back, frozenset()).carried_nodes == 0


def test_other_pdbs_drop_the_nodes_of_gangs_in_their_namespace():
    snap = builders.snapshot([gpu_node(f"n{i}", 8) for i in range(1, 5)], [
        make_pod("single", node="n1", gpus=8, age=600),
        make_pod("g-a", node="n2", gpus=8, age=600, gang="default/seed/g"),
        make_pod("g-b", node="n3", gpus=8, age=600, gang="default/seed/g"),
        make_pod("other", node="n4", gpus=8, age=600, gang="other/seed/g", namespace="other"),
    ])
    cache = _warm(snap)
    pdb = PodDisruptionBudget(name="x", namespace="default", match_labels={},
                              disruptions_allowed=1)
    carried = PlanCache.carried(cache, replace(snap, pdbs=(pdb,)), frozenset())
    (table,) = [t for k, t in carried._tables.items() if k[0] == "evictable"]
    assert set(table) == {"n1", "n4"}


def test_warming_fills_the_top_band_a_few_nodes_at_a_time():
    snap = _cluster()
    cache = PlanCache(snap)
    cfg = preemption.PlannerConfig(record_rejections=False)
    assert preemption.warm(cache, cfg, 2) == 2
    assert preemption.warm(cache, cfg, 2) == 1
    assert preemption.warm(cache, cfg, 2) == 0  # complete
    (table,) = [t for k, t in cache._tables.items() if k[0] == "evictable"]
    assert set(table) == {"n1", "n2", "n3"}
    # a preemptor above every pod plans on what was warmed: the same plan as without
    plan = preemption.plan(snap, [pending("hi", gpus=8)], cfg, cache)
    assert plan == preemption.plan(snap, [pending("hi", gpus=8)], cfg)
    assert plan.victims[0].name == "cheap"
    # no pod declares an end, so the end-aware charge is off and the plan read the warmed
    # table instead of filling one of its own
    assert len([k for k in cache._tables if k[0] == "evictable"]) == 1


def test_warming_fills_the_floor_report_parity_plans_with_too():
    # a silent periodic pod never preempted: a top-priority preemptor plans at floor 0, and
    # idle passes fill that key as well as the key without holds
    periodic = {"mode": CheckpointMode.PERIODIC, "gpus": 8, "age": 7200}
    snap = builders.snapshot([gpu_node(f"n{i}", 8) for i in range(1, 4)], [
        make_pod("reporter", node="n1", checkpoint_age=60, **periodic),
        make_pod("silent", node="n2", **periodic),
        make_pod("plain", node="n3", gpus=8, age=9000),
    ])
    cfg = preemption.PlannerConfig(record_rejections=False)
    cache = PlanCache(snap)
    assert preemption.warm(cache, cfg, 4) == 4  # the 3 nodes without holds, 1 at floor 0
    assert preemption.warm(cache, cfg, 4) == 2
    assert preemption.warm(cache, cfg, 4) == 0  # both complete
    tables = {k[-1]: t for k, t in cache._tables.items() if k[0] == "evictable"}
    assert set(tables) == {None, 0} and all(set(t) == {"n1", "n2", "n3"} for t in tables.values())
    assert tables[0]["n1"].entries == [] and tables[None]["n1"].entries != []  # held at 0
    plan = preemption.plan(snap, [pending("hi", gpus=8)], cfg, cache)
    assert plan == preemption.plan(snap, [pending("hi", gpus=8)], cfg)
    assert plan.victims[0].name == "silent"
    assert len([k for k in cache._tables if k[0] == "evictable"]) == 2  # read, not refilled
    # without report parity only the key without holds is warmed
    off = PlanCache(snap)
    while preemption.warm(off, replace(cfg, report_parity=False), 4):
        pass
    assert [k[-1] for k in off._tables if k[0] == "evictable"] == [None]


def test_judgments_follow_their_nodes_when_nodes_come_and_go():
    snap = _cluster()
    cache = _warm(snap)
    (key,) = cache._rings
    before = {n.name: cache._rings[key].judged[i] for i, n in enumerate(snap.nodes)}
    nodes = (gpu_node("n0", 8), *(n for n in snap.nodes if n.name != "n2"))
    later = replace(snap, nodes=nodes, pods=tuple(p for p in snap.pods if p.node != "n2"))
    carried = PlanCache.carried(cache, later, changed_nodes(snap, later))
    after = {n.name: carried._rings[key].judged[i] for i, n in enumerate(nodes)}
    assert after == {"n0": None, "n1": before["n1"], "n3": before["n3"]}
    assert before["n1"] is not None


def test_a_pod_passing_its_min_runtime_drops_its_node():
    # "cheap" is the cheapest victim once it is past its min-runtime (10 minutes from now)
    snap = _cluster(min_runtime=1200)
    cfg = preemption.PlannerConfig(record_rejections=False)
    cache = _warm(snap)
    later = replace(snap, now=snap.now + 3600)
    carried = PlanCache.carried(cache, later, frozenset())
    plan = preemption.plan(later, [pending("hi", gpus=8)], cfg, carried)
    assert _same([plan], [preemption.plan(later, [pending("hi", gpus=8)], cfg)])
    assert plan.victims[0].name == "cheap"


def test_a_workload_preempted_less_often_drops_its_nodes():
    snap = replace(_cluster(), recent_preemptions={workload_of("cheap"): 3})
    cache = _warm(snap)
    later = replace(snap, now=snap.now + 1, recent_preemptions={})
    carried = PlanCache.carried(cache, later, frozenset())
    (table,) = [t for k, t in carried._tables.items() if k[0] == "evictable"]
    assert "n1" not in table
    cfg = preemption.PlannerConfig(record_rejections=False)
    plan = preemption.plan(later, [pending("hi", gpus=8)], cfg, carried)
    assert _same([plan], [preemption.plan(later, [pending("hi", gpus=8)], cfg)])
    assert plan.victims[0].name == "cheap"  # no longer charged for its preemptions


def test_a_workload_preempted_more_often_drops_its_nodes_for_report_parity():
    # n1's reporter just checkpointed, n2's was preempted once, n3's silent pod once too:
    # report parity's floor is 1, so n2's reporter is held and the plan, made with the floor,
    # takes n1's. A cycle later n1's workload was preempted once more (elsewhere, its pod
    # unchanged): held now, so the silent pod goes, and n1's entries are not kept
    periodic = {"mode": CheckpointMode.PERIODIC, "gpus": 8, "age": 7200}
    snap = replace(builders.snapshot([gpu_node(f"n{i}", 8) for i in range(1, 4)], [
        make_pod("fresh", node="n1", checkpoint_age=300, **periodic),
        make_pod("again", node="n2", checkpoint_age=60, **periodic),
        make_pod("silent", node="n3", **periodic),
    ]), preemption_history={workload_of("again"): 1, workload_of("silent"): 1})
    cfg = preemption.PlannerConfig(record_rejections=False)
    cache = PlanCache(snap)
    assert preemption.plan(snap, [pending("hi", gpus=8)], cfg, cache).victims[0].name == "fresh"
    later = replace(snap, now=snap.now + 1, preemption_history={
        workload_of("again"): 1, workload_of("silent"): 1, workload_of("fresh"): 1})
    carried = PlanCache.carried(cache, later, frozenset())
    assert all("n1" not in t for k, t in carried._tables.items() if k[0] == "evictable")
    plan = preemption.plan(later, [pending("hi", gpus=8)], cfg, carried)
    assert _same([plan], [preemption.plan(later, [pending("hi", gpus=8)], cfg)])
    assert plan.victims[0].name == "silent"


def test_a_pod_whose_end_comes_within_the_wait_drops_its_node():
    # "ending" declares an end 1500 s ahead, beyond the 600 s wait: at first it is charged its
    # loss and "other" (just checkpointed) is the victim. 1000 s later its end is 500 s ahead:
    # charged the preemptor's 8 GPUs x 560 s, less than "other"'s 1000 s of unsaved work, so a
    # carried cache must not keep its node's old, higher bound
    ending = replace(make_pod("ending", node="n1", gpus=8, age=7200, checkpoint_age=3000),
                     expected_end=builders.NOW + 1500)
    snap = builders.snapshot([gpu_node("n1", 8), gpu_node("n2", 8)], [
        ending, make_pod("other", node="n2", gpus=8, age=7200, checkpoint_age=0)])
    cfg = preemption.PlannerConfig(record_rejections=False)
    cache = PlanCache(snap)
    assert preemption.plan(snap, [pending("hi", gpus=8)], cfg, cache).victims[0].name == "other"
    later = replace(snap, now=snap.now + 1000)
    carried = PlanCache.carried(cache, later, frozenset())
    plan = preemption.plan(later, [pending("hi", gpus=8)], cfg, carried)
    assert _same([plan], [preemption.plan(later, [pending("hi", gpus=8)], cfg)])
    assert plan.victims[0].name == "ending"
