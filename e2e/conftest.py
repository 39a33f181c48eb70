"""e2e fixtures: a real Kubernetes API for every test, from one of three backends.

E2E_CLUSTER=local     (default) etcd + kube-apiserver + kube-scheduler + kube-controller-manager +
                      kwok, started here from the testbin (`make testbin`); see localcluster.py.
E2E_CLUSTER=kind      a kind cluster from pytest-kind (needs Docker); GPU capacity is patched onto
                      its nodes, and the testbin's kwok (if built) runs fake GPU nodes in it.
E2E_CLUSTER=existing  the cluster $KUBECONFIG points at (kwok as for kind).

Without a testbin the local backend skips, unless CKPT_REQUIRE_TESTBIN=1 (CI), where it fails.
When a test fails, the part of every component's log written during it is attached to the report.
Fixture and helper API: see the docstring of e2e/harness/kube.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from e2e.harness import kube
from e2e.harness.localcluster import USER_TOKENS, LocalCluster, TestbinMissing, find_testbin
from e2e.harness.mock_nvml import MockNvml, mock_library

LOG_LINES = 400  # per component per failed test; the full logs stay in the pytest tmp dir
_active: list[kube.Cluster] = []
_log_offsets = pytest.StashKey[dict]()


def pytest_configure(config):
    # The local apiserver serves a self-signed certificate; the kubeconfig says to trust it.
    config.addinivalue_line("filterwarnings",
                            "ignore::urllib3.exceptions.InsecureRequestWarning")


def _testbin(backend: str, required: bool):
    try:
        return find_testbin()
    except TestbinMissing as e:
        if required and os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{e} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        if required:
            pytest.skip(str(e))
        return None


def _client(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def _version(api: client.ApiClient) -> str:
    return client.VersionApi(api).get_code().git_version


def _with_kwok(request, backend: str, kubeconfig: Path, workdir: Path):
    """For kind/existing: run the testbin's kwok against that cluster, if the testbin exists."""
    bins = _testbin(backend, required=False)
    if bins is None:
        return None
    kwok = LocalCluster(bins, workdir, kwok_only_for=kubeconfig)
    kwok.start()
    request.addfinalizer(kwok.stop)
    return kwok


def docker_problem() -> str | None:
    if shutil.which("docker") is None:
        return "docker is not installed"
    r = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    return None if r.returncode == 0 else f"`docker info` failed: {r.stderr.strip()[:200]}"


@pytest.fixture(scope="session")
def cluster(request, tmp_path_factory):
    backend = os.environ.get("E2E_CLUSTER", "local")
    workdir = tmp_path_factory.mktemp(f"cluster-{backend}")
    if backend == "local":
        lc = LocalCluster(_testbin(backend, required=True), workdir)
        request.addfinalizer(lc.stop)
        lc.start()
        api = _client(lc.kubeconfig)
        c = kube.Cluster("local", lc.kubeconfig, api, _version(api), local=lc,
                         user_tokens={u: t for t, u in USER_TOKENS.items()})
    elif backend == "kind":
        problem = docker_problem()
        if problem:
            pytest.skip(f"E2E_CLUSTER=kind needs a running Docker engine and kind ({problem}); "
                        "use E2E_CLUSTER=local with `make testbin` instead")
        kubeconfig = Path(request.getfixturevalue("kind_cluster").kubeconfig_path)
        api = _client(kubeconfig)
        _patch_gpu_capacity(api, int(os.environ.get("E2E_KIND_GPUS", "8")))
        kwok = _with_kwok(request, backend, kubeconfig, workdir)
        c = kube.Cluster("kind", kubeconfig, api, _version(api), local=kwok, has_kwok=bool(kwok))
    elif backend == "existing":
        if not os.environ.get("KUBECONFIG"):
            pytest.skip("E2E_CLUSTER=existing needs KUBECONFIG to point at the cluster")
        kubeconfig = Path(os.environ["KUBECONFIG"])
        api = _client(kubeconfig)
        kwok = _with_kwok(request, backend, kubeconfig, workdir)
        c = kube.Cluster("existing", kubeconfig, api, _version(api), local=kwok,
                         has_kwok=bool(kwok))
    else:
        pytest.fail(f"E2E_CLUSTER={backend!r}: expected local, kind or existing", pytrace=False)
    _active.append(c)
    yield c
    _active.remove(c)


def _patch_gpu_capacity(api: client.ApiClient, gpus: int) -> None:
    """Advertise an extended resource the way the Kubernetes docs do: patch node status."""
    core = client.CoreV1Api(api)
    for node in core.list_node().items:
        core.patch_node_status(node.metadata.name,
                               {"status": {"capacity": {kube.GPU: str(gpus)}}})


@pytest.fixture
def namespace(cluster):
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.core.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        cluster.core.delete_namespace(name, grace_period_seconds=0)
    except ApiException as e:
        if e.status != 404:
            raise


@pytest.fixture
def pool():
    return f"p{uuid.uuid4().hex[:8]}"


@pytest.fixture
def gpu_nodes(cluster, pool):
    made: list[str] = []

    def make(n: int, **kwargs) -> list[str]:
        prefix = kwargs.pop("prefix", f"{pool}-n{len(made)}")
        names = kube.create_gpu_nodes(cluster, n, prefix=prefix, pool=pool, **kwargs)
        made.extend(names)
        return names

    yield make
    kube.delete_nodes(cluster, made)


@pytest.fixture
def scheduler_config(cluster):
    changed = []

    def use(config: dict | None) -> None:
        cluster.restart_scheduler(config)
        changed.append(config)

    yield use
    if changed:
        cluster.restart_scheduler(None)


def _log_sizes() -> dict[str, int]:
    logs = _active[0].logs if _active else {}
    return {name: path.stat().st_size for name, path in logs.items() if path.exists()}


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[_log_offsets] = _log_sizes()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.failed and _active):
        return
    offsets = item.stash.get(_log_offsets, {})
    for name, path in _active[0].logs.items():
        if not path.exists():
            continue
        with open(path, "rb") as f:
            f.seek(offsets.get(name, 0))
            lines = f.read().decode(errors="replace").splitlines()
        shown = lines[-LOG_LINES:]
        head = f"{path} (last {len(shown)} of {len(lines)} lines written during this test)\n"
        report.sections.append((f"{name} log", head + "\n".join(shown)))


@pytest.fixture(scope="module")
def nvml(tmp_path_factory) -> MockNvml:
    """NVIDIA's mock libnvidia-ml, built by `make testbin` (e2e/testbin/mocknvml)."""
    library = mock_library()
    if not library.is_file():
        why = f"mock NVML not built ({library}): run `make testbin`"
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{why} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(why)
    return MockNvml(library=library, workdir=tmp_path_factory.mktemp("mocknvml"))


@pytest.fixture(scope="module")
def native_cluster(tmp_path_factory):
    """A control plane of its own with Kubernetes' native gang scheduling: GenericWorkload on
    and scheduling.k8s.io/v1beta1 (PodGroup) served (LocalCluster(native_workload=True)).
    Module-scoped; a test module uses it as its `cluster` with
    `@pytest.fixture(scope="module") def cluster(native_cluster): return native_cluster`."""
    yield from kube.own_local_cluster(tmp_path_factory.mktemp("native"), native_workload=True)
