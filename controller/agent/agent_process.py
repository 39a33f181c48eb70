"""The checkpoint agent's process plumbing: its API writer, its watch, its SDK endpoint.

``controller/agent/agent.py`` holds the agent's decisions (which drain request stands, when to ack,
what a cancel means, what the SDK is told) and the workload hooks; this module connects them to
the outside and runs them, and is apart so that those decisions are tested without an API
server, a socket or a thread (``tests/controller/test_agent.py`` drives ``CheckpointAgent``
with a recording ``PodWriter``):

- ``KubePodWriter``: the agent's only writes, all on its own pod (the JSON-patch ack that first
  tests the drain annotation, last-checkpoint and expected-end), retried on 429 / 5xx /
  connection errors;
- ``watch_own_pod``: list and watch that one pod and feed its annotations to
  ``CheckpointAgent.observe``, reconnecting with ``controller.core.backoff``;
- ``serve``: the local endpoint for the SDK (loopback): ``GET /status``;
  ``GET /events?after=SEQ&wait=SECONDS`` (long poll; ``{"status", "events"}``, ``events`` null
  when the caller must start from the status); ``POST /done`` ``{"plan"}`` (200 acked, 409 not:
  no such standing request); ``POST /checkpointed`` (refreshes last-checkpoint; ``{"final":
  true}``: the workload's last report before it exits); any request with the header
  ``X-Ckpt-Preempt-Stop: checkpoint`` says the workload saves on SIGTERM;
  ``POST /progress`` ``{"done", "total"}`` (``{"expected_end"}``: the end written, or null;
  400 with the reason on a malformed body; ``controller/agent/progress.py``). Shapes:
  ``ckpt_preempt_sdk.Status`` / ``Event``;
- ``run``: the watch and hook threads, until stopped; then, before the endpoint closes,
  ``CheckpointAgent.finish``: a workload that saves on SIGTERM gets to report its final
  checkpoint, and it is written to the pod before the agent exits.
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.parse
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException
from tenacity import Retrying, retry_if_exception, stop_after_attempt

from ckpt_preempt.controller.agent.agent import FINAL_REPORT_SECONDS, CheckpointAgent
from ckpt_preempt.controller.agent.progress import ProgressError
from ckpt_preempt.controller.core import backoff
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.annotations import EXPECTED_END, LAST_CHECKPOINT
from ckpt_preempt.policies.model.times import rfc3339
from ckpt_preempt_sdk import STOP_HEADER, STOP_SAVES

log = logging.getLogger("ckpt_preempt.agent")
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
REQUEST_TIMEOUT_SECONDS = 10.0  # every API call
WATCH_SECONDS = 30  # the server ends each watch after this; the agent lists and watches again
WRITE_ATTEMPTS = 4  # an ack or last-checkpoint write, on 429 / 5xx / connection errors
WRITE_RETRY_CAP_SECONDS = 2.0


# ------------------------------------------------------------------------------- the writes
def _transient(e: BaseException) -> bool:
    if isinstance(e, ApiException):
        return e.status == 429 or e.status >= 500
    return isinstance(e, urllib3.exceptions.HTTPError | OSError)


def _pointer(key: str) -> str:
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


class KubePodWriter:
    def __init__(self, api: client.ApiClient, *, namespace: str, name: str) -> None:
        self.core = client.CoreV1Api(api)
        self.namespace, self.name = namespace, name

    def _patch(self, body: object, content_type: str) -> None:
        Retrying(retry=retry_if_exception(_transient), stop=stop_after_attempt(WRITE_ATTEMPTS),
                 wait=backoff.reconnect_wait(cap_seconds=WRITE_RETRY_CAP_SECONDS), reraise=True)(
            self.core.patch_namespaced_pod, self.name, self.namespace, body,
            _content_type=content_type, _request_timeout=REQUEST_TIMEOUT_SECONDS)

    def ack(self, *, plan: str, drain_raw: str, at: float) -> bool:
        ops = [{"op": "test", "path": _pointer(plan_record.DRAIN_ANNOTATION), "value": drain_raw},
               {"op": "add", "path": _pointer(plan_record.DONE_ANNOTATION), "value": plan},
               {"op": "add", "path": _pointer(LAST_CHECKPOINT), "value": rfc3339(at)}]
        try:
            self._patch(ops, JSON_PATCH)
        except ApiException as e:
            if e.status == 422:  # the test failed: the request changed or is gone
                return False
            raise
        return True

    def checkpointed(self, *, at: float) -> None:
        self._patch({"metadata": {"annotations": {LAST_CHECKPOINT: rfc3339(at)}}}, MERGE)

    def expected_end(self, *, at: float) -> None:
        self._patch({"metadata": {"annotations": {EXPECTED_END: rfc3339(at)}}}, MERGE)


# ------------------------------------------------------------------------------- running
def serve(agent: CheckpointAgent, host: str, port: int) -> ThreadingHTTPServer:
    """Start the SDK endpoint in a daemon thread (raises OSError when it cannot listen)."""

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, code: int, obj: dict) -> None:
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _declared(self) -> None:
            if self.headers.get(STOP_HEADER) == STOP_SAVES:
                agent.saves_on_stop()

        def do_GET(self) -> None:
            self._declared()
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/status":
                return self._reply(200, asdict(agent.status()))
            if url.path != "/events":
                return self._reply(404, {"error": "not found"})
            q = urllib.parse.parse_qs(url.query)
            try:
                after = int(q["after"][0]) if "after" in q else None
                wait = float(q.get("wait", ["0"])[0])
            except ValueError:
                return self._reply(400, {"error": "after must be an integer, wait a number"})
            status, events = agent.changes(after, wait)
            self._reply(200, {"status": asdict(status),
                              "events": None if events is None else [asdict(e) for e in events]})

        def do_POST(self) -> None:
            self._declared()
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                return self._reply(400, {"error": "body is not JSON"})
            try:
                if self.path == "/done":
                    plan = body.get("plan") if isinstance(body, dict) else None
                    if not isinstance(plan, str):
                        return self._reply(400, {"error": 'body must be {"plan": "<id>"}'})
                    ok = agent.ack(plan)
                    return self._reply(200 if ok else 409, {"acked": ok})
                if self.path == "/checkpointed":
                    agent.checkpointed(final=isinstance(body, dict) and body.get("final") is True)
                    return self._reply(200, {"ok": True})
                if self.path == "/progress":
                    try:
                        end = agent.progress(body)
                    except ProgressError as e:
                        return self._reply(400, {"error": str(e)})
                    return self._reply(200, {"expected_end": end})
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:
                return self._reply(503, {"error": f"writing to the API server failed: {e}"})
            return self._reply(404, {"error": "not found"})

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="agent-http", daemon=True).start()
    return server


def watch_own_pod(api: client.ApiClient, agent: CheckpointAgent, *, namespace: str, name: str,
                  stop: threading.Event) -> None:
    """Feed the pod's annotations to ``agent`` until ``stop`` is set (reconnects with backoff)."""
    core = client.CoreV1Api(api)

    def once() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_pod, namespace,
                           field_selector=f"metadata.name={name}", timeout_seconds=WATCH_SECONDS,
                           _request_timeout=WATCH_SECONDS + REQUEST_TIMEOUT_SECONDS):
            if stop.is_set():
                w.stop()
                return
            if ev["type"] == "ERROR":
                raise RuntimeError(f"watch error: {ev['raw_object']}")
            if ev["type"] in ("ADDED", "MODIFIED"):
                agent.observe(ev["object"].metadata.annotations or {})

    backoff.keep_running(once, stop, what="watching own pod", logger=log)


def run(agent: CheckpointAgent, api: client.ApiClient, *, namespace: str, name: str,
        server: ThreadingHTTPServer | None, stop: threading.Event,
        final_seconds: float = FINAL_REPORT_SECONDS) -> None:
    """Watch the pod and run hooks until ``stop`` is set (SIGTERM); then give a workload that
    saves on SIGTERM up to ``final_seconds`` to report its final checkpoint, write it, and
    return (the watch and hook threads are daemons, so a SIGTERM never waits for a watch
    timeout)."""
    threading.Thread(target=watch_own_pod, args=(api, agent), name="agent-watch", daemon=True,
                     kwargs={"namespace": namespace, "name": name, "stop": stop}).start()

    def hooks() -> None:
        while not stop.is_set():
            agent.process_hooks(block_seconds=0.5)

    threading.Thread(target=hooks, name="agent-hooks", daemon=True).start()
    stop.wait()
    agent.finish(final_seconds=final_seconds)  # the endpoint still answers meanwhile
    if server is not None:
        server.shutdown()
