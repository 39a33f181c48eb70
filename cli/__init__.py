"""Command-line plumbing both programs share (``ckpt-preempt`` and ``hwprobe``), which may not
import each other: argparse value parsers and one-line errors (``argtypes``), files named on the
command line that cannot be used, said in words (``files``), and output that survives a closed
pipe (``output``). Standard library only; no decisions live here.
"""
