"""`helm template` of the chart's kueue-boost (templates/kueue-boost.yaml; no cluster): off by
default; when on, one Deployment (replicas 1: no leader election) running `ckpt-preempt
kueue-boost` with the flags its values set and the controller's ConfigMap, under Pod Security
"restricted", as its own ServiceAccount, which reads cluster-wide and patches Workloads only in
config.namespaces; the schema refuses bad values."""

from __future__ import annotations

import argparse

import pytest
import yaml

from ckpt_preempt.cli.files import readable_file
from ckpt_preempt.controller.app import cmd_kueue_boost
from ckpt_preempt.controller.core import config
from e2e.harness import chart

ON = {"kueueBoost": {"enabled": True}}
SCOPED = {**ON, "config": {"namespaces": ["team-a", "team-b"]}}
READ = ["get", "list", "watch"]
CI_VALUES = chart.CHART.parent / "ci-values.yaml"  # `make chart` renders and lints with it


def _deployment(docs: list[dict]) -> dict:
    (dep,) = [d for d in docs if d["kind"] == "Deployment"
              and d["metadata"]["name"].endswith("-kueue-boost")]
    return dep


def _container(docs: list[dict]) -> dict:
    (c,) = _deployment(docs)["spec"]["template"]["spec"]["containers"]
    return c


def _parsed(args: list[str]) -> argparse.Namespace:
    """The Deployment's args as the command itself parses them (an unknown flag exits)."""
    assert args[0] == cmd_kueue_boost.NAME
    p = argparse.ArgumentParser(prog=f"ckpt-preempt {cmd_kueue_boost.NAME}")
    cmd_kueue_boost.add_arguments(p)
    for action in p._actions:  # the files are in the pod, not here: parse their paths only
        if action.type is readable_file:
            action.type = str
    return p.parse_args(args[1:])


def _rules(doc: dict) -> set[tuple[str, str, str]]:
    return {(group, res, verb) for r in doc["rules"] for group in r["apiGroups"]
            for res in r["resources"] for verb in r["verbs"]}


def _bound_to(docs: list[dict], sa: str, namespace: str) -> list[dict]:
    """Every binding that names the ServiceAccount."""
    return [d for d in docs if d["kind"] in {"ClusterRoleBinding", "RoleBinding"}
            and {"kind": "ServiceAccount", "name": sa, "namespace": namespace}
            in d.get("subjects", [])]


def test_off_by_default():
    docs = chart.render("ckpt-preempt", "ckpt-preempt")
    assert not [d for d in docs if "kueue-boost" in d["metadata"]["name"]]
    assert "kueue-boost" not in yaml.safe_dump_all(docs)


def test_on_one_replica_of_the_command_with_the_controllers_config_and_image():
    docs = chart.render("r", "ops", ON)
    dep = _deployment(docs)
    assert dep["metadata"]["name"] == "r-ckpt-preempt-kueue-boost"
    assert dep["metadata"]["namespace"] == "ops"
    # no leader election: exactly one, and never two during an upgrade
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    pod = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"] == pod["metadata"]["labels"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "kueue-boost"
    c = _container(docs)
    controller = chart.find(docs, "Deployment", "r-ckpt-preempt-controller")
    assert c["image"] == controller["spec"]["template"]["spec"]["containers"][0]["image"]
    assert c["command"] == ["ckpt-preempt"]
    args = _parsed(c["args"])
    assert args.in_cluster and not args.dry_run
    assert (args.kueue_priority_boost, args.interval, args.log_level) == ("off", 30.0, "INFO")
    # --config is the controller's ConfigMap (the one this release renders), mounted read-only
    (mount,) = [m for m in c["volumeMounts"] if args.config.startswith(m["mountPath"] + "/")]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    cm = chart.find(docs, "ConfigMap", volume["configMap"]["name"])
    assert cm["metadata"]["name"] == "r-ckpt-preempt-controller"
    key = args.config.removeprefix(mount["mountPath"] + "/")
    assert config.parse(yaml.safe_load(cm["data"][key])) == config.Config(
        lease_namespace="ops", plan_namespace="ops")
    # a config change restarts it, as it does the controller
    assert pod["metadata"]["annotations"]["checksum/config"] == \
        controller["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    # its own ServiceAccount, with its token (it runs --in-cluster)
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "r-ckpt-preempt-kueue-boost"
    assert chart.find(docs, "ServiceAccount", "r-ckpt-preempt-kueue-boost")
    assert spec.get("automountServiceAccountToken", True) is True


def test_values_reach_the_flags_and_the_pod():
    values = {"logLevel": "debug", "kueueBoost": {
        "enabled": True, "priorityBoost": "on", "interval": 12.5,
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "system", "operator": "Exists"}]}}
    docs = chart.render("r", "ops", values)
    c = _container(docs)
    args = _parsed(c["args"])
    assert (args.kueue_priority_boost, args.interval, args.log_level) == ("on", 12.5, "DEBUG")
    assert c["resources"] == {"requests": {"cpu": "20m", "memory": "64Mi"},
                              "limits": {"memory": "256Mi"}}
    spec = _deployment(docs)["spec"]["template"]["spec"]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == [{"key": "system", "operator": "Exists"}]
    # dryRun reaches it through the shared config, which it honours as --dry-run
    cm = chart.find(chart.render("r", "ops", {**ON, "dryRun": True}), "ConfigMap")
    assert config.parse(yaml.safe_load(cm["data"]["config.yaml"])).dry_run is True


def test_the_pod_is_pod_security_restricted():
    docs = chart.render("r", "ops", ON)
    spec = _deployment(docs)["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(spec)
    for c in spec["containers"]:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert "privileged" not in sc and "ports" not in c
    assert all(set(v) <= {"name", "configMap", "emptyDir"} for v in spec["volumes"])


def test_scoped_it_reads_cluster_wide_and_patches_workloads_only_in_its_namespaces():
    docs = chart.render("r", "ops", SCOPED)
    sa = "r-ckpt-preempt-kueue-boost"
    cluster = chart.find(docs, "ClusterRole", sa)
    assert _rules(cluster) == {
        *(("", "pods", v) for v in READ),
        *(("scheduling.k8s.io", "priorityclasses", v) for v in READ),
        *(("kueue.x-k8s.io", "workloadpriorityclasses", v) for v in READ),
        *(("kueue.x-k8s.io", "workloads", v) for v in READ)}
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == sa]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert _rules(role) == {("kueue.x-k8s.io", "workloads", "patch")}
    # every grant it holds: the ClusterRole once, and each Role in its own namespace
    bound = _bound_to(docs, sa, "ops")
    assert sorted((b["kind"], b["metadata"].get("namespace", ""), b["roleRef"]["kind"],
                   b["roleRef"]["name"]) for b in bound) == [
        ("ClusterRoleBinding", "", "ClusterRole", sa),
        ("RoleBinding", "team-a", "Role", sa), ("RoleBinding", "team-b", "Role", sa)]
    # nothing else names it: no write outside team-a and team-b, none on anything but Workloads
    writes = {(ns, rule) for ns, doc in [("", cluster), *((r["metadata"]["namespace"], r)
                                                          for r in roles)]
              for rule in _rules(doc) if rule[2] not in READ}
    assert writes == {("team-a", ("kueue.x-k8s.io", "workloads", "patch")),
                      ("team-b", ("kueue.x-k8s.io", "workloads", "patch"))}


def test_unscoped_it_may_patch_workloads_everywhere_and_nothing_more():
    docs = chart.render("r", "ops", ON)
    sa = "r-ckpt-preempt-kueue-boost"
    assert ("kueue.x-k8s.io", "workloads", "patch") in _rules(chart.find(docs, "ClusterRole", sa))
    assert {v for _, _, v in _rules(chart.find(docs, "ClusterRole", sa))} == {*READ, "patch"}
    assert not [d for d in docs if d["kind"] in {"Role", "RoleBinding"}
                and d["metadata"]["name"] == sa]
    assert [b["kind"] for b in _bound_to(docs, sa, "ops")] == ["ClusterRoleBinding"]


def test_ci_values_turn_it_on_scoped():
    docs = chart.render("ci", "ci", yaml.safe_load(CI_VALUES.read_text()))
    assert _parsed(_container(docs)["args"]).kueue_priority_boost == "on"
    assert {d["metadata"]["namespace"] for d in docs if d["kind"] == "Role"
            and d["metadata"]["name"] == "ci-ckpt-preempt-kueue-boost"} == {"team-a", "team-b"}


@pytest.mark.parametrize(("bad", "says"), [
    ({"enable": True}, "additional properties 'enable'"),
    ({"replicas": 2}, "additional properties 'replicas'"),  # fixed at 1: not a value
    ({"priorityBoost": "maybe"}, "/kueueBoost/priorityBoost"),
    ({"priorityBoost": True}, "/kueueBoost/priorityBoost"),  # a bare `on` in a values file
    ({"interval": 0}, "/kueueBoost/interval"),
    ({"interval": "30s"}, "/kueueBoost/interval"),
    ({"nodeSelector": {"pool": 1}}, "/kueueBoost/nodeSelector/pool"),
])
def test_schema_refuses_bad_values(bad, says):
    done = chart.template("r", "ops", {"kueueBoost": {"enabled": True, **bad}})
    assert done.returncode != 0 and says in done.stderr, done.stderr
