"""The helm chart says what deploy/rbac and deploy/admission say (the e2e tests install those
files; no helm binary renders the chart here). No cluster needed."""

from __future__ import annotations

import json
import re
from dataclasses import fields

import yaml

from ckpt_preempt.controller import config
from e2e.test_trust_support import ADMISSION, CONTROLLER_RBAC, DEPLOY

CHART = DEPLOY / "helm/ckpt-preempt"
NAMESPACE = "ckpt-preempt"  # the release namespace the plain files are written for
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SET_BY_TEMPLATE = {"leaseNamespace", "planNamespace", "dryRun"}  # templates/configmap.yaml


def render(template: str) -> list[dict]:
    """The few constructs these templates use: an `if` around everything, the release
    namespace, and a list from values as JSON."""
    text = re.sub(r"^\{\{-? (if \.Values\.[\w.]+|end) \}\}\n", "", template, flags=re.M)
    text = text.replace("{{ .Release.Namespace }}", NAMESPACE)
    text = re.sub(r"\{\{ toJson \.Values\.([\w.]+) \}\}",
                  lambda m: json.dumps(_value(m.group(1))), text)
    assert "{{" not in text, f"unrendered template construct: {text[text.index('{{'):][:80]}"
    return [d for d in yaml.safe_load_all(text) if d]


def _value(path: str):
    out = VALUES
    for key in path.split("."):
        out = out[key]
    return out


def _plain(*paths) -> list[dict]:
    return [d for p in paths for d in yaml.safe_load_all(p.read_text()) if d]


def test_chart_admission_policies_are_deploy_admission():
    chart = render((CHART / "templates/admission.yaml").read_text())
    assert chart == _plain(*sorted(ADMISSION.glob("*.yaml")))
    assert VALUES["admission"]["enabled"] is True


def test_chart_rbac_is_deploy_rbac():
    chart = render((CHART / "templates/rbac.yaml").read_text())
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    plain = sorted(_plain(CONTROLLER_RBAC), key=key)
    assert sorted(chart, key=key) == plain


def test_chart_values_set_every_config_key_validly():
    expected = {config._camel(f.name) for f in fields(config.Config)} - SET_BY_TEMPLATE
    missing, unknown = expected - set(VALUES["config"]), set(VALUES["config"]) - expected
    assert (missing, unknown) == (set(), set()), "values.yaml's config: (missing, unknown) keys"
    cfg = config.parse({**VALUES["config"], "leaseNamespace": NAMESPACE,
                        "planNamespace": NAMESPACE, "dryRun": False})
    assert cfg == config.Config(lease_namespace=NAMESPACE, plan_namespace=NAMESPACE), \
        "values.yaml's config differs from controller/config.py's defaults"
