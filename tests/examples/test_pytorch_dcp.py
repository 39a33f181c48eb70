"""The PyTorch DCP example with the real agent (its endpoint and signal hook) and a recording fake
of its API writes, no cluster: a request is saved by both ranks and acked, a cancel changes
nothing, a second request is saved at a later step, and SIGTERM makes both ranks save the step
they stop at, report it, and exit ``sdk.EXIT_CHECKPOINTED`` (75); started again, the run resumes
from that step with the losses of a run that never stopped. e2e/test_example_pytorch.py runs it
against the real API server and controller."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

import ckpt_preempt_sdk as sdk
from ckpt_preempt.controller.agent import agent, agent_process
from tests.controller.test_agent import DONE, Pod
from tests.examples.pytorch_env import EXAMPLE, START_SECONDS, Output, torch_python, trainer

_ = torch_python  # a fixture, used by name
ANSWER_SECONDS = 60
SAVED = r"checkpoint on request for plan {} at step (\d+) in (step-\d+) \(acked=(\w+)\)"


def test_request_cancel_request_then_sigterm(torch_python, tmp_path):
    pidfile, run = tmp_path / "train.pid", tmp_path / "run"
    pod = Pod(agent.SignalHook(pidfile=str(pidfile)))
    server = agent_process.serve(pod.agent, "127.0.0.1", 0)
    stop = threading.Event()

    def run_hooks() -> None:  # the agent's hook thread
        while not stop.is_set():
            pod.agent.process_hooks(block_seconds=0.1)

    threading.Thread(target=run_hooks, daemon=True).start()
    proc = subprocess.Popen(
        trainer(torch_python, run, "--pidfile", str(pidfile), "--step-seconds", "0.01",
                "--agent-url", f"http://127.0.0.1:{server.server_address[1]}"),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Output(proc)
    try:
        out.wait_for(r"^training from step 0$", START_SECONDS)
        pod.request("p1")  # the agent signals rank 0 (SIGUSR1); both ranks save; rank 0 acks
        first = out.wait_for(SAVED.format("p1"), ANSWER_SECONDS)
        assert first[3] == "True", first[0]
        assert pod.writer.acks() == [("ack", "p1")] and pod.writer.annotations[DONE] == "p1"
        assert (run / "checkpoints/latest").read_text() == first[2]
        assert sorted(p.name for p in (run / "checkpoints" / first[2]).iterdir()) == [
            ".metadata", "__0_0.distcp", "__1_0.distcp"]
        pod.seen()
        pod.withdraw()  # the plan aborts: SIGUSR2 and a cancelled event; training goes on
        out.wait_for(r"checkpoint request for plan p1 cancelled", ANSWER_SECONDS)
        pod.request("p2")
        second = out.wait_for(SAVED.format("p2"), ANSWER_SECONDS)
        assert second[3] == "True" and int(second[1]) > int(first[1]), (first[0], second[0])
        assert (run / "checkpoints/latest").read_text() == second[2]
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(ANSWER_SECONDS) == sdk.EXIT_CHECKPOINTED
        evicted = int(out.wait_for(r"^evicted at step (\d+)$", 10)[1])
        assert evicted >= int(second[1])
        stopped = out.wait_for(r"^saved on stop at step (\d+) in (step-\d+)$", 10)
        assert int(stopped[1]) == evicted and (run / "checkpoints/latest").read_text() == \
            stopped[2] == f"step-{evicted:08d}"
    finally:
        if proc.poll() is None:
            proc.kill()
        stop.set()
        server.shutdown()
    assert [w[0] for w in pod.writer.acks()] == ["ack", "ack", "last-checkpoint"]  # the stop's
    assert pod.agent._final


@pytest.mark.parametrize(("args", "says"), [
    (["--dir", "/proc/no-such-dir"], "cannot use --dir /proc/no-such-dir"),
    (["--dir", "{tmp}", "--nproc", "0"], "argument --nproc: must be >= 1"),
    (["--dir", "{tmp}", "--steps", "many"], "argument --steps: not a number"),
    (["--dir", "{tmp}", "--lr", "nan"], "argument --lr: must be >= 0.0"),
    (["--steps", "5"], "the following arguments are required: --dir"),
])
def test_bad_input_is_one_line_before_torch_is_imported(tmp_path, args, says):
    """The launcher checks its input with the standard library only (the product's python)."""
    r = subprocess.run([sys.executable, str(EXAMPLE / "train.py"),
                        *(a.format(tmp=tmp_path) for a in args)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and says in r.stderr, r.stderr
