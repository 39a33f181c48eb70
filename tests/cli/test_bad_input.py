"""Every subcommand of both command lines, given bad values, as a user runs them.

The rule, for every row: a non-zero exit code, nothing on stdout, exactly one line on stderr that
starts with the program's name (argparse's errors included: ``argtypes.Parser`` makes them one
line too), and no traceback. Each row runs ``python -m ...`` in a fresh process with no
Kubernetes credentials anywhere (``KUBECONFIG`` unset, an empty ``HOME``, no in-cluster
environment) and no NVML library (``HWPROBE_NVML_LIBRARY`` names a missing file).

Rows marked ``PROBED`` run hwprobe with a fixed 8-GPU topology in place of NVML
(``tests/hwprobe/layouts.py``), so they reach the code after the probe.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTROLLER, HWPROBE = "ckpt_preempt.controller.app.cli", "ckpt_preempt.hwprobe.cli"
PROG = {CONTROLLER: "ckpt-preempt", HWPROBE: "hwprobe"}
EXAMPLE = REPO / "docs" / "snapshot-example.yaml"
MISSING = "/nonexistent/dir"
# hwprobe's main() with the probe replaced by a fixed topology (no NVML needed)
PROBED = ("import sys; from tests.hwprobe import layouts; from ckpt_preempt.hwprobe import cli; "
          "cli._probe = layouts.hgx_h100; sys.exit(cli.main(sys.argv[1:]))")
# ckpt-preempt's main() where `import matplotlib` fails, as it does when it is not installed
NO_MATPLOTLIB = ("import sys; sys.modules['matplotlib'] = None; "
                 "from ckpt_preempt.controller.app import cli; sys.exit(cli.main(sys.argv[1:]))")
BAD_SPEC = "name: bad\ngpu_count: -3\n"
BAD_SNAPSHOT = "now: 5\nnodes: []\npods: []\n"


def bare_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "MOCK_NVML_CONFIG", "LD_LIBRARY_PATH", "NODE_NAME",
                        "POD_NAME", "POD_NAMESPACE")
           and not k.startswith("KUBERNETES_")}
    env.update(HOME=str(home), HWPROBE_NVML_LIBRARY=f"{MISSING}/libnvidia-ml.so.1")
    return env


def run(module: str, args: list[str], tmp: Path, *, code: str | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    head = ["-c", code] if code else ["-m", module]
    return subprocess.run([sys.executable, *head, *args], cwd=REPO, env=bare_env(home),
                          capture_output=True, text=True, timeout=timeout)


def assert_one_line(done: subprocess.CompletedProcess, prog: str, says: str,
                    exit_code: int | None = None) -> None:
    shown = f"exit {done.returncode}\nstdout: {done.stdout!r}\nstderr: {done.stderr!r}"
    assert done.returncode != 0, shown
    if exit_code is not None:
        assert done.returncode == exit_code, shown
    assert "Traceback" not in done.stderr, shown
    lines = done.stderr.splitlines()
    assert len(lines) == 1, shown
    assert lines[0].startswith(prog), shown
    assert says in lines[0], shown
    assert done.stdout == "", shown


def c(*args: str, says: str, exit_code: int | None = 2, id: str):
    return pytest.param(CONTROLLER, list(args), says, exit_code, id=f"ckpt-preempt {id}")


def h(*args: str, says: str, exit_code: int | None = 2, id: str):
    return pytest.param(HWPROBE, list(args), says, exit_code, id=f"hwprobe {id}")


SIM_NUMBERS = [  # every numeric flag of simulate, with a value its type refuses
    ("--utilisation", "0", "must be a number > 0"),
    ("--utilisation", "nan", "expected a finite number"),
    ("--seed", "one", "invalid int value"),
    ("--seeds", "0", "must be an integer >= 1"),
    ("--scale", "1.5", "must be a share between 0 and 1"),
    ("--load", "0", "must be a number > 0"),
    ("--window-hours", "-6", "must be a number > 0"),
    ("--share-on-request", "-0.1", "must be a share between 0 and 1"),
    ("--share-periodic", "1.1", "must be a share between 0 and 1"),
    ("--gang-share", "2", "must be a share between 0 and 1"),
    ("--gang-sizes", "2.5", "expected an integer, got '2.5'"),
    ("--gang-sizes", "2,0", "must be an integer >= 1"),
    ("--checkpoint-intervals-min", "0", "must be an integer >= 1"),
    ("--checkpoint-intervals-min", "15,,30", "expected a comma-separated list"),
    ("--checkpoint-seconds", "30,-90", "must be a number >= 0"),
    ("--max-checkpoint-seconds", "-1", "must be a number >= 0"),
    ("--grace-seconds", "-5", "must be a number >= 0"),
    ("--restore-seconds", "-1", "must be a number >= 0"),
    ("--restore-job-gpu-seconds", "-300", "must be a number >= 0"),
    ("--replay-windows", "0", "must be an integer >= 1"),
    ("--floor-cuts", "-1", "must be an integer >= 0"),
    ("--floor-cuts", "many", "expected an integer, got 'many'"),
    ("--report-lag-seconds", "inf", "expected a finite number"),
    ("--report-jitter-seconds", "soon", "expected a number"),
    ("--drain-failure-share", "1.5", "must be a share between 0 and 1"),
    ("--drain-overrun-share", "-1", "must be a share between 0 and 1"),
    ("--drain-overrun-factor", "0.5", "must be a factor >= 1"),
]

ROWS = [
    c(says="a COMMAND is required: one of simulate, explain, run", id="no subcommand"),
    c("--bogus", says="unrecognized arguments: --bogus", id="unknown flag, no subcommand"),
    c("--bogus", "simulate", says="unrecognized arguments: --bogus",
      id="unknown flag before the subcommand"),
    c("fly", says="invalid choice: 'fly'", id="unknown subcommand"),
    c("simulate", "--bogus", says="unrecognized arguments: --bogus", id="unknown flag"),
    # simulate
    *[c("simulate", flag, value, says=f"argument {flag}: {says}", id=f"simulate {flag} {value}")
      for flag, value, says in SIM_NUMBERS],
    c("simulate", "--policies", "", says="argument --policies: expected a comma-separated",
      id="simulate empty policies"),
    c("simulate", "--policies", " , ", says="argument --policies: expected a comma-separated",
      id="simulate blank policies"),
    c("simulate", "--policies", "kube-default,kube-default", says="names one item twice",
      id="simulate policy twice"),
    c("simulate", "--policies", "fifo", says="unknown policy 'fifo'", id="simulate unknown policy"),
    c("simulate", "--scale", "0", says="--scale must be in (0, 1]", id="simulate zero scale"),
    c("simulate", "--checkpoint-seconds", "90,30", says="MIN <= MAX", id="simulate range order"),
    c("simulate", "--checkpoint-seconds", "30", says="needs MIN,MAX", id="simulate range size"),
    c("simulate", "--share-on-request", "0.6", "--share-periodic", "0.6",
      says="--share-on-request + --share-periodic", id="simulate shares above one"),
    c("simulate", "--protocol", "chaos", says="unknown protocol 'chaos'", id="simulate protocol"),
    c("simulate", "--workload", "imagenet", says="unknown workload", id="simulate workload"),
    c("simulate", "--protocol", "fgd", "--policies", "kube-default",
      says="unknown placement policy kube-default", id="simulate fgd preemption policy"),
    c("simulate", "--protocol", "fgd", "--workload", "training", says="replays an openb pod list",
      id="simulate fgd training"),
    c("simulate", "--protocol", "fgd", "--pods", str(EXAMPLE), says="not an openb pod list",
      id="simulate fgd not a pod list"),
    c("simulate", "--protocol", "fgd", "--plot", "x.png", says="python -m bench.placement",
      id="simulate fgd plot"),
    c("simulate", "--pods", f"{MISSING}/pods.csv",
      says=f"argument --pods: {MISSING}/pods.csv: no such file", id="simulate pods file"),
    c("simulate", "--plot", f"{MISSING}/x.png", says=f"directory {MISSING} does not exist",
      id="simulate plot dir"),
    c("simulate", "--plot", "lost.pdf", says="should end in .png", id="simulate plot suffix"),
    # explain
    c("explain", says="give either POD or --snapshot FILE", id="explain nothing"),
    c("explain", "ns/pod", "--snapshot", str(EXAMPLE), says="give either POD or --snapshot",
      id="explain both"),
    c("explain", "ns/pod", says="cannot load Kubernetes credentials",
      id="explain pod without kubeconfig"),
    c("explain", "ns/pod", "--kubeconfig", f"{MISSING}/config",
      says="cannot load Kubernetes credentials", id="explain pod missing kubeconfig"),
    c("explain", "ns/pod", "--kubeconfig", "/etc/passwd",
      says="kubeconfig /etc/passwd: not a kubeconfig (no clusters, contexts or users)",
      id="explain pod with a file that is no kubeconfig"),
    c("run", "--kubeconfig", "/etc/passwd", says="kubeconfig /etc/passwd: not a kubeconfig",
      id="run with a file that is no kubeconfig"),
    c("explain", "ns/", says="POD must be NAMESPACE/NAME", id="explain pod without name"),
    c("explain", "ns/pod", "--config", f"{MISSING}/c.yaml",
      says=f"argument --config: {MISSING}/c.yaml: no such file", id="explain missing config"),
    c("explain", "--snapshot", f"{MISSING}/s.yaml",
      says=f"argument --snapshot: {MISSING}/s.yaml: no such file", id="explain missing snapshot"),
    c("explain", "--snapshot", str(EXAMPLE), "--max-checkpoint-seconds", "-1",
      says="argument --max-checkpoint-seconds: must be a number >= 0", id="explain cap"),
    c("explain", "--snapshot", str(EXAMPLE), "-o", "xml", says="invalid choice: 'xml'",
      id="explain output"),
    # run
    c("run", "--log-level", "nonsense", says="unknown log level 'nonsense'", id="run log level"),
    c("run", "--log-level", "debug", "--listen", "127.0.0.1:0",
      says="cannot load cluster credentials", id="run debug accepted"),
    c("run", "--log-level", "DEBUG", "--listen", "127.0.0.1:0",
      says="cannot load cluster credentials", id="run DEBUG accepted"),
    c("run", "--listen", "8080", says="expected HOST:PORT", id="run listen no port"),
    c("run", "--listen", "0.0.0.0:99999", says="expected HOST:PORT", id="run listen port"),
    c("run", "--config", f"{MISSING}/c.yaml", "--listen", "127.0.0.1:0",
      says=f"argument --config: {MISSING}/c.yaml: no such file", id="run missing config"),
    c("run", "--kubeconfig", "k", "--in-cluster", says="not allowed with argument",
      id="run two credentials"),
    c("run", "--listen", "127.0.0.1:0", says="cannot load cluster credentials",
      id="run without kubeconfig"),
    c("run", "--in-cluster", "--listen", "127.0.0.1:0", says="cannot load cluster credentials",
      id="run in-cluster outside a cluster"),
    # extender
    c("extender", "--listen", "8080", says="expected HOST:PORT", id="extender listen no port"),
    c("extender", "--prioritize-budget-ms", "0", says="argument --prioritize-budget-ms",
      id="extender budget"),
    c("extender", "--config", f"{MISSING}/c.yaml",
      says=f"argument --config: {MISSING}/c.yaml: no such file", id="extender missing config"),
    c("extender", "--listen", "127.0.0.1:0", says="cannot load cluster credentials",
      id="extender without kubeconfig"),
    # cleanup (an unreachable API server: tests/controller/test_cleanup_cli.py)
    c("cleanup", says="the following arguments are required: --namespace",
      id="cleanup without namespace"),
    c("cleanup", "-n", "x", says="cannot load cluster credentials",
      id="cleanup without kubeconfig"),
    c("cleanup", "-n", "x", "--kubeconfig", "/etc/passwd",
      says="kubeconfig /etc/passwd: not a kubeconfig", id="cleanup kubeconfig not one"),
    c("cleanup", "-n", "x", "--kubeconfig", "k", "--in-cluster",
      says="not allowed with argument", id="cleanup two credentials"),
    c("cleanup", "-n", "x", "--log-level", "chatty", says="unknown log level 'chatty'",
      id="cleanup log level"),
    c("cleanup", "-n", "x", "--retry-seconds", "-1", says="argument --retry-seconds",
      id="cleanup retry seconds"),
    # gate
    c("gate", says="the following arguments are required: --tls-cert, --tls-key",
      id="gate without certificate"),
    c("gate", "--tls-cert", f"{MISSING}/tls.crt", "--tls-key", f"{MISSING}/tls.key",
      says=f"argument --tls-cert: {MISSING}/tls.crt: no such file", id="gate missing certificate"),
    c("gate", "--listen", "8443", "--tls-cert", "c", "--tls-key", "k", says="expected HOST:PORT",
      id="gate listen no port"),
    # grace-webhook
    c("grace-webhook", "--margin-seconds", "-1", "--tls-cert", "c", "--tls-key", "k",
      says="argument --margin-seconds: must be an integer >= 0", id="grace-webhook margin"),
    # kueue-boost
    c("kueue-boost", "--interval", "0", says="argument --interval: must be a number > 0",
      id="kueue-boost interval"),
    c("kueue-boost", "--kueue-priority-boost", "maybe", says="argument --kueue-priority-boost",
      id="kueue-boost gate value"),
    # agent
    c("agent", "--pod", "p", "--namespace", "n", "--log-level", "chatty",
      says="unknown log level 'chatty'", id="agent log level"),
    c("agent", "--pod", "p", "--namespace", "n", "--log-level", "debug",
      says="cannot load Kubernetes credentials", id="agent debug accepted"),
    c("agent", "--pod", "p", "--namespace", "n", "--log-level", "Debug",
      says="cannot load Kubernetes credentials", id="agent Debug accepted"),
    c("agent", "--pod", "p", "--namespace", "n", says="cannot load Kubernetes credentials",
      id="agent without kubeconfig"),
    c("agent", "--namespace", "n", says="--pod and --namespace", id="agent no pod"),
    c("agent", "--pod", "p", "--namespace", "n", "--listen", "127.0.0.1:0",
      says="expected HOST:PORT", id="agent listen port 0"),
    c("agent", "--pod", "p", "--namespace", "n", "--signal-pid", "0",
      says="must be an integer >= 1", id="agent signal pid"),
    c("agent", "--pod", "p", "--namespace", "n", "--exec", "true", "--http", "http://x",
      says="not allowed with argument", id="agent two hooks"),
    c("agent", "--pod", "p", "--namespace", "n", "--http", "ftp://x",
      says="argument --http: expected an http:// or https:// URL", id="agent http scheme"),
    c("agent", "--pod", "p", "--namespace", "n", "--http", "http://x", "--http-cancel", "x",
      says="argument --http-cancel: expected an http:// or https:// URL", id="agent cancel url"),
    c("agent", "--pod", "p", "--namespace", "n", "--signal-pid", "1", "--signal", "SIGNOPE",
      says="unknown signal 'SIGNOPE'", id="agent unknown signal"),
    # hwprobe
    h(says="a COMMAND is required: one of show, report", id="no subcommand"),
    h("--bogus", says="unrecognized arguments: --bogus", id="unknown flag, no subcommand"),
    h("fly", says="invalid choice: 'fly'", id="unknown subcommand"),
    h("show", says="cannot load HWPROBE_NVML_LIBRARY", id="show without NVML"),
    h("report", "--json", says="cannot load HWPROBE_NVML_LIBRARY", id="report without NVML"),
    h("verify", says="the following arguments are required: --expect", id="verify no spec"),
    h("verify", "--expect", "single-gpu", says="cannot load HWPROBE_NVML_LIBRARY",
      id="verify without NVML"),
    h("verify", "--expect", "single-gpu", "--samples", "0",
      says="argument --samples: must be an integer >= 1", id="verify samples"),
    h("verify", "--expect", "single-gpu", "--interval", "-1",
      says="argument --interval: must be a number >= 0", id="verify interval"),
    h("verify", "--expect", "single-gpu", "--with-prometheus", "ftp://x",
      says="argument --with-prometheus: 'ftp://x' is not an http(s) URL", id="verify prometheus"),
    h("verify", "--expect", "single-gpu", "--prometheus-timeout", "0",
      says="argument --prometheus-timeout:", id="verify prometheus timeout"),
    h("publish", "--node", "n", says="cannot load HWPROBE_NVML_LIBRARY",
      id="publish without NVML"),
    h("serve", "--no-publish", says="cannot load HWPROBE_NVML_LIBRARY", id="serve without NVML"),
    h("serve", "--metrics-port", "99999",
      says="argument --metrics-port: must be a port between 1 and 65535", id="serve port"),
    h("serve", "--metrics-port", "0", says="must be a port between 1 and 65535",
      id="serve port 0"),
    h("serve", "--interval", "0", says="argument --interval: must be a number > 0",
      id="serve interval"),
    h("serve", says="serve needs --node", id="serve without node"),
    h("bench", says="cannot load HWPROBE_NVML_LIBRARY", id="bench without NVML"),
    h("gpu-use", says="cannot load HWPROBE_NVML_LIBRARY", id="gpu-use without NVML"),
    h("bench", "--size-mib", "0", says="argument --size-mib: must be an integer >= 1",
      id="bench size"),
    h("bench", "--repeats", "-1", says="argument --repeats: must be an integer >= 1",
      id="bench repeats"),
]


@pytest.mark.parametrize(("module", "args", "says", "exit_code"), ROWS)
def test_bad_input_is_one_line_and_a_non_zero_exit(module, args, says, exit_code, tmp_path):
    assert_one_line(run(module, args, tmp_path), PROG[module], says, exit_code)


def test_every_subcommand_has_a_row():
    from ckpt_preempt.controller.app.cli import build_parser as controller_parser
    from ckpt_preempt.hwprobe.cli import build_parser as hwprobe_parser
    from tests.cli.test_help_and_version import subcommands

    covered = {(p.values[0], p.values[1][0] if p.values[1] else None) for p in ROWS}
    for module, build in ((CONTROLLER, controller_parser), (HWPROBE, hwprobe_parser)):
        for name in [*subcommands(build()), None]:
            assert (module, name) in covered, f"{PROG[module]} {name or '(none)'} has no row"


@pytest.mark.parametrize(("args", "says"), [
    (["verify", "--expect", "{spec}"], "gpu_count"),
    (["publish", "--node", "n"], "no Kubernetes configuration"),
    (["report", "--expect", "no-such-machine"], "unknown spec 'no-such-machine'"),
    (["gpu-use", "--pod-resources-socket", f"{MISSING}/kubelet.sock"], "no PodResources socket"),
], ids=["verify spec gpu_count -3", "publish without kubeconfig", "report unknown spec",
        "gpu-use without the kubelet socket"])
def test_hwprobe_past_the_probe_bad_input_is_one_line(args, says, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD_SPEC)
    done = run(HWPROBE, [a.format(spec=spec) for a in args], tmp_path, code=PROBED)
    assert_one_line(done, "hwprobe", says, 2)


def test_hwprobe_serve_on_a_port_in_use_is_one_line(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = run(HWPROBE, ["serve", "--no-publish", "--metrics-address", "127.0.0.1",
                             "--metrics-port", str(port)], tmp_path, code=PROBED, timeout=60)
    assert_one_line(done, "hwprobe", f"cannot serve metrics on 127.0.0.1:{port}", 2)


def test_run_on_a_port_in_use_is_one_line(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = run(CONTROLLER, ["run", "--listen", f"127.0.0.1:{port}"], tmp_path)
    assert_one_line(done, "ckpt-preempt", f"cannot listen on 127.0.0.1:{port}", 2)


def test_simulate_plot_without_matplotlib_fails_before_the_simulation(tmp_path):
    done = run(CONTROLLER, ["simulate", "--plot", str(tmp_path / "x.png")], tmp_path,
               code=NO_MATPLOTLIB)
    assert_one_line(done, "ckpt-preempt", "--plot needs matplotlib", 2)
    assert not (tmp_path / "x.png").exists()


def _closed_stdout(module: str, args: list[str], tmp: Path, code: str | None = None):
    """Run with stdout a pipe nobody reads: its reader is gone before the first write."""
    head = ["-c", code] if code else ["-m", module]
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    with subprocess.Popen([sys.executable, *head, *args], cwd=REPO, env=bare_env(home),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        proc.stdout.close()
        err = proc.stderr.read().decode()
        return proc.wait(timeout=60), err


@pytest.mark.parametrize(("spec", "exit_code"), [("dgx-a100-8", 1), ("hgx-h100-8", 0)])
def test_hwprobe_verify_into_a_closed_pipe_keeps_its_exit_code(spec, exit_code, tmp_path):
    rc, err = _closed_stdout(HWPROBE, ["verify", "--expect", spec], tmp_path, PROBED)
    assert (rc, err) == (exit_code, "")


def test_hwprobe_verify_piped_into_head_exits_non_zero_on_fail(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    line = (f"set -o pipefail; {sys.executable} -c \"{PROBED}\" verify --expect dgx-a100-8 "
            "| head -1")
    done = subprocess.run(["bash", "-c", line], cwd=REPO, env=bare_env(home),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("FAIL: ") and "Traceback" not in done.stderr


@pytest.mark.parametrize(("args", "exit_code"), [
    (["--snapshot", str(EXAMPLE), "--compare"], 0),
    (["--snapshot", str(EXAMPLE), "--compare", "-o", "json"], 0),
    (["--snapshot", str(EXAMPLE), "--no-drain", "-o", "yaml"], 0),
])
def test_explain_into_a_closed_pipe_keeps_its_exit_code(args, exit_code, tmp_path):
    rc, err = _closed_stdout(CONTROLLER, ["explain", *args], tmp_path)
    assert (rc, err) == (exit_code, "")


def test_explain_of_an_impossible_plan_into_a_closed_pipe_exits_1(tmp_path):
    snap = tmp_path / "snap.yaml"
    snap.write_text("now: 2026-12-02T12:00:00Z\nnodes: [{name: n, gpus: 1}]\n"
                    "pods: [{name: big, namespace: a, gpus: 8, priority: 100}]\npreemptor: a/big\n")
    rc, err = _closed_stdout(CONTROLLER, ["explain", "--snapshot", str(snap)], tmp_path)
    assert (rc, err) == (1, "")


def test_explain_bad_snapshot_row_is_one_line(tmp_path):
    snap = tmp_path / "snap.yaml"
    snap.write_text(BAD_SNAPSHOT)
    done = run(CONTROLLER, ["explain", "--snapshot", str(snap)], tmp_path)
    assert_one_line(done, "ckpt-preempt", "preemptor must name", 2)


def test_explain_pod_with_an_unreachable_api_server_is_one_line(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]  # bound but never accepting: then closed, refusing
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n")
    done = run(CONTROLLER, ["explain", "ns/pod", "--kubeconfig", str(kubeconfig)], tmp_path)
    assert_one_line(done, "ckpt-preempt", "cannot reach the API server", 2)
