"""The checkpoint agent's decisions, with a recording fake of its only writes (``PodWriter``).

The fake holds the pod's annotations as the API server would and refuses an ack whose drain
annotation no longer matches, as the real writer's JSON-patch ``test`` makes the server do
(e2e/test_controller_agent.py checks that against a real API server).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ckpt_preempt_sdk as sdk
from ckpt_preempt.controller.agent import agent, agent_process
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.annotations import EXPECTED_END, LAST_CHECKPOINT
from ckpt_preempt.policies.model.times import rfc3339
from ckpt_preempt_sdk import State

NOW = 1_800_000_000.0
DRAIN, DONE = plan_record.DRAIN_ANNOTATION, plan_record.DONE_ANNOTATION


class RecordingWriter:
    """The pod's annotations as the API server holds them, and every write the agent tried
    (``refused``: the ack's drain annotation no longer matched, so nothing was written)."""

    def __init__(self) -> None:
        self.annotations: dict[str, str] = {}
        self.writes: list[tuple[str, ...]] = []

    def ack(self, *, plan: str, drain_raw: str, at: float) -> bool:
        if self.annotations.get(DRAIN) != drain_raw:
            self.writes.append(("refused", plan))
            return False
        self.annotations.update({DONE: plan, LAST_CHECKPOINT: rfc3339(at)})
        self.writes.append(("ack", plan))
        return True

    def checkpointed(self, *, at: float) -> None:
        self.annotations[LAST_CHECKPOINT] = rfc3339(at)
        self.writes.append(("last-checkpoint", rfc3339(at)))

    def expected_end(self, *, at: float) -> None:
        self.annotations[EXPECTED_END] = rfc3339(at)
        self.writes.append(("expected-end", rfc3339(at)))

    def acks(self) -> list[tuple[str, ...]]:
        """The writes but the declared ends (a loop's progress, every few seconds)."""
        return [w for w in self.writes if w[0] != "expected-end"]


class RecordingHook(agent.Hook):
    def __init__(self, *, saves: bool = True) -> None:
        self.saves, self.calls = saves, []

    def checkpoint(self, request: plan_record.DrainRequest) -> bool:
        self.calls.append(("checkpoint", request.plan))
        return self.saves

    def cancel(self, request: plan_record.DrainRequest) -> None:
        self.calls.append(("cancel", request.plan))


def drain_raw(plan: str) -> str:
    return plan_record.drain_to_annotation(plan_record.DrainRequest(plan=plan, requested=NOW,
                                                                deadline=NOW + 60))


class Pod:
    """A pod whose annotations change on the API server; ``seen`` shows them to the agent."""

    def __init__(self, hook: agent.Hook | None = None) -> None:
        self.writer = RecordingWriter()
        self.agent = agent.CheckpointAgent(self.writer, hook=hook, clock=lambda: NOW)

    def seen(self) -> None:
        self.agent.observe(dict(self.writer.annotations))

    def request(self, plan: str, *, seen: bool = True) -> None:
        self.writer.annotations[DRAIN] = drain_raw(plan)
        if seen:
            self.seen()

    def withdraw(self, *, seen: bool = True) -> None:
        self.writer.annotations.pop(DRAIN, None)
        if seen:
            self.seen()

    def states(self) -> list[tuple[State, str]]:
        _, events = self.agent.changes(0, 0)
        return [(e.state, e.plan) for e in events]


def test_a_request_runs_the_hook_once_and_is_acknowledged():
    hook = RecordingHook()
    pod = Pod(hook)
    pod.request("p1")
    pod.seen()  # the same request again (any other change to the pod)
    pod.agent.process_hooks()
    pod.seen()  # the agent's own ack comes back through the watch
    pod.agent.process_hooks()
    assert hook.calls == [("checkpoint", "p1")]
    assert pod.writer.writes == [("ack", "p1")]
    assert pod.writer.annotations[DONE] == "p1"
    assert pod.writer.annotations[LAST_CHECKPOINT] == rfc3339(NOW)
    assert pod.states() == [(State.REQUESTED, "p1"), (State.ACKED, "p1")]
    status = pod.agent.status()
    assert (status.state, status.plan, status.deadline) == (State.ACKED, "p1", NOW + 60)


def test_cancel_before_the_ack_writes_no_ack():
    hook = RecordingHook(saves=False)  # the workload will ack through the SDK
    pod = Pod(hook)
    pod.request("p1")
    pod.agent.process_hooks()
    pod.withdraw()
    pod.agent.process_hooks()
    assert pod.agent.ack("p1") is False  # the workload's late ack
    assert hook.calls == [("checkpoint", "p1"), ("cancel", "p1")]
    assert pod.writer.writes == []
    assert DONE not in pod.writer.annotations
    assert pod.states() == [(State.REQUESTED, "p1"), (State.CANCELLED, "p1")]
    assert (pod.agent.status().state, pod.agent.status().plan) == (State.CANCELLED, "p1")


def test_a_cancel_the_agent_has_not_seen_yet_still_blocks_the_ack():
    """The request is gone (or replaced) on the API server before the watch shows it."""
    for replacement in (None, "p2"):
        pod = Pod()
        pod.request("p1")
        if replacement is None:
            pod.withdraw(seen=False)
        else:
            pod.request(replacement, seen=False)
        assert pod.agent.ack("p1") is False
        assert pod.writer.writes == [("refused", "p1")]  # the server's test failed
        assert DONE not in pod.writer.annotations
        assert pod.agent.status().state is State.REQUESTED  # not acked
        pod.seen()
        assert pod.agent.ack("p1") is False
        assert pod.writer.writes == [("refused", "p1")]  # not even tried once seen


def test_a_request_withdrawn_before_its_hook_ran_reaches_no_hook():
    hook = RecordingHook()
    pod = Pod(hook)
    pod.request("p1")
    pod.withdraw()
    pod.agent.process_hooks()
    assert hook.calls == []
    assert pod.writer.writes == []


def test_cancel_after_the_ack():
    hook = RecordingHook()
    pod = Pod(hook)
    pod.request("p1")
    pod.agent.process_hooks()
    pod.seen()
    pod.withdraw()
    pod.agent.process_hooks()
    assert hook.calls == [("checkpoint", "p1"), ("cancel", "p1")]
    assert pod.writer.writes == [("ack", "p1")]
    assert pod.states() == [(State.REQUESTED, "p1"), (State.ACKED, "p1"),
                            (State.CANCELLED, "p1")]


def test_a_new_plan_replaces_the_old_one():
    hook = RecordingHook(saves=False)
    pod = Pod(hook)
    pod.request("p1")
    pod.agent.process_hooks()
    pod.request("p2")
    pod.agent.process_hooks()
    assert hook.calls == [("checkpoint", "p1"), ("cancel", "p1"), ("checkpoint", "p2")]
    assert pod.agent.ack("p1") is False
    assert pod.agent.ack("p2") is True
    assert pod.agent.ack("p2") is False  # once
    assert pod.writer.writes == [("ack", "p2")]
    assert pod.states() == [(State.REQUESTED, "p1"), (State.CANCELLED, "p1"),
                            (State.REQUESTED, "p2"), (State.ACKED, "p2")]


def test_a_cancelled_plan_is_never_requested_again():
    hook = RecordingHook()
    pod = Pod(hook)
    pod.request("p1")
    pod.agent.process_hooks()
    pod.withdraw()
    pod.request("p1")
    pod.agent.process_hooks()
    assert hook.calls == [("checkpoint", "p1"), ("cancel", "p1")]
    assert pod.writer.writes == [("ack", "p1")]
    assert pod.agent.status().state is State.CANCELLED


def test_a_restarted_agent_does_not_run_the_hook_for_a_request_already_acked():
    hook = RecordingHook()
    pod = Pod(hook)
    pod.writer.annotations.update({DRAIN: drain_raw("p1"), DONE: "p1"})
    pod.seen()
    pod.agent.process_hooks()
    assert hook.calls == []
    assert pod.agent.status().state is State.ACKED
    assert pod.agent.ack("p1") is False


def test_acks_name_the_standing_plan():
    pod = Pod()
    assert pod.agent.ack("p1") is False  # nothing requested
    pod.request("p1")
    assert pod.agent.ack("other") is False
    assert pod.writer.writes == []


def test_a_failing_hook_does_not_ack_and_the_agent_goes_on():
    class Failing(RecordingHook):
        def checkpoint(self, request):
            super().checkpoint(request)
            raise RuntimeError("disk full")

    hook = Failing()
    pod = Pod(hook)
    pod.request("p1")
    pod.agent.process_hooks()
    pod.request("p2")
    pod.agent.process_hooks()
    assert hook.calls == [("checkpoint", "p1"), ("cancel", "p1"), ("checkpoint", "p2")]
    assert pod.writer.writes == []


NOT_A_DRAIN = st.one_of(
    st.text(max_size=80),
    st.builds(json.dumps, st.dictionaries(st.sampled_from(["plan", "requested", "deadline", "x"]),
                                          st.one_of(st.text(max_size=30), st.integers(),
                                                    st.none()), max_size=4)),
    st.builds(lambda p: drain_raw("p9").replace('"p9"', json.dumps(p)), st.text(max_size=70)),
).filter(lambda raw: not _parses(raw))


def _parses(raw: str) -> bool:
    try:
        plan_record.drain_from_annotation(raw)
    except plan_record.DrainFormatError:
        return False
    return True


@given(NOT_A_DRAIN, st.booleans())
def test_a_malformed_drain_annotation_is_ignored(raw, standing):
    hook = RecordingHook(saves=False)
    pod = Pod(hook)
    if standing:
        pod.request("p1")
    before = pod.agent.status()
    pod.writer.annotations[DRAIN] = raw
    pod.seen()
    pod.agent.process_hooks()
    assert pod.agent.status() == before  # neither a request nor a cancel
    assert hook.calls == ([("checkpoint", "p1")] if standing else [])
    assert pod.writer.writes == []


def test_periodic_checkpoints_refresh_last_checkpoint():
    pod = Pod()
    pod.agent.checkpointed()
    assert pod.writer.writes == [("last-checkpoint", rfc3339(NOW))]


def test_events_after_a_gap_or_from_another_run_start_from_the_status():
    pod = Pod()
    pod.request("p1")
    assert pod.agent.changes(None, 0)[1] is None
    assert pod.agent.changes(5, 0)[1] is None  # counted by an earlier run of the agent
    status, events = pod.agent.changes(0, 0)
    assert status.seq == 1 and [e.plan for e in events] == ["p1"]


# ------------------------------------------------------------------------- SDK over loopback
@pytest.fixture
def served():
    pod = Pod()
    server = agent_process.serve(pod.agent, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield pod, sdk.Checkpointer(url, poll_seconds=0)
    server.shutdown()


def test_sdk_follows_requests_acks_and_cancels(served):
    pod, ckpt = served
    assert ckpt.events() == []
    assert ckpt.status().state is State.IDLE
    pod.request("p1")
    (ev,) = ckpt.events()
    assert (ev.state, ev.plan, ev.deadline) == (State.REQUESTED, "p1", NOW + 60)
    assert ckpt.done("p1") is True
    assert ckpt.done("p1") is False
    assert [(e.state, e.plan) for e in ckpt.events()] == [(State.ACKED, "p1")]
    pod.request("p2")
    pod.withdraw()
    assert [(e.state, e.plan) for e in ckpt.events()] == [
        (State.CANCELLED, "p1"), (State.REQUESTED, "p2"), (State.CANCELLED, "p2")]
    assert ckpt.done("p2") is False
    status = ckpt.status()
    assert (status.state, status.plan) == (State.CANCELLED, "p2")
    assert pod.writer.writes == [("ack", "p1")]
    ckpt.checkpointed()
    assert pod.writer.writes[-1][0] == "last-checkpoint"


def test_sdk_first_contact_sees_a_standing_request_once(served):
    pod, ckpt = served
    pod.request("p1")
    assert [(e.state, e.plan) for e in ckpt.events()] == [(State.REQUESTED, "p1")]
    assert ckpt.events() == []


def test_sdk_blocking_wait_returns_the_request(served):
    pod, ckpt = served
    assert ckpt.events() == []
    assert ckpt.events(timeout=0.2) == []  # nothing happens: returns empty after the timeout
    got: list = []
    waiter = threading.Thread(target=lambda: got.extend(ckpt.events(timeout=60)))
    waiter.start()
    pod.request("p1")
    waiter.join(timeout=60)
    assert not waiter.is_alive()
    assert [(e.state, e.plan) for e in got] == [(State.REQUESTED, "p1")]


def test_sdk_polls_at_most_every_poll_seconds(served):
    pod, ckpt = served
    slow = sdk.Checkpointer(ckpt.url, poll_seconds=3600)
    assert slow.events() == []
    pod.request("p1")
    assert slow.events() == []  # not asked again within the hour
    slow._poll_now.set()  # what the agent's signal does
    assert [e.plan for e in slow.events()] == ["p1"]


def test_endpoint_rejects_bad_input(served):
    _, ckpt = served
    assert ckpt._call("POST", "/done", {})[0] == 400
    assert ckpt._call("POST", "/done", {"plan": 3})[0] == 400
    assert ckpt._call("GET", "/events?after=x")[0] == 400
    assert ckpt._call("GET", "/nope")[0] == 404


def test_sdk_progress_declares_the_end_and_refuses_bad_numbers(served):
    pod, ckpt = served
    clock = [NOW, NOW + 60.0]
    pod.agent.clock = lambda: clock.pop(0) if len(clock) > 1 else clock[0]
    assert ckpt.progress(0, 1000) is None  # one report: no rate yet
    ckpt._last_progress = -float("inf")  # as if PROGRESS_SECONDS had passed
    # 100 steps a minute, 900 left: 9 minutes on
    assert ckpt.progress(100, 1000) == NOW + 60.0 + 540.0
    assert pod.writer.writes == [("expected-end", rfc3339(NOW + 600.0))]
    assert ckpt.progress(200, 1000) is None  # within PROGRESS_SECONDS: not sent
    ckpt._last_progress = -float("inf")
    for done, total in ((5, 0), (-1, 10), (11, 10), (float("nan"), 10), ("5", 10),
                        (True, 10)):  # a refused report does not hold back the next
        with pytest.raises(ValueError, match="refused the progress report"):
            ckpt.progress(done, total)
    assert len(pod.writer.writes) == 1
    assert ckpt._call("POST", "/progress", [1, 2])[0] == 400


def test_sdk_without_an_agent_raises_agent_unavailable():
    ckpt = sdk.Checkpointer("http://127.0.0.1:1", poll_seconds=0)
    for call in (ckpt.events, ckpt.status, ckpt.checkpointed, lambda: ckpt.done("p1"),
                 lambda: ckpt.progress(1, 2)):
        with pytest.raises(sdk.AgentUnavailable):
            call()


def test_a_failed_end_write_is_tried_again_on_the_next_report():
    pod = Pod()
    clock = [NOW, NOW + 60.0, NOW + 61.0]
    pod.agent.clock = lambda: clock.pop(0)
    pod.agent.progress({"done": 0, "total": 100})

    def broken(**_):
        raise OSError("connection refused")
    pod.writer.expected_end, working = broken, pod.writer.expected_end
    with pytest.raises(OSError):
        pod.agent.progress({"done": 10, "total": 100})
    pod.writer.expected_end = working
    assert pod.agent.progress({"done": 10.1, "total": 100}) is not None
    assert [w[0] for w in pod.writer.writes] == ["expected-end"]


def test_a_failed_api_write_is_reported_to_the_sdk(served):
    pod, ckpt = served

    def broken(**_):
        raise OSError("connection refused")
    pod.writer.checkpointed = broken
    with pytest.raises(sdk.AgentUnavailable, match="writing to the API server failed"):
        ckpt.checkpointed()


# ------------------------------------------------------------------------- hooks
REQUEST = plan_record.DrainRequest(plan="p1", requested=NOW, deadline=4_000_000_000.0)


def test_exec_hook_runs_the_command_and_the_cancel_command(tmp_path):
    import sys
    out = tmp_path / "out"
    cmd = (f"{sys.executable} -c \"import os,pathlib; pathlib.Path('{out}').write_text("
           "os.environ['CKPT_PREEMPT_ACTION'] + ' ' + os.environ['CKPT_PREEMPT_PLAN'])\"")
    hook = agent.ExecHook(cmd, cancel_command=cmd)
    assert hook.checkpoint(REQUEST) is True
    assert out.read_text() == "checkpoint p1"
    hook.cancel(REQUEST)
    assert out.read_text() == "cancel p1"
    with pytest.raises(RuntimeError, match="exited 3"):
        agent.ExecHook(f"{sys.executable} -c 'raise SystemExit(3)'").checkpoint(REQUEST)
    agent.ExecHook(f"{sys.executable} -c 'raise SystemExit(3)'").cancel(REQUEST)  # none set


def test_http_hook_posts_requests_and_cancels_to_their_urls():
    seen: list = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        hook = agent.HttpHook(f"{base}/save", cancel_url=f"{base}/cancel")
        assert hook.checkpoint(REQUEST) is True
        hook.cancel(REQUEST)
        agent.HttpHook(f"{base}/save").cancel(REQUEST)  # no cancel URL: nothing posted
    finally:
        server.shutdown()
    assert seen == [("/save", {"action": "checkpoint", "plan": "p1",
                               "deadline": rfc3339(REQUEST.deadline)}),
                    ("/cancel", {"action": "cancel", "plan": "p1"})]


CHILD = """
import signal, sys, time
for name in sys.argv[1:]:
    signal.signal(signal.Signals[name], lambda n, f: print(signal.Signals(n).name, flush=True))
print("ready", flush=True)
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("handled", [("SIGUSR1",), ("SIGUSR1", "SIGUSR2")])
def test_signal_hook_signals_only_what_the_process_handles(tmp_path, handled):
    import subprocess
    import sys
    child = subprocess.Popen([sys.executable, "-c", CHILD, *handled], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        pidfile = tmp_path / "pid"
        pidfile.write_text(f"{child.pid}\n")
        hook = agent.SignalHook(pidfile=str(pidfile))
        assert hook.checkpoint(REQUEST) is False  # the workload acks through the SDK
        assert child.stdout.readline() == "SIGUSR1\n"
        hook.cancel(REQUEST)  # SIGUSR2: sent only to a process that handles it
        if "SIGUSR2" in handled:
            assert child.stdout.readline() == "SIGUSR2\n"
        hook.checkpoint(REQUEST)
        assert child.stdout.readline() == "SIGUSR1\n"  # still alive, and nothing in between
        assert child.poll() is None
        agent.SignalHook(pid=child.pid, signum=agent.signal.SIGTERM).checkpoint(REQUEST)
        hook.checkpoint(REQUEST)  # SIGTERM was not sent: the child still answers
        assert child.stdout.readline() == "SIGUSR1\n"
    finally:
        child.kill()
        child.wait()
