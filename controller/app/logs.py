"""Structured logs: one JSON object per line on stderr.

Log levels are read in any case (``debug``, ``DEBUG``): ``--log-level`` of ``run`` and ``agent``
and the chart's ``logLevel`` (passed as ``--log-level``) all go through ``level``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import UTC, datetime

_STD = set(vars(logging.makeLogRecord({})))
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_LEVEL = "INFO"


def level(text: str) -> str:
    """The canonical name of a log level given in any case; argparse ``type=`` for --log-level."""
    name = text.strip().upper()
    if name not in LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r}; choose from {', '.join(LEVELS)} (any case)")
    return name


def add_level_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--log-level", type=level, default=DEFAULT_LEVEL, metavar="LEVEL",
                   help=f"one of {', '.join(LEVELS)}, any case (default %(default)s)")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
               "level": record.levelname.lower(), "logger": record.name,
               "msg": record.getMessage()}
        out.update({k: v for k, v in vars(record).items() if k not in _STD and k != "message"})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def setup(name: str = DEFAULT_LEVEL) -> None:
    """Log JSON lines at ``name`` (any case; ValueError for an unknown one) to stderr."""
    try:
        canonical = level(name)
    except argparse.ArgumentTypeError as e:
        raise ValueError(str(e)) from None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(canonical)
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
