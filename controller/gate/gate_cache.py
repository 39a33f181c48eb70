"""The eviction gate's watch cache of pods: what it needs of each pod, kept by one list + watch
(``controller.kube.informer.Informer``), so a review reads memory instead of the API server.

Each pod is kept trimmed (uid, resourceVersion, labels, our annotations, priority class,
deletion), as the small dict ``controller.gate.gate`` reads. A pod not in the cache (not synced yet,
or created a moment ago) is read with one GET. A view a little behind the API server is safe:
the drain request is written only at the resourceVersion the decision was made on, so a stale
view's write conflicts and the answer is a refusal the client retries (kubectl: 5 s later);
an ack the cache has not seen yet costs one more retry, never an eviction before the ack.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from kubernetes import client

from ckpt_preempt.controller.kube.informer import Informer
from ckpt_preempt.policies.model import annotations as ann

DRAIN_LOG_SECONDS = 60.0  # the informer's change log is emptied this often (nobody reads it)


def trim(d: Mapping) -> dict:
    meta, spec = d.get("metadata") or {}, d.get("spec") or {}
    return {
        "metadata": {
            "uid": meta.get("uid", ""), "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
            "labels": dict(meta.get("labels") or {}),
            "annotations": {k: v for k, v in (meta.get("annotations") or {}).items()
                            if k.startswith(ann.PREFIXES)},
            "deletionTimestamp": meta.get("deletionTimestamp"),
        },
        "spec": {"priorityClassName": spec.get("priorityClassName") or ""},
    }


def _key(d: Mapping) -> str:
    m = d["metadata"]
    return f"{m.get('namespace', '')}/{m['name']}"


class PodCache:
    def __init__(self, api: client.ApiClient) -> None:
        core = client.CoreV1Api(api)
        self._informer = Informer("pods", core.list_pod_for_all_namespaces, trim, _key,
                                  threading.Event())
        self._stop = threading.Event()

    def start(self) -> None:
        self._informer.start()
        threading.Thread(target=self._drain_log, name="gate-cache-log", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._informer.stop()

    @property
    def synced(self) -> bool:
        return self._informer.synced.is_set()

    def get(self, namespace: str, name: str) -> dict | None:
        """The trimmed pod, or None when the cache has not synced or does not hold it."""
        if not self.synced:
            return None
        return self._informer.get(f"{namespace}/{name}")

    def _drain_log(self) -> None:
        while not self._stop.wait(DRAIN_LOG_SECONDS):
            self._informer.drain()
