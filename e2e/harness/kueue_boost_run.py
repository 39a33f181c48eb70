"""`ckpt-preempt kueue-boost` as its own process for the Kueue bench's e2e tests (no tests here).

    with running_kueue_boost(c, tmp, namespaces=[ns_a, ns_b]) as kb:   # kb.log, kb.tail()
        ...

It runs with the cluster's admin kubeconfig (the component's own RBAC is the chart's, tested in
test_kueue_boost_chart.py), `--kueue-priority-boost on` (the bench's Kueue runs with the
PriorityBoost gate), a controller config whose `namespaces` scope the Workloads it may write,
and `--interval` seconds between passes at most. Returns once its Workload informer has found
Kueue's API (the log line "kueue: watching workloads..."); stopped with SIGTERM afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from e2e.harness import kube

READY = b"kueue: watching workloads."


@dataclass
class KueueBoost:
    proc: subprocess.Popen
    log: Path

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return f"--- last {lines} lines of {self.log} ---\n" + "\n".join(
            text.splitlines()[-lines:])

    def alive(self) -> bool:
        return self.proc.poll() is None


@contextmanager
def running_kueue_boost(c: kube.Cluster, workdir: Path, *, namespaces: list[str],
                        interval: float = 1.0, extra_config: dict | None = None
                        ) -> Iterator[KueueBoost]:
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "kueue-boost.json"
    cfg.write_text(json.dumps({"namespaces": list(namespaces), **(extra_config or {})}))
    log = workdir / "kueue-boost.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ckpt_preempt.controller.app.cli", "kueue-boost",
             "--kubeconfig", str(c.kubeconfig), "--config", str(cfg),
             "--kueue-priority-boost", "on", "--interval", str(interval),
             "--log-level", "info"],
            stdout=out, stderr=subprocess.STDOUT,
            # the bench's kubeconfig skips TLS verification: keep urllib3's warning out of the log
            env={**os.environ, "PYTHONWARNINGS": "ignore:Unverified HTTPS request"})
    kb = KueueBoost(proc=proc, log=log)
    try:
        def ready():
            if not kb.alive():
                raise AssertionError(f"kueue-boost exited with {proc.returncode}\n{kb.tail()}")
            return True if READY in log.read_bytes() else kube.NotYet(kb.tail(5))
        kube.wait_for("kueue-boost to watch Kueue's Workloads", ready, timeout=60)
        yield kb
    finally:
        kube.stop_process(proc)
