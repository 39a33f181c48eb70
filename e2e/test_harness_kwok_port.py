"""The harness's kwok start (e2e/harness/localcluster.py): when the port chosen for kwok is taken
before kwok binds it (CI saw "bind: address already in use" fail every setup of a module), kwok
starts again on a fresh port instead of failing the tests."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from e2e.harness.localcluster import LocalCluster, find_testbin

pytestmark = pytest.mark.e2e


def test_kwok_starts_again_on_a_fresh_port_when_its_port_is_taken(cluster, tmp_path):
    if cluster.local is None:
        pytest.skip("needs the local control plane's testbin")
    kwok = LocalCluster(find_testbin(), tmp_path, kwok_only_for=cluster.kubeconfig)
    taken = kwok.port["kwok"]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        try:
            kwok.start(timeout=60)
            assert kwok.port["kwok"] != taken
            url = f"http://127.0.0.1:{kwok.port['kwok']}/healthz"
            with urllib.request.urlopen(url, timeout=10) as r:
                assert r.status == 200
            assert "address already in use" in kwok.logs["kwok"].read_text()
        finally:
            kwok.stop()
