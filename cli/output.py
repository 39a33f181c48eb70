"""What both command lines print: results on stdout that survive ``| head``, errors on one line."""

from __future__ import annotations

import os
import sys


def emit(text: str) -> None:
    """Print a result on stdout. A reader that went away (``| head``) ends the output, not the
    command: stdout is pointed at devnull, so nothing more fails, and the command goes on to
    return its own exit code (docs.python.org/3/library/signal.html, "Note on SIGPIPE")."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def one_line(err: BaseException) -> str:
    """An exception's message on one line (the kubeconfig loader's span several)."""
    return " ".join(str(err).split()) or type(err).__name__
