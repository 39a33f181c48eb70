"""GPU health from dcgm-exporter through Prometheus, and the checkpoints it asks for.

``PrometheusHealth(cfg)`` reads Prometheus (``prometheusUrl``; bearer token file, CA file or
insecure-skip-verify) with ``prometheus-api-client``:

- one refresh = one coverage query (how many GPUs of each node report) plus at most one
  PromQL query per rule (``policies.model.health.DEFAULT_RULES``; rules reading one field the same
  way share it), each for the whole cluster, returning only the GPUs where a rule may fire,
  never one query per node; the queries run in parallel (``controller/health/health_promql.py``);
- ``healthQueryMode: recorded``: the same expressions are Prometheus recording rules
  (deploy/dcgm/recording-rules.yaml), and a refresh is two selections of what they recorded
  (the coverage count, and every firing GPU labelled with its rule group). No recorded coverage
  at all (rules not installed): every node ``unknown``, and the readiness detail says so;
- each query has ``healthQueryTimeoutSeconds`` and three tries (tenacity, on connection errors,
  timeouts and 5xx); a refresh runs at most every ``healthRefreshSeconds`` (a background
  thread), and the reconcile pass reads the cached ``report()``;
- a sample's node is its first label of ``healthHostnameLabels`` (dcgm-exporter writes
  ``Hostname`` up to 4.5.3-4.8.2, ``hostname`` after), renamed by ``healthNodeNames``, else its
  first DNS label when that is a Node and the full name is not;
- Prometheus unreachable, or the coverage query failing: every node is ``unknown``, the gauge
  ``ckpt_preempt_health_source_up`` is 0 and ``readiness_detail()`` (on /readyz) says why.
  Unknown changes nothing: no node is closed and no checkpoint is asked for.

``ProactiveCheckpoint`` runs in the reconcile pass: when a node turns degraded or failing (from
healthy or never known; ``policies.model.health.turned_worse``), every in-scope ``on-request`` pod
there gets the drain request (``Actions.request_checkpoint``, the same protected write path
as plans) under a plan id ``health-...`` that no eviction ever follows, and an Event
``HealthCheckpointRequested``. At most one round per node per
``healthCheckpointIntervalSeconds``; pods that carry another plan's request, or are a
running plan's victims, are left alone.

``explain_health(cfg, nodes)`` is one refresh for ``explain``: each node's state and reasons.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from urllib3.util.retry import Retry

from ckpt_preempt.controller.core.config import Config, HealthQueryMode
from ckpt_preempt.controller.core.events import Reason
from ckpt_preempt.controller.core.metrics import Metrics
from ckpt_preempt.controller.health.health_promql import (
    GROUP_LABEL,
    RECORDED_QUERIES,
    RECORDED_REPORTING,
    WINDOW_LABEL,
    coverage_query,
    query_groups,
    rule_queries,
    window_text,
)
from ckpt_preempt.controller.kube import convert
from ckpt_preempt.controller.kube.records import PodInfo
from ckpt_preempt.controller.writes.actions import Actions
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model import health as ph
from ckpt_preempt.policies.model.health import GpuKey, Health, HealthReport, NodeHealth, Rule
from ckpt_preempt.policies.model.model import CheckpointMode
from ckpt_preempt.policies.model.times import rfc3339

log = logging.getLogger("ckpt_preempt.health")
QUERY_ATTEMPTS = 3
MAX_PARALLEL_QUERIES = 8
HEALTH_PLAN_PREFIX = "health-"  # drain requests of ours that no eviction follows
NOT_RECORDED = ("the recording rules (deploy/dcgm/recording-rules.yaml) are not installed or "
                "not evaluated yet, or no GPU reports (healthQueryMode: recorded)")


# -- the source ------------------------------------------------------------------------------------
def _retryable(e: BaseException) -> bool:
    if isinstance(e, requests.RequestException):
        return True
    return isinstance(e, PrometheusApiClientException) and "Status Code 5" in str(e)


class PrometheusHealth:
    """Reads health from Prometheus; ``start()`` refreshes in the background."""

    def __init__(self, cfg: Config, metrics: Metrics | None = None, *,
                 rules: tuple[Rule, ...] = ph.DEFAULT_RULES,
                 nodes: Callable[[], Collection[str]] = tuple) -> None:
        self.cfg, self.metrics, self.rules, self.nodes = cfg, metrics, rules, nodes
        self.labels = cfg.health_hostname_labels
        self.node_map = cfg.health_node_map
        self.recorded = cfg.health_query_mode == HealthQueryMode.RECORDED
        # queries: rule name -> the query its readings come from; reads: rule name -> where
        # in the answers they are (the query in direct mode, the rule group label in recorded)
        if self.recorded:
            self.coverage, findings = RECORDED_QUERIES
            groups = query_groups(rules, cfg.health_window_seconds)
            self.queries = {name: findings for g in groups for name in g.members}
            self.reads = {name: g.name for g in groups for name in g.members}
        else:
            self.coverage = coverage_query(self.labels)
            self.queries = rule_queries(rules, cfg.health_window_seconds)
            self.reads = dict(self.queries)
        session = requests.Session()
        session.verify = (cfg.prometheus_ca_file or not cfg.prometheus_insecure_skip_verify)
        self.prom = PrometheusConnect(
            url=cfg.prometheus_url.rstrip("/"), session=session,
            retry=Retry(total=0), timeout=cfg.health_query_timeout_seconds)
        self._report = ph.unknown("no refresh yet")
        self._since: float | None = None  # when the source went down (None: up)
        self._stale_rules = ""  # recorded mode: the installed rules' window is not ours
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- one refresh
    def _query(self, expr: str) -> list[dict]:
        for attempt in Retrying(stop=stop_after_attempt(QUERY_ATTEMPTS), reraise=True,
                                wait=wait_exponential(multiplier=0.1, max=1.0),
                                retry=retry_if_exception(_retryable)):
            with attempt:
                return self.prom.custom_query(expr)
        raise AssertionError("unreachable")  # Retrying re-raises the last error

    def _key(self, labels: Mapping[str, str], known: Collection[str]) -> GpuKey | None:
        host = next((labels[k] for k in self.labels if labels.get(k)), None)
        if host is None:
            return None
        node = self.node_map.get(host, host)
        if known and node not in known and node.split(".")[0] in known:
            node = node.split(".")[0]
        return GpuKey(node, labels.get("gpu", "?"))

    def refresh(self) -> HealthReport:
        """Query Prometheus once and judge; never raises for the source's faults."""
        t0 = time.perf_counter()
        try:
            self._authorize()
            known = frozenset(self.nodes())
            exprs = sorted(set(self.queries.values()))
            # All at once: Prometheus evaluates them in parallel. The coverage answer decides
            # whether the source is up; a rule whose query fails finds nothing this time.
            with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL_QUERIES, len(exprs) + 1),
                                    thread_name_prefix="health-query") as pool:
                coverage = pool.submit(self._query, self.coverage)
                answers = {e: pool.submit(self._query, e) for e in exprs}
                reporting: dict[str, int] = {}
                covering = coverage.result()
                if self.recorded:
                    self._check_window(covering)
                for sample in covering:
                    if (k := self._key(sample["metric"], known)) is not None:
                        reporting[k.node] = reporting.get(k.node, 0) + int(
                            float(sample["value"][1]))
                by_answer: dict[str, dict[GpuKey, float]] = {}
                for expr, answer in answers.items():
                    try:
                        samples = answer.result()
                    except (requests.RequestException, PrometheusApiClientException) as e:
                        log.warning("health query %s failed: %s", expr, _short(e))
                        continue
                    for sample in samples:
                        labels = sample["metric"]
                        where = labels.get(GROUP_LABEL, "") if self.recorded else expr
                        if (k := self._key(labels, known)) is not None:
                            got = by_answer.setdefault(where, {})
                            got[k] = max(got.get(k, float("-inf")), float(sample["value"][1]))
            readings = {name: by_answer[w] for name, w in self.reads.items() if w in by_answer}
            if self.recorded and not reporting:
                report = ph.unknown(f"no {RECORDED_REPORTING} series in prometheus "
                                    f"{self.cfg.prometheus_url}: {NOT_RECORDED}")
            else:
                report = ph.judge(self.rules, reporting, readings)
            self._since = None
        except (requests.RequestException, PrometheusApiClientException, OSError,
                ValueError, KeyError, TypeError) as e:
            if self._since is None:
                self._since = time.time()
                log.warning("health source down: %s", _short(e))
            report = ph.unknown(f"prometheus {self.cfg.prometheus_url} unreadable since "
                                f"{rfc3339(self._since)}: {_short(e)}")
        with self._lock:
            self._report = report
        if self.metrics is not None:
            self.metrics.health_refresh.observe(time.perf_counter() - t0)
            self.metrics.health_source_up.set(1 if report.source_up else 0)
            for state in Health:
                self.metrics.health_nodes.labels(state.value).set(
                    sum(1 for n in report.nodes.values() if n.state is state))
        return report

    def _check_window(self, covering: list[dict]) -> None:
        ours = window_text(self.cfg.health_window_seconds)
        theirs = sorted({s["metric"].get(WINDOW_LABEL, "?") for s in covering} - {ours})
        stale = (f"the recording rules' window is {', '.join(theirs)}, healthWindowSeconds "
                 f"{ours}: regenerate them (python -m ckpt_preempt.controller.health.health_promql)"
                 if theirs else "")
        if stale and stale != self._stale_rules:
            log.warning("health: %s", stale)
        self._stale_rules = stale

    def _authorize(self) -> None:
        """Read the token file on every refresh: mounted tokens rotate."""
        token_file = self.cfg.prometheus_bearer_token_file
        if token_file:
            token = Path(token_file).read_text().strip()
            self.prom.headers = {"Authorization": f"Bearer {token}"}

    # -- cached, in the background
    def report(self) -> HealthReport:
        with self._lock:
            return self._report

    def readiness_detail(self) -> str:
        r = self.report()
        if not r.source_up:
            return f"health: unknown ({r.problem})"
        return "health: prometheus readable" + (f" ({self._stale_rules})" if self._stale_rules
                                                 else "")

    def start(self, stop: threading.Event) -> None:
        def loop() -> None:
            while not stop.is_set():
                self.refresh()
                stop.wait(self.cfg.health_refresh_seconds)
        self._thread = threading.Thread(target=loop, name="health", daemon=True)
        self._thread.start()


def _short(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:200]


# -- what health changes ---------------------------------------------------------------------------
class ProactiveCheckpoint:
    """Asks checkpointing pods on a node that turned degraded or failing to checkpoint."""

    def __init__(self, actions: Actions, cfg: Config, scope: convert.Scope,
                 limits, metrics: Metrics) -> None:
        self.actions, self.cfg, self.scope, self.limits = actions, cfg, scope, limits
        self.metrics = metrics
        self.last_known: dict[str, Health] = {}  # unknown never overwrites a known state
        self.last_round: dict[str, float] = {}  # node -> when it last got a round
        # pod uid -> (node, request plan) of a round whose write found the pod changed since it
        # was read: asked again, from the next pass's fresh view, within the same round
        self.stale: dict[str, tuple[NodeHealth, str]] = {}

    def step(self, report: HealthReport, pods: Iterable[PodInfo], now: float,
             held: Collection[str] = ()) -> list[str]:
        """Send the requests for nodes that turned worse; returns the pod keys asked."""
        turned = []
        for name, node in report.nodes.items():
            if node.state is Health.UNKNOWN:
                continue
            before = self.last_known.get(name, Health.UNKNOWN)
            self.last_known[name] = node.state
            if ph.turned_worse(before, node.state) and self.cfg.health_checkpoint and (
                    now - self.last_round.get(name, float("-inf"))
                    >= self.cfg.health_checkpoint_interval_seconds):
                turned.append(node)
        if not turned and not self.stale:
            return []
        on_node: dict[str, list[PodInfo]] = {}
        asked = []
        retries, self.stale = self.stale, {}  # a pod gone or moved since is not asked again
        for p in pods:
            if p.node is not None:
                on_node.setdefault(p.node, []).append(p)
            retry = retries.get(p.uid)
            if retry is not None and retry[0].node == p.node and \
                    self._ask(p, retry[0], retry[1], now, held):
                asked.append(p.key)
        for node in turned:
            self.last_round[node.node] = now
            plan = f"{HEALTH_PLAN_PREFIX}{int(now):x}-" \
                   f"{hashlib.sha256(node.node.encode()).hexdigest()[:8]}"
            for p in on_node.get(node.node, ()):
                if self._ask(p, node, plan, now, held):
                    asked.append(p.key)
        return asked

    def _ask(self, p: PodInfo, node: NodeHealth, plan: str, now: float,
             held: Collection[str]) -> bool:
        if p.deleting or p.done or p.uid in held or not self.scope.covers(p):
            return False
        raw = p.annotations.get(plan_record.DRAIN_ANNOTATION)
        if raw is not None and not _ours(raw):
            return False  # a plan's request stands: never replace it
        pod, _ = convert.to_pod(p, now, self.limits, True)
        if pod.checkpoint is not CheckpointMode.ON_REQUEST:
            return False
        seconds = min(pod.checkpoint_seconds or self.cfg.max_checkpoint_seconds,
                      self.cfg.max_checkpoint_seconds)
        request = plan_record.DrainRequest(plan=plan, requested=now, deadline=now + seconds)
        why = node.reasons[0] if node.reasons else node.state.value
        more = f" (+{len(node.reasons) - 1} more)" if len(node.reasons) > 1 else ""
        message = (f"node {node.node} turned {node.state}: {why}{more}; asked to checkpoint by "
                   f"{rfc3339(request.deadline)} (request {plan}; no eviction follows)")
        if self.cfg.dry_run:
            self.actions.emit(p, Reason.HEALTH_CHECKPOINT_REQUESTED, "(dry run) " + message)
            return False
        if not self.actions.request_checkpoint(p, request, only_if_unchanged=True):
            self.stale[p.uid] = (node, plan)  # changed since read: the next pass decides again
            return False
        self.metrics.health_checkpoints.inc()
        self.actions.emit(p, Reason.HEALTH_CHECKPOINT_REQUESTED, message)
        log.info("health checkpoint requested", extra={"pod": p.key, "node": node.node,
                                                       "plan": plan})
        return True


def _ours(raw: str) -> bool:
    try:
        return plan_record.drain_from_annotation(raw).plan.startswith(HEALTH_PLAN_PREFIX)
    except plan_record.DrainFormatError:
        return False


def states(report: HealthReport | None) -> Mapping[str, Health]:
    """Node name -> state, for the planner's snapshot (absent: unknown)."""
    return {} if report is None else {n: h.state for n, h in report.nodes.items()}


# -- explain ---------------------------------------------------------------------------------------
def explain_health(cfg: Config, nodes: Iterable[str]) -> list[NodeHealth]:
    """Each node's health and why, from one refresh now (all unknown without prometheusUrl)."""
    names = list(nodes)
    if not cfg.prometheus_url:
        report = ph.unknown("no prometheusUrl configured")
    else:
        report = PrometheusHealth(cfg, nodes=lambda: names).refresh()
    return [report.node(n) for n in names]
