"""What both command lines say about a file they were given and cannot use: in words, naming the
path, on one line; never ``[Errno 2] No such file or directory: '/x'`` nor a parser's
five-line excerpt of the file.

- ``readable_file``: argparse ``type=`` for a flag naming a file to read, checked while the
  command line is parsed (``argument --snapshot: /x: no such file``).
- ``os_problem(e)``: an OSError's reason in words (``no such file``, ``is a directory``).
- ``parse_problem(e, kind)``: where and why a JSON or YAML parser stopped
  (``not valid JSON at line 3 column 5: Expecting ',' delimiter``). YAML's errors are read by
  their attributes (``problem_mark``), as this package imports no YAML library.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
from pathlib import Path

_REASONS = {
    errno.ENOENT: "no such file",
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "a part of the path is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "no space left on the device",
}


def os_problem(e: OSError) -> str:
    """The reason of an OSError in words, without its errno number or repeated path."""
    if e.errno in _REASONS:
        return _REASONS[e.errno]
    return (e.strerror or str(e) or type(e).__name__).lower()


def file_problem(path: str | os.PathLike, e: OSError) -> str:
    """``PATH: reason`` for an OSError met while using the file at ``path``."""
    return f"{os.fspath(path)}: {os_problem(e)}"


def read_problem(path: str | os.PathLike) -> str | None:
    """Why the file at ``path`` cannot be read, in words (``no such file``, ``is a directory``,
    ``permission denied``), or None. Nothing is opened, so a FIFO does not block."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        return os_problem(e)
    if stat.S_ISDIR(mode):
        return _REASONS[errno.EISDIR]
    if not os.access(path, os.R_OK):
        return _REASONS[errno.EACCES]
    return None


def readable_file(text: str) -> Path:
    """argparse ``type=`` for a file to read: refused while parsing, with the reason in words."""
    if problem := read_problem(text):
        raise argparse.ArgumentTypeError(f"{text}: {problem}")
    return Path(text)


def parse_problem(e: Exception, kind: str) -> str:
    """Where and why a ``kind`` ("JSON", "YAML") parser refused a text, on one line."""
    if hasattr(e, "lineno") and hasattr(e, "colno") and hasattr(e, "msg"):  # JSONDecodeError
        return f"not valid {kind} at line {e.lineno} column {e.colno}: {e.msg}"
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    why = getattr(e, "problem", None) or getattr(e, "context", None)
    if mark is not None and why:  # yaml.MarkedYAMLError: 0-based line and column
        return f"not valid {kind} at line {mark.line + 1} column {mark.column + 1}: {why}"
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte {e.start})"
    return f"not valid {kind}: {' '.join(str(e).split()) or type(e).__name__}"
