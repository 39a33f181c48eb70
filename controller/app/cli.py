"""``ckpt-preempt``: one entry point, one module per subcommand.

Each command module exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int`` (the exit code). Errors the user can fix exit with code 2 and one line on
stderr (argparse's errors too: ``argtypes.Parser`` prints ``PROG: error: ...`` alone), never a
traceback; a flag naming a file to read is checked while parsing (``cli.files.readable_file``),
and a file error no command caught is said in words here, with its path. Results go to stdout
through ``emit``, so ``ckpt-preempt ... | head`` keeps the exit code.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from types import ModuleType

from ckpt_preempt.cli import argtypes, files

PROG = "ckpt-preempt"
DISTRIBUTION = "ckpt-preempt"  # pyproject.toml [project] name
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def _commands() -> list[ModuleType]:
    from ckpt_preempt.controller.app import (
        cmd_agent,
        cmd_cleanup,
        cmd_explain,
        cmd_extender,
        cmd_gate,
        cmd_grace,
        cmd_kueue_boost,
        cmd_run,
        cmd_simulate,
    )

    return [cmd_simulate, cmd_explain, cmd_run, cmd_agent, cmd_extender, cmd_cleanup, cmd_gate,
            cmd_grace, cmd_kueue_boost]


def version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every subcommand included; builds nothing else."""
    parser = argtypes.Parser(
        prog=PROG,
        description="Checkpoint-safe preemption for GPU clusters on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}",
                        help="print the version and exit")
    # not required=True: parse_command reports an unknown flag first, then a missing COMMAND
    sub = parser.add_subparsers(dest="command", metavar="COMMAND",
                                title="commands", help="what to do, one of:")
    for mod in _commands():
        p = sub.add_parser(mod.NAME, help=mod.HELP, description=mod.__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_command(argv)
    try:
        return args._run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as e:  # a file the command uses, not caught nearer: its path, in words
        if e.filename is None:
            raise
        print(f"{PROG}: {files.file_problem(e.filename, e)}", file=sys.stderr)
        return argtypes.EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
