"""values.yaml's config sets every key of controller/core/config.py, to its default. No cluster
needed.
That the rendered chart says what deploy/rbac and deploy/admission say is checked with helm
itself: e2e/test_chart_render.py."""

from __future__ import annotations

from dataclasses import fields

import yaml

from ckpt_preempt.controller.core import config
from e2e.harness.trust import DEPLOY

CHART = DEPLOY / "helm/ckpt-preempt"
NAMESPACE = "ckpt-preempt"  # the release namespace the plain files are written for
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())
SET_BY_TEMPLATE = {"leaseNamespace", "planNamespace", "dryRun"}  # templates/configmap.yaml


def test_chart_values_set_every_config_key_validly():
    expected = {config._camel(f.name) for f in fields(config.Config)} - SET_BY_TEMPLATE
    missing, unknown = expected - set(VALUES["config"]), set(VALUES["config"]) - expected
    assert (missing, unknown) == (set(), set()), "values.yaml's config: (missing, unknown) keys"
    given = {k: v for k, v in VALUES["config"].items() if v != ""}  # as templates/configmap.yaml
    cfg = config.parse({**given, "leaseNamespace": NAMESPACE,
                        "planNamespace": NAMESPACE, "dryRun": False})
    assert cfg == config.Config(lease_namespace=NAMESPACE, plan_namespace=NAMESPACE), \
        "values.yaml's config differs from controller/core/config.py's defaults"
