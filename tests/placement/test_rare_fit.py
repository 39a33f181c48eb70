"""Ours' rare-fit term: the cut-off T from the workload, and what the term changes."""

from __future__ import annotations

from collections import Counter
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.placement import ours, protocol
from ckpt_preempt.policies.placement.devices import PodShape, new_node, place
from ckpt_preempt.policies.placement.fgd import TargetPod

DATA = resources.files("ckpt_preempt.policies").joinpath("data")


def share(milli: int, cpu: int = 1000) -> PodShape:
    return PodShape(cpu_milli=cpu, memory_mib=1024, gpu_count=1, gpu_milli=milli)


@pytest.fixture(scope="module")
def default_trace() -> tuple[PodShape, ...]:
    return protocol.load_pods(DATA.joinpath("openb_pod_list_default.csv").read_text())


def test_the_cutoff_is_the_smallest_size_five_percent_of_shared_pods_fit_in():
    # 40 shared pods: 5 % is 2. One asks for 50, one for 100: 100 is where 2 fit.
    assert ours.rare_fit_cutoff({50: 1, 100: 1, 300: 18, 800: 20}) == 100
    # 20 shared pods: 5 % is 1, already reached at 50.
    assert ours.rare_fit_cutoff({50: 1, 300: 19}) == 50
    # Weights instead of counts (an online or given target): the same rule.
    assert ours.rare_fit_cutoff({60: 0.01, 200: 0.04, 500: 0.95}) == 200  # 0.05 exactly
    assert ours.rare_fit_cutoff({60: 0.01, 200: 0.03, 500: 0.96}) == 500
    assert ours.rare_fit_cutoff({}) == 0  # no shared pod: no cut-off, the term is off


def test_the_default_trace_cutoff_is_the_readmes_220_milli(default_trace):
    # policies/placement/README.md, "Where Ours loses": 106 of the 3,078 shared pods ask for
    # 50-160 milli (3.4 %); with the 62 pods of 220 milli, 168 (5.5 %) fit.
    assert ours.Ours(default_trace, ours.OursConfig(rare_fit_weight=4)).rare_fit_milli == 220


def test_the_term_avoids_a_remainder_only_rare_pods_fit(default_trace):
    # GPU 0 has 560 free, GPU 1 has 750. A 500-milli pod leaves 60 (below T = 220: only 7 of
    # 3,078 shared pods fit) or 250 (most pods under 500 fit). FGD's measure counts the 250 as
    # more fragment, so Ours without the term takes GPU 0; with beta 4 it takes GPU 1.
    node = new_node("n", "V100M32", cpu_milli=96000, memory_mib=786432, gpus=2)
    node = place(node, share(440), (0,))
    node = place(node, share(250), (1,))
    pod = share(500, cpu=4000)
    assert ours.Ours(default_trace, ours.OursConfig(rare_fit_weight=0)).evaluate(
        node, pod)[1] == (0,)
    assert ours.Ours(default_trace, ours.OursConfig(rare_fit_weight=4)).evaluate(
        node, pod)[1] == (1,)


@settings(max_examples=80, deadline=None)
@given(gpus=st.lists(st.integers(0, 1000), min_size=1, max_size=8),
       cpu=st.integers(0, 96000), beta=st.sampled_from([0.5, 4.0]))
def test_the_term_adds_beta_times_the_rare_remainders(default_trace, gpus, cpu, beta):
    base = ours.Ours(default_trace, ours.OursConfig(rare_fit_weight=0))
    with_term = ours.Ours(default_trace, ours.OursConfig(rare_fit_weight=beta))
    rare = sum(g for g in gpus if 0 < g < 220)
    added = with_term.frag("V100M32", cpu, tuple(gpus)) - base.frag("V100M32", cpu, tuple(gpus))
    assert added == pytest.approx(beta * rare)


def test_an_online_target_learns_the_cutoff_from_the_pods_seen():
    policy = ours.Ours((), ours.OursConfig(target="online", rare_fit_weight=4, refresh_every=8))
    assert policy.rare_fit_milli == 0
    for pod in [share(100)] + [share(500)] * 7:  # 8 seen: the refresh at 8; 5 % of 8 is 0.4
        policy.observe(pod)
    assert policy.rare_fit_milli == 100
    version = policy.version
    for pod in [share(700)] * 8:
        policy.observe(pod)
    assert policy.rare_fit_milli == 100 and policy.version > version  # memo dropped on refresh


def test_shapes_of_the_same_size_count_together():
    # 40 pods seen: 5 % is 2. Two 100-milli pods that differ in CPU are two pods of 100 milli.
    policy = ours.Ours((), ours.OursConfig(target="online", refresh_every=40))
    for pod in [share(100, cpu=1000), share(100, cpu=2000)] + [share(600)] * 38:
        policy.observe(pod)
    assert policy.rare_fit_milli == 100
    target = (TargetPod(cpu_milli=1000, gpu_milli=100, gpu_count=1, gpu_spec="", weight=0.03),
              TargetPod(cpu_milli=2000, gpu_milli=100, gpu_count=1, gpu_spec="", weight=0.03),
              TargetPod(cpu_milli=1000, gpu_milli=600, gpu_count=1, gpu_spec="", weight=0.94))
    assert ours.Ours.with_target(target).rare_fit_milli == 100


def test_whole_gpu_pods_leave_the_term_off():
    # The extender's pods ask for whole GPUs: no shared pod, no cut-off, the measure is Ours'
    # without the term.
    policy = ours.Ours((), ours.OursConfig(target="online", refresh_every=4))
    for gpus in (1, 2, 1, 8):
        policy.observe(PodShape(cpu_milli=4000, gpu_count=gpus, gpu_milli=1000))
    assert policy.rare_fit_milli == 0
    off = ours.Ours((), ours.OursConfig(target="online", refresh_every=4, rare_fit_weight=0))
    for gpus in (1, 2, 1, 8):
        off.observe(PodShape(cpu_milli=4000, gpu_count=gpus, gpu_milli=1000))
    assert policy.frag("A100", 8000, (1000, 100, 0)) == off.frag("A100", 8000, (1000, 100, 0))


def test_a_given_target_sets_the_cutoff_from_its_shared_shapes():
    target = (TargetPod(cpu_milli=1000, gpu_milli=150, gpu_count=1, gpu_spec="", weight=0.02),
              TargetPod(cpu_milli=1000, gpu_milli=450, gpu_count=1, gpu_spec="", weight=0.48),
              TargetPod(cpu_milli=8000, gpu_milli=1000, gpu_count=1, gpu_spec="", weight=0.5))
    policy = ours.Ours.with_target(target, ours.OursConfig(rare_fit_weight=4))
    assert policy.rare_fit_milli == 450  # 0.02 of 0.5 shared weight is 4 %, below 5 %


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_negative_or_nan_weight_is_refused(bad):
    with pytest.raises(ValueError, match="rare_fit_weight"):
        ours.OursConfig(rare_fit_weight=bad)


def test_counts_of_the_cutoff_match_the_loss_profile_rule(default_trace):
    # benchmark.loss_profile calls a remainder g a rare fit when fewer than 5 % of the shared
    # pods ask for g or less; every g below the cut-off is one, the cut-off itself is not.
    sizes = sorted(p.gpu_milli for p in default_trace if p.is_shared)
    cutoff = ours.rare_fit_cutoff(Counter(sizes))
    share_at = lambda g: sum(s <= g for s in sizes) / len(sizes)  # noqa: E731
    assert share_at(cutoff - 1) < ours.RARE_FIT_SHARE <= share_at(cutoff)
