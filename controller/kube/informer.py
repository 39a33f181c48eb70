"""List + watch into a small in-memory cache, one thread per resource kind.

Each ``Informer`` lists (paged, 500 at a time), then watches from the list's resourceVersion
with bookmarks. A 410 Gone (or an ERROR event) relists at once; a broken connection reconnects
with the project's one backoff policy (``controller.core.backoff``: tenacity, full jitter, capped).
Objects are decoded from raw JSON (``_preload_content=False``) and trimmed by
``convert.*_info`` right away, so the cache holds compact records only.
``synced`` is set after the first complete list (``/readyz`` waits for it).
Each store also keeps a ``ChangeLog`` of the keys touched since it was last drained, so
``controller.kube.cluster_model`` updates its model at the cost of what changed, not of the cluster.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.backoff import keep_running

log = logging.getLogger("ckpt_preempt.watch")  # one logger name for the whole watch
PAGE = 500
WATCH_SECONDS = 240


@dataclass(frozen=True, slots=True)
class Changes:
    """What one store went through since it was last drained. ``relist``: every (key, record)
    in the store's order, when it was replaced wholesale (the first drain, a relist after 410 /
    ERROR); otherwise ``changed``: (key, record or None when gone, moved) per key touched, where
    ``moved`` says the key left the store or joined it at the end (its place in the store's
    order is new), in the order those moves happened."""

    relist: tuple[tuple[str, Any], ...] | None = None
    changed: tuple[tuple[str, Any, bool], ...] = ()


class ChangeLog:
    """The keys a dict-backed store touched since the last ``drain``, kept under the store's
    own lock. A dict keeps insertion order, and the snapshot lists objects in that order, so a
    key deleted or added is moved to the end here just as it lands at the end of the store."""

    def __init__(self) -> None:
        self._touched: dict[str, bool] = {}  # key -> moved
        self._relisted = True  # the first drain hands over everything

    def put(self, key: str, existed: bool) -> None:
        if existed:
            self._touched.setdefault(key, False)
        else:
            self._touched.pop(key, None)
            self._touched[key] = True

    def delete(self, key: str) -> None:
        self._touched.pop(key, None)
        self._touched[key] = True

    def relisted(self) -> None:
        self._touched.clear()
        self._relisted = True

    def drain(self, items: Mapping[str, Any]) -> Changes:
        if self._relisted:
            out = Changes(relist=tuple(items.items()))
        else:
            out = Changes(changed=tuple((k, items.get(k), moved)
                                        for k, moved in self._touched.items()))
        self._touched = {}
        self._relisted = False
        return out


class Informer:
    def __init__(self, kind: str, list_fn: Callable[..., Any], trim: Callable[[dict], Any],
                 key: Callable[[dict], str], changed: threading.Event) -> None:
        self.kind = kind
        self._list_fn = list_fn
        self._trim = trim
        self._key = key
        self._changed = changed
        self._lock = threading.Lock()
        self._items: dict[str, Any] = {}
        self._log = ChangeLog()
        self.synced = threading.Event()
        self.relists = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{kind}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def items(self) -> list[Any]:
        with self._lock:
            return list(self._items.values())

    def get(self, key: str) -> Any:
        with self._lock:
            return self._items.get(key)

    def drain(self) -> Changes:
        """What changed since the last call (for ``controller.kube.cluster_model``)."""
        with self._lock:
            return self._log.drain(self._items)

    def _relist(self) -> str:
        items: dict[str, Any] = {}
        cont, rv = None, ""
        while True:
            kw = {"limit": PAGE, "_preload_content": False, "_request_timeout": 60}
            if cont:
                kw["_continue"] = cont
            body = json.loads(self._list_fn(**kw).data)
            for d in body.get("items") or []:
                items[self._key(d)] = self._trim(d)
            meta = body.get("metadata") or {}
            cont, rv = meta.get("continue"), meta.get("resourceVersion", rv)
            if not cont:
                break
        with self._lock:
            self._items = items
            self._log.relisted()
        self.relists += 1
        self.synced.set()
        self._changed.set()
        return rv

    def _watch(self, rv: str) -> str | None:
        """Stream events from rv; returns the last resourceVersion, or None to relist."""
        resp = self._list_fn(watch=True, resource_version=rv, allow_watch_bookmarks=True,
                             timeout_seconds=WATCH_SECONDS, _preload_content=False,
                             _request_timeout=(10, WATCH_SECONDS + 30))
        try:
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                if self._stop.is_set():
                    return rv
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    kind, obj = ev.get("type"), ev.get("object") or {}
                    if kind == "ERROR":
                        log.info("watch %s: %s; relisting", self.kind, obj.get("message"))
                        return None
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if kind == "BOOKMARK":
                        continue
                    k = self._key(obj)
                    record = None if kind == "DELETED" else self._trim(obj)
                    with self._lock:
                        if record is None:
                            self._items.pop(k, None)
                            self._log.delete(k)
                        else:
                            self._log.put(k, k in self._items)
                            self._items[k] = record
                    self._changed.set()
        finally:
            resp.release_conn()
        return rv

    def _run(self) -> None:
        rv: str | None = None

        def once() -> None:
            nonlocal rv
            try:
                if rv is None:
                    rv = self._relist()
                rv = self._watch(rv)
            except ApiException as e:
                if e.status != 410:
                    raise
                log.info("watch %s: 410 Gone; relisting", self.kind)
                rv = None  # relist at once, not after a backoff

        keep_running(once, self._stop, what=f"watch {self.kind}", logger=log)
