"""The faults of a chaos run: the controller replicas as processes (`Replicas`), SIGKILLed on a
seeded schedule and restarted (`kill_at_random`), and the fault proxy's rates for one
command-line share (`proxy_faults`)."""

from __future__ import annotations

import random
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from kubernetes.client.rest import ApiException

from e2e.harness import kube
from e2e.harness.chaos.config import ChaosConfig
from e2e.harness.controller_run import start_controller_process
from e2e.harness.faultproxy import Faults


def proxy_faults(seed: int, share: float) -> Faults | None:
    """`share` of writes and evictions failed, a third of that of reads, 30 % of watches cut;
    None (no proxy) for 0."""
    if not share:
        return None
    return Faults(seed=seed, rates={"write": share, "read": share / 3, "watch": 0.3})


class Replicas:
    """Controller processes; a killed one is restarted under a new identity or, as a
    StatefulSet pod would be, under its old one (seeded)."""

    def __init__(self, c: kube.Cluster, cfg, workdir: Path, count: int, rnd: random.Random):
        self.c, self.cfg, self.dir, self.rnd = c, cfg, workdir, rnd
        self.procs: list[subprocess.Popen | None] = [None] * count
        self.identity = [f"r{i}" for i in range(count)]
        self.starts = Counter()
        self.kills, self.leader_kills = 0, 0

    def start(self, i: int) -> None:
        self.starts[i] += 1
        self.procs[i] = start_controller_process(
            self.c, self.cfg, self.dir, identity=self.identity[i],
            log_name=f"{self.identity[i]}-{self.starts[i]}.log")

    def start_all(self) -> None:
        for i in range(len(self.procs)):
            self.start(i)

    def leader(self) -> int | None:
        try:
            lease = self.c.coordination.read_namespaced_lease(self.cfg.lease_name,
                                                              self.cfg.lease_namespace)
        except ApiException:
            return None
        holder = lease.spec.holder_identity
        return self.identity.index(holder) if holder in self.identity else None

    def kill(self, i: int) -> None:
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait()
            self.kills += 1
        if self.rnd.random() < 0.5:
            self.identity[i] = f"r{i}-{self.starts[i]}"

    def stop_all(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            if p is not None:
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def logs_tail(self, lines: int = 30) -> str:
        out = []
        for f in sorted(self.dir.glob("r*.log")):
            text = [line for line in f.read_text(errors="replace").splitlines()
                    if "InsecureRequestWarning" not in line and "warnings.warn(" not in line]
            text = text[-lines:]
            out.append(f"--- {f.name}\n" + "\n".join(text))
        return "\n".join(out)



def kill_at_random(stop: threading.Event, cfg: ChaosConfig, replicas: Replicas,
                   before_kill: Callable[[], None]) -> None:
    """Until `stop`: every `cfg.kill_every` seconds (seeded), SIGKILL a replica (the Lease
    holder 3 times in 4) and restart it `cfg.restart_after` seconds later. `before_kill`
    runs before each kill (the driver counts kills made while a plan was unfinished)."""
    every = cfg.kill_every
    if every is None:
        return
    rnd = random.Random(f"{cfg.seed}/kills")
    while not stop.wait(rnd.uniform(*every)):
        leader = replicas.leader()
        if leader is not None and rnd.random() < 0.75:
            i = leader
        else:
            i = rnd.randrange(len(replicas.procs))
        replicas.leader_kills += i == leader
        before_kill()
        replicas.kill(i)
        if stop.wait(rnd.uniform(*cfg.restart_after)):
            replicas.start(i)
            return
        replicas.start(i)
