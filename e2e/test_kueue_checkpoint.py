"""Kueue's own preemptions are checkpoint-safe: a real Kueue (v0.17.0, e2e/harness/kueue.py)
preempts a low-priority batch Job whose pod's container is the real tiny training loop
(examples/tiny_training/train.py, run by ContainerProcess: SIGTERM when the pod starts
terminating), and the Job, admitted again once the preemptor is gone, resumes from the
loop's checkpoint. The work lost is measured in three modes:

- ``feature``: the loop saves on SIGTERM (the SDK's stop handler) and the real grace webhook
  (``ckpt-preempt grace-webhook``, the namespace opted in) sizes the pod's grace to its declared
  ``ckpt-preempt.io/checkpoint-seconds`` + 30 s: nothing is lost;
- ``short-grace``: it saves on SIGTERM but nobody sizes the grace (an explicit 3 s, the save
  takes 6 s): SIGKILL mid-save, the atomic save leaves the last periodic checkpoint;
- ``no-save``: the behaviour before save-on-SIGTERM (``--no-save-on-stop``): SIGTERM kills
  the loop (143), and it resumes from its last periodic checkpoint.

Each mode prints one JSON line (``-s`` shows it) and writes it to ``lost-work.json`` in the
test's tmp folder. And with the grace webhook's process killed (failurePolicy Ignore), Kueue
still admits and preempts, and the Job's pods are created with the grace they asked for."""

from __future__ import annotations

import contextlib
import json
import re
import sys
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from e2e.harness import kube, kueue, kueue_pods
from e2e.harness.grace_run import SECONDS, opt_in, running_grace_webhook
from e2e.harness.kueue_fixtures import HIGH, LOW, cluster, kq, namespace  # noqa: F401
from e2e.harness.localcluster import free_port
from e2e.harness.paths import REPO

pytestmark = pytest.mark.e2e
ns = namespace("ckpt")
TRAIN = REPO / "examples" / "tiny_training" / "train.py"
GPUS = 8  # the Job's one pod; the ClusterQueue and the node have exactly these
STEP_SECONDS = 0.04
EVERY = 100  # a periodic checkpoint every 4 s of steps
SAVE_SECONDS = 6.0  # the save on SIGTERM
GRACE = 3  # the Job template's own terminationGracePeriodSeconds: shorter than the save
MARGIN = 30  # the grace webhook's margin (its default)
DECLARED = 6  # ckpt-preempt.io/checkpoint-seconds the pod declares (the save's length)

# The real loop as the container, each step counted on stdout, so the step the loop had reached
# at SIGTERM is known even when SIGTERM kills it with no output (mode no-save). The loop calls
# time.sleep(--step-seconds) once per step, after counting the step.
COUNTING = """
import runpy, sys, time
step_seconds = float(sys.argv[sys.argv.index("--step-seconds") + 1])
real_sleep, steps = time.sleep, 0
def sleep(seconds):
    global steps
    if seconds == step_seconds:
        steps += 1
        print(f"step-done {steps}", flush=True)
    real_sleep(seconds)
time.sleep = sleep
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _running_pod(kq: kueue.RunningKueue, ns: str, job: str):
    def probe():
        pods = kq.job_pods(ns, job)
        running = [p for p in pods if p.status.phase == "Running" and p.spec.node_name
                   and p.metadata.deletion_timestamp is None]
        return running[0] if running else kube.NotYet(
            [(p.metadata.name, p.status.phase, p.spec.node_name) for p in pods])
    return kq.wait(f"a Running pod of Job {ns}/{job}", probe, timeout=90)


def _gone(kq: kueue.RunningKueue, ns: str, pod: str) -> None:
    def probe():
        try:
            kq.c.core.read_namespaced_pod(pod, ns)
        except ApiException as e:
            if e.status == 404:
                return True
            raise
        return kube.NotYet("still there")
    kq.wait(f"pod {ns}/{pod} to be gone", probe, timeout=120)


def _loop(run_dir: Path, *extra: str) -> list[str]:
    # --agent-url: a port nobody listens on (no agent here; the SDK goes on without one)
    return [sys.executable, "-c", COUNTING, str(TRAIN), "--dir", str(run_dir),
            "--steps", str(10**9), "--every", str(EVERY), "--step-seconds", str(STEP_SECONDS),
            "--agent-url", f"http://127.0.0.1:{free_port()}", *extra]


def _last(pattern: str, text: str) -> int | None:
    found = re.findall(pattern, text)
    return int(found[-1]) if found else None


def _exit_status(returncode: int) -> int:
    """As a container runtime reports it: 128 + the signal for a process a signal killed."""
    return returncode if returncode >= 0 else 128 - returncode


def _saved_step(run_dir: Path) -> int:
    ckpt = run_dir / "checkpoint.json"
    return json.loads(ckpt.read_text())["step"] if ckpt.exists() else 0


MODES = {  # mode: (grace webhook on, loop flags, the pod's grace)
    "feature": (True, ["--save-seconds", str(SAVE_SECONDS)], DECLARED + MARGIN),
    "short-grace": (False, ["--save-seconds", str(SAVE_SECONDS)], GRACE),
    "no-save": (False, ["--no-save-on-stop"], GRACE),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_lost_work_when_kueue_preempts_a_training_job(kq, cluster, ns, pool, gpu_nodes, tmp_path,
                                                      mode):
    webhook_on, flags, grace = MODES[mode]
    gpu_nodes(1)
    q = kq.make_queue(ns, gpus=GPUS, pool=pool)
    run_dir = tmp_path / "run"
    hook = contextlib.nullcontext()
    if webhook_on:
        opt_in(cluster, ns)
        hook = running_grace_webhook(cluster, tmp_path / "grace", scope=[ns], probe=ns,
                                     margin=MARGIN)
    with hook:
        kq.make_job(ns, "low", queue=q, gpus=GPUS, priority_class=LOW, grace_seconds=GRACE,
                    pod_annotations={SECONDS: str(DECLARED)})
        kq.wait_admitted(ns, "low")
        victim = _running_pod(kq, ns, "low")
        assert victim.spec.termination_grace_period_seconds == grace
        first_log = tmp_path / "first.log"
        with kueue_pods.ContainerProcess(cluster, ns, victim.metadata.name, _loop(run_dir, *flags),
                                    first_log) as first:
            # the preemptor comes halfway between two periodic checkpoints
            def halfway():
                done = _last(r"step-done (\d+)", first_log.read_text()) or 0
                return ((_saved_step(run_dir) >= EVERY and done >= EVERY + EVERY // 2)
                        or kube.NotYet(f"{done} steps"))
            kube.wait_for("the loop to pass its first periodic checkpoint", halfway, timeout=90)
            kq.make_job(ns, "high", queue=q, gpus=GPUS, priority_class=HIGH, grace_seconds=1)
            evicted = kq.wait_evicted(ns, "low")
            assert kueue.condition(evicted, "Preempted")["reason"] == "InClusterQueue"
            kq.wait("Job low to be suspended", lambda: kq.job(ns, "low").spec.suspend,
                    timeout=60)
            kube.wait_for("the container to end", lambda: first.exited_at is not None
                          or kube.NotYet(first_log.read_text()[-300:]), timeout=grace + 90)
        _gone(kq, ns, victim.metadata.name)
        text = first_log.read_text()
        start = _last(r"training from step (\d+)", text)
        counted = _last(r"step-done (\d+)", text)
        assert start == 0 and counted, text[-2000:]
        at_sigterm = start + counted
        stopping_at = _last(r"stopping at step (\d+)", text)
        status = _exit_status(first.returncode)
        stopped_after = first.exited_at - first.sigterm_at
        # what the container saw at SIGTERM: the Job controller's delete with the pod's grace
        assert first.deletion_grace_seconds == grace

        # The preemptor runs once the victim is gone; when it ends, Kueue admits the low Job
        # again and its new pod runs the loop on the same folder, as a restarted pod would.
        kq.wait_admitted(ns, "high")
        _running_pod(kq, ns, "high")
        kq.c.batch.delete_namespaced_job("high", ns, propagation_policy="Background")
        kq.wait_admitted(ns, "low")
        again = _running_pod(kq, ns, "low")
        second_log = tmp_path / "second.log"
        with kueue_pods.ContainerProcess(cluster, ns, again.metadata.name, _loop(run_dir, *flags),
                                    second_log):
            kube.wait_for("the restarted loop to start", lambda: _last(
                r"training from step (\d+)", second_log.read_text()) is not None, timeout=60)
        resumed = _last(r"training from step (\d+)", second_log.read_text())

    lost = at_sigterm - resumed
    row = {"mode": mode, "grace_seconds": grace, "save_seconds": SAVE_SECONDS
           if "--save-seconds" in flags else None, "exit_status": status,
           "killed": first.killed, "sigterm_to_exit_seconds": round(stopped_after, 2),
           "steps_at_sigterm": at_sigterm, "resumed_from_step": resumed, "lost_steps": lost,
           "step_seconds": STEP_SECONDS, "gpus": GPUS,
           "lost_gpu_seconds": round(lost * STEP_SECONDS * GPUS, 2)}
    line = json.dumps(row, sort_keys=True)
    print(f"\nlost work: {line}")
    (tmp_path / "lost-work.json").write_text(line + "\n")

    if mode == "feature":  # saved the step it stopped at, well within the sized grace
        assert stopping_at == at_sigterm, text[-2000:]
        assert "evicted: saved at step" in text
        assert status == 75 and not first.killed
        assert stopped_after < grace, row
        assert lost == 0, row
        return
    assert resumed % EVERY == 0 and EVERY <= resumed <= at_sigterm, row  # a periodic checkpoint
    assert lost > 0, row
    if mode == "short-grace":  # the save began, and SIGKILL came at the grace's end
        assert stopping_at == at_sigterm, text[-2000:]
        assert "evicted: saved" not in text
        assert first.killed and status == 128 + 9, row
        assert grace - 1.5 <= stopped_after <= grace + 45, row  # 1 s deadline resolution
    else:  # SIGTERM's default action: no save at all
        assert stopping_at is None, text[-2000:]
        assert status == 143 and not first.killed, row


def test_with_the_grace_webhook_killed_kueue_still_admits_and_preempts(kq, cluster, ns, pool,
                                                                       gpu_nodes, tmp_path):
    default = 30  # the Job template's grace (job_body's default, the API server's too)
    declared = 45  # the webhook would raise the grace to 75
    gpu_nodes(1)
    q = kq.make_queue(ns, gpus=GPUS, pool=pool)
    opt_in(cluster, ns)
    # returns once a dry-run pod in ns comes back with its grace raised: the webhook worked
    with running_grace_webhook(cluster, tmp_path / "grace", scope=[ns], probe=ns,
                               margin=MARGIN) as webhook:
        webhook.kill()  # SIGKILL: the API server can no longer reach it
        kq.make_job(ns, "low", queue=q, gpus=GPUS, priority_class=LOW, grace_seconds=default,
                    pod_annotations={SECONDS: str(declared)})
        kq.wait_admitted(ns, "low")
        victim = _running_pod(kq, ns, "low")
        log = tmp_path / "container.log"
        with kueue_pods.ContainerProcess(cluster, ns, victim.metadata.name, _loop(tmp_path / "run"),
                                    log) as container:
            kube.wait_for("the loop to train", lambda: "step-done" in log.read_text(),
                          timeout=60)
            kq.make_job(ns, "high", queue=q, gpus=GPUS, priority_class=HIGH,
                        grace_seconds=default, pod_annotations={SECONDS: str(declared)})
            evicted = kq.wait_evicted(ns, "low")
            assert kueue.condition(evicted, "Preempted")["reason"] == "InClusterQueue"
            kube.wait_for("the victim's loop to end", lambda: container.exited_at is not None,
                          timeout=default + 90)
        kq.wait_admitted(ns, "high")
        preemptor = _running_pod(kq, ns, "high")
    # failurePolicy Ignore: both pods created as the Job controller sent them
    assert victim.spec.termination_grace_period_seconds == default
    assert preemptor.spec.termination_grace_period_seconds == default
    assert container.deletion_grace_seconds == default
    assert _exit_status(container.returncode) == 75 and not container.killed, log.read_text()
