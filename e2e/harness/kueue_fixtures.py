"""The fixtures every Kueue e2e module shares: its own control plane (``cluster``, overriding
the session's: Kueue's CRDs and webhooks stay off it, and its kwok plays Job pods and grace
periods), a running Kueue with the two WorkloadPriorityClasses (``kq``), and a namespace Kueue
manages per test (``namespace(prefix)``). Import them into the module::

    from e2e.harness.kueue_fixtures import HIGH, LOW, cluster, kq, namespace  # noqa: F401
    ns = namespace("ckpt")
"""

from __future__ import annotations

import contextlib
import uuid

import pytest
from kubernetes.client.rest import ApiException

from e2e.harness import kueue

LOW, HIGH = "e2e-low", "e2e-high"  # WorkloadPriorityClasses
LOW_VALUE, HIGH_VALUE = 100, 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """This module's own control plane (kwok stages for Job pods and grace periods)."""
    yield from kueue.kueue_cluster(tmp_path_factory.mktemp("kueue-bench"))


@pytest.fixture(scope="module")
def kq(cluster, tmp_path_factory):
    with kueue.running_kueue(cluster, tmp_path_factory.mktemp("kueue")) as k:
        k.make_priority_class(LOW, LOW_VALUE)
        k.make_priority_class(HIGH, HIGH_VALUE)
        yield k


def namespace(prefix: str, *, name: str = "ns"):
    """A fixture called ``name``: a new namespace Kueue manages, deleted after the test."""

    @pytest.fixture(name=name)
    def fixture(kq):
        ns = kq.tenant_namespace(f"{prefix}-{uuid.uuid4().hex[:6]}")
        yield ns
        with contextlib.suppress(ApiException):
            kq.c.core.delete_namespace(ns, grace_period_seconds=0)

    return fixture
