"""Elastic shrink in the controller: config, the drain request naming the leaving members,
and only those members evicted."""

from __future__ import annotations

import pytest

from ckpt_preempt.controller import config, convert


def test_the_controller_config_turns_shrink_off_and_sets_the_rendezvous_cost():
    cfg = convert.planner_config(config.parse({"elasticShrink": False,
                                               "rendezvousCostSeconds": 15}))
    assert (cfg.shrink, cfg.rendezvous_seconds) == (False, 15.0)
    assert convert.planner_config(config.Config()).shrink
    with pytest.raises(config.ConfigError, match="rendezvousCostSeconds"):
        config.parse({"rendezvousCostSeconds": -1})
