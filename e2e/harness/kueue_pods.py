"""Pods on the Kueue bench (``e2e.harness.kueue``): how long a pod stayed Terminating
(``watch_termination``), and a local process as a kwok pod's container (``ContainerProcess``):
SIGTERM when the pod starts terminating, the pod deleted once the process exits, as a kubelet
does. kwok plays no container, so this is how a real training loop meets a real grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from e2e.harness import kube


def _epoch(t: datetime) -> float:
    return t.timestamp()


@dataclass
class Termination:
    """What watch_termination saw of one pod's termination (wall-clock seconds)."""

    grace_seconds: int  # the pod's spec.terminationGracePeriodSeconds
    deletion_grace_seconds: int | None  # metadata.deletionGracePeriodSeconds when first seen
    requested_at: float  # deletionTimestamp - deletionGracePeriodSeconds: the delete request
    deadline: float  # deletionTimestamp when first seen (1 s resolution)
    gone_at: float  # when a read first answered 404

    @property
    def lingered(self) -> float:
        """Seconds from the delete request until the pod object was gone."""
        return self.gone_at - self.requested_at


def watch_termination(c: kube.Cluster, namespace: str, name: str, *, timeout: float = 120,
                      interval: float = 0.2) -> Termination:
    """Follow pod `name` until it is gone. Call it before or while it is Terminating: the first
    read that shows a deletionTimestamp records it (a later delete with a shorter grace moves
    it; the first one seen counts)."""
    first: client.V1Pod | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pod = c.core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            break
        if first is None and pod.metadata.deletion_timestamp is not None:
            first = pod
        time.sleep(interval)
    else:
        raise kube.WaitTimeout(f"pod {namespace}/{name} still there after {timeout:.0f}s")
    gone = time.time()
    if first is None:
        raise AssertionError(f"pod {namespace}/{name} was gone before it was seen Terminating")
    dts = _epoch(first.metadata.deletion_timestamp)
    dgs = first.metadata.deletion_grace_period_seconds
    return Termination(grace_seconds=first.spec.termination_grace_period_seconds,
                       deletion_grace_seconds=dgs, requested_at=dts - (dgs or 0), deadline=dts,
                       gone_at=gone)


class ContainerProcess:
    """A local process playing pod `name`'s container, as a kubelet runs one: started now; sent
    SIGTERM when the pod gets its deletionTimestamp; when it exits while the pod is
    Terminating, the pod is deleted with grace 0 (what a kubelet does once the containers have
    stopped), so the pod goes before its grace period ends; if the pod is gone first (kwok's
    stage deleted it at the end of its grace), the process gets SIGKILL. Times are monotonic.

        with ContainerProcess(c, ns, pod, [sys.executable, "train.py"], tmp / "c.log") as cp:
            ...
        cp.sigterm_at, cp.exited_at, cp.returncode, cp.killed, cp.released_at,
        cp.deletion_grace_seconds (the pod's deletionGracePeriodSeconds at SIGTERM)

    A process that exits while the pod is not Terminating changes nothing (the pod keeps
    Running; kwok plays no container).
    """

    def __init__(self, c: kube.Cluster, namespace: str, name: str, argv: Sequence[str],
                 log: Path, *, env: dict[str, str] | None = None, interval: float = 0.1):
        self.c, self.namespace, self.name, self.interval = c, namespace, name, interval
        self.log = log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})
        self.started_at = time.monotonic()
        self.sigterm_at: float | None = None
        self.deletion_grace_seconds: int | None = None  # as the pod had it at SIGTERM
        self.exited_at: float | None = None
        self.released_at: float | None = None
        self.killed = False
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"container-{name}", daemon=True)
        self._thread.start()

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def _pod(self) -> client.V1Pod | None:
        try:
            return self.c.core.read_namespaced_pod(self.name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                pod = self._pod()
                if pod is None:
                    if self.proc.poll() is None:
                        self.killed = True
                        self.proc.kill()
                    self._exited()
                    return
                if pod.metadata.deletion_timestamp is not None and self.sigterm_at is None:
                    self.sigterm_at = time.monotonic()
                    self.deletion_grace_seconds = pod.metadata.deletion_grace_period_seconds
                    if self.proc.poll() is None:
                        self.proc.send_signal(signal.SIGTERM)
                if self.proc.poll() is not None and self.sigterm_at is not None:
                    self._exited()
                    with contextlib.suppress(ApiException):
                        self.c.core.delete_namespaced_pod(self.name, self.namespace,
                                                          grace_period_seconds=0)
                    self.released_at = time.monotonic()
                    return
                time.sleep(self.interval)
        except BaseException as e:  # reported by close()
            self.error = e

    def _exited(self) -> None:
        self.proc.wait()
        if self.exited_at is None:
            self.exited_at = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.error is not None:
            raise self.error

    def __enter__(self) -> ContainerProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
