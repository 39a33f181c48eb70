"""The controller behind e2e/harness/faultproxy.py: the API answers 409, 429, 500 and 503 to a share
of its requests and cuts its watches, and every preemption still ends Done or cleanly Aborted, with
no pod evicted twice or outside a stored plan (counted from the API server's audit log).

Also here: the proxy itself, and the audit checks of the chaos run (e2e/harness/chaos/checks.py)
caught in the act (rogue evictions made on purpose must be reported), so a silent checker cannot
pass the chaos tests.
"""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from kubernetes import config
from kubernetes.client.rest import ApiException

from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.chaos import (
    BYSTANDER,
    VICTIM,
    Chaos,
    ChaosConfig,
    Made,
    check_evictions,
    check_gangs,
    plan_versions,
)
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    plan_of,
    priority_classes,
    start_controller_process,
)
from e2e.harness.faultproxy import CODES, NO_FAULTS, WRITE, FaultProxy, Faults
from e2e.harness.localcluster import ADMIN_TOKEN, read_audit

pytestmark = pytest.mark.e2e
HOLD = "e2e.ckpt-preempt.io/hold"  # a finalizer: the pod stays Terminating until it is removed


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from kube.own_local_cluster(tmp_path_factory.mktemp("audited"), audit=True)


def _proxied(proxy: FaultProxy, tmp_path) -> kube.Cluster:
    path = proxy.kubeconfig(tmp_path / "proxied.kubeconfig", ADMIN_TOKEN)
    return kube.Cluster("proxied", path, config.new_client_from_config(config_file=str(path)))


def test_proxy_fails_writes_with_status_bodies_and_cuts_watches(cluster, namespace, tmp_path):
    with FaultProxy(cluster.local.server, Faults(seed=3, rates={WRITE: 1.0})) as proxy:
        via = _proxied(proxy, tmp_path)
        assert via.core.read_namespace(namespace).metadata.name == namespace  # reads pass
        seen = set()
        for i in range(12):
            with pytest.raises(ApiException) as err:
                via.core.create_namespaced_config_map(namespace, {"metadata": {"name": f"c{i}"}})
            status = json.loads(err.value.body)
            assert status["kind"] == "Status" and status["code"] == err.value.status
            seen.add(err.value.status)
        assert seen == set(CODES[WRITE])
        names = {cm.metadata.name for cm in cluster.core.list_namespaced_config_map(
            namespace).items}
        assert not names & {f"c{i}" for i in range(12)}  # none reached the API server
        writes = [e for e in read_audit(cluster.local.audit_log)
                  if e.resource == "configmaps" and e.namespace == namespace]
        assert writes == []

        proxy.set_faults(Faults(seed=3, rates={"watch": 1.0}, watch_cut_after=(0.5, 0.5)))
        t0 = time.monotonic()
        resp = via.core.list_namespaced_pod(namespace, watch=True, timeout_seconds=30,
                                            _preload_content=False)
        with pytest.raises(Exception):  # noqa: B017 (urllib3's ProtocolError: cut mid-stream)
            for _ in resp.stream(1024):
                pass
        assert time.monotonic() - t0 < 10
        assert proxy.counts[("watch", "cut")] == 1

    a, b = FaultProxy(cluster.local.server, Faults(seed=5, rates={WRITE: 0.3})), \
        FaultProxy(cluster.local.server, Faults(seed=5, rates={WRITE: 0.3}))
    c = FaultProxy(cluster.local.server, Faults(seed=6, rates={WRITE: 0.3}))
    runs = [[p.decide(WRITE) for _ in range(200)] for p in (a, b, c)]
    assert runs[0] == runs[1] != runs[2]  # seeded: same seed, same faults
    assert 30 <= sum(x is not None for x in runs[0]) <= 90


def test_audit_checks_report_rogue_evictions(cluster, namespace, pool, gpu_nodes):
    """Evictions made by hand, outside any plan, twice, and of one gang member, are each
    reported; one under an Evicting plan naming its victim is not."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    made: dict[str, Made] = {}

    def pod(name: str, role: str = VICTIM, gang: str | None = None, **kw) -> None:
        p = kube.create_pod(cluster, namespace, name, gpus=1, pool=pool, node_name=node,
                            priority_class=LOW, grace_seconds=0, gang=gang,
                            gang_total=2 if gang else None, **kw)
        made[f"{namespace}/{name}"] = Made(namespace=namespace, name=name, uid=p.metadata.uid,
                                           role=role, priority=100, gang=gang, gpus=1, node=node)

    pod("twice")
    cluster.core.patch_namespaced_pod("twice", namespace, {"metadata": {"finalizers": [HOLD]}})
    pod("g-0", gang="g")
    pod("g-1", gang="g")
    pod("planned")
    pod("preemptor", role=BYSTANDER)
    made[f"{namespace}/preemptor"] = dataclasses.replace(made[f"{namespace}/preemptor"],
                                                         priority=1000)
    now = time.time()
    record = plan_record.PlanRecord(
        id="f00d-0001", state=plan_record.State.EVICTING, mode=plan_record.Mode.NOMINATE,
        created=now, deadline=now, evict_by=now + 60, bind_by=now + 120,
        placements=(plan_record.PlannedPlacement(
            uid=made[f"{namespace}/preemptor"].uid, namespace=namespace, name="preemptor",
            node=node),),
        victims=(plan_record.PlannedVictim(uid=made[f"{namespace}/planned"].uid,
                                         namespace=namespace, name="planned", node=node,
                                         drain=False),))
    cluster.core.create_namespaced_config_map(namespace, {
        "metadata": {"name": "ckpt-plan-f00d-0001"},
        "data": {plan_record.PLAN_DATA_KEY: plan_record.plan_to_annotation(record)}})
    try:
        for name in ("twice", "twice", "g-0", "planned"):
            kube.evict(cluster, namespace, name)
        events = read_audit(cluster.local.audit_log)
        versions, malformed = plan_versions(events, namespace)
        assert [v.record.id for v in versions] == ["f00d-0001"] and malformed == []
        doubles, outside = check_evictions(events, made, {namespace}, versions)
        assert doubles == [f"{namespace}/twice evicted 2 times"]
        assert sorted(line.split(" ", 1)[0] for line in outside) == [
            f"{namespace}/g-0", f"{namespace}/twice", f"{namespace}/twice"]
        alive = {f"{namespace}/{p.metadata.name}" for p in
                 cluster.core.list_namespaced_pod(namespace).items}
        assert check_gangs(events, made, alive) == [
            f"gang {namespace}/g: evicted ['g-0'], still running ['g-1']"]
        _, out_of_scope = check_evictions(events, made, {"elsewhere"}, versions)
        assert any(line.startswith(f"{namespace}/planned: outside") for line in out_of_scope)
    finally:
        cluster.core.patch_namespaced_pod("twice", namespace, {"metadata": {"finalizers": None}})


def test_preemptions_end_done_or_cleanly_aborted_under_api_faults(cluster, namespace, pool,
                                                                  tmp_path):
    faults = Faults(seed=11, rates={WRITE: 0.15, "eviction": 0.2, "read": 0.05, "watch": 0.3},
                    watch_cut_after=(1.0, 6.0))
    cfg = ChaosConfig(seed=11, drains=8, max_seconds=80.0, nodes=5, kill_every=None,
                      faults=faults, settle_seconds=40.0)
    chaos = Chaos(cluster, namespace, pool, cfg, tmp_path)
    try:
        report = chaos.run()
    finally:
        chaos.teardown()
    figures, inv = report.figures, report.invariants
    detail = f"{figures}\n" + "\n".join(inv.lines()) + "\n" + chaos.replicas.logs_tail()
    assert inv.ok, detail
    assert figures["drains"] >= cfg.drains, detail
    injected = figures["faults"]
    for code in (409, 429, 500, 503):
        assert sum(n for k, n in injected.items() if k.endswith(f"injected-{code}")) > 0, detail
    assert injected.get("watch:cut", 0) > 0, detail
    assert sum(n for k, n in injected.items() if k.startswith("eviction:injected")) > 0, detail


def test_a_gang_is_never_left_half_evicted_when_its_plan_aborts(cluster, namespace, pool,
                                                                gpu_nodes, tmp_path):
    """g-0 is evicted, g-1's evictions fail (503: an API outage for that one pod), then the
    preemptor is deleted. The gang is broken already: g-1 must follow once the API lets it."""
    priority_classes(cluster)
    (node,) = gpu_nodes(1)
    for i in range(2):
        kube.create_pod(cluster, namespace, f"g-{i}", gpus=4, pool=pool, node_name=node,
                        priority_class=LOW, gang="g", gang_total=2, grace_seconds=0)
    outage = Faults(paths={f"/namespaces/{namespace}/pods/g-1/eviction": 503})
    with FaultProxy(cluster.local.server, outage) as proxy:
        path = proxy.kubeconfig(tmp_path / "proxied.kubeconfig", ADMIN_TOKEN)
        ctl = start_controller_process(kube.Cluster("proxied", path, cluster.api),
                                       config_for(namespace), tmp_path, identity="c1",
                                       log_name="c1.log")
        try:
            kube.create_pod(cluster, namespace, "p", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER, grace_seconds=0)
            kube.wait_pod_gone(cluster, namespace, "g-0", timeout=60)
            kube.wait_for("an eviction of g-1 refused", lambda: proxy.counts[
                ("eviction", "injected-503")] > 0, timeout=30)
            cluster.core.delete_namespaced_pod("p", namespace, grace_period_seconds=0)
            time.sleep(2)  # the plan has seen its preemptor go, and keeps evicting the gang
            proxy.set_faults(NO_FAULTS)  # the outage is over
            kube.wait_pod_gone(cluster, namespace, "g-1", timeout=30)

            def ended():
                plan = plan_of(cluster, namespace, "p")
                return plan if plan and plan.state.terminal else kube.NotYet("plan running")
            assert kube.wait_for("the plan to end", ended, timeout=30).state is \
                plan_record.State.ABORTED
        finally:
            ctl.kill()
            ctl.wait()
