"""policies.kube_default against the real kube-scheduler on the same clusters.

A short seeded run of e2e/differential.py's random clusters, classified by
bench/differential.py (which runs 200+),
and the differences already known, each on a hand-made cluster, so that the classifier is seen
to find and explain them (and so that a fix in kube_default shows up here as a failure that
says to move the case)."""

from __future__ import annotations

import json
import uuid

import pytest

from bench.differential import RULES, classify
from e2e import differential
from e2e.differential import Case, NodeSpec, PdbSpec, PodSpec

pytestmark = pytest.mark.e2e
SEED, CASES = 20261203, 15
MIN_AGREEMENT = 0.95  # of the cases that are not documented ties


@pytest.fixture
def differential_cluster(cluster):
    if cluster.local is not None and cluster.local.scheduler_config is not None:
        cluster.restart_scheduler(None)  # the default profile, DefaultPreemption on
    differential.ensure_priority_classes(cluster)
    return cluster


def test_kube_default_picks_the_victims_kube_scheduler_picks(differential_cluster):
    run = uuid.uuid4().hex[:5]
    verdicts = []
    for i in range(CASES):
        case = differential.generate(SEED, i, pdb_edges=False)
        verdicts.append(classify(differential.run_case(differential_cluster, case,
                                                                    run=run)))
    shown = "\n".join(json.dumps(v.as_json()) for v in verdicts if v.kind != "agree")
    kinds = [v.kind for v in verdicts]
    assert "anomaly" not in kinds, shown
    assert kinds.count("real") == 0, shown  # every disagreement is a documented tie-break
    counted = [k for k in kinds if k != "tie"]
    assert counted.count("agree") >= MIN_AGREEMENT * len(counted), shown
    # the run preempted at all: most cases evict someone (not all "fits nowhere")
    assert sum(bool(v.kube["victims"]) for v in verdicts) >= CASES // 2, shown


def _pod(name: str, node: str, started_ago: int, labels: dict) -> PodSpec:
    return PodSpec(name=name, node=node, gpus=1, cpu_milli=500, memory_mi=512,
                   priority_class="diff-low-10", started_ago=started_ago, labels=labels)


def _known(index: int, a_labels: dict, pdbs: tuple[PdbSpec, ...]) -> Case:
    """Two 1-GPU nodes, one 1-GPU pod each: "a" on n0, started 2 h ago, "b" on n1 (team b),
    started 1 h ago. Equal on every other criterion, kube_default takes the node whose victim
    started later (n1, "b") unless a PDB tells them apart."""
    return Case(seed=0, index=index, tie_prone=False,
                nodes=(NodeSpec(name="n0", gpus=1, cpu=8, memory_gi=32),
                       NodeSpec(name="n1", gpus=1, cpu=8, memory_gi=32)),
                pods=(_pod("a", "n0", 7200, a_labels),
                      _pod("b", "n1", 3600, {"app": "diff", "team": "b", "tier": "x"})),
                pdbs=pdbs,
                preemptor=PodSpec(name=differential.PREEMPTOR, node="", gpus=1, cpu_milli=100,
                                  memory_mi=64, priority_class=differential.PREEMPTOR_CLASS,
                                  started_ago=0))


KNOWN = {
    # "a" has no labels; the NotIn PDB covers both (0 allowed). kube-scheduler never charges
    # a pod without labels, so evicting "a" breaks nothing and n0 wins; kube_default charges
    # both, ties on PDBs and takes "b" (started later).
    "unlabeled-pod-breaks-no-pdb": _known(1000, {}, (PdbSpec(name="not-y", selector={
        "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["y"]}]},
        min_available=2),)),
    # Selector {} (0 allowed) plus one on team b (0 allowed). kube-scheduler ignores {}, so
    # only "b" breaks a PDB and "a" goes; kube_default counts {} against both and takes "b".
    "empty-selector-pdb-ignored": _known(1001, {"app": "diff", "team": "a", "tier": "x"}, (
        PdbSpec(name="everyone", selector={}, min_available=2),
        PdbSpec(name="team-b", selector={"matchLabels": {"team": "b"}}, min_available=1))),
}


@pytest.mark.parametrize("rule", sorted(KNOWN))
def test_known_difference_is_found_and_explained(differential_cluster, rule):
    assert rule in RULES
    seen = differential.run_case(differential_cluster, KNOWN[rule], run=uuid.uuid4().hex[:5])
    v = classify(seen)
    assert seen.victims == ("a",), json.dumps(v.as_json())  # kube-scheduler's choice
    assert v.kind == "real" and v.ours["victims"] == ["b"], (
        f"kube_default now agrees with kube-scheduler on {rule!r}: if it was fixed, drop the "
        f"rule from bench.differential.RULES, this case from KNOWN, and let generate() keep "
        f"such cases with pdb_edges=False\n{json.dumps(v.as_json())}")
    assert [rule] in v.detail["explained_by"], json.dumps(v.as_json())
