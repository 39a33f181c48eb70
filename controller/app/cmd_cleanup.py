"""Remove what a stopped controller left in the cluster.

`helm uninstall` deletes what the chart made, but not what the controller made at run time:
the plan ConfigMaps and the Lease in the release namespace, the reservation taint
(``ckpt-preempt.io/reserved``) on nodes, the drain requests (``ckpt-preempt.io/drain``) on
victims and the nominations of preemptors. Run this after `helm uninstall` (or with the
controller scaled to 0):

    ckpt-preempt cleanup --namespace ckpt-preempt --kubeconfig ~/.kube/config [--dry-run]

It refuses while a controller still holds the Lease: a Lease that changes within its
``leaseDurationSeconds`` is renewed by someone (judged by this process's clock since it first
read the Lease, as ``controller/writes/leader.py`` does, so clock skew does not matter). Each write
goes through ``controller/writes/actions.py`` and is guarded as the controller's own are (by
resourceVersion or by the plan it names), so running it twice, or at once with another
cleanup, is safe. Writes the chart's admission policies refuse (403: they are deleted a moment
after `helm uninstall` returns) are tried again for ``--retry-seconds``. Pod tolerations
of the reservation taint stay (a pod's tolerations cannot be removed); they are harmless once
the taint is gone.

Exit codes: 0 nothing left (or, with --dry-run, listed), 1 some write refused or failed, 2 a
usage error, a controller still running, or an API server it cannot reach.
"""

from __future__ import annotations

import argparse
import sys
import time

from ckpt_preempt.cli import argtypes
from ckpt_preempt.controller.app import logs
from ckpt_preempt.controller.app.cmd_common import add_cluster_flags, connect
from ckpt_preempt.policies.lifecycle import plan_record

NAME = "cleanup"
HELP = "remove the plans, reservation taints, drain requests and Lease a stopped controller left"
REFUSED_RETRY_SECONDS = 15.0  # how long 403s are retried: admission policies being unloaded
#                               (an assumption, not a measurement)
LEASE_POLL_SECONDS = 1.0
REFUSED_HINT = (" (the chart's admission policies let only the controller write these: run after "
                "`helm uninstall`; docs/operations.md, Uninstall)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ckpt_preempt.controller.core.config import Config

    add_cluster_flags(p)
    p.add_argument("--namespace", "-n", required=True,
                   help="the controller's namespace (the release's: its plans and Lease)")
    p.add_argument("--lease-name", default=Config().lease_name,
                   help="the controller's Lease (config leaseName; default %(default)s)")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed; change "
                   "nothing")
    p.add_argument("--retry-seconds", type=argtypes.non_negative_float, metavar="SECONDS",
                   default=REFUSED_RETRY_SECONDS,
                   help="how long writes refused with 403 are tried again (default %(default)s)")
    logs.add_level_flag(p)


class StillRunning(Exception):
    """A controller renews the Lease: cleaning up under it would race its writes."""


class Cleanup:
    """One cleanup of one namespace's controller leftovers (see the module docstring)."""

    def __init__(self, api, *, namespace: str, lease_name: str, dry_run: bool) -> None:
        from kubernetes import client

        from ckpt_preempt.controller.writes.actions import Actions, WriteGuard

        self.core = client.CoreV1Api(api)
        self.leases = client.CoordinationV1Api(api)
        self.namespace, self.lease_name, self.dry_run = namespace, lease_name, dry_run
        self.actions = Actions(api, plan_namespace=namespace, guard=WriteGuard(dry_run=dry_run))
        self.done: list[str] = []  # what was removed (or would be), one line each, all passes
        self._stale: str | None = None  # resourceVersion of the Lease found unrenewed

    def _say(self, line: str) -> None:
        self.done.append(("would remove: " if self.dry_run else "removed: ") + line)

    # ------------------------------------------------------------------------------ the Lease
    def lease_left(self):
        """The Lease if nobody renews it (None: there is none); raises ``StillRunning``."""
        from kubernetes.client.rest import ApiException

        first, seen = time.monotonic(), None
        while True:
            try:
                lease = self.leases.read_namespaced_lease(self.lease_name, self.namespace)
            except ApiException as e:
                if e.status == 404:
                    return None
                raise
            spec, rv = lease.spec, lease.metadata.resource_version
            if not spec.holder_identity or rv == self._stale:
                return lease
            if seen is not None and seen != rv:
                raise StillRunning(f"controller {spec.holder_identity} renews Lease "
                                   f"{self.namespace}/{self.lease_name}: stop it first (helm "
                                   "uninstall, or scale its Deployment to 0)")
            seen = seen or rv
            duration = spec.lease_duration_seconds or 0
            if time.monotonic() - first >= duration:
                self._stale = rv  # not renewed for a whole lease duration: its holder is gone
                return lease
            time.sleep(LEASE_POLL_SECONDS)

    # ------------------------------------------------------------------------------ one pass
    def _pod(self, namespace: str, name: str, uid: str):
        from kubernetes.client.rest import ApiException

        from ckpt_preempt.controller.kube.records import pod_info

        try:
            pod = self.core.read_namespaced_pod(name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        info = pod_info(self.core.api_client.sanitize_for_serialization(pod))
        return info if info.uid == uid else None

    def _plans(self) -> None:
        from ckpt_preempt.controller.kube import watch
        from ckpt_preempt.controller.kube.records import MANAGED_BY
        from ckpt_preempt.controller.planning import plans
        from ckpt_preempt.controller.writes.write_bodies import PLAN_PREFIX

        selector = "=".join(MANAGED_BY)
        for cm in self.core.list_namespaced_config_map(self.namespace,
                                                       label_selector=selector).items:
            d = self.core.api_client.sanitize_for_serialization(cm)
            name, rv = cm.metadata.name, cm.metadata.resource_version
            try:
                record = plans.parse(watch.stored_plan(d)).record
            except Exception:  # an unreadable plan is deleted, nothing else is done for it
                record = None
            if record is not None:
                for pl in record.placements:
                    pod = self._pod(pl.namespace, pl.name, pl.uid)
                    if pod is not None and not pod.node and pod.nominated == pl.node:
                        self.actions.clear_nomination(pod, pl.node, record.id)
                        self._say(f"nomination of {pod.key} on {pl.node} (plan {record.id})")
                for v in record.victims:
                    pod = self._pod(v.namespace, v.name, v.uid)
                    if pod is not None and plan_record.drain_requested(pod.annotations, record.id):
                        self.actions.withdraw_checkpoint(pod, record.id)
                        self._say(f"drain request on {pod.key} (plan {record.id})")
                for node in sorted(record.nodes):
                    self._unreserve(node, record.id)
            if not name.startswith(PLAN_PREFIX):
                self.done.append(f"left alone: ConfigMap {self.namespace}/{name} (labelled "
                                 "as a plan but not named as one)")
                continue
            self.actions.delete_plan(name[len(PLAN_PREFIX):], rv)
            state = record.state.value if record else "unreadable"
            self._say(f"plan {self.namespace}/{name} ({state})")

    def _unreserve(self, node: str, plan_id: str | None) -> None:
        from kubernetes.client.rest import ApiException

        from ckpt_preempt.controller.writes.write_bodies import node_reserved_for

        try:
            taints = [t.to_dict() for t in self.core.read_node(node).spec.taints or []]
        except ApiException as e:
            if e.status == 404:
                return
            raise
        if node_reserved_for(taints, plan_id):
            self.actions.unreserve(node, plan_id)
            self._say(f"reservation taint on node {node} (plan {plan_id})")

    def _strays(self) -> None:
        """Taints and drain requests no stored plan names any more."""
        from ckpt_preempt.controller.kube.records import pod_info
        from ckpt_preempt.policies.model.annotations import RESERVED_TAINT

        for node in self.core.list_node().items:
            for t in node.spec.taints or []:
                if t.key == RESERVED_TAINT:  # (a value-less one is matched as such)
                    self._unreserve(node.metadata.name, t.value)
        for pod in self.core.list_pod_for_all_namespaces().items:
            raw = (pod.metadata.annotations or {}).get(plan_record.DRAIN_ANNOTATION)
            if raw is None:
                continue
            try:
                plan_id = plan_record.drain_from_annotation(raw).plan
            except plan_record.DrainFormatError:
                self.done.append(f"left alone: unreadable drain request on "
                                 f"{pod.metadata.namespace}/{pod.metadata.name}")
                continue
            info = pod_info(self.core.api_client.sanitize_for_serialization(pod))
            self.actions.withdraw_checkpoint(info, plan_id)
            self._say(f"drain request on {info.key} (plan {plan_id})")

    def one_pass(self) -> None:
        lease = self.lease_left()
        self._plans()
        self._strays()
        if lease is not None:
            self.actions.delete_lease(self.lease_name, self.namespace,
                                      lease.metadata.resource_version)
            self._say(f"lease {self.namespace}/{self.lease_name}")


def failure(e: Exception, server: str) -> tuple[str, int]:
    """The one line and the exit code for what stopped a cleanup: 2 when the API server at
    ``server`` cannot be reached (nothing was decided), 1 when it refused or failed a request."""
    from kubernetes.client.rest import ApiException

    from ckpt_preempt.cli.output import one_line
    from ckpt_preempt.controller.core import api_connection
    from ckpt_preempt.controller.writes.actions import WriteFailed, api_error

    cause = e.__cause__ if isinstance(e, WriteFailed) and e.__cause__ is not None else e
    if unreachable := api_connection.cannot_reach(cause, server):
        return unreachable, 2
    if isinstance(cause, ApiException):
        return api_error(cause) + (REFUSED_HINT if cause.status == 403 else ""), 1
    return one_line(e), 1


def run(args: argparse.Namespace) -> int:
    from kubernetes.client.rest import ApiException

    from ckpt_preempt.controller.writes.actions import Conflict, WriteFailed

    prog = "ckpt-preempt cleanup"
    logs.setup(args.log_level)
    api = connect(args, prog)
    if api is None:
        return 2
    job = Cleanup(api, namespace=args.namespace, lease_name=args.lease_name,
                  dry_run=args.dry_run)
    deadline = None
    while True:
        try:
            if deadline is None:  # the first wait for the Lease does not count against retries
                job.lease_left()
                deadline = time.monotonic() + args.retry_seconds
            job.one_pass()
            break
        except StillRunning as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
        except Exception as e:  # its reads and writes, an unreachable API server: one line
            refused = isinstance(e, ApiException | WriteFailed) and e.status == 403
            if (refused or isinstance(e, Conflict)) and deadline is not None \
                    and time.monotonic() < deadline:
                time.sleep(1.0)  # policies still unloading, or an object changed: again
                continue
            line, code = failure(e, api.configuration.host)
            print(f"{prog}: {line}", file=sys.stderr)
            return code
    for line in dict.fromkeys(job.done):  # a pass tried again repeats what it left alone
        print(line)
    if not any(line.startswith(("removed", "would")) for line in job.done):
        print(f"nothing left behind in {args.namespace}")
    return 0
