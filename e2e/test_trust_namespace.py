"""A tenant who may only create, get and list pods in its own namespace tries to reach another
namespace's workload. Its pod names, as its controlling owner, an object of the neighbour's
namespace by uid, with a kind no API server serves (``attach.example.com/v1 Anchor``): the garbage
collector cannot resolve that kind, so the pod stays. Before workload keys were namespaced the
pod then counted as part of the neighbour's workload (controller/README.md, "What a workload
is"), which moved the starvation bound, the fairness penalty and report parity. Each test here
makes the attachment and checks that it changes nothing:

- the bound, stripped: the neighbour's 8-GPU pod was preempted once at 8 GPUs; a 1-GPU pod
  attached to it would make its workload 9 GPUs, "grown", and drop its protection;
- the bound, shielding: a workload preempted at 16 GPUs holds 8; the tenant's 8-GPU pod attached
  to it would be held by the bound with it;
- the fairness penalty: attached to a recently preempted workload, the tenant's cheap pod would
  look dear and the neighbour's would be taken instead;
- report parity: attached to a workload preempted as often as the silent alternative, the
  tenant's reporting pod would be held and the neighbour's silent pod taken instead.

The neighbour's history is stored as a plan written before keys were namespaced (a bare owner
uid), so the tests also show old plans counting for the same workload after the upgrade.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.model import RejectReason
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    exists,
    plan_of,
    pod_events,
    priority_classes,
    rfc3339,
    running_controller,
    wait_run_past,
)
from e2e.harness.trust import extra_namespace, store_plan, tenant

pytestmark = pytest.mark.e2e


OWNER = "job"  # the name of every owner object here (one per test namespace)


def _owner(c: kube.Cluster, namespace: str, name: str = OWNER) -> str:
    """An object of `namespace` that pods name as their controlling owner (a stand-in for a
    Job; the garbage collector finds it by name and uid, so its pods stay): its uid."""
    return c.core.create_namespaced_config_map(namespace, {"metadata": {"name": name}}
                                               ).metadata.uid


def _owned_by(body: dict, uid: str, *, name: str = OWNER, kind: str = "ConfigMap",
              api: str = "v1") -> dict:
    body["metadata"]["ownerReferences"] = [{"apiVersion": api, "kind": kind, "name": name,
                                            "uid": uid, "controller": True}]
    return body


def _attached(body: dict, uid: str) -> dict:
    """The attack: an owner of a kind no API server serves, so the garbage collector keeps the
    pod whatever namespace the uid belongs to."""
    return _owned_by(body, uid, kind="Anchor", api="attach.example.com/v1")


def _preempted_once(c: kube.Cluster, plan_ns: str, pid: str, *, namespace: str, owner: str,
                    node: str, gpus: float) -> None:
    """A finished plan of a minute ago that evicted a pod of `owner`'s workload in `namespace`
    while the workload held `gpus` GPUs, stored as plans were before keys were namespaced: the
    workload recorded as the owner's bare uid."""
    then = time.time() - 60
    store_plan(c, plan_ns, plan_record.PlanRecord(
        id=pid, state=plan_record.State.DONE, mode=plan_record.Mode.NOMINATE,
        created=then, deadline=then, evict_by=then + 30, bind_by=then + 60,
        placements=(plan_record.PlannedPlacement(uid=f"{pid}-preemptor", namespace=namespace,
                                                 name=f"{pid}-preemptor", node=node),),
        victims=(plan_record.PlannedVictim(uid=f"{pid}-victim", namespace=namespace,
                                           name=f"{pid}-victim", node=node, drain=False,
                                           workload=owner, workload_gpus=gpus),)))


@pytest.fixture
def world(cluster, namespace, pool, gpu_nodes):
    """(neighbour namespace, tenant namespace, the tenant's CoreV1Api, two 8-GPU nodes)."""
    priority_classes(cluster)
    nodes = gpu_nodes(2)
    with extra_namespace(cluster) as theirs, tenant(cluster, theirs) as api:
        yield namespace, theirs, client.CoreV1Api(api), nodes


def _plan_victims(c: kube.Cluster, plan_ns: str) -> list[tuple[str, str]]:
    rec = kube.wait_for("a plan for the preemptor",
                        lambda: plan_of(c, plan_ns, "urgent") or kube.NotYet("no plan"),
                        timeout=30)
    return [(v.namespace, v.name) for v in rec.victims]


def _waits_at_bound(c: kube.Cluster, ns: str) -> None:
    note = kube.wait_for("the preemptor told why it waits", lambda: next(
        (e for e in pod_events(c, ns)
         if e.involved_object.name == "urgent" and e.reason == Reason.PREEMPTION_NOT_POSSIBLE),
        None) or kube.NotYet([e.reason for e in pod_events(c, ns)]), timeout=30)
    assert str(RejectReason.VICTIMS_AT_BOUND) in note.message


def test_an_attachment_cannot_strip_a_neighbours_protection(cluster, pool, world):
    ours, theirs, as_tenant, (n0, n1) = world
    job = _owner(cluster, ours)
    cluster.core.create_namespaced_pod(ours, _owned_by(kube.pod_body(
        "neighbour", gpus=8, pool=pool, priority_class=LOW, node_name=n0), job))
    _preempted_once(cluster, ours, "earlier", namespace=ours, owner=job, node=n0, gpus=8.0)
    # the tenant's pod on the other node, 1 GPU: the neighbour's workload would hold 9
    as_tenant.create_namespaced_pod(theirs, _attached(kube.pod_body(
        "leech", gpus=1, pool=pool, priority_class=LOW, node_name=n1), job))
    # the preemptor can only go where the neighbour runs: a pod of its own priority fills the
    # leech's node, so taking the leech would not make room there
    kube.create_pod(cluster, ours, "filler", gpus=7, pool=pool, priority_class=HIGH_NEVER,
                    node_name=n1)
    for ns, name in ((ours, "neighbour"), (theirs, "leech"), (ours, "filler")):
        kube.wait_pod_running(cluster, ns, name)
    cfg = config_for(ours, namespaces=(ours, theirs), max_preemptions_per_window=1)
    with running_controller(cluster, cfg):
        kube.create_pod(cluster, ours, "urgent", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        _waits_at_bound(cluster, ours)
        time.sleep(3)  # a few more cycles: still nothing planned, nothing evicted
        assert plan_of(cluster, ours, "urgent") is None
        assert exists(cluster, ours, "neighbour") and exists(cluster, theirs, "leech")


def test_an_attachment_cannot_shield_the_tenants_pod(cluster, pool, world):
    ours, theirs, as_tenant, (n0, n1) = world
    job = _owner(cluster, ours)
    cluster.core.create_namespaced_pod(ours, _owned_by(kube.pod_body(
        "neighbour", gpus=8, pool=pool, priority_class=LOW, node_name=n0), job))
    # preempted once at 16 GPUs, it holds 8 now: the bound protects it
    _preempted_once(cluster, ours, "earlier", namespace=ours, owner=job, node=n0, gpus=16.0)
    as_tenant.create_namespaced_pod(theirs, _attached(kube.pod_body(
        "shielded", gpus=8, pool=pool, priority_class=LOW, node_name=n1), job))
    for ns, name in ((ours, "neighbour"), (theirs, "shielded")):
        kube.wait_pod_running(cluster, ns, name)
    cfg = config_for(ours, namespaces=(ours, theirs), max_preemptions_per_window=1)
    with running_controller(cluster, cfg):
        kube.create_pod(cluster, ours, "urgent", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        assert _plan_victims(cluster, ours) == [(theirs, "shielded")]
        kube.wait_pod_running(cluster, ours, "urgent", timeout=90)
        assert exists(cluster, ours, "neighbour") and not exists(cluster, theirs, "shielded")


def test_an_attachment_cannot_make_the_tenants_pod_dearer(cluster, pool, world):
    ours, theirs, as_tenant, (n0, n1) = world
    job = _owner(cluster, ours)
    # the neighbour never checkpoints: evicting it loses all its work
    kube.create_pod(cluster, ours, "neighbour", gpus=8, pool=pool, priority_class=LOW,
                    node_name=n0)
    wait_run_past(kube.wait_pod_running(cluster, ours, "neighbour"), 3.0)
    # another of the neighbour's workloads, preempted a minute ago (the penalty's window)
    _preempted_once(cluster, ours, "earlier", namespace=ours, owner=job, node=n0, gpus=16.0)
    # the tenant's pod checkpointed just now: the cheap victim, unless the penalty of the
    # workload it attaches to (8 GPUs x 3600 s) made it the dear one
    as_tenant.create_namespaced_pod(theirs, _attached(kube.pod_body(
        "cheap", gpus=8, pool=pool, priority_class=LOW, node_name=n1, checkpoint="periodic",
        last_checkpoint=rfc3339(0)), job))
    kube.wait_pod_running(cluster, theirs, "cheap")
    cfg = config_for(ours, namespaces=(ours, theirs), fairness_penalty_seconds=3600.0,
                     max_preemptions_per_window=0)
    with running_controller(cluster, cfg):
        kube.create_pod(cluster, ours, "urgent", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        assert _plan_victims(cluster, ours) == [(theirs, "cheap")]


def test_an_attachment_cannot_buy_report_paritys_hold(cluster, pool, world):
    ours, theirs, as_tenant, (n0, n1) = world
    silent_job, often = _owner(cluster, ours, "silent-job"), _owner(cluster, ours, "often-job")
    # the neighbour declares periodic checkpoints and reports none (silent), preempted once:
    # report parity's floor is 1, so a reporter is held only if its workload was preempted once
    cluster.core.create_namespaced_pod(ours, _owned_by(kube.pod_body(
        "silent", gpus=8, pool=pool, priority_class=LOW, node_name=n0, checkpoint="periodic"),
        silent_job, name="silent-job"))
    _preempted_once(cluster, ours, "silent-before", namespace=ours, owner=silent_job, node=n0,
                    gpus=8.0)
    _preempted_once(cluster, ours, "often-before", namespace=ours, owner=often, node=n0,
                    gpus=16.0)
    # the silent pod is charged from its start: let it run a while, so that the reporter, which
    # reports a checkpoint taken after that, is the cheaper victim whenever kwok starts it
    wait_run_past(kube.wait_pod_running(cluster, ours, "silent"), 3.0)
    # the tenant's reporter, never preempted, attaches to the neighbour's preempted workload
    as_tenant.create_namespaced_pod(theirs, _attached(kube.pod_body(
        "reporter", gpus=8, pool=pool, priority_class=LOW, node_name=n1, checkpoint="periodic",
        last_checkpoint=rfc3339(0)), often))
    kube.wait_pod_running(cluster, theirs, "reporter")
    cfg = config_for(ours, namespaces=(ours, theirs), fairness_penalty_seconds=0.0,
                     max_preemptions_per_window=10)
    with running_controller(cluster, cfg):
        kube.create_pod(cluster, ours, "urgent", gpus=8, pool=pool, priority_class=HIGH_NEVER)
        assert _plan_victims(cluster, ours) == [(theirs, "reporter")]
