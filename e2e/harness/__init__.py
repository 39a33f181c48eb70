"""The test harness: the reusable infrastructure that e2e tests and benchmarks run on.

A local control plane (`localcluster`), the fixtures' and helpers' view of it (`kube`), the
tools the test bench builds (`kubectl`, `chart` for helm, `promstack` for Prometheus,
`mock_nvml`, `images` for podman), a fault-injecting proxy (`faultproxy`), the controller, the
eviction gate and the extender run as processes beside a test (`controller_run`,
`eviction_gate_run`, `extender_run`), the RBAC and admission objects of the trust tests
(`trust`), the differential checks against the real kube-scheduler (`differential`,
`differential_workload` make and observe cases; `differential_classify`,
`differential_workload_classify` judge them), the chaos run (`chaos/`), the burst of
Evictions at the gate (`gate_burst`), bulk kwok nodes and pods (`kwok_scale`), and in-memory
stand-ins for the watch cache and the extender's view (`offline`).

Import direction: e2e tests (e2e/test_*.py) and benchmarks (bench/) import this package;
nothing here imports `bench` or an e2e test module (tests/bench/test_layout.py checks it).
No tests here: pytest collects only files named test_*.py.
"""
