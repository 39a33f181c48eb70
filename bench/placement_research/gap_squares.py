"""Our scorer with a Sum-of-Squares term for shared GPUs: a third-round idea for the 190-milli
and pairing remainders (README, "Third round"). Pure.

Sum of Squares (Csirik, Johnson, Kenyon, Orlin, Shor and Weber, "On the sum-of-squares
algorithm for bin packing", J. ACM 53(1), 2006) packs items of discrete sizes online: with
N(h) the number of open bins whose gap is h (0 < h < capacity), it puts each item where
sum N(h)^2 grows least. For distributions that admit a perfect packing its expected waste
grows only as the square root of the number of items, where Best Fit's can grow linearly.
Shared GPUs are such bins: capacity 1000 milli, pod sizes in steps of 10.

Here the bins are every GPU of the cluster that holds a shared pod; whole-GPU pods fill a GPU
and never count. The term depends on the whole cluster, not on one node, so it cannot live in
``protocol.run``'s memo of scores per node state: ``run`` below is the protocol's loop
without that memo (the same arrivals, node order, feasibility and first-node tie rule), and
with ``mode="off"`` it places exactly as ``protocol.run`` does with ``Ours``.

Modes, for a shared pod (other pods are placed by ``Ours`` alone):
- ``"tie"``: our integer score first; among equal scores, the smaller growth of sum N(h)^2;
- ``"first"``: the growth of sum N(h)^2 first, then our score;
- ``"blend"``: our score minus ``weight`` x growth / 100.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ckpt_preempt.policies.placement.devices import MILLI_PER_GPU, GpuNode, PodShape, fits, place
from ckpt_preempt.policies.placement.ours import Ours
from ckpt_preempt.policies.placement.protocol import RunResult

MODES = ("off", "tie", "first", "blend")
BLEND_UNITS = 100.0  # one integer score point is worth this much growth of sum N(h)^2


def square_growth(gaps: Counter[int], free: int, milli: int) -> int:
    """How much sum N(h)^2 grows when a pod of ``milli`` goes on a GPU with ``free`` milli."""
    left = free - milli
    growth = 0
    if free < MILLI_PER_GPU:  # the GPU leaves gap ``free``: (n-1)^2 - n^2
        growth -= 2 * gaps[free] - 1
    if left > 0:  # and joins gap ``left``: (n+1)^2 - n^2
        growth += 2 * gaps[left] + 1
    return growth


def _shared_key(policy: Ours, node: GpuNode, pod: PodShape, gaps: Counter[int], mode: str,
                weight: float) -> tuple[tuple, tuple[int, ...]]:
    """The node's key for shared ``pod`` (larger is better) and its best GPU. Within the node
    the GPU with the best head wins, then the tightest, then the lowest index (as ``Ours``);
    between nodes the head, then our tie-break."""
    best: tuple[tuple, int] | None = None
    for i, g, score in policy.gpu_scores(node, pod):
        growth = 0 if mode == "off" else square_growth(gaps, g, pod.gpu_milli)
        if mode == "first":
            head: tuple = (-growth, score)
        elif mode == "blend":
            head = (score - weight * growth / BLEND_UNITS,)
        else:  # "off" (growth 0) and "tie"
            head = (score, -growth)
        if best is None or (head, -g) > best[0]:
            best = ((head, -g), i)
    if best is None:
        raise ValueError(f"{node.name}: pod does not fit")
    (head, _), i = best
    return (*head, policy.tie(node, pod)), (i,)


def run(nodes: Sequence[GpuNode], pods: Sequence[PodShape], policy: Ours, seed: int,
        mode: str = "tie", weight: float = 1.0) -> RunResult:
    """Place ``pods`` one by one as ``protocol.run`` does, shared pods by ``mode``."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    state = list(nodes)
    gaps: Counter[int] = Counter()  # N(h): GPUs holding a shared pod with h milli free
    total = sum(n.gpu_count for n in state) * MILLI_PER_GPU
    memo: dict[tuple, tuple] = {}  # non-shared pods: Ours' score per (pod, node state)
    arrived = allocated = placed = failed = evaluations = 0
    version = policy.version
    curve = [(0, 0)]
    failed_at: list[int] = []
    for index, pod in enumerate(pods):
        policy.observe(pod)
        if policy.version != version:  # an online target changed: scores are stale
            memo.clear()
            version = policy.version
        arrived += pod.total_gpu_milli
        best: tuple[tuple, int, tuple[int, ...]] | None = None
        for i, node in enumerate(state):
            if node.memory_free < pod.memory_mib or node.cpu_free < pod.cpu_milli:
                continue
            if not fits(node, pod):
                continue
            evaluations += 1
            if pod.is_shared:
                key, gpus = _shared_key(policy, node, pod, gaps, mode, weight)
            else:
                state_key = (pod, node.model, node.cpu_free, node.gpu_free, node.kinds)
                hit = memo.get(state_key)
                if hit is None:
                    hit = memo[state_key] = policy.evaluate(node, pod)
                key, gpus = hit
            if best is None or key > best[0]:  # ties: the first node in order
                best = (key, i, gpus)
        if best is None:
            failed += 1
            failed_at.append(index)
        else:
            _, i, gpus = best
            if pod.is_shared:
                free = state[i].gpu_free[gpus[0]]
                if free < MILLI_PER_GPU:
                    gaps[free] -= 1
                if free - pod.gpu_milli > 0:
                    gaps[free - pod.gpu_milli] += 1
            state[i] = place(state[i], pod, gpus)
            allocated += pod.total_gpu_milli
            placed += 1
        curve.append((arrived, allocated))
    return RunResult(
        policy=f"Ours+sum-of-squares({mode})", seed=seed, arrived=placed + failed, placed=placed,
        failed=failed, fallbacks=0, evaluations=evaluations, total_gpu_milli=total,
        curve=tuple(curve), failed_indices=tuple(failed_at), nodes=tuple(state))
