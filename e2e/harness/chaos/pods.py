"""The pods of a chaos run (`Population`): fake 8-GPU nodes filled with victims (single pods
and gangs; `checkpoint: on-request` ones labelled for the acker, some never acknowledged;
grace periods of 0-4 s, so kwok keeps them Terminating a while, as a kubelet would),
bystanders that must never be evicted (equal priority, or outside the controller's
namespaces), and preemptors (8- and 4-GPU pods and 2-pod gangs, unschedulable in mode (a) or
gated in mode (b)). Every choice comes from the seed."""

from __future__ import annotations

import contextlib
import random
import time

from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.kube.records import ADMISSION_GATE
from e2e.harness import kube
from e2e.harness.chaos.config import (
    ACKS_LABEL,
    BYSTANDER,
    GPUS_PER_NODE,
    PREEMPTOR,
    PRIORITY,
    ROLE_LABEL,
    VICTIM,
    ChaosConfig,
    Group,
    Made,
)
from e2e.harness.controller_run import HIGH_KUBE, HIGH_NEVER, LOW, LOWER, priority_classes, rfc3339


class Population:
    """What the driver created (`made`, by "namespace/name"; `groups`, the preemptors by key;
    `nodes`) in `namespace`, and in `out_namespace` the bystanders out of the controller's
    scope."""

    def __init__(self, c: kube.Cluster, namespace: str, pool: str, cfg: ChaosConfig) -> None:
        self.c, self.ns, self.pool, self.cfg = c, namespace, pool, cfg
        self.out_ns = f"{namespace}-out"  # bystanders the controller may never touch
        self.rnd = random.Random(cfg.seed)
        self.made: dict[str, Made] = {}
        self.groups: dict[str, Group] = {}
        self.nodes: list[str] = []
        self.seq = 0

    def setup(self) -> None:
        priority_classes(self.c)
        self.c.core.create_namespace({"metadata": {"name": self.out_ns}})
        self.nodes = kube.create_gpu_nodes(self.c, self.cfg.nodes, prefix=f"{self.pool}-n",
                                           pool=self.pool, gpus=GPUS_PER_NODE)
        for node in self.nodes[: max(1, self.cfg.nodes // 4)]:
            self._pod(BYSTANDER, HIGH_KUBE, 2, node=node)  # same priority as the preemptors
            self._pod(BYSTANDER, LOWER, 2, node=node, namespace=self.out_ns)  # out of scope
        self.refill({n: self.free(n, []) for n in self.nodes})

    def teardown(self) -> None:
        """Remove what setup() made outside the caller's namespace (nodes, the out-of-scope
        namespace)."""
        kube.delete_nodes(self.c, self.nodes)
        with contextlib.suppress(ApiException):
            self.c.core.delete_namespace(self.out_ns, grace_period_seconds=0)

    def _name(self, prefix: str) -> str:
        self.seq += 1
        return f"{prefix}{self.seq}"

    def _pod(self, role: str, pclass: str, gpus: int, *, node: str | None = None,
             namespace: str | None = None, name: str | None = None, gang: str | None = None,
             gang_total: int | None = None, gates: tuple[str, ...] = (),
             **kw) -> Made:
        ns = namespace or self.ns
        name = name or self._name({VICTIM: "v", BYSTANDER: "b", PREEMPTOR: "p"}[role])
        labels = {ROLE_LABEL: role, **kw.pop("labels", {})}
        pod = kube.create_pod(self.c, ns, name, gpus=gpus, pool=self.pool, priority_class=pclass,
                              node_name=node, gang=gang, gang_total=gang_total, labels=labels,
                              scheduling_gates=gates, **kw)
        m = Made(namespace=ns, name=name, uid=pod.metadata.uid, role=role,
                 priority=PRIORITY[pclass], gang=gang, gpus=gpus, node=node)
        self.made[f"{ns}/{name}"] = m
        return m

    def _victim_kwargs(self) -> dict:
        r = self.rnd.random()
        kw: dict = {"grace_seconds": self.rnd.choice((0, 1, 2, 4))}
        if r < 0.45:
            kw.update(checkpoint="on-request", checkpoint_seconds=self.rnd.randint(2, 5),
                      labels={ACKS_LABEL: "yes" if self.rnd.random() < 0.6 else "no"})
        elif r < 0.8:
            kw.update(checkpoint="periodic",
                      last_checkpoint=rfc3339(self.rnd.uniform(60, 7200)))
        return kw

    def refill(self, free: dict[str, int]) -> None:
        """Fill free GPUs with victims: pods of 8, 4 or 2 GPUs, some as 2-pod gangs (on one
        node or across two)."""
        pieces: list[tuple[str, int]] = []
        for node, gpus in sorted(free.items()):
            while gpus > 0:
                size = self.rnd.choice([s for s in (8, 4, 4, 2) if s <= gpus] or [gpus])
                pieces.append((node, size))
                gpus -= size
        self.rnd.shuffle(pieces)
        while pieces:
            node, size = pieces.pop()
            pclass = self.rnd.choice((LOW, LOWER))
            mate = next((i for i, (n, s) in enumerate(pieces) if s == size), None)
            if mate is not None and self.rnd.random() < 0.35:
                node2, _ = pieces.pop(mate)
                gang, kw = self._name("g"), self._victim_kwargs()
                for i, n in enumerate((node, node2)):
                    self._pod(VICTIM, pclass, size, node=n, name=f"{gang}-{i}", gang=gang,
                              gang_total=2, **dict(kw, labels=dict(kw.get("labels", {}))))
            else:
                self._pod(VICTIM, pclass, size, node=node, **self._victim_kwargs())

    def free(self, node: str, pods: list) -> int:
        used = sum(self.gpus(p) for p in pods if p.spec.node_name == node
                   and p.status.phase not in ("Succeeded", "Failed"))
        bystanders = sum(m.gpus for m in self.made.values()
                         if m.namespace == self.out_ns and m.node == node)
        return GPUS_PER_NODE - used - bystanders

    @staticmethod
    def gpus(p) -> int:
        return sum(int((c.resources.requests or {}).get(kube.GPU, 0)) for c in p.spec.containers)

    def launch(self, candidates: int) -> None:
        """One new preemptor, of a kind that fits the nodes that could be freed: a pod or a
        2-pod gang, pending (mode a) or gated (mode b)."""
        kinds = [(mode, 4, size) for mode in ("nominate", "admit") for size in (1, 2)]
        if candidates >= 1:
            kinds += [("nominate", 8, 1), ("admit", 8, 1)]
        if candidates >= 2:
            kinds += [("nominate", 8, 2), ("admit", 8, 2)]
        mode, gpus, size = self.rnd.choice(kinds)
        withdraw = self.rnd.random() < self.cfg.withdraw_share
        hold = self.rnd.uniform(0.5, 3.0)
        gates = (ADMISSION_GATE,) if mode == "admit" else ()
        if size == 1:
            names = [self._pod(PREEMPTOR, HIGH_NEVER, gpus, gates=gates, grace_seconds=0).name]
            key = names[0]
        else:
            key = self._name("q")
            names = [self._pod(PREEMPTOR, HIGH_NEVER, gpus, name=f"{key}-{i}", gang=key,
                               gang_total=size, gates=gates, grace_seconds=0).name
                     for i in range(size)]
        self.groups[key] = Group(key=key, mode=mode, members=names, created=time.monotonic(),
                                 withdraw=withdraw, hold=hold)

    def delete(self, g: Group, why: str) -> None:
        for name in g.members:
            with contextlib.suppress(ApiException):
                self.c.core.delete_namespaced_pod(name, self.ns, grace_period_seconds=0)
        g.ended = why

