# Two entry points, each doing its own setup on a fresh machine:
#   make run    - replay the bundled Alibaba openb trace under every policy (the simulator)
#   make test   - lint, layering contracts, unit tests and e2e tests on a real control plane
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed-$(shell cat pyproject.toml sdk/pyproject.toml | sha256sum | cut -c1-12)

.PHONY: run test unit e2e lint testbin chart torch-venv example bench clean image docs

$(STAMP): pyproject.toml sdk/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ./sdk -e '.[test,dev,plot]'
	@rm -f $(VENV)/.installed-*
	@touch $@

run: $(STAMP)
	$(BIN)/ckpt-preempt simulate $(ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# Builds (or reuses from ~/.cache) etcd, kube-*, kwok, the mock NVML and the PodResources test
# server (e2e/podresources: 40 s cold, 0.03 s cached). Without Go (or when a build fails) the
# tests needing them skip, unless CKPT_REQUIRE_TESTBIN=1 (CI), where that is an error.
testbin:
	@if command -v go >/dev/null 2>&1; then \
	  e2e/testbin/build.sh || { [ "$$CKPT_REQUIRE_TESTBIN" != 1 ] || exit 1; \
	    echo "testbin build failed: e2e and mock-NVML tests will be skipped"; }; \
	  e2e/podresources/build.sh || { [ "$$CKPT_REQUIRE_TESTBIN" != 1 ] || exit 1; \
	    echo "PodResources test server build failed: its tests will be skipped"; }; \
	else \
	  [ "$$CKPT_REQUIRE_TESTBIN" != 1 ] || { echo "go not found and CKPT_REQUIRE_TESTBIN=1"; exit 1; }; \
	  echo "go not found: e2e tests will be skipped (install Go >= 1.26, or Docker + kind and set E2E_CLUSTER=kind)"; \
	fi

# The helm chart: `helm lint --strict`, and `helm template` with default values and with
# deploy/helm/ci-values.yaml (namespaces set). helm comes from the testbin cache (built by
# `make testbin`); without it this skips, unless CKPT_REQUIRE_TESTBIN=1 (CI), where it fails.
CHART = deploy/helm/ckpt-preempt
chart: testbin
	@helm=$$(e2e/testbin/helm/build.sh --find) || { \
	  [ "$$CKPT_REQUIRE_TESTBIN" != 1 ] || { echo "helm missing and CKPT_REQUIRE_TESTBIN=1"; exit 1; }; \
	  echo "helm not built: chart checks skipped"; exit 0; }; \
	set -e; \
	$$helm lint --strict $(CHART); \
	$$helm lint --strict $(CHART) -f deploy/helm/ci-values.yaml; \
	$$helm template ckpt-preempt $(CHART) -n ckpt-preempt >/dev/null; \
	$$helm template ci $(CHART) -n ci -f deploy/helm/ci-values.yaml >/dev/null; \
	echo "chart: lint and template passed ($$($$helm version --short))"

# The container image (deploy/Dockerfile), built with podman on a Debian base that mmdebstrap makes
# and ~/.cache/ckpt-preempt/images keeps: no registry (e2e/testbin/images/build.sh; it installs
# podman, mmdebstrap, runc and uidmap with apt-get when missing). If it cannot build, the image
# tests (e2e/test_images.py) skip, unless CKPT_REQUIRE_TESTBIN=1 (CI), where that is an error.
image:
	@e2e/testbin/images/build.sh || { [ "$$CKPT_REQUIRE_TESTBIN" != 1 ] || exit 1; \
	  echo "image not built: the image tests will be skipped"; }

# The PyTorch DCP example (examples/pytorch_dcp) runs real torch from its own venv, cached in
# ~/.cache/ckpt-preempt/torch-venv (never the product's venv). Cold: 2.8 GB from PyPI, 4-7 min
# measured on 2 cores (7 min with other jobs loading them); cached afterwards. If it cannot be
# installed its test skips, unless CKPT_REQUIRE_TORCH=1 (CI), where that is an error.
torch-venv: $(STAMP)
	@py=$$($(BIN)/python examples/pytorch_dcp/torch_venv.py) && echo "torch venv: $$py" || { \
	  [ "$$CKPT_REQUIRE_TORCH" != 1 ] || { echo "CKPT_REQUIRE_TORCH=1: failing"; exit 1; }; \
	  echo "torch venv not installed: the PyTorch example tests will be skipped"; }

# Only the PyTorch example: checkpoint on request -> evict -> resume (see its README).
# 2 min 55 s measured with the venv cached (10 tests; the 2 cores shared with other jobs).
example: $(STAMP) testbin torch-venv
	@$(BIN)/python -m pytest tests/examples e2e/test_example_pytorch.py $(PYTEST_ARGS)

test: $(STAMP) lint testbin chart torch-venv
	@$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing on purpose"; exit 1; fi; exit $$rc

unit: $(STAMP)
	@$(BIN)/python -m pytest tests $(PYTEST_ARGS); rc=$$?; [ $$rc -ne 5 ] || exit 1; exit $$rc

# Every benchmark runs as a module from the repository root (python -m bench.NAME; its
# docstring says what it measures, how to run it and its target).
bench: $(STAMP)
	$(BIN)/python -m bench.evidence --out bench/results
	$(BIN)/python -m bench.harsh_world
	nice -n 10 $(BIN)/python -m bench.disruptions
	$(BIN)/python -m bench.restart_cost
	$(BIN)/python -m bench.timing
	$(BIN)/python -m bench.starvation_bound
	$(BIN)/python -m bench.loss_concentration
	$(BIN)/python -m bench.incentive
	$(BIN)/python -m bench.elastic_shrink
	$(BIN)/python -m bench.kueue_rows
	$(BIN)/python -m bench.sim_speed --jobs 2 --out bench/results/sim_speed.json
	$(BIN)/python -m bench.lost_work
	$(BIN)/python -m bench.fairness
	$(BIN)/python -m bench.optimality
	$(BIN)/python -m bench.floor --seeds 40 --styles all --procs 2 > bench/results/floor.json
	$(BIN)/python -m bench.floor --seeds 40 --styles openb/stress,training/replay --exact-reports > bench/results/floor_exact_reports.json
	$(BIN)/python -m bench.plan_latency
	$(BIN)/python -m bench.plan_latency --size frontier
	$(BIN)/python -m bench.extender_latency
	$(BIN)/python -m bench.eviction_gate
	$(BIN)/python -m bench.health_refresh
	$(BIN)/python -m bench.chaos
	$(BIN)/python -m bench.differential --cases 220 --out bench/results/differential.json
	$(BIN)/python -m bench.differential --workload --cases 200 --seed 2
	$(BIN)/python -m bench.scale_pass
	$(BIN)/python -m bench.scale_kwok
	$(BIN)/python -m bench.nvlink_cliques
	$(BIN)/python -m bench.admission_placement

# docs/architecture.svg from its Graphviz source (Debian: apt-get install graphviz). The SVG
# carries the source's sha256, which tests/docs/test_architecture.py checks, so CI needs no dot.
docs: docs/architecture.svg
docs/architecture.svg: docs/architecture.dot
	dot -Tsvg $< | sed "1a <!-- rendered from docs/architecture.dot sha256:$$(sha256sum $< | cut -c1-64) -->" > $@

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
