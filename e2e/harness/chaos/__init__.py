"""The chaos run: preemptors keep coming while controller replicas are SIGKILLed at seeded
random points (optionally behind the fault proxy); the promises are checked at the end from the
API server's audit log and API state. `python -m bench.chaos` runs it long (`make bench`);
e2e/test_chaos.py and e2e/test_api_faults.py run it short.

    chaos = Chaos(cluster, namespace, pool, ChaosConfig(seed=1, drains=12), workdir)
    report = chaos.run()        # report.figures (a dict), report.invariants (Invariants)
    chaos.teardown()

    config    ChaosConfig, and the pods (Made) and preemptors (Group) a run makes
    pods      Population: nodes, victims, bystanders and preemptors, from the seed
    faults    Replicas (controller processes), kill_at_random, proxy_faults
    run       Chaos: the driver, the acker, settling
    checks    Invariants and the checks behind them
    report    Report and its figures

Choices come from the seed; how they interleave with the controller depends on timing, so two
runs of a seed are alike, not equal.
"""

from e2e.harness.chaos.checks import (
    Invariants,
    check_evictions,
    check_gangs,
    plan_versions,
)
from e2e.harness.chaos.config import BYSTANDER, PREEMPTOR, VICTIM, ChaosConfig, Made
from e2e.harness.chaos.faults import proxy_faults
from e2e.harness.chaos.report import Report
from e2e.harness.chaos.run import Chaos

__all__ = ["BYSTANDER", "PREEMPTOR", "VICTIM", "Chaos", "ChaosConfig", "Invariants", "Made",
           "Report", "check_evictions", "check_gangs", "plan_versions", "proxy_faults"]
