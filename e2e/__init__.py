"""End-to-end tests: a real Kubernetes control plane (see conftest.py) or a real GPU."""
