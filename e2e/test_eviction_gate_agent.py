"""The eviction gate with the real checkpoint agent and SDK: `kubectl drain` of a node with a
training pod waits for the pod's own checkpoint, and the restarted loop loses nothing done
before it; the same drain without the gate loses the work since the last checkpoint.

The pod's "process" is examples/tiny_training/train.py run here with the SDK, next to the real
agent (`ckpt-preempt agent`, as the pod's identity with get/watch/patch on its own pod only).
The local control plane has no kubelet: once the drain has deleted the pod, the test ends the
loop as the kubelet would end a big model's container whose save cannot finish within its
grace period (SIGKILL: the loop's own save on SIGTERM is not counted). Lost work is the
training time between the loop's last save and that kill. Both cases start from the same
checkpoint (step SEED_STEPS, "the last periodic one"), train TRAIN_SECONDS with no periodic
save (a real job's next one is minutes away) and are drained the same way.

Prints one JSON line per case (`pytest -s`): lost seconds, GPU-hours lost per drained node
(lost seconds x the pod's GPUs / 3600) and the drain's wall time; a third line has the drain's
extra wall time with the gate. The assertions are behaviour only: with the gate, the restart
resumes from the step saved on request (the work lost is only what followed the ack); without
it, from the last periodic checkpoint."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.harness import kube
from e2e.harness.controller_run import (
    REPO,
    exists,
    free_port,
    grant_agent,
    start_agent,
    user_kubeconfig,
)
from e2e.harness.eviction_gate_run import gate_config, running_gate, start_drain

pytestmark = pytest.mark.e2e
TRAIN = REPO / "examples/tiny_training/train.py"
POD_GPUS = 8
# the pod's checkpoint-seconds and the gate's cap: a deadline far beyond the agent's ack, even
# on a slow machine (the ack, not the deadline, must release the drain)
CHECKPOINT_SECONDS = 60
SEED_STEPS = 100  # the checkpoint both cases start from
TRAIN_SECONDS = 8  # training since the last checkpoint when the drain begins
NEVER = 10**9  # --every: no periodic checkpoint within the test
NO_AGENT = "http://127.0.0.1:1"  # the seeding and resuming runs talk to no agent
SECONDS_PER_HOUR = 3600
ON_REQUEST = re.compile(r"checkpoint on request for plan (\S+) at step (\d+) \(acked=(\w+)\)")
RESUMED = re.compile(r"resumed from step (\d+)")


@dataclass(frozen=True)
class Case:
    """What one drained node cost: the loop's output up to its kill, where the restart resumed,
    the training time lost and the drain's wall time."""

    out: str
    resumed_step: int
    unsaved_s: float  # training since the last save when the drain began
    lost_s: float  # training since the last save when the loop was killed
    drain_s: float

    def report(self, case: str) -> None:
        line = {"measure": "eviction-gate-agent-drain", "case": case, "pod_gpus": POD_GPUS,
                "unsaved_at_drain_s": round(self.unsaved_s, 2), "lost_s": round(self.lost_s, 2),
                "gpu_hours_lost": round(self.lost_s * POD_GPUS / SECONDS_PER_HOUR, 5),
                "drain_s": round(self.drain_s, 2)}
        print(json.dumps(line))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _train(run: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TRAIN), "--dir", str(run), "--agent-url",
                           NO_AGENT, *args], capture_output=True, text=True, timeout=60)


def _drained(cluster, namespace, node, name, tmp: Path) -> Case:
    """A training pod on `node` (agent and SDK), drained with `kubectl drain` after
    TRAIN_SECONDS of training; its loop killed once the pod is gone, then run again."""
    run, pidfile = tmp / "run", tmp / "train.pid"
    seeded = _train(run, "--steps", str(SEED_STEPS), "--every", str(SEED_STEPS))
    assert seeded.returncode == 0, seeded.stdout + seeded.stderr
    kube.create_pod(cluster, namespace, name, gpus=POD_GPUS, node_name=node,
                    checkpoint="on-request", checkpoint_seconds=CHECKPOINT_SECONDS)
    kube.wait_pod_running(cluster, namespace, name)
    grant_agent(cluster, namespace, name)
    kubeconfig = user_kubeconfig(cluster, "ckpt-preempt-agent", tmp / "agent.kubeconfig")
    port = free_port()
    loop = subprocess.Popen(
        [sys.executable, str(TRAIN), "--dir", str(run), "--steps", str(NEVER), "--every",
         str(NEVER), "--pidfile", str(pidfile), "--agent-url", f"http://127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    agent = start_agent(cluster, kubeconfig, namespace, name, tmp, "--signal-pidfile",
                        str(pidfile), port=port)
    try:
        kube.wait_for("the agent's local endpoint", lambda: _listening(port), timeout=60)
        kube.wait_for("the loop to train", pidfile.exists, timeout=60)
        trained_from = pidfile.stat().st_mtime  # written as the loop starts its steps
        time.sleep(max(0.0, trained_from + TRAIN_SECONDS - time.time()))  # the work at stake
        start, unsaved = time.monotonic(), time.time() - trained_from
        drain = start_drain(cluster, node, timeout=CHECKPOINT_SECONDS + 30)

        def pod_ended():
            if drain.poll() not in (None, 0):
                raise AssertionError(f"kubectl drain failed: {drain.communicate()}")
            return not exists(cluster, namespace, name)
        kube.wait_for("the drain to delete the pod", pod_ended, timeout=CHECKPOINT_SECONDS + 30,
                      interval=0.1)
        loop.send_signal(signal.SIGKILL)  # the kubelet's end of a container that cannot save
        killed = time.time()
        drain_out, drain_err = drain.communicate(timeout=60)
        drain_s = time.monotonic() - start
        out, _ = loop.communicate(timeout=10)
    finally:
        kube.stop_process(agent)
        if loop.poll() is None:
            loop.kill()
            loop.wait()
    assert drain.returncode == 0, drain_err
    assert f'pod/{name} evicted' in drain_out, drain_out
    kube.wait_pod_gone(cluster, namespace, name)
    saved = max((run / "checkpoint.json").stat().st_mtime, trained_from)
    again = _train(run, "--steps", "0")  # resume, then stop at once: where would it go on?
    resumed = RESUMED.search(again.stdout)
    assert resumed, again.stdout + again.stderr
    return Case(out=out, resumed_step=int(resumed.group(1)), unsaved_s=unsaved,
                lost_s=killed - saved, drain_s=drain_s)


def _gate_answers(log: str, namespace: str, name: str) -> list[str]:
    """The gate's answers to the Evictions of one pod, in order ("refused: ...", "allowed:
    ...")."""
    prefix = f"eviction of {namespace}/{name} "
    msgs = [json.loads(line)["msg"] for line in log.splitlines() if line.startswith("{")]
    return [m.removeprefix(prefix) for m in msgs if m.startswith(prefix)]


def test_drain_waits_for_the_agents_ack_and_the_restart_resumes_from_that_checkpoint(
        cluster, namespace, gpu_nodes, tmp_path):
    bare, gated = gpu_nodes(2)

    # without the gate: evicted at once, the restart resumes from the last periodic checkpoint
    without = _drained(cluster, namespace, bare, "train-bare", tmp_path / "bare")
    assert "checkpoint on request" not in without.out  # nobody asked it to save
    assert without.resumed_step == SEED_STEPS  # every step trained since then is lost

    # with the gate: refused (429) until the agent acks the loop's save, then evicted
    with running_gate(cluster, namespace, tmp_path / "gate",
                      gate_config(cap=CHECKPOINT_SECONDS)) as gate:
        with_gate = _drained(cluster, namespace, gated, "train-gated", tmp_path / "gated")
        gate_log = gate.log.read_text()
    asked = ON_REQUEST.search(with_gate.out)
    assert asked, with_gate.out
    plan, saved_step, acked = asked.group(1), int(asked.group(2)), asked.group(3)
    assert plan.startswith("disruption/")
    assert acked == "True"  # the agent wrote checkpoint-done=plan on the pod, not the test
    # the gate refused (429: kubectl retried quietly) until the ack, which released it
    answers = _gate_answers(gate_log, namespace, "train-gated")
    assert answers, gate_log[-2000:]
    assert answers[0].startswith("refused: the pod is asked to checkpoint first") \
        and plan in answers[0], answers
    assert all(a.startswith("refused: waiting for the pod") for a in answers[1:-1]), answers
    assert answers[-1] == f"allowed: checkpoint acknowledged for {plan}", answers
    assert with_gate.resumed_step == saved_step > SEED_STEPS  # nothing before the ack is lost

    without.report("no gate")
    with_gate.report("gate, agent acks")
    print(json.dumps({"measure": "eviction-gate-agent-drain", "case": "extra drain time",
                      "extra_drain_s": round(with_gate.drain_s - without.drain_s, 2),
                      "saved_lost_s": round(without.lost_s - with_gate.lost_s, 2)}))
