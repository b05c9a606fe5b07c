"""A YAML parser's error in one line, with where it is (line and column, 1-based).

Who calls it: api/parsing.py (the server's answer to a manifest that is not YAML) and the
CLI's readers of files. PyYAML's own text spreads one error over four lines with a
``in "<unicode string>"`` for each mark; this keeps the problem, its position, and the
context it arose in, once.
"""

from __future__ import annotations

import yaml

__all__ = ["yaml_error_line"]


def yaml_error_line(err: yaml.YAMLError) -> str:
    """``did not find expected ',' or '}' at line 4, column 5 (while parsing a flow mapping
    that starts at line 3, column 11)``; any other YAMLError: its text on one line."""
    if not isinstance(err, yaml.MarkedYAMLError):
        return " ".join(str(err).split())
    problem = err.problem or "invalid YAML"
    text = f"{problem}{_at(err.problem_mark)}"
    if err.context:
        context = f"{err.context}{_at(err.context_mark, 'that starts at')}"
        text = f"{text} ({context})"
    return " ".join(text.split())


def _at(mark: yaml.Mark | None, words: str = "at") -> str:
    if mark is None:
        return ""
    return f" {words} line {mark.line + 1}, column {mark.column + 1}"
