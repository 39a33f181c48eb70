"""Our placement scorer where the planner places a pod without preemption (gated gang
admission, mode b, and any preemptor that already fits): the same measure the kube-scheduler
extender's prioritize uses (``ours.Ours``), on a per-device view of the planner's node-level
``Resources``.

The planner's ``search.NodeSearch.fit_without_preemption`` orders the nodes where a pod fits as
things stand by:

1. the node's GPU health (``policies.model.health``): healthy, unknown, then degraded; failing nodes
   are closed and never considered;
2. for ``nvlink: preferred`` pods of 2+ GPUs, a node where one NVLink domain surely fits first;
3. our scorer's key (``key``): the fragmentation decrease as an integer score, then its
   BestFit tie-break (least CPU and GPU left), higher first;
4. the node's name.

Only nodes that tie on 1 and 2 are scored, so the added cost is one scorer call per candidate
node that could win. ``BESTFIT`` keeps the old rule instead of 3 (fewest whole GPUs left over).

**The per-device view** (``device_view``), from what a ``Snapshot`` knows:

- a pod with whole GPUs sees the node's ``allocatable.gpus`` devices, the used ones first and
  each free one whole (1000 milli): Kubernetes does not say which device a pod got, and the
  extender's view (``controller.extender.extender_model``) puts used GPUs on the lowest indices too;
- a pod with only MIG slices (``gpu_milli``) sees the node's MIG capacity cut into devices of
  1000 milli (the last one the remainder), the used milli packed onto the first ones. Slices are
  fixed partitions in reality; this is an approximation that keeps the scorer's measure
  meaningful (how much MIG room is left, and how scattered);
- CPU and memory as they are; no NVLink domains (the scorer does not use them; step 2 does).

**The target workload** is what the cluster runs and waits for: the typical shapes
(``fgd.typical_from_counts``) of every pod in the snapshot, counted once per controller cycle
(``Snapshot.request_counts``). The extender learns its target online from the same pods.

**Gangs** (``GANG_BLOCK``): a gang's members are placed one after the other, each seeing the
earlier ones' choices. Scored one by one, the scorer is myopic: it can spread two 2-GPU members
over two nodes and leave neither able to take a 4-GPU pod, where BestFit fills one node.
With ``GANG_BLOCK``, a node is scored by placing on it as many of the gang's members still to
place with the same request as fit there (up to all of them): the decrease of that block. What
this buys is measured by ``bench/admission_placement.py`` (policies/placement/README.md).
"""

from __future__ import annotations

from ckpt_preempt.policies.model.model import Node, Resources
from ckpt_preempt.policies.model.snapshot import Snapshot
from ckpt_preempt.policies.placement import fgd
from ckpt_preempt.policies.placement.devices import MILLI_PER_GPU, GpuNode, PodShape, fits
from ckpt_preempt.policies.placement.ours import Ours

BESTFIT = "bestfit"  # fewest whole GPUs left over (the planner's rule before the scorer)
PER_POD = "ours"  # our scorer, one member at a time (what the extender does per pod)
GANG_BLOCK = "ours-gang"  # our scorer on the block of same-request members a node can take
PLACEMENTS = (GANG_BLOCK, PER_POD, BESTFIT)
ANY_MODEL = ""  # no GPU model is known to the planner; pods carry no gpu_spec either
UNSCORED = (float("-inf"), float("-inf"))  # a node the per-device view cannot hold the pod on


def pod_shape(requests: Resources) -> PodShape:
    """A request as the placement model counts it: whole GPUs if any (MIG slices beside them
    are not scored); else MIG slices as a share of one device, or whole devices from 1000
    milli up; else CPU only."""
    r = requests
    if r.gpus:
        return PodShape(cpu_milli=r.cpu_milli, memory_mib=r.memory_mib, gpu_count=r.gpus,
                        gpu_milli=MILLI_PER_GPU)
    if r.gpu_milli >= MILLI_PER_GPU:
        return PodShape(cpu_milli=r.cpu_milli, memory_mib=r.memory_mib,
                        gpu_count=-(-r.gpu_milli // MILLI_PER_GPU), gpu_milli=MILLI_PER_GPU)
    return PodShape(cpu_milli=r.cpu_milli, memory_mib=r.memory_mib,
                    gpu_count=1 if r.gpu_milli else 0, gpu_milli=r.gpu_milli)


def device_view(node: Node, free: Resources, mig: bool = False) -> GpuNode:
    """The node as the placement model sees it, with ``free`` left: its whole GPUs, or with
    ``mig`` its MIG capacity (see the module docstring)."""
    alloc = node.allocatable
    if mig:
        used = max(0, alloc.gpu_milli - free.gpu_milli)
        devices = []
        for start in range(0, alloc.gpu_milli, MILLI_PER_GPU):
            size = min(MILLI_PER_GPU, alloc.gpu_milli - start)
            taken = min(size, used)
            used -= taken
            devices.append(size - taken)
        gpu_free = tuple(devices)
    else:
        idle = max(0, min(free.gpus, alloc.gpus))
        gpu_free = (0,) * (alloc.gpus - idle) + (MILLI_PER_GPU,) * idle
    return GpuNode(name=node.name, model=ANY_MODEL, cpu_milli=alloc.cpu_milli,
                   memory_mib=alloc.memory_mib, gpu_free=gpu_free, cpu_free=free.cpu_milli,
                   memory_free=free.memory_mib)


def target(snapshot: Snapshot) -> tuple[fgd.TargetPod, ...]:
    """The typical shapes of every pod in the snapshot."""
    counts: dict[PodShape, int] = {}
    for requests, n in snapshot.request_counts.items():
        shape = pod_shape(requests)
        counts[shape] = counts.get(shape, 0) + n
    return fgd.typical_from_counts(counts)


def block_size(requests: Resources, free: Resources, members: int) -> int:
    """How many of ``members`` pods asking ``requests`` fit in ``free`` together (at least 1:
    the one being placed fits). Only whole-GPU and CPU-only requests form blocks; a MIG share
    is scored alone."""
    r = requests
    if members <= 1 or (r.gpu_milli and not r.gpus):
        return 1
    k = members
    for want, have in ((r.gpus, free.gpus), (r.cpu_milli, free.cpu_milli),
                       (r.memory_mib, free.memory_mib), (r.gpu_milli, free.gpu_milli)):
        if want > 0:
            k = min(k, have // want)
    return max(1, k)


class AdmissionScorer:
    """Our scorer for one planning search; its memo lives as long as the search."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.ours = Ours.with_target(target(snapshot))
        # nodes of one shape in one state score alike: large clusters have few such pairs
        self._memo: dict[tuple, tuple[float, float]] = {}

    def key(self, node: Node, free: Resources, requests: Resources,
            members: int = 1) -> tuple[float, float]:
        """Our scorer's key for placing ``members`` pods asking ``requests`` (those of them
        that fit, ``block_size``) on ``node`` with ``free`` left; higher is better."""
        memo = (node.allocatable, free, requests, members)
        got = self._memo.get(memo)
        if got is None:
            got = self._memo[memo] = self._key(node, free, requests, members)
        return got

    def _key(self, node: Node, free: Resources, requests: Resources,
             members: int) -> tuple[float, float]:
        k = block_size(requests, free, members)
        block = Resources(cpu_milli=requests.cpu_milli * k, memory_mib=requests.memory_mib * k,
                          gpus=requests.gpus * k, gpu_milli=requests.gpu_milli * k)
        shape = pod_shape(block)
        view = device_view(node, free, mig=bool(requests.gpu_milli and not requests.gpus))
        if not fits(view, shape):
            return UNSCORED
        got, _ = self.ours.evaluate(view, shape)
        return got
