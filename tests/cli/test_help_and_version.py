"""Both command lines: help text for every flag and subcommand, ``--version``, log levels in any
case, and the shared value parsers (cli/argtypes.py)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from ckpt_preempt.cli import argtypes
from ckpt_preempt.controller.app import logs
from ckpt_preempt.controller.app.cli import build_parser as controller_parser
from ckpt_preempt.hwprobe.cli import build_parser as hwprobe_parser

REPO = Path(__file__).resolve().parents[2]
PARSERS = {"ckpt-preempt": controller_parser, "hwprobe": hwprobe_parser}


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    sub = _subparsers(parser)
    return list(sub.choices) if sub else []


def walk(parser: argparse.ArgumentParser):
    """(parser, action) for every action of the parser and of each subcommand's parser."""
    for action in parser._actions:
        yield parser, action
    sub = _subparsers(parser)
    for name, child in (sub.choices.items() if sub else ()):
        yield parser, next(a for a in sub._choices_actions if a.dest == name)
        yield from walk(child)


@pytest.mark.parametrize("prog", PARSERS)
def test_every_flag_and_subcommand_has_help(prog):
    parser = PARSERS[prog]()
    missing = [f"{p.prog}: {'/'.join(a.option_strings) or a.dest}" for p, a in walk(parser)
               if not isinstance(a, argparse._HelpAction)
               and (a.help is None or not str(a.help).strip() or a.help == argparse.SUPPRESS)]
    assert missing == []
    assert len(list(walk(parser))) > 10  # the walk reached the subcommands' flags


def test_both_command_lines_have_their_subcommands():
    assert subcommands(controller_parser()) == ["simulate", "explain", "run", "agent",
                                                "extender", "cleanup", "gate", "grace-webhook",
                                                "kueue-boost"]
    assert subcommands(hwprobe_parser()) == ["show", "report", "verify", "gpu-use", "publish",
                                             "serve", "bench"]


@pytest.mark.parametrize(("module", "prog"), [("ckpt_preempt.controller.app.cli", "ckpt-preempt"),
                                              ("ckpt_preempt.hwprobe.cli", "hwprobe")])
def test_version_prints_the_program_and_the_installed_version(module, prog):
    done = subprocess.run([sys.executable, "-m", module, "--version"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{prog} {metadata.version('ckpt-preempt')}\n"


@pytest.mark.parametrize("module", ["ckpt_preempt.controller.app.cli", "ckpt_preempt.hwprobe.cli"])
def test_help_of_every_subcommand_prints(module):
    parser = controller_parser() if "controller" in module else hwprobe_parser()
    for name in subcommands(parser):
        done = subprocess.run([sys.executable, "-m", module, name, "--help"], cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.startswith("usage: "), done.stderr


@pytest.mark.parametrize(("text", "level"), [("debug", "DEBUG"), ("DEBUG", "DEBUG"),
                                             ("Info", "INFO"), (" warning ", "WARNING"),
                                             ("error", "ERROR"), ("critical", "CRITICAL")])
def test_log_levels_are_read_in_any_case(text, level):
    import logging

    assert logs.level(text) == level
    root = logging.getLogger()
    handlers, was = root.handlers[:], root.level
    try:
        logs.setup(text)
        assert root.level == logging.getLevelName(level)
    finally:  # the root logger is the process's: leave it as found for the tests after this one
        root.handlers[:] = handlers
        root.setLevel(was)


@pytest.mark.parametrize("text", ["nonsense", "", "verbose", "10"])
def test_unknown_log_levels_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="unknown log level"):
        logs.level(text)
    with pytest.raises(ValueError, match="unknown log level"):
        logs.setup(text)


@pytest.mark.parametrize(("parse", "text", "value"), [
    (argtypes.positive_int, "3", 3),
    (argtypes.non_negative_int, "0", 0),
    (argtypes.positive_float, "0.5", 0.5),
    (argtypes.non_negative_float, "0", 0.0),
    (argtypes.fraction, "1", 1.0),
    (argtypes.fraction, "0", 0.0),
    (argtypes.at_least_one, "1.5", 1.5),
    (argtypes.port, "65535", 65535),
    (argtypes.positive_ints, "2, 4,8", (2, 4, 8)),
    (argtypes.non_negative_floats, "30,90", (30.0, 90.0)),
    (argtypes.names, "a,b", ("a", "b")),
    (argtypes.host_port, "127.0.0.1:9402", ("127.0.0.1", 9402)),
    (argtypes.host_port, ":80", ("", 80)),
    (argtypes.host_port, "[::1]:80", ("::1", 80)),
    (argtypes.host_port_or_any, "127.0.0.1:0", ("127.0.0.1", 0)),
])
def test_value_parsers_accept(parse, text, value):
    assert parse(text) == value


@pytest.mark.parametrize(("parse", "text"), [
    (argtypes.positive_int, "0"), (argtypes.positive_int, "1.5"), (argtypes.positive_int, ""),
    (argtypes.non_negative_int, "-1"), (argtypes.non_negative_int, "2.5"),
    (argtypes.positive_float, "0"), (argtypes.positive_float, "inf"),
    (argtypes.non_negative_float, "-0.1"), (argtypes.non_negative_float, "nan"),
    (argtypes.fraction, "1.01"), (argtypes.fraction, "-0.01"),
    (argtypes.at_least_one, "0.99"),
    (argtypes.port, "0"), (argtypes.port, "65536"), (argtypes.port, "http"),
    (argtypes.positive_ints, ""), (argtypes.positive_ints, "2,,4"),
    (argtypes.non_negative_floats, "1,-1"),
    (argtypes.names, ""), (argtypes.names, "a,a"), (argtypes.names, "a,"),
    (argtypes.host_port, "localhost"), (argtypes.host_port, "h:0"),
    (argtypes.host_port_or_any, "h:65536"),
])
def test_value_parsers_refuse(parse, text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse(text)
