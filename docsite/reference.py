"""Reference pages generated from the code's own definitions, so they cannot drift:
the settings (their dataclasses and attribute docstrings), the v2 API (the OpenAPI
document a node serves), the metrics (the Prometheus registry and the StatsD
declarations), the command line (its parser) and the error codes (the error tree)."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

from dynamiq import errors
from dynamiq.api.openapi import openapi_document
from dynamiq.api.v2.routes import ROUTES
from dynamiq.cli import parser
from dynamiq.config import sources
from dynamiq.config.sections import LimitsSettings
from dynamiq.config.settings import Settings
from dynamiq.metrics.prometheus import PrometheusMetrics
from dynamiq.metrics.statsd import SERIES

__all__ = ["PAGES", "commands", "error_classes", "metric_families", "setting_rows"]

CLI_COLUMNS = "100"  # the width argparse wraps help to, whatever the terminal building


@dataclasses.dataclass(frozen=True, slots=True)
class SettingRow:
    """One setting as the reference shows it."""

    key: str
    kind: str
    default: str
    variable: str
    flag: str
    meaning: str


def _docstrings(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass: the string right after each field."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    found: dict[str, str] = {}
    for field, after in itertools.pairwise(body):
        named = isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name)
        if named and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
            found[field.target.id] = inspect.cleandoc(str(after.value.value))
    return found


def setting_rows(settings: type = Settings) -> list[SettingRow]:
    """Every setting of every section, in the order the sections define them; a setting
    without its docstring is an error (the page would not say what it means)."""
    rows = []
    for section in dataclasses.fields(settings):
        cls: Any = section.default_factory
        meaning = _docstrings(cls)
        for field in dataclasses.fields(cls):
            key = f"{section.name}.{field.name}"
            if field.name not in meaning:
                raise ValueError(f"setting {key} has no docstring in its section's dataclass")
            default = field.default
            rows.append(
                SettingRow(
                    key=key,
                    kind=field.type if isinstance(field.type, str) else field.type.__name__,
                    default=repr(default) if isinstance(default, str) else str(default),
                    variable=sources.variable(key),
                    flag=sources.flag(key),
                    meaning=meaning[field.name],
                )
            )
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def configuration() -> str:
    """The settings' reference page."""
    lines = [
        "# Settings",
        "",
        "Every setting, generated from the settings' own definitions"
        " (`dynamiq/config/sections.py`). A setting is read from the file given with"
        " `-c` (gcfg/INI, `[section] key = value`), then its environment variable, then its"
        " flag, the last one given winning. How they are read: [Configuration](configuration.md).",
        "",
    ]
    for section, rows in itertools.groupby(setting_rows(), lambda r: r.key.split(".")[0]):
        lines += [f"## `[{section}]`", "", "| key | type | default | environment | meaning |"]
        lines.append("| --- | --- | --- | --- | --- |")
        lines += [
            f"| `{row.key}` | {row.kind} | `{_cell(row.default)}` | `{row.variable}` "
            f"| {_cell(row.meaning)} |"
            for row in rows
        ]
    return "\n".join(lines) + "\n"


def v2() -> str:
    """The v2 API's reference page, from the OpenAPI document a node with keys serves."""
    document = openapi_document(ROUTES, LimitsSettings(), True)
    lines = [
        "# v2 routes",
        "",
        "Every operation of the OpenAPI document a node serves at `GET /v2/openapi.json`"
        " (with keys on and the default limits), rendered at build time. What the routes"
        " do together: [The v2 API](v2.md).",
        "",
    ]
    for path, operations in document["paths"].items():
        for method, op in operations.items():
            lines += [f"## `{method.upper()} {path}`", "", op.get("summary", ""), ""]
            if op.get("description"):
                lines += [op["description"], ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | schema |", "| --- | --- | --- |"]
                for p in params:
                    schema = json.dumps(p.get("schema", {}), sort_keys=True)
                    lines.append(f"| `{p['name']}` | {p['in']} | `{_cell(schema)}` |")
                lines.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            if body:
                lines += [f"Request body: `{_schema_name(body.get('schema', {}))}`", ""]
            lines += ["| status | answer |", "| --- | --- |"]
            for status, answer in op.get("responses", {}).items():
                lines.append(f"| {status} | {_cell(answer.get('description', ''))} |")
            lines.append("")
    lines += ["## Schemas", ""]
    for name, schema in document["components"]["schemas"].items():
        text = json.dumps(schema, indent=2, sort_keys=True)
        lines += [f"### `{name}`", "", "```json", text, "```", ""]
    return "\n".join(lines)


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else json.dumps(schema, sort_keys=True)


def metric_families() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """The Prometheus families a node serves: name, type, help and labels."""
    registry = PrometheusMetrics().registry
    found = []
    for family in registry.collect():
        collector = registry._names_to_collectors[family.name]  # no public view of it
        labels = tuple(getattr(collector, "_labelnames", ()))
        found.append((family.name, family.type, family.documentation, labels))
    return found


def metrics() -> str:
    """The metrics' reference page."""
    lines = [
        "# Metrics",
        "",
        "Generated from the declarations: the node's Prometheus registry and the StatsD"
        " sink's names. Where they are served and what to watch:"
        " [Observability](observability.md).",
        "",
        "## Prometheus (`GET /metrics`)",
        "",
        "| family | type | labels | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for name, kind, doc, labels in metric_families():
        shown = ", ".join(f"`{label}`" for label in labels) or "none"
        lines.append(f"| `{name}` | {kind} | {shown} | {_cell(doc)} |")
    lines += [
        "",
        "## StatsD (`stats.type = statsd`)",
        "",
        "Names follow `stats.prefix`, verbatim, as the original's did.",
        "",
        "| name | type | meaning |",
        "| --- | --- | --- |",
    ]
    for name, kind, doc in SERIES:
        lines.append(f"| `{name}` | {kind} | {_cell(doc)} |")
    return "\n".join(lines) + "\n"


def commands() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command of the command line with its parser, depth first."""

    def walk(name: str, command: argparse.ArgumentParser) -> Iterator[tuple[str, Any]]:
        yield name, command
        for action in command._actions:  # argparse has no public walk
            if isinstance(action, argparse._SubParsersAction):
                for child, sub in action.choices.items():
                    yield from walk(f"{name} {child}", sub)

    yield from walk("dynamiq", parser())


def cli() -> str:
    """The command line's reference page: each command's own help."""
    lines = [
        "# Commands",
        "",
        "Every command's `--help`, generated from the command line's parser."
        " How they are used: [Command line](cli.md).",
        "",
    ]
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = CLI_COLUMNS
    try:
        for name, command in commands():
            lines += [f"## `{name}`", "", "```text", command.format_help().rstrip(), "```", ""]
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return "\n".join(lines)


def error_classes() -> list[type[errors.DynamiqError]]:
    """The error tree, depth first from ``DynamiqError``."""

    def walk(cls: type[errors.DynamiqError]) -> Iterator[type[errors.DynamiqError]]:
        yield cls
        for sub in cls.__subclasses__():
            yield from walk(sub)

    return list(walk(errors.DynamiqError))


def error_codes() -> str:
    """The error codes' reference page."""
    lines = [
        "# Error codes",
        "",
        'v2 answers every error as `{"error": "CODE", "message": "..."}` with the'
        " status below; generated from the error tree (`dynamiq/errors.py`). The SQS and"
        " SNS endpoint answers AWS's codes instead: [SQS and SNS](sqs-sns.md).",
        "",
        "| code | status | error | meaning |",
        "| --- | --- | --- | --- |",
    ]
    seen = set()
    for cls in error_classes():
        if cls.__module__ != errors.__name__ or (cls.code, cls.status) in seen:
            continue
        seen.add((cls.code, cls.status))
        summary = (inspect.getdoc(cls) or "").split("\n\n")[0]
        lines.append(f"| `{cls.code}` | {cls.status} | `{cls.__name__}` | {_cell(summary)} |")
    return "\n".join(lines) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    "reference/settings.md": configuration,
    "reference/v2-routes.md": v2,
    "reference/metrics.md": metrics,
    "reference/commands.md": cli,
    "reference/errors.md": error_codes,
}
