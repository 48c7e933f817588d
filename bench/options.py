"""The command lines of the benches: a parser that says what the bench measures, and
its numeric knobs given as defaults."""

from __future__ import annotations

import argparse

__all__ = ["options"]


def options(doc: str | None, **numbers: float) -> argparse.ArgumentParser:
    """Return a parser described by ``doc``'s first paragraph, with one ``--name`` option
    for each number given, of that number's type and with it as the default
    (``seconds=10.0`` is ``--seconds``, a float; ``cluster_queues=0`` is ``--cluster-queues``)."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    for name, default in numbers.items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return parser
