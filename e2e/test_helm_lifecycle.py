"""The chart's whole life with the real helm binary against the local control plane: `helm
install` (a bad value is refused and nothing is created), `helm upgrade` while a plan is
Draining, `helm rollback` to the first revision, and `helm uninstall` followed by `ckpt-preempt
cleanup`, after which nothing of the release is left: no chart object, no plan ConfigMap, no
Lease, no reservation taint, no drain request, no nomination, no helm record.

The module has a control plane of its own with an audit log, so Eviction calls are counted
at the API server. That control plane runs pods in kwok (no containers), so the Deployment's
pods are played here, as in test_chart_deploy.py: after each helm step the controller runs from
the source tree with the command and args of the *live* Deployment, the config file of the
*live* ConfigMap (what the kubelet would mount) and a token of the chart's ServiceAccount. An
upgrade or a rollback is followed by what the Deployment's rolling update does (maxSurge 1,
maxUnavailable 0): the new pod starts and becomes ready as a standby, then the old one gets
SIGTERM, releases the Lease, and the new one takes over. Victims carry a finalizer, so an
evicted victim stays Terminating as it would under a real kubelet's grace period.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import pytest
import yaml
from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

from ckpt_preempt.controller.core.config import Config
from ckpt_preempt.controller.kube.records import MANAGED_BY
from ckpt_preempt.controller.writes.write_bodies import PLAN_PREFIX
from ckpt_preempt.policies.lifecycle import plan_record
from ckpt_preempt.policies.model.annotations import RESERVED_TAINT
from e2e.harness import chart, kube
from e2e.harness.controller_run import (
    HIGH_NEVER,
    LOW,
    PLAN_LABEL_SELECTOR,
    REPO,
    plan_of,
    priority_classes,
    reasons,
    rfc3339,
)
from e2e.harness.localcluster import read_audit
from e2e.harness.trust import status_of

pytestmark = pytest.mark.e2e

LEASE = Config().lease_name  # config.leaseName: the chart's default
HOLD = "e2e.ckpt-preempt.io/hold"  # a victim's finalizer: Terminating until the test lets go
DRAIN_SECONDS = 20  # victim 1's declared checkpoint time: its plan drains across the upgrade
LEASE_V1, LEASE_V2 = 6, 8  # leaseDurationSeconds before and after the upgrade
INSECURE_OK = "ignore:Unverified HTTPS request"  # (urllib3 is not importable when -W is read)
VICTIM_EVENTS = ["CheckpointRequested", "CheckpointDeadlineExceeded", "Evicted"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A control plane of this module's own, with an audit log: every Eviction call is counted
    where it lands, at the API server."""
    yield from kube.own_local_cluster(tmp_path_factory.mktemp("helm"), audit=True)


def _wait_state(c: kube.Cluster, ns: str, namespace: str, preemptor: str,
                state: plan_record.State) -> None:
    def probe() -> bool | kube.NotYet:
        r = plan_of(c, ns, preemptor, namespace)
        return (r is not None and r.state is state) or kube.NotYet(str(r and r.state))
    kube.wait_for(f"the plan for {preemptor} to be {state.value}", probe, timeout=60)


def _victim(c: kube.Cluster, ns: str, name: str, node: str, pool: str, seconds: int) -> None:
    """A low-priority 8-GPU pod, placed by the scheduler (the chart's admission policies refuse
    spec.nodeName) on `node`, the pool's one free node."""
    body = kube.pod_body(name, gpus=8, pool=pool, priority_class=LOW,
                         checkpoint="on-request", checkpoint_seconds=seconds)
    body["metadata"]["finalizers"] = [HOLD]
    c.core.create_namespaced_pod(ns, body)
    assert kube.wait_pod_running(c, ns, name).spec.node_name == node
    # an hour of unsaved work: a checkpoint of `seconds` saves more than it costs, so it drains
    c.core.patch_namespaced_pod_status(name, ns, {"status": {"startTime": rfc3339(3600)}})


def _let_go(c: kube.Cluster, ns: str, name: str) -> None:
    try:
        c.core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": None}})
    except ApiException as e:
        if e.status != 404:
            raise


def _cleanup(c: kube.Cluster, ns: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckpt_preempt.controller.app.cli", "cleanup",
                           "--namespace", ns, "--kubeconfig", str(c.kubeconfig),
                           # errors only: the test cluster's kubeconfig skips TLS verification,
                           # which the client warns of once at start
                           "--log-level", "error", *flags],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO),
                               # the test cluster's self-signed certificate is not pinned
                               "PYTHONWARNINGS": INSECURE_OK})


def _leftovers(c: kube.Cluster, ns: str, nodes: list[str],
               namespace: str) -> dict[str, list[str]]:
    """What the controller makes at run time, still found in the release namespace, on the
    test's nodes and in its workload namespace (the cluster is shared with other tests)."""
    lease = []
    try:
        c.coordination.read_namespaced_lease(LEASE, ns)
        lease = [LEASE]
    except ApiException as e:
        if e.status != 404:
            raise
    return {
        "plans": sorted(cm.metadata.name for cm in c.core.list_namespaced_config_map(
            ns, label_selector=PLAN_LABEL_SELECTOR).items),
        "lease": lease,
        "taints": sorted(n for n in nodes if any(
            t.key == RESERVED_TAINT for t in c.core.read_node(n).spec.taints or [])),
        "drain": sorted(f"{namespace}/{p.metadata.name}"
                        for p in c.core.list_namespaced_pod(namespace).items
                        if plan_record.DRAIN_ANNOTATION in (p.metadata.annotations or {})),
    }


def _present(dyn: dynamic.DynamicClient, doc: dict) -> bool:
    res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    try:
        res.get(name=doc["metadata"]["name"], namespace=doc["metadata"].get("namespace"))
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return True


def _release_objects(c: kube.Cluster, ns: str, release: str) -> list[str]:
    """The release's objects found by label or name: pods, helm's records, admission."""
    fullname = f"{release}-ckpt-preempt"
    out = [f"pod/{p.metadata.name}" for p in c.core.list_namespaced_pod(
        ns, label_selector=f"app.kubernetes.io/instance={release}").items]
    out += [f"secret/{s.metadata.name}" for s in c.core.list_namespaced_secret(
        ns, label_selector=f"owner=helm,name={release}").items]
    adm = client.AdmissionregistrationV1Api(c.api)
    for kind, items in [
            ("validatingadmissionpolicy", adm.list_validating_admission_policy().items),
            ("validatingadmissionpolicybinding",
             adm.list_validating_admission_policy_binding().items),
            ("validatingwebhookconfiguration", adm.list_validating_webhook_configuration().items),
            ("mutatingwebhookconfiguration", adm.list_mutating_webhook_configuration().items),
            ("clusterrole", c.rbac.list_cluster_role().items),
            ("clusterrolebinding", c.rbac.list_cluster_role_binding().items)]:
        out += [f"{kind}/{o.metadata.name}" for o in items
                if o.metadata.name.startswith(fullname)]
    return out


@pytest.mark.parametrize(("flag", "says"), [
    ("config.maxCheckpointSeconds=-5", "at '/config/maxCheckpointSeconds': exclusiveMinimum"),
    ("config.nosuchKey=1", "additional properties 'nosuchKey' not allowed"),
    ("config.renewDeadlineSeconds=20",
     "config.renewDeadlineSeconds + config.requestTimeoutSeconds must not exceed"),
])
def test_helm_install_refuses_a_bad_value_and_creates_nothing(cluster, tmp_path, flag, says):
    release = f"e2e-{uuid.uuid4().hex[:6]}"
    with chart.restricted_namespace(cluster) as ns:
        done = chart.run_helm(cluster, tmp_path, "install", release, str(chart.CHART),
                              "-n", ns, "--set", flag)
        assert done.returncode != 0
        assert says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "panic" not in done.stderr
        listed = chart.run_helm(cluster, tmp_path, "list", "-n", ns, "-q")
        assert listed.returncode == 0 and listed.stdout.strip() == "", listed.stdout
        assert _release_objects(cluster, ns, release) == []
        assert [cm.metadata.name for cm in cluster.core.list_namespaced_config_map(ns).items
                if cm.metadata.name != "kube-root-ca.crt"] == []
        assert [sa.metadata.name for sa in cluster.core.list_namespaced_service_account(
            ns).items if sa.metadata.name != "default"] == []


def test_helm_upgrade_during_drain_rollback_and_uninstall_leave_nothing(
        cluster, namespace, pool, gpu_nodes, tmp_path):
    priority_classes(cluster)
    (node1,) = gpu_nodes(1)
    release = f"e2e-{uuid.uuid4().hex[:6]}"
    deployment = f"{release}-ckpt-preempt-controller"
    replicas: list[chart.Replica] = []
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({
        "config": {"namespaces": [namespace], **chart.FAST, "leaseDurationSeconds": LEASE_V1},
        "hwprobe": {"enabled": False}}))
    with chart.restricted_namespace(cluster) as ns:
        def helm(*args: str) -> subprocess.CompletedProcess:
            done = chart.run_helm(cluster, tmp_path, *args, "-n", ns)
            assert done.returncode == 0, done.stderr
            return done

        def template_checksum() -> str:
            d = cluster.apps.read_namespaced_deployment(deployment, ns)
            return d.spec.template.metadata.annotations["checksum/config"]

        installed = False
        try:
            # ---- install
            helm("install", release, str(chart.CHART), "-f", str(values))
            installed = True
            checksum_v1 = template_checksum()
            manifest = [d for d in yaml.safe_load_all(
                helm("get", "manifest", release).stdout) if d]
            _victim(cluster, namespace, "victim1", node1, pool, DRAIN_SECONDS)
            replicas.append(chart.start_replica(cluster, ns, deployment, tmp_path, "rev1"))
            kube.wait_for("rev1 to lead", lambda: replicas[-1].holds(cluster, ns, LEASE),
                          timeout=30)
            kube.create_pod(cluster, namespace, "big1", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            _wait_state(cluster, ns, namespace, "big1", plan_record.State.DRAINING)
            kube.wait_event(cluster, namespace, "CheckpointRequested", "victim1", timeout=30)
            assert reasons(cluster, namespace, "victim1") == VICTIM_EVENTS[:1]

            # ---- upgrade while plan 1 drains: new config, the same plan store
            helm("upgrade", release, str(chart.CHART), "--reuse-values",
                 "--set", f"config.leaseDurationSeconds={LEASE_V2}")
            assert template_checksum() != checksum_v1  # what rolls the Deployment's pods
            replicas.append(chart.roll(cluster, ns, deployment, tmp_path, "rev2", replicas[-1],
                                       lease=LEASE))
            lease = cluster.coordination.read_namespaced_lease(LEASE, ns)
            assert lease.spec.lease_duration_seconds == LEASE_V2  # the upgraded config
            r1 = plan_of(cluster, ns, "big1", namespace)
            assert r1.state is plan_record.State.DRAINING  # the upgrade happened mid-drain
            assert kube.condition(cluster.core.read_namespaced_pod("victim1", namespace),
                                  "Ready").status == "True"

            kube.wait_event(cluster, namespace, "Evicted", "victim1", timeout=DRAIN_SECONDS + 30)
            victim = cluster.core.read_namespaced_pod("victim1", namespace)
            assert victim.metadata.deletion_timestamp is not None  # Terminating, held
            time.sleep(3 * chart.FAST["retrySeconds"])  # passes that see it Terminating
            _let_go(cluster, namespace, "victim1")
            kube.wait_pod_running(cluster, namespace, "big1", timeout=60)
            _wait_state(cluster, ns, namespace, "big1", plan_record.State.DONE)
            target = f"{namespace}/victim1"
            assert chart.writes(replicas, "request-checkpoint", target) == 1
            assert chart.writes(replicas, "evict", target) == 1
            evictions = [(e.user, e.code) for e in read_audit(cluster.local.audit_log)
                         if (e.resource, e.subresource, e.namespace, e.name)
                         == ("pods", "eviction", namespace, "victim1")]
            sa = chart.find(manifest, "ServiceAccount", deployment)["metadata"]["name"]
            assert evictions == [(f"system:serviceaccount:{ns}:{sa}", 201)]
            assert reasons(cluster, namespace, "victim1") == VICTIM_EVENTS

            # ---- rollback to revision 1: its config again
            helm("rollback", release, "1")
            assert template_checksum() == checksum_v1
            history = yaml.safe_load(helm("history", release, "-o", "yaml").stdout)
            assert [h["revision"] for h in history] == [1, 2, 3]
            assert history[-1]["description"] == "Rollback to 1"
            replicas.append(chart.roll(cluster, ns, deployment, tmp_path, "rev3", replicas[-1],
                                       lease=LEASE))
            lease = cluster.coordination.read_namespaced_lease(LEASE, ns)
            assert lease.spec.lease_duration_seconds == LEASE_V1

            # ---- a plan in flight at uninstall: victim 2 evicted but Terminating (held)
            (node2,) = gpu_nodes(1)

            def leftovers() -> dict[str, list[str]]:
                return _leftovers(cluster, ns, [node1, node2], namespace)
            _victim(cluster, namespace, "victim2", node2, pool, 1)
            kube.create_pod(cluster, namespace, "big2", gpus=8, pool=pool,
                            priority_class=HIGH_NEVER)
            kube.wait_event(cluster, namespace, "Evicted", "victim2", timeout=60)
            r2 = plan_of(cluster, ns, "big2", namespace)
            assert r2.state is plan_record.State.EVICTING
            left = leftovers()
            assert left == {"plans": sorted(f"{PLAN_PREFIX}{r.id}" for r in (r1, r2)),
                            "lease": [LEASE], "taints": [node2],
                            "drain": [f"{namespace}/victim2"]}, left
            big2 = cluster.core.read_namespaced_pod("big2", namespace)
            assert big2.status.nominated_node_name == node2

            # cleanup refuses while a controller renews the Lease, and changes nothing
            holder = cluster.coordination.read_namespaced_lease(LEASE, ns).spec.holder_identity
            done = _cleanup(cluster, ns)
            assert done.returncode == 2, done
            assert done.stderr.strip().splitlines() == [
                f"ckpt-preempt cleanup: controller {holder} renews Lease {ns}/{LEASE}: stop it "
                "first (helm uninstall, or scale its Deployment to 0)"], done.stderr
            assert leftovers() == left

            # ---- uninstall: the chart's objects go; the kubelet would stop the pod
            helm("uninstall", release)
            installed = False
            kube.stop_process(replicas[-1].proc)
            dyn = dynamic.DynamicClient(cluster.api)
            assert [f"{d['kind']}/{d['metadata']['name']}" for d in manifest
                    if _present(dyn, d)] == []
            kube.wait_for("the release's pods and records to be gone", lambda: (
                found := _release_objects(cluster, ns, release)) == [] or kube.NotYet(found),
                timeout=60)
            assert leftovers() == left  # what helm cannot know about
            # and what no readable plan names: a taint of a plan long gone, an unreadable plan
            chart.wait_policies_unloaded(cluster)
            taints = cluster.core.read_node(node1).spec.taints or []
            cluster.core.patch_node(node1, {"spec": {"taints": [
                *[t.to_dict() for t in taints],
                {"key": RESERVED_TAINT, "value": "gone", "effect": "NoSchedule"}]}})
            cluster.core.create_namespaced_config_map(ns, {
                "metadata": {"name": f"{PLAN_PREFIX}unreadable", "labels": dict([MANAGED_BY])},
                "data": {plan_record.PLAN_DATA_KEY: "{not a plan"}})
            left = {**left, "plans": sorted([*left["plans"], f"{PLAN_PREFIX}unreadable"]),
                    "taints": sorted([node1, node2])}
            assert leftovers() == left

            done = _cleanup(cluster, ns, "--dry-run")
            assert done.returncode == 0, done
            assert leftovers() == left
            assert done.stdout and all(line.startswith("would remove: ")
                                       for line in done.stdout.splitlines()), done.stdout
            assert f"would remove: lease {ns}/{LEASE}" in done.stdout.splitlines()

            done = _cleanup(cluster, ns)
            assert done.returncode == 0, done
            assert leftovers() == {"plans": [], "lease": [], "taints": [], "drain": []}
            big2 = cluster.core.read_namespaced_pod("big2", namespace)
            assert big2.status.nominated_node_name is None
            removed = done.stdout.splitlines()
            assert f"removed: reservation taint on node {node2} (plan {r2.id})" in removed
            assert f"removed: drain request on {namespace}/victim2 (plan {r2.id})" in removed
            assert f"removed: lease {ns}/{LEASE}" in removed
            assert f"removed: reservation taint on node {node1} (plan gone)" in removed
            assert f"removed: plan {ns}/{PLAN_PREFIX}unreadable (unreadable)" in removed
            again = _cleanup(cluster, ns)
            assert (again.returncode, again.stdout) == (0, f"nothing left behind in {ns}\n")
        finally:
            for r in replicas:
                kube.stop_process(r.proc)
            for name in ("victim1", "victim2"):
                _let_go(cluster, namespace, name)
            if installed:
                chart.run_helm(cluster, tmp_path, "uninstall", release, "-n", ns)
            chart.wait_policies_unloaded(cluster)


def test_cleanup_is_refused_while_the_charts_policies_stand(cluster, tmp_path):
    """With the chart installed but no controller running (scaled to 0), the chart's admission
    policies refuse the admin's cleanup: one line that says what to do, exit 1, nothing changed.
    After `helm uninstall` the same command removes what was left."""
    release = f"e2e-{uuid.uuid4().hex[:6]}"
    name = f"{PLAN_PREFIX}left"
    with chart.restricted_namespace(cluster) as ns:
        # a plan an earlier controller left (stored before the policies existed)
        cluster.core.create_namespaced_config_map(ns, {
            "metadata": {"name": name, "labels": dict([MANAGED_BY])},
            "data": {plan_record.PLAN_DATA_KEY: "{}"}})
        done = chart.run_helm(cluster, tmp_path, "install", release, str(chart.CHART), "-n", ns,
                              "--set", "hwprobe.enabled=false")
        assert done.returncode == 0, done.stderr
        installed = True
        try:
            kube.wait_for("the plan-store policy to be enforced", lambda: status_of(
                lambda: cluster.core.delete_namespaced_config_map(name, ns, dry_run="All"))
                == 403, timeout=30)
            done = _cleanup(cluster, ns, "--retry-seconds", "1")
            assert done.returncode == 1, done
            (line,) = done.stderr.strip().splitlines()
            assert line.startswith("ckpt-preempt cleanup: 403 Forbidden: ") and \
                "run after `helm uninstall`" in line, line
            assert [cm.metadata.name for cm in cluster.core.list_namespaced_config_map(
                ns, label_selector=PLAN_LABEL_SELECTOR).items] == [name]

            done = chart.run_helm(cluster, tmp_path, "uninstall", release, "-n", ns)
            assert done.returncode == 0, done.stderr
            installed = False
            done = _cleanup(cluster, ns)  # (the policies' removal takes a moment: retried)
            assert (done.returncode, done.stdout) == (
                0, f"removed: plan {ns}/{name} (unreadable)\n"), done
            assert cluster.core.list_namespaced_config_map(
                ns, label_selector=PLAN_LABEL_SELECTOR).items == []
        finally:
            if installed:
                chart.run_helm(cluster, tmp_path, "uninstall", release, "-n", ns)
            chart.wait_policies_unloaded(cluster)
