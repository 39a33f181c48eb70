"""A real Prometheus for the test bench, and a fixture exporter speaking dcgm-exporter's format.

    prom = start_prometheus(["127.0.0.1:9400"], workdir, scrape_interval_s=1.0)
    prom.url                            # http://127.0.0.1:<port>
    prom.query("DCGM_FI_DEV_XID_ERRORS")  # -> the instant vector's result list
    prom.wait_until("up == 1")          # until the query returns something (or a timeout)
    prom.stop(); prom.start()           # same port, same data dir (a restart)
    prom = start_prometheus([...], workdir, rule_files=[path], evaluation_interval_s=1.0)
    prom.rule_groups()                  # /api/v1/rules: each group's health, evaluationTime
    with start_prometheus(...) as prom: ...

    with DcgmFixtureExporter() as exporter:      # stdlib http.server on 127.0.0.1, free port
        exporter.target                 # "127.0.0.1:<port>", for start_prometheus
        exporter.add_node("gpu-1", gpus=8)       # every field of the counters file, healthy
        exporter.set("DCGM_FI_DEV_XID_ERRORS", 79, gpu=3, hostname="gpu-1")
        exporter.add("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", 500, gpu=0,
                     hostname="gpu-1")  # a counter rises
        exporter.remove_node("gpu-1")   # its series vanish (Prometheus marks them stale)

Prometheus is the binary `e2e/testbin/prometheus/build.sh` caches (Debian's package, unpacked),
or $CKPT_PROMETHEUS (a path to a prometheus binary). It runs on 127.0.0.1 with a generated
config and its own data dir under `workdir`; its log is `prom.log`. Without the binary the
fixtures skip, unless CKPT_REQUIRE_TESTBIN=1 (CI), where that is a failure.

The exporter serves the fields of deploy/dcgm/health-counters.csv (their type and help come
from there) with the labels dcgm-exporter's GPU template renders (github.com/NVIDIA/dcgm-exporter
internal/pkg/rendermetrics/render_metrics.go @ 4.5.3-4.8.2): gpu, UUID, pci_bus_id, device,
modelName, then Hostname (renamed `hostname` after that release, in PR #655: pass
`hostname_label="hostname"`), then the `label`-type fields (DCGM_FI_DRIVER_VERSION).

Fixtures: bind them in a test module (an import would read as an unused name to the linter):
    from e2e.harness import promstack
    dcgm_exporter, prometheus = promstack.dcgm_exporter, promstack.prometheus
    dcgm_exporter      function  a started DcgmFixtureExporter, stopped afterwards
    prometheus         function  prometheus(targets, scrape_interval_s=1.0, rule_files=...,
                                 evaluation_interval_s=...) -> Prom, started in
                                 the test's tmp dir and stopped afterwards (skips or fails
                                 as above without the binary)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from e2e.harness.localcluster import _die_with_parent, free_port
from e2e.harness.paths import REPO, TESTBIN

BUILD_SCRIPT = TESTBIN / "prometheus" / "build.sh"
COUNTERS_FILE = REPO / "deploy" / "dcgm" / "health-counters.csv"
HOW_TO_GET = ("get it with `make testbin` (or e2e/testbin/prometheus/build.sh: Debian's package, "
              "needs apt-get), or set CKPT_PROMETHEUS to a prometheus binary")
EXPOSITION_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
DRIVER_VERSION = "570.124.06"  # what the fixture's DCGM_FI_DRIVER_VERSION label says
MODEL_NAME = "NVIDIA H100 80GB HBM3"
# The value each field has on a healthy GPU; every other field starts at 0.
HEALTHY_VALUES = {"DCGM_FI_DEV_GPU_TEMP": 41.0, "DCGM_FI_DEV_POWER_USAGE": 312.5}


class PrometheusMissing(RuntimeError):
    """No Prometheus binary; the message says how to get one."""


def prometheus_key() -> str:
    """The cache key build.sh computes: a hash of the script itself."""
    return hashlib.sha256(BUILD_SCRIPT.read_bytes()).hexdigest()[:16]


def find_prometheus() -> Path:
    """$CKPT_PROMETHEUS if set, else the cache entry for this build script."""
    if os.environ.get("CKPT_PROMETHEUS"):
        path = Path(os.environ["CKPT_PROMETHEUS"])
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
        root = Path(os.environ.get("CKPT_PROMETHEUS_ROOT", cache / "ckpt-preempt" / "prometheus"))
        path = root / prometheus_key() / "prometheus"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise PrometheusMissing(f"prometheus not found at {path}: {HOW_TO_GET}")
    return path


def prometheus_or_skip() -> Path:
    try:
        return find_prometheus()
    except PrometheusMissing as e:
        if os.environ.get("CKPT_REQUIRE_TESTBIN") == "1":
            pytest.fail(f"{e} [CKPT_REQUIRE_TESTBIN=1, so this is a failure]", pytrace=False)
        pytest.skip(str(e))


# -- Prometheus ------------------------------------------------------------------------------------
def config_text(targets: list[str], scrape_interval_s: float, rule_files: Sequence[Path] = (),
                evaluation_interval_s: float | None = None) -> str:
    """prometheus.yml for one job scraping `targets` (JSON is YAML), loading `rule_files`,
    evaluated every `evaluation_interval_s` (default: the scrape interval)."""
    interval = f"{int(scrape_interval_s * 1000)}ms"
    evaluation = f"{int((evaluation_interval_s or scrape_interval_s) * 1000)}ms"
    return json.dumps({
        "global": {"scrape_interval": interval, "scrape_timeout": interval,
                   "evaluation_interval": evaluation},
        "rule_files": [str(Path(f).resolve()) for f in rule_files],
        "scrape_configs": [{"job_name": "dcgm-exporter", "static_configs": [{"targets": targets}]}],
    }, indent=1)


class Prom:
    """A running Prometheus server; `start_prometheus` makes one."""

    def __init__(self, binary: Path, targets: list[str], workdir: Path,
                 scrape_interval_s: float = 1.0, rule_files: Sequence[Path] = (),
                 evaluation_interval_s: float | None = None):
        self.binary, self.dir = binary, Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(config_text(targets, scrape_interval_s, rule_files,
                                           evaluation_interval_s))
        self.log = self.dir / "prom.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        """Start (or restart) the server and wait until /-/ready answers 200."""
        if self.proc is not None and self.proc.poll() is None:
            return
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.binary), f"--config.file={self.config}",
                 f"--storage.tsdb.path={self.dir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=2h"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.proc.returncode}):\n{self.tail()}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"prometheus not ready after {timeout:g}s:\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> Prom:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def query(self, expr: str) -> list[dict]:
        """The result of an instant query (a list of {"metric": {...}, "value": [t, "v"]})."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"query {expr!r} failed: {body}")
        return body["data"]["result"]

    def rule_groups(self) -> list[dict]:
        """/api/v1/rules: each rule group with its `rules`, `evaluationTime` (seconds, the
        last evaluation) and `lastEvaluation`; each rule with its `health` and `lastError`."""
        with urllib.request.urlopen(f"{self.url}/api/v1/rules?type=record", timeout=10) as r:
            return json.load(r)["data"]["groups"]

    def wait_until(self, expr: str, timeout: float = 30,
                   check: Callable[[list[dict]], bool] = bool) -> list[dict]:
        """Poll `expr` until `check(result)` holds; raise AssertionError with the last result."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.query(expr)
            if check(got):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus: {expr!r} still {got} after {timeout:g}s")
            time.sleep(0.2)


def start_prometheus(targets: list[str], workdir: Path, scrape_interval_s: float = 1.0,
                     *, binary: Path | None = None, rule_files: Sequence[Path] = (),
                     evaluation_interval_s: float | None = None) -> Prom:
    """Start the real Prometheus scraping `targets` ("host:port") every `scrape_interval_s`,
    with `rule_files` (recording rules) evaluated every `evaluation_interval_s`."""
    prom = Prom(binary or find_prometheus(), targets, workdir, scrape_interval_s, rule_files,
                evaluation_interval_s)
    try:
        prom.start()
    except BaseException:
        prom.stop()
        raise
    return prom


# -- the fixture exporter --------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # gauge | counter | label
    help: str


def read_counters(path: Path = COUNTERS_FILE) -> tuple[Field, ...]:
    """The fields of a dcgm-exporter counters file (`FIELD, type, help`, # comments)."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, kind, text = (part.strip() for part in line.split(",", 2))
            out.append(Field(name, kind, text))
    return tuple(out)


@dataclass(frozen=True)
class FixtureGpu:
    hostname: str
    index: int

    @property
    def uuid(self) -> str:
        digest = hashlib.sha256(f"{self.hostname}/{self.index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


class DcgmFixtureExporter:
    """Serves /metrics like dcgm-exporter would for the GPUs added, with values tests change."""

    def __init__(self, *, hostname_label: str = "Hostname", counters: Path = COUNTERS_FILE):
        fields = read_counters(counters)
        self.fields = {f.name: f for f in fields if f.kind != "label"}
        self.static_labels = {f.name: DRIVER_VERSION for f in fields if f.kind == "label"}
        self.hostname_label = hostname_label
        self._values: dict[str, dict[FixtureGpu, float]] = {name: {} for name in self.fields}
        self._models: dict[FixtureGpu, str] = {}
        self._lock = threading.Lock()
        self._text: bytes | None = None  # rendered once per change
        self.scrapes = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.target = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.target}/metrics"
        self._thread: threading.Thread | None = None

    # -- test API
    def add_node(self, hostname: str, gpus: int = 8, *, model: str = MODEL_NAME) -> None:
        """GPUs 0..gpus-1 on `hostname`, every field at its healthy value."""
        with self._lock:
            for i in range(gpus):
                gpu = FixtureGpu(hostname, i)
                self._models[gpu] = model
                for name, series in self._values.items():
                    series[gpu] = HEALTHY_VALUES.get(name, 0.0)
            self._text = None

    def remove_node(self, hostname: str) -> None:
        with self._lock:
            for gpu in [g for g in self._models if g.hostname == hostname]:
                del self._models[gpu]
                for series in self._values.values():
                    series.pop(gpu, None)
            self._text = None

    def set(self, metric: str, value: float, *, gpu: int, hostname: str) -> None:
        self._change(metric, gpu, hostname, lambda _: float(value))

    def add(self, metric: str, delta: float, *, gpu: int, hostname: str) -> float:
        """Raise a counter by `delta`; returns the new value."""
        return self._change(metric, gpu, hostname, lambda old: old + delta)

    def get(self, metric: str, *, gpu: int, hostname: str) -> float:
        return self._change(metric, gpu, hostname, lambda old: old)

    def unset(self, metric: str, *, gpu: int, hostname: str) -> None:
        """Stop exposing one series (a field DCGM stopped reporting for that GPU)."""
        self._change(metric, gpu, hostname, lambda _: None)

    def _change(self, metric: str, gpu: int, hostname: str,
                new: Callable[[float], float | None]) -> float:
        if metric not in self.fields:
            raise KeyError(f"{metric} is not a field of {COUNTERS_FILE.name}")
        key = FixtureGpu(hostname, gpu)
        with self._lock:
            if key not in self._models:
                raise KeyError(f"no GPU {gpu} on {hostname}: add_node() it first")
            series = self._values[metric]
            old = series.get(key, 0.0)
            value = new(old)
            if value is None:
                series.pop(key, None)
                self._text = None
                return old
            if series.get(key) != value:
                series[key] = value
                self._text = None
            return value

    # -- exposition
    def render(self) -> bytes:
        with self._lock:
            if self._text is None:
                self._text = self._render()
            return self._text

    def _render(self) -> bytes:
        static = "".join(f',{k}="{v}"' for k, v in self.static_labels.items())
        labels = {gpu: (f'gpu="{gpu.index}",UUID="{gpu.uuid}",pci_bus_id="{gpu.pci_bus_id}",'
                        f'device="nvidia{gpu.index}",modelName="{model}",'
                        f'{self.hostname_label}="{gpu.hostname}"{static}')
                  for gpu, model in self._models.items()}
        out: list[str] = []
        for name, f in self.fields.items():
            series = self._values[name]
            if not series:
                continue
            out.append(f"# HELP {name} {f.help}\n# TYPE {name} {f.kind}\n")
            out.extend(f"{name}{{{labels[gpu]}}} {_number(v)}\n" for gpu, v in series.items())
        return "".join(out).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.render()
                exporter.scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", EXPOSITION_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # scrapes would flood the test output
                pass

        return Handler

    # -- lifecycle
    def start(self) -> DcgmFixtureExporter:
        if self._thread is None:
            self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                            name="dcgm-fixture-exporter")
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> DcgmFixtureExporter:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _number(v: float) -> str:
    return str(int(v)) if v.is_integer() else repr(v)


# -- fixtures --------------------------------------------------------------------------------------
@pytest.fixture
def dcgm_exporter() -> Iterator[DcgmFixtureExporter]:
    with DcgmFixtureExporter() as exporter:
        yield exporter


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[..., Prom]]:
    binary = prometheus_or_skip()
    started: list[Prom] = []

    def make(targets: list[str], scrape_interval_s: float = 1.0, **kw) -> Prom:
        prom = start_prometheus(targets, tmp_path / f"prometheus-{len(started)}",
                                scrape_interval_s, binary=binary, **kw)
        started.append(prom)
        return prom

    yield make
    for prom in started:
        prom.stop()
        shutil.rmtree(prom.dir / "data", ignore_errors=True)
