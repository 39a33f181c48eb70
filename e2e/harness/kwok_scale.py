"""Many kwok nodes and pods at once, and a burst of preemptors onto full nodes.

    create_nodes(c, names, pool, workers)   -> nodes/s; waits until every one is Ready
    fill(c, ns, pool, nodes, per_node, workers, **pod_kwargs) -> pods/s, bound at creation
    burst(c, ns, pool, nodes=300, preemptors=100)   -> the burst's figures (below)
    vm_mib(pid)                             -> {"VmRSS", "VmHWM"} of a process, in MiB

`burst`: ``nodes`` full 8-GPU nodes (one low-priority 8-GPU pod each), the controller running
in this process, then ``preemptors`` 8-GPU pods of a ``preemptionPolicy: Never`` class at once:
the time until all are bound, and the evictions, which must be exactly the victims of the
stored plans. Where the time went, from the controller's own audit log (logger
``ckpt_preempt.audit``, one line per write): when the first and last plan were stored and the
last eviction sent, and the writes by verb. bench/scale_kwok.py runs it big;
e2e/test_scale_burst.py and e2e/test_scale_model.py run it small.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

from kubernetes import client

from ckpt_preempt.controller.writes.write_bodies import MANAGED_BY
from ckpt_preempt.policies.lifecycle import plan_record
from e2e.harness import kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    config_for,
    priority_classes,
    running_controller,
)

BURST_TARGET_SECONDS = 30


def parallel(c: kube.Cluster, calls: Iterable[Callable[[client.CoreV1Api], object]],
             workers: int) -> float:
    """Run API calls on ``workers`` threads, each with its own connections; objects per second."""
    calls = list(calls)
    local = threading.local()

    def run(call: Callable[[client.CoreV1Api], object]) -> None:
        if not hasattr(local, "core"):
            local.core = client.CoreV1Api(kube.client_copy(c.api))
        call(local.core)

    t0 = time.monotonic()
    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(run, call) for call in calls]:
            f.result()
    return len(calls) / max(time.monotonic() - t0, 1e-9)


def create_nodes(c: kube.Cluster, names: list[str], pool: str, workers: int) -> float:
    rate = parallel(c, [lambda core, n=n: core.create_node(kube.node_body(n, pool=pool),
                                                           _preload_content=False)
                        for n in names], workers)
    kube.wait_for(f"{len(names)} kwok nodes Ready", lambda: _all_ready(c, pool, len(names)),
                  timeout=120 + len(names) / 20, interval=1.0)
    return rate


def _all_ready(c: kube.Cluster, pool: str, n: int) -> bool | kube.NotYet:
    nodes = c.core.list_node(label_selector=f"{kube.POOL_LABEL}={pool}").items
    ready = sum(1 for x in nodes if any(k.type == "Ready" and k.status == "True"
                                        for k in x.status.conditions or [])
                and not any(t.key.startswith("node.kubernetes.io/") for t in x.spec.taints or []))
    return True if ready == n else kube.NotYet(f"{ready}/{n} ready")


def fill(c: kube.Cluster, namespace: str, pool: str, nodes: list[str], per_node: int,
         workers: int, **pod_kwargs) -> float:
    """``per_node`` pods of 8/per_node GPUs on each node, bound at creation."""
    gpus = 8 // per_node
    priority_classes(c)

    def one(core: client.CoreV1Api, node: str, i: int) -> None:
        body = kube.pod_body(f"{node}-{i}", gpus=gpus, pool=pool, node_name=node,
                             priority_class=LOW, grace_seconds=0, **pod_kwargs)
        core.create_namespaced_pod(namespace, body, _preload_content=False)
    return parallel(c, [lambda core, n=n, i=i: one(core, n, i)
                        for n in nodes for i in range(per_node)], workers)


def vm_mib(pid: int) -> dict[str, float]:
    out = {}
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return out


def plan_victims(c: kube.Cluster, namespace: str) -> dict[str, set[str]]:
    """Victim uids of every stored plan, by plan id."""
    cms = c.core.list_namespaced_config_map(
        namespace, label_selector=f"{MANAGED_BY[0]}={MANAGED_BY[1]}").items
    out = {}
    for cm in cms:
        raw = (cm.data or {}).get(plan_record.PLAN_DATA_KEY)
        if raw:
            r = plan_record.plan_from_annotation(raw)
            out[r.id] = {v.uid for v in r.victims}
    return out


class _AuditClock(logging.Handler):
    """Seconds since ``t0`` of every audit line (verb, plan), and urllib3's pool warnings."""

    def __init__(self, t0: float) -> None:
        super().__init__(logging.INFO)
        self.t0, self.writes, self.pool_full = t0, [], 0
        self.evicted: list[str] = []  # the target of every eviction sent
        self.lines: list[dict] = []  # every audit line, for --timeline

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("urllib3"):
            self.pool_full += "pool is full" in record.getMessage()
            return
        verb = str(getattr(record, "audit", "?"))
        self.writes.append((time.monotonic() - self.t0, verb.split(" ")[0], verb))
        self.lines.append({"t": round(time.monotonic() - self.t0, 3), "verb": verb,
                           "target": getattr(record, "target", ""),
                           "plan": getattr(record, "plan", ""), "thread": record.threadName})
        if verb == "evict":
            self.evicted.append(str(getattr(record, "target", "?")))

    def evictions_sent(self) -> int:
        """Eviction API calls sent (retries of one eviction after 429/5xx included)."""
        return len(self.evicted)

    def profile(self) -> dict:
        def at(verb: str, pick) -> float | None:
            times = [t for t, _, v in self.writes if v == verb]
            return round(pick(times), 2) if times else None
        by_verb: dict[str, int] = {}
        for _, head, _ in self.writes:
            by_verb[head] = by_verb.get(head, 0) + 1
        return {"first_plan_s": at("create-plan", min), "last_plan_s": at("create-plan", max),
                "last_evict_s": at("evict", max), "last_done_s": at("update-plan Done", max),
                "writes": len(self.writes), "by_verb": by_verb,
                "pool_full_warnings": self.pool_full}


@contextlib.contextmanager
def _audit_clock(t0: float):
    loggers = [logging.getLogger("ckpt_preempt.audit"), logging.getLogger("urllib3")]
    levels = [lg.level for lg in loggers]
    handler = _AuditClock(t0)
    for lg in loggers:
        lg.setLevel(logging.INFO if lg.name.endswith("audit") else logging.WARNING)
        lg.addHandler(handler)
    try:
        yield handler
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def burst(c: kube.Cluster, namespace: str, pool: str, *, nodes: int, preemptors: int,
          workers: int = 8, timeout: float = 300, write_concurrency: int | None = None,
          timeline: Path | None = None) -> dict:
    """``preemptors`` 8-GPU pods at once onto ``nodes`` full nodes, the controller running."""
    priority_classes(c)
    names = [f"{pool}-b{i}" for i in range(nodes)]
    create_nodes(c, names, pool, workers)
    fill(c, namespace, pool, names, 1, workers)
    kube.wait_for("victims Running", lambda: _running(c, namespace, nodes), timeout=120,
                  interval=0.5)
    victims = {p.metadata.uid: p.metadata.name
               for p in c.core.list_namespaced_pod(namespace).items}
    knobs = {} if write_concurrency is None else {"write_concurrency": write_concurrency}
    with running_controller(c, config_for(namespace, **knobs)) as ctl, \
            _audit_clock(time.monotonic()) as clock:
        kube.wait_for("controller synced", ctl.cache.synced, timeout=60)
        t0 = clock.t0 = time.monotonic()
        wall0 = time.time()
        parallel(c, [lambda core, i=i: core.create_namespaced_pod(namespace, kube.pod_body(
            f"pre-{i}", gpus=8, pool=pool, priority_class=HIGH_NEVER), _preload_content=False)
            for i in range(preemptors)], workers)
        kube.wait_for(f"{preemptors} preemptors bound",
                      lambda: _bound(c, namespace, preemptors), timeout=timeout, interval=0.25)
        seconds = time.monotonic() - t0
    if timeline is not None:
        timeline.write_text("".join(json.dumps(x) + "\n" for x in clock.lines))
    left = {p.metadata.uid for p in c.core.list_namespaced_pod(namespace).items
            if p.metadata.deletion_timestamp is None}
    evicted = set(victims) - left
    planned = plan_victims(c, namespace)
    return {"nodes": nodes, "preemptors": preemptors, "all_bound_s": round(seconds, 2),
            "evictions": len(evicted), "plans": len(planned),
            "planned_victims": sorted(set().union(*planned.values())) if planned else [],
            "evicted": sorted(evicted), "target_s": BURST_TARGET_SECONDS,
            "write_concurrency": ctl.cfg.write_concurrency,
            "evictions_sent": clock.evictions_sent(),
            "eviction_retries": ctl.metrics.registry.get_sample_value(
                "ckpt_preempt_eviction_retries_total") or 0.0,
            "profile": {**clock.profile(),
                        **_unschedulable_to_planned(c, namespace, wall0, clock.lines)}}


def _unschedulable_to_planned(c: kube.Cluster, namespace: str, wall0: float,
                              lines: list[dict]) -> dict:
    """When kube-scheduler first reported each preemptor unschedulable (its first
    FailedScheduling Event; the controller plans only such pods), in seconds since the burst,
    and how long after that its PreemptionPlanned Event was sent."""
    raw = c.core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling",
                                       _preload_content=False).data
    first: dict[str, float] = {}
    for e in json.loads(raw)["items"]:
        name = e["involvedObject"]["name"]
        stamp = e.get("eventTime") or e.get("firstTimestamp")
        if not name.startswith("pre-") or not stamp:
            continue
        t = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - wall0
        first[name] = min(t, first.get(name, t))
    times = sorted(first.values())
    planned = {x["target"].split("/")[-1]: x["t"] for x in lines
               if x["verb"] == "event PreemptionPlanned"}
    lags = sorted(planned[n] - t for n, t in first.items() if n in planned)
    return {"unschedulable_seen": len(times),
            "unschedulable_p50_s": round(times[len(times) // 2], 2) if times else None,
            "last_unschedulable_s": round(times[-1], 2) if times else None,
            "planned_after_p50_s": round(lags[len(lags) // 2], 2) if lags else None,
            "planned_after_max_s": round(lags[-1], 2) if lags else None}


def _running(c: kube.Cluster, namespace: str, n: int) -> bool | kube.NotYet:
    pods = c.core.list_namespaced_pod(namespace).items
    k = sum(1 for p in pods if p.status.phase == "Running")
    return True if k >= n else kube.NotYet(f"{k}/{n} Running")


def _bound(c: kube.Cluster, namespace: str, n: int) -> bool | kube.NotYet:
    # raw JSON, not the client's models: the controller under test shares this interpreter
    raw = c.core.list_namespaced_pod(namespace, _preload_content=False).data
    k = sum(1 for p in json.loads(raw)["items"] if p["metadata"]["name"].startswith("pre-")
            and p["spec"].get("nodeName"))
    return True if k >= n else kube.NotYet(f"{k}/{n} bound")
