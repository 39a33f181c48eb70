"""docs/operations.md: its `ckpt-preempt` command lines parse with the real command line, the
chart values it sets exist in values.yaml, and the names it gives the chart's objects are the
ones the chart renders (read from the templates' name helpers and the admission bindings)."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from ckpt_preempt.controller.app import cli
from tests.deploy import monitoring as mon

CHART = mon.REPO / "deploy" / "helm" / "ckpt-preempt"
RELEASE = "ckpt-preempt"  # the release the runbook's commands assume
TEXT = mon.RUNBOOK.read_text()


def code_lines() -> list[str]:
    """Every command in the doc: lines of its ``sh`` blocks (continuations joined) and inline
    code spans that start with a command."""
    lines: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", TEXT, re.S):
        lines += [ln for ln in block.replace("\\\n", " ").splitlines()
                  if ln.strip() and not ln.startswith("#")]
    lines += re.findall(r"`((?:ckpt-preempt|helm|kubectl) [^`]+)`", TEXT.replace("\n", " "))
    return lines


def argv(line: str) -> list[str]:
    line = re.sub(r"<[A-Z]+>", "x", line.split("|")[0].split(">")[0])
    return shlex.split(line)


CLI_LINES = [ln for ln in code_lines() if ln.startswith("ckpt-preempt ")]


def test_the_doc_has_commands():
    assert len(CLI_LINES) >= 2 and any(ln.startswith("helm ") for ln in code_lines())


@pytest.mark.parametrize("line", CLI_LINES)
def test_every_ckpt_preempt_command_parses(line, capsys):
    args = cli.build_parser().parse_command(argv(line)[1:])
    assert args.command == argv(line)[1]
    assert capsys.readouterr().err == ""


def _has_key(values: dict, dotted: str) -> bool:
    node = values
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_every_value_the_doc_sets_exists():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    keys = re.findall(r"--set ([a-z][A-Za-z.]*)=", TEXT)  # KEY=VALUE is a placeholder
    assert {"dryRun", "config.drain", "extender.enabled"} <= set(keys)
    for key in keys:
        assert _has_key(values, key), f"values.yaml has no {key}"


def test_the_object_names_are_the_charts():
    """Names the doc uses for the release's objects are ``<release>-<suffix>`` for a suffix the
    chart's templates define."""
    templates = "\n".join(p.read_text() for p in (CHART / "templates").glob("*"))
    suffixes = set(re.findall(r'include "ckpt-preempt\.fullname" \. }}-([a-z-]+)', templates))
    suffixes |= set(re.findall(r'define "ckpt-preempt\.[a-z]+" -}}{{ include '
                               r'"ckpt-preempt\.fullname" \. }}-([a-z-]+)', templates))
    used = set(re.findall(r"(?:deploy|ds|svc|validatingadmissionpolicybinding|configmap|lease)"
                          rf"[/ ]{RELEASE}-([a-z-]+)", TEXT))
    assert used, "no object names found in the doc"
    assert used <= suffixes | {s + "-metrics" for s in suffixes}, sorted(used - suffixes)
