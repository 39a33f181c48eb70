"""writeConcurrency: the write sequences of one pass side by side
(``controller/writes/write_lanes.py``).

``Lanes`` itself: tasks that share an object run in the order they were submitted and never at
once, tasks with nothing in common do run at once, a failing task loses no other, and a
``NotLeader`` stops the batch and reaches the caller. Then whole passes of the reconciler over a
burst of preemptors: each victim is evicted once, only while a stored plan that names it is
Evicting, each plan's writes keep their order, and a planner fault that hands out a held victim
is refused before anything is written. The config knob is checked like every other one.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.core import config
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.writes.actions import NotLeader
from ckpt_preempt.controller.writes.write_lanes import Lanes, plan_objects
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.lifecycle.plan_record import State
from tests.controller.fakes import T0, Call, FakeCache, Rig, node, pod

# ------------------------------------------------------------------------------------ Lanes


@settings(max_examples=25, deadline=None)
@given(tasks=st.lists(st.tuples(st.sets(st.sampled_from("abcd"), min_size=1),
                                st.integers(0, 3)), min_size=1, max_size=14),
       width=st.integers(1, 6))
def test_tasks_that_share_an_object_run_in_order_and_never_at_once(tasks, width):
    lock = threading.Lock()
    running: dict[str, int] = defaultdict(int)
    started: dict[str, list[int]] = defaultdict(list)
    overlaps: list[tuple[int, str]] = []

    def task(i: int, keys: set[str], ms: int) -> None:
        with lock:
            for k in keys:
                started[k].append(i)
                running[k] += 1
                if running[k] > 1:
                    overlaps.append((i, k))
        time.sleep(ms / 1000)
        with lock:
            for k in keys:
                running[k] -= 1

    with Lanes(width) as lanes:
        for i, (keys, ms) in enumerate(tasks):
            lanes.submit(keys, task, i, keys, ms)
    assert overlaps == []
    for k in "abcd":
        assert started[k] == [i for i, (keys, _) in enumerate(tasks) if k in keys]


def test_tasks_with_nothing_in_common_run_at_once():
    barrier = threading.Barrier(4, timeout=10)  # broken unless all four wait at the same time
    met = []
    with Lanes(4) as lanes:
        for i in range(4):
            lanes.submit({f"pod/{i}"}, lambda i=i: met.append((i, barrier.wait())))
    assert sorted(i for i, _ in met) == [0, 1, 2, 3]


def test_a_failing_task_loses_no_other_task():
    done, errors = [], []

    def task(i: int) -> None:
        if i in (3, 7):
            raise (ValueError if i == 3 else RuntimeError)(f"task {i}")
        time.sleep(0.001)
        done.append(i)

    with Lanes(4, on_error=lambda: errors.append(1)) as lanes:
        for i in range(20):
            lanes.submit({f"pod/{i % 5}"}, task, i)  # 3 and 7 share lanes with later tasks
    assert sorted(done) == [i for i in range(20) if i not in (3, 7)]
    assert len(errors) == 2


@pytest.mark.parametrize("width", [1, 3])
def test_not_leader_in_a_task_stops_the_batch_and_reaches_the_caller(width):
    ran = []

    def task(i: int) -> None:
        if i == 0:
            raise NotLeader("lost the lease")
        ran.append(i)

    with pytest.raises(NotLeader, match="lost the lease"), Lanes(width) as lanes:
        lanes.submit({"plan/a"}, task, 0)
        for i in range(1, 5):
            lanes.submit({"plan/a"}, task, i)  # after the failure in its lane: never runs
    assert ran == []
    with pytest.raises(NotLeader):
        lanes.check()


def test_batches_on_one_pool_start_no_threads_of_their_own():
    pool = Lanes.pool(3)
    names = set()

    def task() -> None:
        names.add(threading.current_thread().name)
        time.sleep(0.005)

    for _ in range(4):
        with Lanes(3, pool=pool) as lanes:
            for i in range(6):
                lanes.submit({f"pod/{i}"}, task)
    assert 1 < len(names) <= 3
    pool.shutdown()


def test_width_one_runs_each_task_at_once_on_the_callers_thread():
    seen = []
    with Lanes(1) as lanes:
        lanes.submit({"x"}, lambda: seen.append(threading.current_thread()))
        assert seen == [threading.current_thread()]


@pytest.mark.parametrize("width", [0, 65])
def test_lanes_refuse_a_width_out_of_bounds(width):
    with pytest.raises(ValueError, match="width"):
        Lanes(width)


# ------------------------------------------------------------------------------ config knob


def test_write_concurrency_defaults_to_eight_and_is_read_from_the_file():
    assert config.Config().write_concurrency == 8
    assert config.parse({"writeConcurrency": 1}).write_concurrency == 1
    assert config.parse({"writeConcurrency": 64.0}).write_concurrency == 64


@pytest.mark.parametrize("value", [0, 65, 2.5, True, "8", -1])
def test_a_bad_write_concurrency_is_one_clear_error(value):
    with pytest.raises(config.ConfigError, match="writeConcurrency"):
        config.parse({"writeConcurrency": value})


def test_run_with_a_bad_write_concurrency_says_one_line_and_exits_2(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("writeConcurrency: 0\n")
    done = subprocess.run(
        [sys.executable, "-m", "ckpt_preempt.controller.app.cmd_run", "--config", str(path),
         "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "writeConcurrency" in done.stderr
    assert "Traceback" not in done.stderr


# -------------------------------------------------------------------------- the reconciler

N = 10  # full nodes, one 8-GPU victim each, and as many 8-GPU preemptors
MEET_SECONDS = 10.0  # how long a first writer thread waits for a second one


def burst() -> FakeCache:
    return FakeCache(nodes=[node(f"b{i}") for i in range(N)],
                     pods=[*(pod(f"v{i}", node=f"b{i}") for i in range(N)),
                           *(pod(f"p{i}", priority=1000, pending=True) for i in range(N))])


class Oracle:
    """Looks at every write before it is applied: an eviction must name a victim of a stored
    plan that is Evicting, and no pod may be evicted twice."""

    def __init__(self, rig: Rig, *, meet: bool = False) -> None:
        self.rig, self.evicted, self.threads, self.bad = rig, [], set(), []
        rig.actions.before_write = self
        if meet:
            self._meet_writers(rig)

    def _meet_writers(self, rig: Rig) -> None:
        """The first two writer threads wait for each other before their first write (outside
        the fake's one-write-at-a-time lock): side by side they meet at once, whatever the
        machine's timing; written one at a time, the first waits MEET_SECONDS in vain and the
        test sees a single writer thread."""
        self._meet = threading.Barrier(2, timeout=MEET_SECONDS)
        self._met: set[str] = set()
        self._lock = threading.Lock()
        send = rig.actions._write

        def write(call: Call, *args, **kwargs):
            name = threading.current_thread().name
            with self._lock:
                meet = (name.startswith("ckpt-writes") and name not in self._met
                        and len(self._met) < 2)
                self._met.add(name)
            if meet:
                with contextlib.suppress(threading.BrokenBarrierError):
                    self._meet.wait()
            return send(call, *args, **kwargs)
        rig.actions._write = write

    def __call__(self, call: Call) -> None:
        self.threads.add(threading.current_thread().name)
        if call.verb != "evict":
            return
        r = self.rig.cache.plan(call.plan)
        if r is None or r.state is not State.EVICTING or call.args["uid"] not in r.victim_uids:
            self.bad.append(call)
        self.evicted.append(call.args["uid"])


def stored(rig: Rig) -> list[plan_record.PlanRecord]:
    return [plan_record.plan_from_annotation(o.raw) for o in rig.cache.plans.items()]


def test_a_burst_is_written_side_by_side_and_each_victim_is_evicted_once_in_its_plan():
    rig = Rig(burst(), write_concurrency=4)
    oracle = Oracle(rig, meet=True)
    rig.tick(T0)
    plans = stored(rig)
    assert len(plans) == N and oracle.bad == []
    assert sorted(oracle.evicted) == sorted(u for r in plans for u in r.victim_uids)
    assert len(set(oracle.evicted)) == N  # each victim once
    assert len({t for t in oracle.threads if t.startswith("ckpt-writes")}) > 1
    # planned one after another: no two plans of the pass share a pod or a node
    objects = [plan_objects(r) - {f"plan/{r.id}"} for r in plans]
    assert all(a.isdisjoint(b) for i, a in enumerate(objects) for b in objects[i + 1:])
    rig.cache.finish_terminating()
    for r in plans:
        for pl in r.placements:
            rig.cache.bind(pl.uid, pl.node)
    rig.tick(T0 + 2)
    assert {r.state for r in stored(rig)} == {State.DONE}
    assert len(oracle.evicted) == N and oracle.bad == []


def _writes_by_preemptor(rig: Rig) -> dict[str, list[str]]:
    owner = {r.id: r.anchor.name for r in stored(rig)}
    out: dict[str, list[str]] = defaultdict(list)
    for c in rig.actions.calls:
        plan = c.plan or (c.args or {}).get("id", "")
        if c.ok and plan in owner:
            out[owner[plan]].append(c.verb)
    return dict(out)


def test_each_plan_writes_in_the_same_order_one_at_a_time_or_side_by_side():
    rigs = {width: Rig(burst(), write_concurrency=width) for width in (1, 8)}
    for rig in rigs.values():
        rig.tick(T0)
    one, eight = (_writes_by_preemptor(rigs[w]) for w in (1, 8))
    assert len(one) == N and one == eight
    assert one["p0"][:2] == ["create_plan", "update_plan"] and "evict" in one["p0"]


def test_a_planner_fault_that_hands_out_a_held_victim_writes_nothing_for_it(monkeypatch,
                                                                            caplog):
    """If the restriction were lost (a planner or cache fault), the second preemptor would be
    given the first one's node and victim: that plan is refused before it is stored."""
    caplog.set_level("ERROR", logger="ckpt_preempt.reconcile")  # whatever ran before
    real = convert.for_preemptor

    def unrestricted(snap, nodes, preemptor, *, reserved_nodes, busy_pods, blocked_pods,
                     bounded_pods, queued_gpus):
        return real(snap, nodes, preemptor, reserved_nodes=frozenset(),
                    busy_pods=frozenset(), blocked_pods=frozenset(), bounded_pods=frozenset(),
                    queued_gpus=queued_gpus)
    monkeypatch.setattr(convert, "for_preemptor", unrestricted)
    cache = FakeCache(nodes=[node("b0")], pods=[
        pod("v0", node="b0"), pod("p0", priority=1000, pending=True),
        pod("p1", priority=1000, pending=True)])
    rig = Rig(cache, write_concurrency=4)
    oracle = Oracle(rig)
    rig.tick(T0)
    assert len(stored(rig)) == 1
    assert oracle.evicted == ["uid-v0"] and oracle.bad == []
    assert rig.metrics.registry.get_sample_value("ckpt_preempt_loop_errors_total") == 1
    assert "uses what other plans hold (b0, uid-v0)" in caplog.text


def test_not_leader_in_a_plans_task_ends_the_pass():
    rig = Rig(burst(), write_concurrency=4)
    rig.actions.lose_leadership_on("evict")
    with pytest.raises(NotLeader):
        rig.tick(T0)
    assert not any(c.verb == "evict" and c.ok for c in rig.actions.calls)


# ---------------------------------------------------- the preemptor changes under the write


def _real_actions(lives: list[dict], patches: list):
    from unittest import mock

    from kubernetes import client

    from ckpt_preempt.controller.writes.actions import Actions

    real = Actions(client.ApiClient(), plan_namespace="ckpt-preempt", connections=4)
    real.core = mock.MagicMock()
    real.core.api_client.sanitize_for_serialization.side_effect = lives
    real.core.patch_namespaced_pod.side_effect = patches
    return real


def _live(rv: str, tolerations: list[dict] | None = None) -> dict:
    return {"metadata": {"resourceVersion": rv}, "spec": {"tolerations": tolerations or []}}


def test_tolerate_reads_again_after_a_conflict_and_patches_the_fresh_version():
    from kubernetes.client.rest import ApiException

    real = _real_actions([_live("1"), _live("2")], [ApiException(status=409), None])
    real.tolerate(pod("p0", priority=1000, pending=True), "plan-1")
    bodies = [c.args[2] for c in real.core.patch_namespaced_pod.call_args_list]
    assert [b["metadata"]["resourceVersion"] for b in bodies] == ["1", "2"]
    assert bodies[1]["spec"]["tolerations"][-1]["value"] == "plan-1"


def test_tolerate_gives_up_after_its_attempts_and_stops_once_the_toleration_is_there():
    from kubernetes.client.rest import ApiException

    from ckpt_preempt.controller.writes.actions import TOLERATE_ATTEMPTS, Conflict
    from ckpt_preempt.policies.model.annotations import RESERVED_TAINT

    n = TOLERATE_ATTEMPTS
    real = _real_actions([_live(str(i)) for i in range(n)], [ApiException(status=409)] * n)
    with pytest.raises(Conflict):
        real.tolerate(pod("p0", priority=1000, pending=True), "plan-1")
    assert real.core.patch_namespaced_pod.call_count == n
    ours = {"key": RESERVED_TAINT, "value": "plan-1"}
    real = _real_actions([_live("1"), _live("2", [ours])], [ApiException(status=409)])
    real.tolerate(pod("p0", priority=1000, pending=True), "plan-1")  # written meanwhile
    assert real.core.patch_namespaced_pod.call_count == 1
