"""The generated reference pages cover what the code defines: every setting, metric,
v2 route, command and error code is on the built site, taken from the code itself."""

from __future__ import annotations

import dataclasses
import html
import re
import socket
from pathlib import Path

import pytest

from docsite import performance, reference
from dynamiq import errors
from dynamiq.api.v2.routes import ROUTES
from dynamiq.config.sources import keys
from dynamiq.metrics.prometheus import PrometheusMetrics
from dynamiq.metrics.statsd import SERIES, StatsdMetrics


def _text(site: Path, page: str) -> str:
    return html.unescape((site / page / "index.html").read_text(encoding="utf-8"))


def test_every_setting_is_on_the_settings_page(site: Path) -> None:
    text = _text(site, "reference/settings")
    known = keys()
    assert len(known) > 60
    for key in known:
        assert f"<code>{key}</code>" in text, key
        assert "DYNAMIQ_" + key.replace(".", "_").upper() in text, key
    assert len(reference.setting_rows()) == len(known)


def test_every_documented_v2_route_is_on_the_routes_page(site: Path) -> None:
    text = _text(site, "reference/v2-routes")
    documented = [r for r in ROUTES if r.summary]
    assert len(documented) > 20
    for route in documented:
        assert f"{route.method} {route.path}" in text, (route.method, route.path)


def test_every_metric_is_on_the_metrics_page(site: Path) -> None:
    text = _text(site, "reference/metrics")
    families = [f.name for f in PrometheusMetrics().registry.collect()]
    assert "dynamiq_queue_depth" in families
    for name in families:
        assert f"<code>{name}</code>" in text, name
    for name, _, _ in SERIES:
        assert f"<code>{html.unescape(name)}</code>" in text, name


def test_the_statsd_sink_sends_only_declared_names() -> None:
    """What the StatsD sink sends matches ``SERIES``, so the page cannot fall behind it."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(2)
    sink = StatsdMetrics("127.0.0.1", server.getsockname()[1], "", max_packet=65000)
    try:
        sink.sent({"q": 1})
        sink.received("q", 1, 10)
        sink.deleted("q", 1)
        sink.redelivered("q", 1)
        sink.lifecycle("q", "dead_lettered", 1)
        sink.topic_event("t", "published", 1)
        sink.queue_level("q", 3, 1)
        sink.push_attempt("sub-1", 0.01, 1)
        sink.request("/v2/queues/{queue}/receive", "POST", 200, 0.001)
        sink.error("QUEUE_FULL")
        sink.node_level(3, 0.0004)
        sink.flush()
        sent = server.recv(65536).decode()
    finally:
        sink.close()
        server.close()
    names = [line.split(":", 1)[0] for line in sent.splitlines()]
    patterns = [
        re.compile(".+".join(map(re.escape, re.split(r"<[^>]+>", n))) + "$") for n, _, _ in SERIES
    ]
    assert len(names) >= 15
    for name in names:
        assert any(p.match(name) for p in patterns), name


def test_every_command_is_on_the_commands_page(site: Path) -> None:
    text = _text(site, "reference/commands")
    found = [name for name, _ in reference.commands()]
    for expected in ("dynamiq serve", "dynamiq keys create", "dynamiq queues", "dynamiq backup"):
        assert any(name.startswith(expected) for name in found), expected
    for name in found:
        assert f"<code>{name}</code>" in text, name


def test_every_error_code_is_on_the_errors_page(site: Path) -> None:
    text = _text(site, "reference/errors")
    codes = {
        cls.code
        for cls in vars(errors).values()
        if isinstance(cls, type) and issubclass(cls, errors.DynamiqError)
    }
    assert {"QUEUE_FULL", "QUEUE_NOT_FOUND", "INVALID"} <= codes
    for code in codes:
        assert f"<code>{code}</code>" in text, code


def test_the_performance_page_shows_every_recorded_run(site: Path) -> None:
    text = _text(site, "performance")
    recorded = performance.runs()
    assert len(recorded) >= 20
    for run in recorded:
        assert run.meta["title"] in text, run.name
        assert str(run.meta["command"]) in text, run.name
    assert (site / "performance" / "w1-history.png").stat().st_size > 10_000


def test_a_results_file_without_its_command_is_refused(tmp_path: Path) -> None:
    (tmp_path / "run.md").write_text("---\nbench: w1\ntitle: t\ndate: 2026-12-01\n---\nx\n")
    with pytest.raises(ValueError, match="commit, machine, command"):
        performance.runs(tmp_path)


@dataclasses.dataclass(frozen=True)
class _Loose:
    """``[loose]``: a section one of whose settings says nothing."""

    said: int = 1
    """A setting with its meaning."""
    unsaid: int = 2


@dataclasses.dataclass(frozen=True)
class _Top:
    loose: _Loose = dataclasses.field(default_factory=_Loose)


def test_a_setting_without_its_meaning_fails_the_build() -> None:
    with pytest.raises(ValueError, match=r"loose\.unsaid has no docstring"):
        reference.setting_rows(_Top)
    rows = {row.key: row for row in reference.setting_rows()}
    assert rows["limits.maxbatch"].default == "1000"
    assert rows["storage.backend"].variable == "DYNAMIQ_STORAGE_BACKEND"
    assert rows["core.httpport"].flag == "--core-httpport"
