"""Where in a filter policy SNS's parser stood when it refused it (pure).

SNS reads a policy as a stream of JSON tokens, written out again without
spaces, and most of its refusals end with where the stream stood then:
``\\n at [Source: (String)"{...}"; line: 1, column: 31]``, the column counted
from 1, after what the parser had read. A refusal here names a node of the
policy by its path (keys and indices) and how far into it the parser was:

- ``open``: the node just met as the next token. Its first character is
  read: a text's opening quote, an array's or object's bracket; a number
  or ``true``/``false``/``null`` is read whole. A key met names the place of
  its value, read this way (the parser looks past the colon at once).
- ``done``: the node read to its end (a text's closing quote, a bracket).

The source is shown up to 500 characters, the rest counted, as SNS shows it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

__all__ = ["Edge", "Path", "Place", "located"]

Path = tuple[str | int, ...]
Edge = Literal["open", "done"]
Place = tuple[Path, Edge]
SNIPPET = 500  # characters of the source a refusal shows


def located(spec: Any, place: Place) -> str:
    """What SNS's refusal of ``spec`` ends with, the parser at ``place``."""
    path, edge = place
    spans: dict[Path, tuple[int, int]] = {}
    out: list[str] = []
    _emit(spec, (), spans, out, 0)
    text = "".join(out)
    start, end = spans[path]
    node = _at(spec, path)
    opened = isinstance(node, str | list | dict)
    column = start + 2 if edge == "open" and opened else end + 1
    shown = text[:SNIPPET]
    rest = f"[truncated {len(text) - SNIPPET} chars]" if len(text) > SNIPPET else ""
    return f'\n at [Source: (String)"{shown}"{rest}; line: 1, column: {column}]'


def _at(node: Any, path: Path) -> Any:
    for step in path:
        node = node[step]
    return node


def _emit(
    node: Any, path: Path, spans: dict[Path, tuple[int, int]], out: list[str], at: int
) -> int:
    """Write ``node`` compactly into ``out`` from offset ``at``, keeping each node's span
    by its path; return the offset after it."""
    start = at
    if isinstance(node, dict):
        out.append("{")
        at += 1
        for i, (key, value) in enumerate(node.items()):
            name = ("," if i else "") + json.dumps(key, ensure_ascii=False) + ":"
            out.append(name)
            at = _emit(value, (*path, key), spans, out, at + len(name))
        out.append("}")
        at += 1
    elif isinstance(node, list):
        out.append("[")
        at += 1
        for i, value in enumerate(node):
            if i:
                out.append(",")
                at += 1
            at = _emit(value, (*path, i), spans, out, at)
        out.append("]")
        at += 1
    else:
        written = json.dumps(node, ensure_ascii=False)
        out.append(written)
        at += len(written)
    spans[path] = (start, at)
    return at
