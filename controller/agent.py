"""The checkpoint agent: a sidecar that answers drain requests for its own pod.

It watches only its own pod (RBAC: get/watch/patch on that one pod). When the controller writes
``ckpt-preempt.io/drain`` with a plan id the agent has not acknowledged, it runs the workload's
checkpoint hook, then writes ``ckpt-preempt.io/checkpoint-done=<plan>`` and refreshes
``ckpt-preempt.io/last-checkpoint``. Hooks (``Hook``):

- ``ExecHook``: run a command; exit 0 = checkpoint saved;
- ``HttpHook``: POST the request as JSON to a local URL; 2xx = saved;
- ``SignalHook``: signal a process (shared process namespace); the workload saves, then says so
  through the SDK (``controller.sdk``), which calls this agent's local HTTP endpoint.

Local endpoint (loopback, for ``controller.sdk``): ``GET /drain`` → ``{"plan": id|null,
"deadline": t|null}``; ``POST /done`` (body ``{"plan": id}``, optional) acknowledges the current
request; ``POST /checkpointed`` reports a periodic checkpoint (refreshes last-checkpoint).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from policies import lifecycle

log = logging.getLogger("ckpt_preempt.agent")
LAST_CHECKPOINT = "ckpt-preempt.io/last-checkpoint"
MERGE = "application/merge-patch+json"


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Hook:
    """Starts a checkpoint. Returns True when it is saved already, False when the workload will
    report completion itself (SDK ``done``). Raises on failure (the agent does not ack)."""

    def __call__(self, request: lifecycle.DrainRequest) -> bool:
        raise NotImplementedError


@dataclass(frozen=True)
class ExecHook(Hook):
    command: str

    def __call__(self, request: lifecycle.DrainRequest) -> bool:
        env = {**os.environ, "CKPT_PREEMPT_PLAN": request.plan,
               "CKPT_PREEMPT_DEADLINE": rfc3339(request.deadline)}
        timeout = max(1.0, request.deadline - time.time())
        r = subprocess.run(shlex.split(self.command), env=env, timeout=timeout, check=False)
        if r.returncode != 0:
            raise RuntimeError(f"checkpoint command exited {r.returncode}")
        return True


@dataclass(frozen=True)
class HttpHook(Hook):
    url: str

    def __call__(self, request: lifecycle.DrainRequest) -> bool:
        body = json.dumps({"plan": request.plan, "deadline": rfc3339(request.deadline)}).encode()
        req = urllib.request.Request(self.url, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        timeout = max(1.0, request.deadline - time.time())
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # raises on 4xx/5xx
            return 200 <= resp.status < 300


@dataclass(frozen=True)
class SignalHook(Hook):
    pid: int | None = None
    pidfile: str | None = None
    signum: int = signal.SIGUSR1

    def __call__(self, request: lifecycle.DrainRequest) -> bool:
        pid = self.pid if self.pid is not None else int(Path(self.pidfile).read_text().strip())
        os.kill(pid, self.signum)
        return False


class CheckpointAgent:
    def __init__(self, api: client.ApiClient, *, namespace: str, name: str, hook: Hook | None,
                 listen: tuple[str, int] | None = ("127.0.0.1", 8471)) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.name, self.hook = namespace, name, hook
        self.listen = listen
        self.current: lifecycle.DrainRequest | None = None
        self.acked: set[str] = set()
        self._lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    # ---------------------------------------------------------------------- API writes
    def _patch(self, annotations: dict[str, str]) -> None:
        self.core.patch_namespaced_pod(self.name, self.namespace,
                                       {"metadata": {"annotations": annotations}},
                                       _content_type=MERGE)

    def ack(self, plan: str | None = None) -> bool:
        with self._lock:
            req = self.current
            if req is None or (plan is not None and plan != req.plan) or req.plan in self.acked:
                return False
            self._patch({lifecycle.DONE_ANNOTATION: req.plan,
                         LAST_CHECKPOINT: rfc3339(time.time())})
            self.acked.add(req.plan)
        log.info("checkpoint acknowledged", extra={"plan": req.plan, "pod": self.name})
        return True

    def checkpointed(self) -> None:
        self._patch({LAST_CHECKPOINT: rfc3339(time.time())})

    # ---------------------------------------------------------------------- drain requests
    def on_pod(self, pod: client.V1Pod) -> None:
        raw = (pod.metadata.annotations or {}).get(lifecycle.DRAIN_ANNOTATION)
        if raw is None:
            return
        try:
            req = lifecycle.drain_from_annotation(raw)
        except lifecycle.DrainFormatError as e:
            log.warning("ignoring malformed %s: %s", lifecycle.DRAIN_ANNOTATION, e)
            return
        done = (pod.metadata.annotations or {}).get(lifecycle.DONE_ANNOTATION)
        with self._lock:
            if done == req.plan:
                self.acked.add(req.plan)
            if req.plan in self.acked or (self.current and self.current.plan == req.plan):
                return
            self.current = req
        log.info("checkpoint requested", extra={"plan": req.plan, "pod": self.name})
        threading.Thread(target=self._run_hook, args=(req,), daemon=True).start()

    def _run_hook(self, req: lifecycle.DrainRequest) -> None:
        if self.hook is None:
            return  # the workload polls GET /drain through the SDK
        try:
            if self.hook(req):
                self.ack(req.plan)
        except Exception as e:
            log.warning("checkpoint hook failed: %s", e, extra={"plan": req.plan})

    # ---------------------------------------------------------------------- loops
    def run(self, stop: threading.Event) -> None:
        """Serve the SDK endpoint and watch the pod until `stop` is set (returns at once then:
        the watch runs in a daemon thread, so a SIGTERM never waits for a watch timeout)."""
        if self.listen:
            self.server = _serve(self, *self.listen)
        threading.Thread(target=self._watch_loop, args=(stop,), name="agent-watch",
                         daemon=True).start()
        stop.wait()
        if self.server:
            self.server.shutdown()

    def _watch_loop(self, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            try:
                w = watch.Watch()
                for ev in w.stream(self.core.list_namespaced_pod, self.namespace,
                                   field_selector=f"metadata.name={self.name}",
                                   timeout_seconds=30):
                    if stop.is_set():
                        w.stop()
                        break
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self.on_pod(ev["object"])
                failures = 0
            except ApiException as e:
                failures += 1
                log.warning("watching own pod failed: %s", e.reason)
            except Exception as e:
                failures += 1
                log.warning("watch interrupted: %s", e)
            if failures:
                stop.wait(min(30.0, 0.5 * 2 ** min(failures, 6)))


def _serve(agent: CheckpointAgent, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, obj: dict) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path != "/drain":
                return self._reply(404, {"error": "not found"})
            req = agent.current
            pending = req is not None and req.plan not in agent.acked
            self._reply(200, {"plan": req.plan if pending else None,
                              "deadline": rfc3339(req.deadline) if pending else None})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self._reply(400, {"error": "body is not JSON"})
            if self.path == "/done":
                ok = agent.ack(body.get("plan"))
                return self._reply(200 if ok else 409, {"acked": ok})
            if self.path == "/checkpointed":
                agent.checkpointed()
                return self._reply(200, {"ok": True})
            return self._reply(404, {"error": "not found"})

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="agent-http", daemon=True).start()
    return server
