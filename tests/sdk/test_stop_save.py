"""The SDK's stop contract with a real process: SIGTERM is a flag, the save it starts is atomic,
more SIGTERMs do not abort it, and a SIGKILL at any point of it leaves the old checkpoint or the
new one, never a torn one. ``save_child.py`` pauses at each phase of its save until told to go
on, so each case signals it at exactly one point."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ckpt_preempt_sdk as sdk

CHILD = Path(__file__).resolve().parent / "save_child.py"
WAIT_SECONDS = 60  # generous: 2 loaded cores


class Child:
    def __init__(self, checkpoint: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(CHILD), str(checkpoint)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.expect("training")

    def expect(self, line: str) -> None:
        got = self.proc.stdout.readline().strip()  # the child prints one line per phase
        assert got == line, (got, self.proc.stderr.read() if not got else "")

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()


def version(checkpoint: Path) -> int:
    """The checkpoint's version; fails on a torn or corrupt one."""
    doc = json.loads(checkpoint.read_bytes())
    assert hashlib.sha256(doc["payload"].encode()).hexdigest() == doc["sha256"]
    return doc["version"]


PHASES = ["mid-write", "before-replace", "before-dir-fsync"]


@pytest.mark.parametrize(("kill_at", "survives"), [
    pytest.param("mid-write", 1, id="SIGKILL with half the new file written keeps the old one"),
    pytest.param("before-replace", 1, id="SIGKILL after the fsync, before the rename: old one"),
    pytest.param("before-dir-fsync", 2, id="SIGKILL after the rename: the new one"),
])
def test_sigkill_during_the_save_leaves_the_old_or_the_new_checkpoint(tmp_path, kill_at,
                                                                      survives):
    ckpt = tmp_path / "ckpt.json"
    child = Child(ckpt)
    try:
        child.proc.send_signal(signal.SIGTERM)  # the kubelet's SIGTERM ...
        for name in PHASES[:PHASES.index(kill_at)]:
            child.expect(name)
            child.go()
        child.expect(kill_at)
        child.proc.kill()  # ... and its SIGKILL when the grace period ends mid-save
        assert child.proc.wait(WAIT_SECONDS) == -signal.SIGKILL
    finally:
        child.proc.kill()
    assert version(ckpt) == survives
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != ckpt.name]
    assert all(n.startswith(".ckpt.json.") and n.endswith(".tmp") for n in leftovers)


def test_more_sigterms_during_the_save_do_not_abort_it(tmp_path):
    ckpt = tmp_path / "ckpt.json"
    child = Child(ckpt)
    try:
        child.proc.send_signal(signal.SIGTERM)
        for name in PHASES:  # a SIGTERM at every phase of the save
            child.expect(name)
            child.proc.send_signal(signal.SIGTERM)
            child.go()
        child.expect("saved; signals 4")
        assert child.proc.wait(WAIT_SECONDS) == sdk.EXIT_CHECKPOINTED
    finally:
        child.proc.kill()
    assert version(ckpt) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.json"]


def test_without_the_stop_handler_sigterm_keeps_its_default_action(tmp_path):
    r = subprocess.run([sys.executable, "-c",
                        "import os, signal, ckpt_preempt_sdk as sdk; sdk.Checkpointer(); "
                        "os.kill(os.getpid(), signal.SIGTERM); print('survived')"],
                       capture_output=True, text=True, timeout=WAIT_SECONDS)
    assert r.returncode == -signal.SIGTERM and "survived" not in r.stdout


def test_the_stop_flag_counts_signals_and_restores_the_old_handlers():
    before = signal.getsignal(signal.SIGTERM)
    stop = sdk.StopRequest().install()
    try:
        assert not stop and stop.elapsed() == 0.0 and stop.first_at is None
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop and stop.requested and stop.count == 2 and stop.elapsed() >= 0.0
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_checkpointers_stop_flag_and_exit_code_without_an_agent():
    ckpt = sdk.Checkpointer("http://127.0.0.1:1")
    assert not ckpt.stop_requested
    stop = ckpt.install_stop_handler()
    try:
        assert ckpt.stop is stop and not ckpt.stop_requested
        os.kill(os.getpid(), signal.SIGTERM)
        assert ckpt.stop_requested
        assert ckpt.saved_on_stop() == sdk.EXIT_CHECKPOINTED == 75  # no agent: still 75
    finally:
        stop.restore()
    assert sdk.EXIT_NOT_SAVED == 143 != sdk.EXIT_CHECKPOINTED
