"""The scheduler extender over real HTTP round trips (an in-process server on a free port):
the verbs' wire format, NVLink filtering, score range, victim reshaping, bad input."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.controller.extender.extender import Extender
from ckpt_preempt.controller.extender.extender_model import build_view
from ckpt_preempt.controller.extender.extender_verbs import (
    MAX_EXTENDER_PRIORITY,
    MIN_EXTENDER_PRIORITY,
    to_extender_scores,
)
from ckpt_preempt.controller.kube import records
from ckpt_preempt.controller.kube.podgroups import podgroup_info
from ckpt_preempt.policies.model.topology import SCHEMA
from e2e.harness.offline import StaticView

HOUR = 3600.0


def ts(seconds_ago: float) -> str:
    return datetime.fromtimestamp(time.time() - seconds_ago, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_json(name, *, gpus=0, cpu="1", node=None, priority=0, started_ago=HOUR,
             checkpoint_ago=None, annotations=None, labels=None) -> dict:
    req = {"cpu": cpu, "memory": "1Gi", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    ann = dict(annotations or {})
    if checkpoint_ago is not None:
        ann["ckpt-preempt.io/last-checkpoint"] = ts(checkpoint_ago)
    spec = {"containers": [{"name": "c", "resources": {"requests": req}}], "priority": priority}
    status = {"phase": "Pending"}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "startTime": ts(started_ago)}
    return {"metadata": {"name": name, "namespace": "team", "uid": f"uid-{name}",
                         "creationTimestamp": ts(started_ago), "labels": labels or {},
                         "annotations": ann}, "spec": spec, "status": status}


def node_json(name, *, gpus=8, domains=None) -> dict:
    anns = {}
    if domains is not None:
        anns[records.TOPOLOGY_ANNOTATION] = json.dumps(
            {"schema": SCHEMA, "gpu_count": gpus, "nvlink_domains": domains})
    return {"metadata": {"name": name, "annotations": anns},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi",
                                       "nvidia.com/gpu": str(gpus)}}}


def serve(nodes, pods, **kw) -> tuple[Extender, str]:
    view = build_view([records.node_info(n) for n in nodes], [records.pod_info(p) for p in pods])
    ext = Extender(StaticView(view), **kw)
    host, port = ext.serve("127.0.0.1", 0)
    return ext, f"http://{host}:{port}"


def post(url: str, body) -> tuple[int, object]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def extenders():
    made = []

    def make(nodes, pods, **kw):
        ext, url = serve(nodes, pods, **kw)
        made.append(ext)
        return ext, url

    yield make
    for e in made:
        e.stop()


TWO_FOURS = [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_filter_keeps_nvlink_pods_only_where_a_free_domain_is_sure(extenders):
    nodes = [node_json("split", domains=TWO_FOURS), node_json("whole", domains=[list(range(8))]),
             node_json("busy", domains=[list(range(8))]), node_json("unknown")]
    pods = [pod_json("x", gpus=3, node="split"), pod_json("y", gpus=5, node="busy")]
    _, url = extenders(nodes, pods)
    names = ["split", "whole", "busy", "unknown"]
    want = pod_json("job", gpus=4, annotations={"ckpt-preempt.io/nvlink": "required"})
    code, out = post(url + "/ckpt/filter", {"Pod": want, "NodeNames": names})
    assert code == 200
    assert out["NodeNames"] == ["whole"]
    # split: 5 free, but the 3 busy GPUs may sit in either 4-GPU domain (worst case)
    assert "needs" in out["FailedNodes"]["split"] and "5 free" in out["FailedNodes"]["split"]
    assert "3 free" in out["FailedNodes"]["busy"]
    assert out["FailedAndUnresolvableNodes"]["unknown"].startswith("nvlink-required-but-topology")
    big = pod_json("big", gpus=6, annotations={"ckpt-preempt.io/nvlink": "required"})
    _, out = post(url + "/filter", {"Pod": big, "NodeNames": ["split"]})
    assert out["NodeNames"] == []
    assert out["FailedAndUnresolvableNodes"]["split"].startswith("nvlink-required-but-no-domain")
    plain = pod_json("plain", gpus=4)
    _, out = post(url + "/filter", {"pod": plain, "nodenames": names})  # Go: any key case
    assert out["NodeNames"] == names and not out["FailedNodes"]


def test_filter_without_node_cache_returns_node_objects(extenders):
    nodes = [node_json("whole", domains=[list(range(8))]), node_json("split", domains=TWO_FOURS)]
    _, url = extenders(nodes, [pod_json("x", gpus=3, node="split")])
    want = pod_json("job", gpus=4, annotations={"ckpt-preempt.io/nvlink": "required"})
    code, out = post(url + "/filter", {"Pod": want, "Nodes": {"items": nodes}})
    assert code == 200 and [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["whole"]


def test_prioritize_prefers_the_node_that_leaves_less_fragmented_and_stays_in_range(extenders):
    nodes = [node_json("empty"), node_json("half"), node_json("full")]
    pods = [pod_json("h", gpus=4, node="half"), pod_json("f", gpus=8, node="full")]
    _, url = extenders(nodes, pods)
    code, out = post(url + "/prioritize",
                     {"Pod": pod_json("p", gpus=4), "NodeNames": ["empty", "half", "full"]})
    assert code == 200
    scores = {h["Host"]: h["Score"] for h in out}
    assert scores["half"] == MAX_EXTENDER_PRIORITY  # fills the half-used node
    assert scores["empty"] < scores["half"]
    assert scores["full"] == MIN_EXTENDER_PRIORITY  # does not fit
    assert all(MIN_EXTENDER_PRIORITY <= s <= MAX_EXTENDER_PRIORITY for s in scores.values())


def test_scores_map_to_the_extender_range_with_the_best_standing_out():
    out = to_extender_scores({"a": (50, 0.0), "b": (80, -0.2), "c": (80, -0.1), "d": None})
    got = {h["Host"]: h["Score"] for h in out}
    assert got == {"a": 0, "b": 9, "c": 10, "d": 0}


def test_prioritize_past_its_budget_falls_back_to_bestfit_and_counts_it(extenders):
    nodes = [node_json(f"n{i}") for i in range(300)]
    pods = [pod_json(f"p{i}", gpus=1 + i % 3, node=f"n{i}") for i in range(300)]
    ext, url = extenders(nodes, pods, budget_seconds=1e-9)
    code, out = post(url + "/prioritize",
                     {"Pod": pod_json("p", gpus=2), "NodeNames": [f"n{i}" for i in range(300)]})
    assert code == 200 and len(out) == 300
    assert ext.metrics.score_fallbacks._value.get() == 1
    best = [h["Host"] for h in out if h["Score"] == MAX_EXTENDER_PRIORITY]
    assert best and all(int(h[1:]) % 3 == 2 for h in best)  # BestFit: the fullest nodes


def _victims(**nodes) -> dict:
    return {n: {"Pods": [{"UID": f"uid-{p}"} for p in ps], "NumPDBViolations": 0}
            for n, ps in nodes.items()}


def test_preempt_keeps_the_node_losing_least_work_and_never_adds_victims(extenders):
    """Scenario 7's cluster: kube-scheduler offers one victim set per node; the extender keeps
    only `b` (checkpointed 10 minutes ago)."""
    nodes = [node_json(f"n{i}") for i in range(4)]
    pods = [pod_json("a", gpus=8, node="n0", priority=10, started_ago=6 * HOUR,
                     checkpoint_ago=5 * HOUR),
            pod_json("b", gpus=8, node="n1", priority=50, started_ago=6 * HOUR,
                     checkpoint_ago=HOUR / 6),
            pod_json("c1", gpus=4, node="n2", priority=50, started_ago=3 * HOUR,
                     checkpoint_ago=2 * HOUR),
            pod_json("c2", gpus=4, node="n2", priority=50, started_ago=3 * HOUR,
                     checkpoint_ago=2 * HOUR),
            pod_json("d", gpus=8, node="n3", priority=50, started_ago=HOUR / 2)]
    _, url = extenders(nodes, pods)
    offered = _victims(n0=["a"], n1=["b"], n2=["c1", "c2"], n3=["d"])
    code, out = post(url + "/preempt", {"Pod": pod_json("big", gpus=8, priority=1000),
                                        "NodeNameToMetaVictims": offered})
    assert code == 200
    assert out == {"NodeNameToMetaVictims": _victims(n1=["b"])}
    # full victim objects (nodeCacheCapable false) are read by their metadata.uid
    full = {n: {"Pods": [pod_json(p["UID"][4:]) for p in v["Pods"]], "NumPDBViolations": 0}
            for n, v in offered.items()}
    code, out = post(url + "/preempt", {"Pod": pod_json("big", gpus=8, priority=1000),
                                        "NodeNameToVictims": full})
    assert code == 200 and out == {"NodeNameToMetaVictims": _victims(n1=["b"])}


def test_preempt_picks_the_cheapest_sufficient_subset_and_drops_gang_splits(extenders):
    gang = {"scheduling.ai/gang-name": "g", "scheduling.ai/gang-total": "2"}
    nodes = [node_json("n0"), node_json("n1"), node_json("n2")]
    pods = [pod_json("old", gpus=4, node="n0", started_ago=5 * HOUR),
            pod_json("new", gpus=4, node="n0", started_ago=HOUR / 10),
            pod_json("g0", gpus=8, node="n1", started_ago=HOUR / 60, labels=gang),
            pod_json("g1", gpus=8, node="n2", started_ago=HOUR / 60, labels=gang)]
    _, url = extenders(nodes, pods)
    code, out = post(url + "/preempt", {"Pod": pod_json("p", gpus=4, priority=1000),
                                        "NodeNameToMetaVictims": _victims(
                                            n0=["old", "new"], n1=["g0"])})
    assert code == 200
    # n0: only `new` need go (4 GPUs free it); n1 would split the gang g across n1 and n2
    assert out == {"NodeNameToMetaVictims": _victims(n0=["new"])}
    _, out = post(url + "/preempt", {"Pod": pod_json("p", gpus=4, priority=1000),
                                     "NodeNameToMetaVictims": _victims(n1=["g0"])})
    assert out == {"NodeNameToMetaVictims": {}}  # no preemption rather than half a gang


def test_preempt_drops_nodes_where_the_offered_victims_leave_no_nvlink_domain(extenders):
    nodes = [node_json("n0", domains=TWO_FOURS), node_json("n1", domains=TWO_FOURS)]
    pods = [pod_json("a", gpus=2, node="n0", started_ago=60),
            pod_json("b", gpus=6, node="n0", started_ago=5 * HOUR),
            pod_json("c", gpus=8, node="n1", started_ago=5 * HOUR)]
    _, url = extenders(nodes, pods)
    want = pod_json("p", gpus=4, priority=1000, annotations={"ckpt-preempt.io/nvlink": "required"})
    # kube-scheduler counts GPUs only: evicting `a` frees 2+0 -> not enough anyway; offering
    # `a` alone on n0 cannot make 4 GPUs surely share a domain, so n0 is dropped
    code, out = post(url + "/preempt", {"Pod": want,
                                        "NodeNameToMetaVictims": _victims(n0=["a"], n1=["c"])})
    assert code == 200 and out == {"NodeNameToMetaVictims": _victims(n1=["c"])}


@pytest.mark.parametrize("path,body,needle", [
    ("/filter", b"{not json", "not JSON"),
    ("/filter", b"[1, 2]", "not a JSON object"),
    ("/prioritize", json.dumps({"NodeNames": ["a"]}).encode(), "no Pod"),
    ("/filter", json.dumps({"Pod": {"spec": {}}, "NodeNames": []}).encode(), "not a usable"),
    ("/preempt", json.dumps({"Pod": pod_json("p")}).encode(), "neither NodeNameToMetaVictims"),
    ("/filter", json.dumps({"Pod": pod_json("p"), "NodeNames": "a"}).encode(), "NodeNames"),
])
def test_bad_input_is_a_400_with_one_line(extenders, path, body, needle):
    _, url = extenders([node_json("a")], [])
    code, text = post(url + path, body)
    assert code == 400 and needle in text and text.count("\n") == 1, text
    code, _ = post(url + "/filter", {"Pod": pod_json("p"), "NodeNames": ["a"]})
    assert code == 200  # the server lives on


def test_health_and_metrics_endpoints(extenders):
    _, url = extenders([node_json("a")], [])
    post(url + "/filter", {"Pod": pod_json("p"), "NodeNames": ["a"]})
    with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(url + "/readyz", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    assert 'ckpt_preempt_extender_requests_total{code="200",verb="filter"} 1.0' in text
    assert "ckpt_preempt_extender_score_fallbacks_total 0.0" in text
    code, _ = post(url + "/bind", {"x": 1})
    assert code == 404


class _Items:
    def __init__(self, docs, trim):
        self.docs, self.trim = docs, trim

    def items(self):
        return [self.trim(d) for d in self.docs]


class _Cache:
    """The three informers' ``items()`` and the ``changed`` event a ClusterCache exposes."""

    def __init__(self, nodes, pods):
        import threading

        self.changed = threading.Event()
        self.nodes, self.pods = _Items(nodes, records.node_info), _Items(pods, records.pod_info)
        self.pdbs = _Items([], records.pdb_info)
        self.podgroups = _Items([], podgroup_info)

    def synced(self):
        return True


def test_cached_view_follows_the_watch_cache_on_the_next_request_when_cheap():
    from ckpt_preempt.controller.extender.extender_model import CachedView

    cache = _Cache([node_json("a")], [])
    view = CachedView(cache)
    assert view.current().nodes["a"].free.gpus == 8
    cache.pods.docs.append(pod_json("p", gpus=3, node="a"))
    assert view.current().nodes["a"].free.gpus == 8  # no watch event yet: same view
    cache.changed.set()
    assert view.current().nodes["a"].free.gpus == 5 and view.rebuilds == 2
    view.last_build_seconds = 10.0  # an expensive rebuild: requests no longer wait for one
    cache.pods.docs.append(pod_json("q", gpus=5, node="a"))
    cache.changed.set()
    assert view.current().nodes["a"].free.gpus == 5


def test_preempt_answers_only_offered_victims_and_never_an_empty_list():
    """Random nodes, pods and offered victim sets (some insufficient, some naming pods on
    another node): each kept node has >= 1 victim, all offered for that node, freeing enough."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ckpt_preempt.controller.extender.extender_verbs import PreemptSettings, preempt

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.lists(st.sampled_from((1, 2, 4)), max_size=4), min_size=1, max_size=4),
           st.sampled_from((1, 2, 4, 8)), st.data())
    def check(layout, want, data):
        nodes = [node_json(f"n{i}") for i in range(len(layout))]
        pods, on = [], {}
        for i, sizes in enumerate(layout):
            free = 8
            for k, g in enumerate(sizes):
                if g <= free:
                    free -= g
                    pods.append(pod_json(f"p{i}-{k}", gpus=g, node=f"n{i}",
                                         started_ago=data.draw(st.integers(60, 10 * 3600))))
                    on.setdefault(f"n{i}", []).append(f"uid-p{i}-{k}")
        view = build_view([records.node_info(n) for n in nodes],
                          [records.pod_info(p) for p in pods])
        all_uids = [u for us in on.values() for u in us]
        offered = {n: data.draw(st.lists(st.sampled_from(all_uids), unique=True, max_size=4))
                   for n in on if all_uids}
        args = {"Pod": pod_json("pre", gpus=want, priority=1000),
                "NodeNameToMetaVictims": {n: {"Pods": [{"UID": u} for u in us]}
                                          for n, us in offered.items()}}
        out, dropped = preempt(view, args, PreemptSettings())
        kept = out["NodeNameToMetaVictims"]
        assert set(kept) | set(dropped) == set(offered)
        for n, v in kept.items():
            uids = [p["UID"] for p in v["Pods"]]
            assert uids and set(uids) <= set(offered[n]) and set(uids) <= set(on[n])
            freed = sum(view.pods[u].requests.gpus for u in uids)
            assert view.nodes[n].free.gpus + freed >= want

    check()


def _fresh_keys(scorer, view, pod, names):
    """What prioritize would rank by without its memo: our key per node, None if no fit."""
    from ckpt_preempt.policies.placement.devices import fits
    out = {}
    for name in names:
        nv = view.nodes.get(name)
        if nv is None or not fits(nv.gpu, pod.shape):
            out[name] = None
        else:
            out[name] = scorer.ours.evaluate(nv.gpu, pod.shape)[0]
    return out


@settings(max_examples=40, deadline=None)
@given(used=st.lists(st.tuples(st.integers(0, 8), st.integers(1, 48)), min_size=1, max_size=12),
       asks=st.lists(st.tuples(st.integers(0, 8), st.integers(1, 16)), min_size=1, max_size=6))
def test_prioritize_memo_scores_as_a_fresh_scorer_would(used, asks):
    """Nodes in the same state share a memoised key; the scores must be those a fresh
    evaluation gives, request after request, also after the target workload changes."""
    from ckpt_preempt.controller.extender.extender_verbs import Scorer, pending_pod
    nodes = [node_json(f"n{i}") for i in range(len(used))]
    pods = [pod_json(f"r{i}", gpus=g, cpu=str(c), node=f"n{i}")
            for i, (g, c) in enumerate(used) if g]
    view = build_view([records.node_info(n) for n in nodes], [records.pod_info(p) for p in pods])
    scorer = Scorer(budget_seconds=60.0)
    scorer.learn(view)
    names = [f"n{i}" for i in range(len(used))]
    for k, (g, c) in enumerate(asks):
        pod = pending_pod({"Pod": pod_json(f"ask{k}", gpus=g, cpu=str(c))})
        got = {h["Host"]: h["Score"] for h in scorer.score(view, pod, names)}
        want = {h["Host"]: h["Score"]
                for h in to_extender_scores(_fresh_keys(scorer, view, pod, names))}
        assert got == want


def test_only_scoring_new_node_states_counts_against_the_budget():
    """Once a shape's node states are memoised, a request costs lookups, not scoring: even a
    budget already spent does not send it to BestFit. A new shape's states still count."""
    from ckpt_preempt.controller.extender.extender_verbs import Scorer, pending_pod
    nodes = [node_json(f"n{i}") for i in range(40)]
    pods = [pod_json(f"r{i}", gpus=1 + i % 4, cpu=str(1 + i % 7), node=f"n{i}") for i in range(40)]
    view = build_view([records.node_info(n) for n in nodes], [records.pod_info(p) for p in pods])
    fallbacks = []
    scorer = Scorer(budget_seconds=60.0, on_fallback=lambda: fallbacks.append(1))
    scorer.learn(view)
    names = [f"n{i}" for i in range(40)]
    ask = pending_pod({"Pod": pod_json("ask", gpus=2)})
    first = scorer.score(view, ask, names)
    scorer.budget_seconds = 0.0  # spent before it starts
    again = scorer.score(view, pending_pod({"Pod": pod_json("ask2", gpus=2)}), names)
    assert again == first and not fallbacks
    scorer.score(view, pending_pod({"Pod": pod_json("other", gpus=3)}), names)
    assert fallbacks == [1]


def _native(pod: dict, group: str) -> dict:
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def test_preempt_never_splits_a_native_podgroup_gang(extenders):
    """Members of a native PodGroup (spec.schedulingGroup) are one gang for the preempt verb,
    as for the controller: offering one member's node alone is dropped, not half a gang."""
    nodes = [node_json("n1"), node_json("n2")]
    pods = [_native(pod_json("g0", gpus=8, node="n1", started_ago=HOUR / 60), "train"),
            _native(pod_json("g1", gpus=8, node="n2", started_ago=HOUR / 60), "train")]
    _, url = extenders(nodes, pods)
    code, out = post(url + "/preempt", {"Pod": pod_json("p", gpus=4, priority=1000),
                                        "NodeNameToMetaVictims": _victims(n1=["g0"])})
    assert code == 200 and out == {"NodeNameToMetaVictims": {}}


def test_a_bound_member_of_a_single_disruption_podgroup_may_go_alone():
    """With the PodGroup known and its disruption mode Single, a bound member is no gang
    member (policies.model.native_gangs.membership): the preempt verb may take it alone."""
    from ckpt_preempt.controller.extender.extender_verbs import PreemptSettings, preempt
    from ckpt_preempt.policies.model.native_gangs import Disruption, NativeGroup

    nodes = [node_json("n1"), node_json("n2")]
    pods = [_native(pod_json("g0", gpus=8, node="n1", started_ago=HOUR / 60), "train"),
            _native(pod_json("g1", gpus=8, node="n2", started_ago=HOUR / 60), "train")]
    groups = {"team/train": NativeGroup(namespace="team", name="train", min_count=2,
                                        disruption=Disruption.SINGLE)}
    args = {"Pod": pod_json("p", gpus=4, priority=1000),
            "NodeNameToMetaVictims": _victims(n1=["g0"])}
    infos = [records.node_info(n) for n in nodes], [records.pod_info(p) for p in pods]
    view = build_view(*infos, podgroups=groups)
    out, _ = preempt(view, args, PreemptSettings())
    assert out == {"NodeNameToMetaVictims": _victims(n1=["g0"])}
    gang_view = build_view(*infos)  # the group unknown: members count as a gang
    out, _ = preempt(gang_view, args, PreemptSettings())
    assert out == {"NodeNameToMetaVictims": {}}
