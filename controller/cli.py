"""``ckpt-preempt``: one entry point, one module per subcommand.

Each command module exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int`` (the exit code). Errors the user can fix exit with code 2 and one line.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType


def _commands() -> list[ModuleType]:
    from ckpt_preempt.controller import cmd_agent, cmd_explain, cmd_run, cmd_simulate

    return [cmd_simulate, cmd_explain, cmd_run, cmd_agent]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="ckpt-preempt",
        description="Checkpoint-safe preemption for GPU clusters on Kubernetes.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for mod in _commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    args = parser.parse_args(argv)
    try:
        return args._run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
