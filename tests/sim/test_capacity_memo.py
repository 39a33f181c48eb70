"""The engine's placement remembers asks that failed (``devices.Capacity.place``): the answer must
be the one working it out again gives, whatever happened in between. Two capacities run the
same random history, one remembering and one working every ask out; every answer and every
node's free room must agree, and remembering must actually spare work."""

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_preempt.policies.model.model import ZERO, Node, Resources
from ckpt_preempt.policies.sim import devices, workload

MODELS = ("A", "B")


class Forgetful(devices.Capacity):
    """The reference: never trusts a remembered failure."""

    def _still_fails(self, failure) -> bool:
        return False


class Counting(devices.Capacity):
    """The capacity under test, counting the asks it answered from memory."""

    remembered = 0

    def _still_fails(self, failure) -> bool:
        held = super()._still_fails(failure)
        self.remembered += held
        return held


def _nodes(spec):
    return [Node(name=f"n{i}", allocatable=Resources(cpu_milli=cpu, memory_mib=10**6, gpus=g))
            for i, (g, cpu, _, _) in enumerate(spec)]


members = st.builds(
    lambda gpus, milli, cpu, model: workload.Member(
        name="m", cpu_milli=cpu, memory_mib=1024, gpus=gpus if not milli else 1,
        gpu_milli=milli, gpu_spec=model),
    st.integers(1, 4), st.sampled_from([0, 0, 250, 500, 700]), st.sampled_from([1000, 8000]),
    st.sampled_from(["", "", "A", "B", "A|B"]))
asks = st.one_of(
    st.lists(members, min_size=1, max_size=4).map(tuple),
    st.tuples(members, st.integers(1, 4)).map(lambda t: (t[0],) * t[1]),  # a gang of equals
)
nodes = st.lists(st.tuples(st.integers(1, 8), st.sampled_from([16000, 64000]),
                           st.sampled_from(MODELS), st.integers(0, 1)), min_size=1, max_size=6)
steps = st.lists(st.one_of(
    st.tuples(st.just("place"), st.integers(0, 7)),  # ask k of the pool
    st.tuples(st.just("release"), st.integers(0, 50)),  # give back one placed ask
    st.tuples(st.just("cordon"), st.integers(0, 5)),  # hold a node's room back, then return it
), min_size=1, max_size=60)


@settings(max_examples=300, deadline=None)
@given(nodes, st.lists(asks, min_size=1, max_size=8), steps)
def test_remembered_failures_answer_as_working_it_out_does(spec, pool, history):
    built = _nodes(spec)
    models = [m for _, _, m, _ in spec]
    shared = [s for _, _, _, s in spec]
    caps = (Counting(built, models, shared), Forgetful(built, models, shared))
    placed: list[tuple[tuple, list[int], list[str]]] = []
    cordoned: dict[int, Resources] = {}
    serial = 0
    for op, k in history:
        if op == "place":
            ask = pool[k % len(pool)]
            serial += 1
            keys = [f"{serial}-{i}" for i in range(len(ask))]
            got = [c.place(ask, keys) for c in caps]
            assert got[0] == got[1]
            if got[0] is not None:
                placed.append((ask, got[0], keys))
        elif op == "release" and placed:
            ask, where, keys = placed.pop(k % len(placed))
            for c in caps:
                for m, i, key in zip(ask, where, keys, strict=True):
                    c.give(i, devices.requests(m), key)
        elif op == "cordon":
            i = k % len(built)
            for c in caps:
                if i in cordoned:
                    c.set_free(i, c.free[i] + cordoned[i])
                else:
                    held = c.free[i]
                    c.set_free(i, ZERO)
            if i in cordoned:
                del cordoned[i]
            else:
                cordoned[i] = held
        assert caps[0].free == caps[1].free
        assert caps[0].shared == caps[1].shared


def test_a_failed_ask_is_answered_from_memory_until_room_comes_back():
    cap = Counting(_nodes([(2, 64000, "A", 0), (2, 64000, "A", 0)]), ["A", "A"], [0, 0])
    big = (workload.Member(name="g", cpu_milli=1000, memory_mib=1024, gpus=2),) * 3
    small = (workload.Member(name="s", cpu_milli=1000, memory_mib=1024, gpus=1),)
    assert cap.place(big) is None  # 2 slots of 2 GPUs, 3 asked
    assert cap.place(big) is None and cap.remembered == 1  # nothing changed
    first = cap.place(small)
    assert first == [0]
    assert cap.place(big) is None and cap.remembered == 2  # only taken since
    cap.give(0, devices.requests(small[0]))
    assert cap.place(big) is None and cap.remembered == 3  # given back, still 2 slots


def test_a_remembered_gang_is_placed_once_its_last_slot_comes_back():
    # two 2-GPU nodes, one half taken; a gang of two 2-GPU members needs both nodes whole
    cap = Counting(_nodes([(2, 64000, "A", 0), (2, 64000, "A", 0)]), ["A", "A"], [0, 0])
    pair = (workload.Member(name="g", cpu_milli=1000, memory_mib=1024, gpus=2),) * 2
    one = (workload.Member(name="s", cpu_milli=1000, memory_mib=1024, gpus=1),)
    assert cap.place(one) == [0]
    assert cap.place(pair) is None  # one slot of two
    other = (workload.Member(name="t", cpu_milli=1000, memory_mib=1024, gpus=1),)
    assert cap.place(other) == [0]  # node 0 full now; nothing given back
    assert cap.place(pair) is None and cap.remembered == 1  # slots counted: 1
    cap.give(0, devices.requests(other[0]))
    assert cap.place(pair) is None and cap.remembered == 2  # still one slot (node 1)
    cap.give(0, devices.requests(one[0]))
    assert cap.place(pair) == [0, 1]  # exactly the two slots it needs: worked out, placed
