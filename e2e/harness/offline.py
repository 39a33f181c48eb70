"""In-memory stand-ins for the product's live inputs, for tests and benchmarks that drive its
model directly: ``LoggedStore`` (an Informer's store without the network: a dict and its
``ChangeLog``, fed by the caller, for ``controller.kube.cluster_model``) and ``StaticView``
(a fixed cluster view for the extender, in place of its watch-fed ``CachedView``)."""

from __future__ import annotations

from typing import Any

from ckpt_preempt.controller.extender.extender_model import ClusterView
from ckpt_preempt.controller.kube.informer import ChangeLog, Changes


class LoggedStore:
    """An Informer's store without the network: a dict and its ChangeLog, fed by the caller."""

    def __init__(self, items: dict[str, Any] | None = None) -> None:
        self.items: dict[str, Any] = {} if items is None else items
        self._log = ChangeLog()

    def put(self, key: str, obj: Any) -> None:
        self._log.put(key, key in self.items)
        self.items[key] = obj

    def delete(self, key: str) -> None:
        self.items.pop(key, None)
        self._log.delete(key)

    def relist(self, items: dict[str, Any]) -> None:
        self.items = items
        self._log.relisted()

    def drain(self) -> Changes:
        return self._log.drain(self.items)


class StaticView:
    """A fixed view: what the extender serves from, never rebuilt."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view

    def synced(self) -> bool:
        return True

    def current(self) -> ClusterView:
        return self.view
