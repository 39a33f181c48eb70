"""bench/restart_cost.py's choice of the shipped restartCostSeconds: the smallest worst cell."""

from bench import restart_cost
from ckpt_preempt.policies.sim import stats


def _e(x):
    return stats.Estimate(median=x, low=x, high=x, n=5)


def test_the_choice_is_the_charge_whose_worst_cell_regrets_least_not_the_best_average():
    # 600 s is best on average (1.0 and 1.0 except a 1.3 miss), 300 s never far from the best
    regrets = {
        "a": {0.0: _e(1.2), 60.0: _e(1.1), 150.0: _e(1.08), 300.0: _e(1.02), 600.0: _e(1.0)},
        "b": {0.0: _e(1.0), 60.0: _e(1.0), 150.0: _e(1.04), 300.0: _e(1.06), 600.0: _e(1.3)},
    }
    chosen, worst = restart_cost.choose(regrets)
    assert chosen == 300.0
    assert worst == {0.0: 1.2, 60.0: 1.1, 150.0: 1.08, 300.0: 1.06, 600.0: 1.3}


def test_ties_go_to_the_smaller_charge():
    flat = {"a": {c: _e(1.0) for c in restart_cost.CHARGES}}
    assert restart_cost.choose(flat)[0] == restart_cost.CHARGES[0]
