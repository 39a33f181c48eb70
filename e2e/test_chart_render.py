"""`helm template` of deploy/helm/ckpt-preempt (the test bench's helm; no cluster): what it renders
equals deploy/'s plain files, names are release-scoped, `config.namespaces` narrows the RBAC, and
values.schema.json refuses bad values."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import fields

import pytest
import yaml

from ckpt_preempt.controller.core import config
from e2e.harness import chart
from e2e.harness.trust import ADMISSION, CONTROLLER_RBAC, DEPLOY

NAMESPACE = "ckpt-preempt"  # deploy/'s plain files are release ckpt-preempt in this namespace
SET_BY_TEMPLATE = {"leaseNamespace", "planNamespace", "dryRun"}  # templates/configmap.yaml
CI_VALUES = yaml.safe_load((DEPLOY / "helm/ci-values.yaml").read_text())


def _plain(*paths) -> list[dict]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def _key(d: dict) -> tuple[str, str, str]:
    return d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]


def test_default_release_is_deploy_rbac_and_admission():
    docs = chart.render("ckpt-preempt", NAMESPACE)
    controller = [d for d in docs if d["metadata"]["name"] == "ckpt-preempt-controller"
                  and d["kind"] in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
                                    "RoleBinding"}]
    assert sorted(controller, key=_key) == sorted(_plain(CONTROLLER_RBAC), key=_key)
    policies = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")
                and "hwprobe" not in d["metadata"]["name"]]
    assert sorted(policies, key=_key) == sorted(_plain(*ADMISSION.glob("*.yaml")), key=_key)


def test_default_release_is_deploy_rbac_for_hwprobe():
    docs = chart.render("ckpt-preempt", NAMESPACE)
    hwprobe = [d for d in docs if d["metadata"]["name"].startswith("ckpt-preempt-hwprobe")
               and d["kind"] != "DaemonSet"]
    assert {d["kind"] for d in hwprobe} >= {"ClusterRole", "ValidatingAdmissionPolicy"}
    assert sorted(hwprobe, key=_key) == sorted(_plain(DEPLOY / "rbac/hwprobe.yaml"), key=_key)


def test_rendered_config_is_the_controllers_defaults():
    docs = chart.render("r", "ops")
    cm = chart.find(docs, "ConfigMap")
    cfg = config.parse(yaml.safe_load(cm["data"]["config.yaml"]))
    assert cfg == config.Config(lease_namespace="ops", plan_namespace="ops")


def test_schema_knows_every_config_key_and_its_type():
    schema = json.loads((chart.CHART / "values.schema.json").read_text())
    props = schema["properties"]["config"]["properties"]
    by_key = {config._camel(f.name): f for f in fields(config.Config)}
    assert set(props) == set(by_key) - SET_BY_TEMPLATE
    json_type = {bool: "boolean", int: "integer", float: "number", str: "string",
                 tuple: "array"}
    for key, rule in props.items():
        default = getattr(config.Config(), by_key[key].name)
        assert rule["type"] == json_type[type(default)], key


def test_two_releases_share_no_object_name():
    a, b = chart.render("a", "ops"), chart.render("b", "ops")
    names_a, names_b = {_key(d) for d in a}, {_key(d) for d in b}
    assert len(names_a) == len(a) and names_a.isdisjoint(names_b)
    cluster_scoped = {k for k in names_a if not k[1]}
    assert Counter(k[0] for k in cluster_scoped) == {
        "ClusterRole": 2, "ClusterRoleBinding": 2,  # controller, hwprobe
        "ValidatingAdmissionPolicy": 5, "ValidatingAdmissionPolicyBinding": 5}


def _rules(doc: dict) -> set[tuple[str, str]]:
    return {(res, verb) for r in doc["rules"] for res in r["resources"] for verb in r["verbs"]}


def test_namespaces_narrow_the_controllers_writes_to_them():
    docs = chart.render("ckpt-preempt", NAMESPACE, {"config": {"namespaces": ["ta", "tb"]}})
    cluster_wide = _rules(chart.find(docs, "ClusterRole", "ckpt-preempt-controller"))
    assert cluster_wide == {("pods", "get"), ("pods", "list"), ("pods", "watch"),
                            ("nodes", "get"), ("nodes", "list"), ("nodes", "watch"),
                            ("nodes", "patch"), ("poddisruptionbudgets", "list"),
                            ("poddisruptionbudgets", "watch"), ("podgroups", "list"),
                            ("podgroups", "watch"), ("resourceclaims", "list"),
                            ("resourceclaims", "watch"), ("resourceslices", "list"),
                            ("resourceslices", "watch")}
    scoped = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-scope")]
    assert sorted(d["metadata"]["namespace"] for d in scoped) == ["ta", "tb"]
    for role in scoped:
        assert _rules(role) == {("pods", "patch"), ("pods/status", "patch"),
                                ("pods/eviction", "create"), ("events", "create")}
    bindings = [d for d in docs if d["kind"] == "RoleBinding"
                and d["metadata"]["name"].endswith("-scope")]
    assert {b["subjects"][0]["namespace"] for b in bindings} == {NAMESPACE}


@pytest.mark.parametrize(("values", "kinds"), [
    ({}, ["DaemonSet", "Deployment"]),
    # and the grace webhook's and kueue-boost's
    (CI_VALUES, ["DaemonSet", "Deployment", "Deployment", "Deployment"]),
], ids=["defaults", "ci-values"])
def test_every_pod_asks_for_what_pod_security_restricted_requires(values, kinds):
    docs = chart.render("r", "ops", values)
    workloads = [d for d in docs if d["kind"] in {"Deployment", "DaemonSet"}]
    assert sorted(d["kind"] for d in workloads) == kinds
    for w in workloads:
        spec = w["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["readOnlyRootFilesystem"] is True
            assert "privileged" not in sc and "hostPath" not in str(spec.get("volumes"))


def test_hwprobe_daemonset_runs_serve_on_its_own_node():
    docs = chart.render("r", "ops", {"hwprobe": {"interval": 30, "runtimeClassName": "nvidia"}})
    ds = chart.find(docs, "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"] == ["hwprobe"]
    assert c["args"] == ["serve", "--node", "$(NODE_NAME)", "--interval", "30",
                         "--metrics-port", "9402"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert "resources" in c and "nvidia.com/gpu" not in str(c["resources"])
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["runtimeClassName"] == "nvidia"
    assert not [d for d in chart.render("r", "ops", {"hwprobe": {"enabled": False}})
                if "hwprobe" in d["metadata"]["name"]]


def test_hwprobe_reads_pod_resources_only_when_asked():
    (c,) = chart.find(chart.render("r", "ops"), "DaemonSet")["spec"]["template"]["spec"][
        "containers"]
    assert "--pod-resources-socket" not in c["args"]
    docs = chart.render("r", "ops", {"hwprobe": {"podResources": {
        "enabled": True, "directory": "/var/lib/k0s/kubelet/pod-resources"}}})
    spec = chart.find(docs, "DaemonSet")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["args"][-2:] == ["--pod-resources-socket",
                              "/var/lib/k0s/kubelet/pod-resources/kubelet.sock"]
    assert {"name": "pod-resources", "mountPath": "/var/lib/k0s/kubelet/pod-resources",
            "readOnly": True} in c["volumeMounts"]
    assert {"name": "pod-resources", "hostPath": {
        "path": "/var/lib/k0s/kubelet/pod-resources", "type": "Directory"}} in spec["volumes"]
    sc = c["securityContext"]
    assert sc["runAsUser"] == 0 and sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["allowPrivilegeEscalation"] is False and "privileged" not in sc


@pytest.mark.parametrize(("bad", "says"), [
    ("config.maxCheckpointSecond=60", "additional properties 'maxCheckpointSecond'"),
    ("config.maxCheckpointSeconds=0", "/config/maxCheckpointSeconds"),
    ("config.evictAttempts=-1", "/config/evictAttempts"),
    ("config.writeConcurrency=0", "/config/writeConcurrency"),
    ("config.writeConcurrency=65", "/config/writeConcurrency"),
    ("config.unknownCheckpoint=never", "/config/unknownCheckpoint"),
    ("config.schedulerNames={}", "/config/schedulerNames"),
    ("config.fairnessWindowSeconds=100000", "must not exceed config.planHistorySeconds"),
    ("config.preemptionBoundWindowSeconds=100000",
     "preemptionBoundWindowSeconds must not exceed config.planHistorySeconds"),
    ("config.maxPreemptionsPerWindow=-1", "/config/maxPreemptionsPerWindow"),
    ("config.maxPreemptionsPerWindow=1.5", "/config/maxPreemptionsPerWindow"),
    ("config.renewDeadlineSeconds=12", "must not exceed config.leaseDurationSeconds"),
    ("logLevel=verbose", "/logLevel"),
    ("controller.replica=3", "additional properties 'replica'"),
    ("hwprobe.interval=0", "/hwprobe/interval"),
    ("hwprobe.metricsPort=99999", "/hwprobe/metricsPort"),
    ("hwprobe.podResources.directory=var/lib", "/hwprobe/podResources/directory"),
    ("admission.tolerationExemptNamespaces={}", "/admission/tolerationExemptNamespaces"),
    ("extender.enable=true", "additional properties 'enable'"),
    ("extender.port=0", "/extender/port"),
    ("extender.replicas=0", "/extender/replicas"),
    ("extender.prioritizeBudgetMs=0", "/extender/prioritizeBudgetMs"),
    ("config.gpuResources={gpu}", "/config/gpuResources"),
    ("config.gpuDraDrivers={Bad_Driver}", "/config/gpuDraDrivers"),
])
def test_schema_refuses_bad_values(bad, says):
    done = chart.template("r", "ops", None, "--set", bad)
    assert done.returncode != 0 and says in done.stderr, done.stderr


def test_log_level_in_either_case_reaches_the_controller_upper_case():
    docs = chart.render("r", "ops", {"logLevel": "debug"})
    args = chart.find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--log-level") + 1] == "DEBUG"


EXTENDER_ON = {"extender": {"enabled": True}}
SCHEDULER_CONFIG = DEPLOY / "scheduler" / "scheduler-config.yaml"


def test_extender_is_off_by_default_and_on_runs_read_only_and_restricted():
    assert not [d for d in chart.render("r", "ops") if "extender" in d["metadata"]["name"]]
    docs = chart.render("r", "ops", {"extender": {"enabled": True, "port": 9999,
                                                  "prioritizeBudgetMs": 7.5}})
    dep = chart.find(docs, "Deployment", "r-ckpt-preempt-extender")
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"] == ["ckpt-preempt"]
    assert c["args"][:2] == ["extender", "--in-cluster"]
    assert c["args"][c["args"].index("--listen") + 1] == "0.0.0.0:9999"
    assert c["args"][c["args"].index("--prioritize-budget-ms") + 1] == "7.5"
    assert c["ports"] == [{"name": "http", "containerPort": 9999}]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    # it reads the controller's config (the ConfigMap this release renders)
    (config_volume,) = [v for v in spec["volumes"] if v["name"] == "config"]
    assert chart.find(docs, "ConfigMap", config_volume["configMap"]["name"])
    # its own ServiceAccount, which may only read
    assert spec["serviceAccountName"] == "r-ckpt-preempt-extender"
    verbs = {v for kind in ("ClusterRole", "Role")
             for _, v in _rules(chart.find(docs, kind, "r-ckpt-preempt-extender"))}
    assert verbs == {"get", "list", "watch"}


def test_extender_service_is_the_host_the_sample_scheduler_config_calls():
    url = yaml.safe_load(SCHEDULER_CONFIG.read_text())["extenders"][0]["urlPrefix"]
    host_port = url.split("://", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    docs = chart.render("ckpt-preempt", NAMESPACE, EXTENDER_ON)
    svc = chart.find(docs, "Service", "ckpt-preempt-extender")
    assert f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc" == host
    (svc_port,) = svc["spec"]["ports"]
    assert svc_port["port"] == int(port) and svc_port["targetPort"] == "http"
    dep = chart.find(docs, "Deployment", "ckpt-preempt-extender")
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert dep["spec"]["template"]["metadata"]["labels"] == svc["spec"]["selector"]
