"""``policies`` is pure: no cluster client, no NVML, no network, no clock, no hidden randomness.

An AST scan of every Python file under ``policies/``. The scanner resolves import aliases, so
``import time as t; t.time()`` and ``from datetime import datetime as dt; dt.now()`` are caught.
The scanner is itself tested on snippets, so a scan that finds nothing means something.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ckpt_preempt import policies

ROOT = Path(policies.__file__).parent
FILES = sorted(ROOT.rglob("*.py"))

FORBIDDEN_MODULES = (
    "kubernetes", "kubernetes_asyncio", "lightkube", "kopf", "pynvml", "socket", "ssl",
    "subprocess", "requests", "httpx", "aiohttp", "urllib", "urllib3", "http", "tenacity",
    "ckpt_preempt.controller", "ckpt_preempt.hwprobe",
)
FORBIDDEN_PREFIXES = ("prometheus_",)

CLOCKS = {
    "time.time", "time.time_ns", "time.monotonic", "time.monotonic_ns", "time.perf_counter",
    "time.perf_counter_ns", "time.process_time", "time.clock_gettime",
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today",
}
HIDDEN_RANDOMNESS = {"os.urandom", "uuid.uuid1", "uuid.uuid4", "random.SystemRandom"}


def _forbidden_module(name: str) -> bool:
    top = name.split(".")[0]
    inside = ".".join(name.split(".")[:2])  # our own packages live under ckpt_preempt
    return top in FORBIDDEN_MODULES or inside in FORBIDDEN_MODULES or top.startswith(
        FORBIDDEN_PREFIXES)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def scan(source: str) -> list[str]:
    """Every impurity in ``source``, as 'line: what'."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                aliases[a.asname or top] = a.name if a.asname else top
                if _forbidden_module(a.name):
                    found.append(f"{node.lineno}: import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            if _forbidden_module(node.module):
                found.append(f"{node.lineno}: from {node.module} import ...")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is None:
            continue
        head, _, rest = name.partition(".")
        qualified = aliases.get(head, head) + (f".{rest}" if rest else "")
        if qualified in CLOCKS:
            found.append(f"{node.lineno}: clock {qualified}()")
        elif qualified in HIDDEN_RANDOMNESS or qualified.startswith("secrets."):
            found.append(f"{node.lineno}: hidden randomness {qualified}()")
        elif qualified.startswith("random.") and qualified != "random.Random":
            found.append(f"{node.lineno}: global RNG {qualified}()")
        elif qualified == "random.Random" and not (node.args or node.keywords):
            found.append(f"{node.lineno}: unseeded random.Random()")
        elif qualified in ("__import__", "importlib.import_module") and node.args \
                and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and _forbidden_module(node.args[0].value):
            found.append(f"{node.lineno}: dynamic import {node.args[0].value}")
    return found


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("import kubernetes", id="kubernetes client"),
        pytest.param("from kubernetes.client import CoreV1Api", id="from a kubernetes submodule"),
        pytest.param("import pynvml as nv", id="NVML under an alias"),
        pytest.param("import socket", id="socket"),
        pytest.param("import subprocess", id="subprocess"),
        pytest.param("import requests", id="requests"),
        pytest.param("from urllib.request import urlopen", id="urllib"),
        pytest.param("import http.client", id="http"),
        pytest.param("from prometheus_client import Counter", id="prometheus client"),
        pytest.param("import tenacity", id="tenacity"),
        pytest.param("from ckpt_preempt.controller.planning import reconcile",
                     id="the controller layer"),
        pytest.param("import time\ndef f():\n    return time.time()", id="time.time in a function"),
        pytest.param("import time\nT0 = time.monotonic()", id="time.monotonic at import"),
        pytest.param("import time as t\nt.perf_counter()", id="perf_counter under an alias"),
        pytest.param("from time import perf_counter\nperf_counter()", id="perf_counter imported"),
        pytest.param("from datetime import datetime\ndatetime.now()", id="datetime.now"),
        pytest.param("import datetime\ndatetime.datetime.utcnow()", id="datetime.utcnow"),
        pytest.param("from datetime import datetime as dt\ndt.now()", id="datetime.now aliased"),
        pytest.param("from datetime import date\ndate.today()", id="date.today"),
        pytest.param("import random\nrandom.random()", id="random.random"),
        pytest.param("import random\nrandom.shuffle([1])", id="global RNG shuffle"),
        pytest.param("from random import randint\nrandint(1, 2)", id="randint imported"),
        pytest.param("import random\nrandom.Random()", id="unseeded Random"),
        pytest.param("import uuid\nuuid.uuid4()", id="uuid4"),
        pytest.param("__import__('socket')", id="dynamic import"),
    ],
)
def test_scanner_flags(source):
    assert scan(source)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("import random\nrng = random.Random(7)\nrng.random()",
                     id="a seeded Random instance"),
        pytest.param("import random\ndef f(seed):\n    return random.Random(seed).randrange(3)",
                     id="seeded from a parameter"),
        pytest.param("from datetime import datetime\ndatetime.fromisoformat('2026-12-02')",
                     id="parsing a timestamp reads no clock"),
        pytest.param("from datetime import UTC, datetime\ndatetime.fromtimestamp(0, tz=UTC)",
                     id="formatting a given time"),
        pytest.param("def f(snapshot):\n    return snapshot.now", id="now comes from the data"),
        pytest.param("import json, re, zlib, heapq", id="pure standard library"),
        pytest.param("from policies.model.snapshot import Snapshot", id="own package"),
        pytest.param("from . import model", id="relative import"),
    ],
)
def test_scanner_allows(source):
    assert scan(source) == []


def test_every_policies_module_is_scanned():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"model/model.py", "planner/preemption.py", "baselines/kube_default.py",
            "baselines/oracle.py", "sim/engine.py"} <= names


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.relative_to(ROOT).as_posix()) for p in FILES]
)
def test_policies_module_is_pure(path):
    assert scan(path.read_text(encoding="utf-8")) == []
