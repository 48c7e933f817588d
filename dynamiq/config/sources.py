"""Settings read from their sources: a gcfg/INI file, the environment and flags.

Precedence, lowest first: the defaults (``config``), the config file,
environment variables ``DYNAMIQ_<SECTION>_<KEY>``, command-line flags
``--<section>-<key>``. A bad value raises ``ConfigError`` naming the key and
where the value came from.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynamiq.config import SECTIONS, Settings
from dynamiq.errors import ConfigError

__all__ = ["flag", "keys", "load_settings", "parse_gcfg", "variable"]

# Variables the project reads for other purposes than settings: the client's
# nodes, key and certificate authorities, the Riak tests' node, the benchmark's
# driver, baseline checkout and other interpreter, the installer's extras.
OTHER_VARIABLES = frozenset(
    {
        "DYNAMIQ_HOSTS",
        "DYNAMIQ_KEY",
        "DYNAMIQ_CA_FILE",
        "DYNAMIQ_RIAK_URL",
        "DYNAMIQ_PEERS",
        "DYNAMIQ_BASELINE",
        "DYNAMIQ_PYTHON",
        "DYNAMIQ_EXTRAS",
    }
)


def variable(key: str) -> str:
    """Setting ``key``'s environment variable (``core.httpport``: ``DYNAMIQ_CORE_HTTPPORT``)."""
    return "DYNAMIQ_" + key.replace(".", "_").upper()


def flag(key: str) -> str:
    """The command-line flag of setting ``key`` (``core.httpport``: ``--core-httpport``)."""
    return "--" + key.replace(".", "-")


def keys() -> dict[str, type]:
    """Return every setting as ``section.key`` with its type."""
    out: dict[str, type] = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            out[f"{section}.{f.name}"] = type(f.default)
    return out


def parse_gcfg(text: str, source: str) -> dict[str, tuple[str, str]]:
    """Parse gcfg/INI text into ``{"section.key": (raw value, "file:line")}``.

    Raises:
        ConfigError: on a line that is neither a section, a setting nor a comment.
    """
    values: dict[str, tuple[str, str]] = {}
    section = ""
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        line = _strip_comment(raw).strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]") or len(line) < 3:
                raise ConfigError(f"bad section header {raw.strip()!r}", source=where)
            section = line[1:-1].strip().lower()
            continue
        key, eq, value = line.partition("=")
        if not section:
            raise ConfigError("setting outside of any [section]", source=where)
        value = value.strip() if eq else "true"
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        values[f"{section}.{key.strip().lower()}"] = (value, where)
    return values


def _strip_comment(line: str) -> str:
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch in ";#" and not quoted:
            return line[:i]
    return line


def _convert(key: str, kind: type, raw: str, source: str) -> Any:
    try:
        if kind is bool:
            return {
                "true": True,
                "yes": True,
                "on": True,
                "1": True,
                "false": False,
                "no": False,
                "off": False,
                "0": False,
            }[raw.strip().lower()]
        if kind is int:
            return _parse_size(raw)
        if kind is float:
            return float(raw)
    except (KeyError, ValueError):
        word = {bool: "a boolean", int: "an integer", float: "a number"}[kind]
        raise ConfigError(f"{raw!r} is not {word}", key=key, source=source) from None
    return raw


def _parse_size(raw: str) -> int:
    text = raw.strip().lower().replace("_", "")
    for suffix, factor in (("kib", 1 << 10), ("mib", 1 << 20), ("gib", 1 << 30), ("tib", 1 << 40)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def load_settings(
    path: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Settings:
    """Build validated ``Settings`` from a file, the environment and flags.

    Args:
        path: a gcfg/INI file, or None for defaults only.
        env: environment variables (``os.environ`` when None); only
            ``DYNAMIQ_<SECTION>_<KEY>`` names are read, and any other
            ``DYNAMIQ_`` name is refused (a misspelt setting).
        flags: ``{"section.key": value}`` from the command line.

    Raises:
        ConfigError: naming the key and its source, for an unreadable file,
            an unknown key or a bad value.
    """
    known = keys()
    raw: dict[str, tuple[str, str]] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file: {exc}", source=str(path)) from None
        raw.update(parse_gcfg(text, str(path)))
    environ = os.environ if env is None else env
    by_variable = {variable(key): key for key in known}
    for name in sorted(n for n in environ if n.startswith("DYNAMIQ_")):
        if name in by_variable:
            raw[by_variable[name]] = (environ[name], f"environment variable {name}")
        elif name not in OTHER_VARIABLES:
            key = name.removeprefix("DYNAMIQ_").lower().replace("_", ".", 1)
            raise ConfigError("unknown setting", key=key, source=f"environment variable {name}")
    for key, value in (flags or {}).items():
        raw[key] = (value, f"flag {flag(key)}")
    return _build(raw, known)


def _build(raw: dict[str, tuple[str, str]], known: dict[str, type]) -> Settings:
    by_section: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    sources: dict[str, str] = {}
    for key, (value, source) in raw.items():
        if key not in known:
            raise ConfigError("unknown setting", key=key, source=source)
        section, name = key.split(".", 1)
        by_section[section][name] = _convert(key, known[key], value, source)
        sources[key] = source
    parts: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        try:
            parts[section] = cls(**by_section[section])
        except ConfigError as exc:
            raise ConfigError(exc.detail, key=exc.key, source=sources.get(exc.key or "")) from None
    try:
        return Settings(**parts)
    except ConfigError as exc:
        raise ConfigError(exc.detail, key=exc.key, source=sources.get(exc.key or "")) from None
