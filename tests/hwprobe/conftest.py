"""Fixtures for the mock-NVML tests (e2e/harness/mock_nvml.py says how the mock is found and
run)."""

from __future__ import annotations

import os

import pytest

from e2e.harness.mock_nvml import MockNvml, mock_library


@pytest.fixture(scope="session")
def mocknvml(tmp_path_factory) -> MockNvml:
    library = mock_library()
    if not library.is_file():
        why = (f"mock NVML not built ({library}): "
               "run `make testbin` or e2e/testbin/mocknvml/build.sh")
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(why)
    return MockNvml(library=library, workdir=tmp_path_factory.mktemp("mocknvml"))


@pytest.fixture(scope="session")
def podresources_binary():
    from tests.hwprobe.podreslib import server_binary

    binary = server_binary()
    if not binary.is_file():
        why = (f"PodResources test server not built ({binary}): "
               "run `make testbin` or e2e/podresources/build.sh")
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(why)
    return binary


@pytest.fixture
def kubelet(podresources_binary):
    """The kubelet's PodResources API, served by the real generated service (Go)."""
    from tests.hwprobe.podreslib import Server

    server = Server(podresources_binary)
    yield server
    server.stop()
