"""Value parsers for argparse ``type=``: nonsense is refused while the command line is parsed,
before any work starts, with argparse's usual one error line.

Shared by both command lines (``ckpt-preempt`` and ``hwprobe``), which may not import each other;
pure (the standard library's argparse and math only; ``Parser`` writes only what argparse writes).
Each value parser takes the flag's text and returns the converted value or raises
``argparse.ArgumentTypeError`` saying what is allowed::

    p.add_argument("--samples", type=argtypes.positive_int, default=1)
    p.add_argument("--gang-share", type=argtypes.fraction)
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from typing import NoReturn

PORT_MIN, PORT_MAX = 1, 65535  # TCP ports a server can listen on (0 would pick one at random)
EXIT_USAGE = 2  # argparse's exit code for a bad command line


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``PROG: error: MESSAGE (see PROG --help)``,
    instead of argparse's usage block and a line; its subcommand parsers are of this class too.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_command(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        """``parse_args`` for a program of subcommands (``dest="command"``, added without
        ``required=True``): an unknown flag is named before a missing command, where argparse
        would report only "the following arguments are required: COMMAND"."""
        args, unknown = self.parse_known_args(argv)
        if unknown:
            self.error(f"unrecognized arguments: {' '.join(unknown)}")
        if getattr(args, "command", None) is None:
            self.error(f"a COMMAND is required: one of {', '.join(self._commands())}")
        return args

    def command_error(self, command: str, message: str) -> NoReturn:
        """``error`` as subcommand ``command`` reports it (``PROG COMMAND: error: ...``), for a
        rule between flags that argparse cannot state (``publish`` needs ``--node``)."""
        self._commands()[command].error(message)

    def _commands(self) -> dict[str, argparse.ArgumentParser]:
        return {name: parser for action in self._actions
                if isinstance(action, argparse._SubParsersAction)
                for name, parser in action.choices.items()}


def _number(text: str, kind: type[int] | type[float]) -> int | float:
    try:
        value = kind(text.strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 (counts: samples, repeats, seeds)."""
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (counts where 0 turns a thing off)."""
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0 (intervals, loads, sizes)."""
    value = float(_number(text, float))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (durations that may be zero: grace, lag, restore)."""
    value = float(_number(text, float))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A share between 0 and 1, both included."""
    value = float(_number(text, float))
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be a share between 0 and 1, got {text!r}")
    return value


def at_least_one(text: str) -> float:
    """A finite factor >= 1 (how many times longer)."""
    value = float(_number(text, float))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a factor >= 1, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port a server can listen on."""
    value = int(_number(text, int))
    if not PORT_MIN <= value <= PORT_MAX:
        raise argparse.ArgumentTypeError(
            f"must be a port between {PORT_MIN} and {PORT_MAX}, got {text!r}")
    return value


def _items(text: str, example: str = "1,2,3") -> list[str]:
    items = [x.strip() for x in text.split(",")]
    if not text.strip() or any(not x for x in items):
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated list like {example}, got {text!r}")
    return items


def positive_ints(text: str) -> tuple[int, ...]:
    """A comma-separated list of integers >= 1 ("2,4,8")."""
    return tuple(positive_int(x) for x in _items(text))


def non_negative_floats(text: str) -> tuple[float, ...]:
    """A comma-separated list of finite numbers >= 0 ("30,90")."""
    return tuple(non_negative_float(x) for x in _items(text))


def names(text: str) -> tuple[str, ...]:
    """A non-empty comma-separated list of distinct names ("a,b")."""
    items = _items(text, example="a,b")
    if len(set(items)) < len(items):
        raise argparse.ArgumentTypeError(f"names one item twice: {text!r}")
    return tuple(items)


def _host_port(text: str, lowest: int) -> tuple[str, int]:
    host, sep, number = text.strip().rpartition(":")
    try:
        if not sep:
            raise argparse.ArgumentTypeError("no port")
        value = int(_number(number, int))
        if not lowest <= value <= PORT_MAX:
            raise argparse.ArgumentTypeError(f"the port must be between {lowest} and {PORT_MAX}")
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r} ({e})") from None
    return host.strip("[]"), value


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``:PORT`` (host "" then: the caller's default), port 1-65535."""
    return _host_port(text, PORT_MIN)


def host_port_or_any(text: str) -> tuple[str, int]:
    """Like ``host_port``, and port 0 also: the system picks a free one (tests do)."""
    return _host_port(text, 0)
