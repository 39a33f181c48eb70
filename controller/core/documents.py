"""The one reader of the JSON or YAML files a user names: the controller's config file, the
snapshot ``explain`` plans on, a kubeconfig checked before the client's loader reads it.

A ``.json`` file is parsed as JSON, any other as YAML (which reads JSON too). A file that cannot
be read or parsed raises ``DocumentError``, whose text is one line naming the file and, for a
parse error, the line and column (``snap.json: not valid JSON at line 3 column 5: Expecting ','
delimiter``), never the parser's excerpt of the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from ckpt_preempt.cli import files


class DocumentError(ValueError):
    """The file cannot be read, or is not valid JSON or YAML; one line naming it."""


def load(path: str | os.PathLike) -> object:
    """The document in the file at ``path`` (None for an empty YAML file)."""
    kind = "JSON" if Path(path).suffix.lower() == ".json" else "YAML"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise DocumentError(files.file_problem(path, e)) from e
    except UnicodeDecodeError as e:
        raise DocumentError(f"{os.fspath(path)}: {files.parse_problem(e, kind)}") from e
    try:
        return json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        raise DocumentError(f"{os.fspath(path)}: {files.parse_problem(e, kind)}") from e
