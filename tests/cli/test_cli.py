"""The real ``dynamiq`` command against a live node, as people and scripts use it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from dynamiq.client import Client
from dynamiq.testing.cluster import LocalCluster
from dynamiq.testing.endpoint import Receiver
from tests.servers import refused
from tests.waiting import until

COMMANDS = [
    "serve",
    "cluster",
    "queues",
    "topics",
    "stats",
    "status",
    "keys",
    "redrive",
    "publish",
    "consume",
    "peek",
    "spool",
    "completion",
]


@pytest.fixture
def queue(node: str, request: pytest.FixtureRequest) -> Iterator[str]:
    name = request.node.name.replace("[", "-").replace("]", "")[:60].strip("-_")
    with Client(node) as client:
        client.create_queue(name, visibility_timeout=30)
    yield name
    with Client(node) as client:
        client.delete_queue(name)


def dynamiq(
    *args: str, url: str | None = None, stdin: str | None = None, check: int | None = 0
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DYNAMIQ_HOSTS": url or ""}
    done = subprocess.run(
        [sys.executable, "-m", "dynamiq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    if check is not None:
        assert done.returncode == check, (done.returncode, done.stdout, done.stderr)
    return done


def depth(node: str, queue: str) -> int:
    with Client(node) as client:
        return int(client.queue(queue)["stats"]["depth"])


def test_help_lists_every_command_with_one_line() -> None:
    text = dynamiq("--help").stdout
    for command in COMMANDS:
        assert any(line.split()[:1] == [command] for line in text.splitlines()), command


def test_queues_from_creation_to_deletion(node: str) -> None:
    made = json.loads(
        dynamiq(
            *("queues", "create", "cq", "visibility_timeout=7", "content_dedup=true", "--json"),
            url=node,
        ).stdout
    )
    assert made["settings"]["visibility_timeout"] == 7 and made["settings"]["content_dedup"] is True
    listed = json.loads(dynamiq("queues", "list", "--json", url=node).stdout)
    assert "cq" in [q["queue"] for q in listed]
    changed = json.loads(
        dynamiq("--json", "queues", "set", "cq", "delay_seconds=2", url=node).stdout
    )
    assert changed["settings"]["delay_seconds"] == 2
    human = dynamiq("queues", "show", "cq", url=node).stdout
    assert "settings.visibility_timeout" in human and "7.0" in human
    dynamiq("publish", "cq", "a", "b", url=node)
    assert json.loads(dynamiq("queues", "purge", "cq", "--json", url=node).stdout) == {"purged": 2}
    dynamiq("queues", "delete", "cq", url=node)
    assert "cq" not in dynamiq("queues", "list", url=node).stdout


def test_ten_thousand_lines_through_publish_and_consume(node: str, queue: str) -> None:
    lines = [f"line {i}" for i in range(10_000)]
    published = json.loads(
        dynamiq("publish", queue, "--json", url=node, stdin="\n".join(lines) + "\n").stdout
    )
    assert published == {"to": queue, "published": 10_000, "spooled": 0, "duplicates": 0}
    out = dynamiq("consume", queue, "--json", url=node).stdout.splitlines()
    assert sorted(json.loads(line)["body"] for line in out) == sorted(lines)
    assert depth(node, queue) == 0  # each deleted once written


def test_consume_deletes_only_what_it_wrote(node: str, queue: str, tmp_path: Path) -> None:
    dynamiq("publish", queue, *[f"m{i}" for i in range(30)], url=node)
    dynamiq("consume", queue, "--max", "10", "--no-delete", "--visibility", "60", url=node)
    assert depth(node, queue) == 30  # read, left leased
    written = tmp_path / "out.jsonl"
    dynamiq("consume", queue, "--max", "12", "--output", str(written), url=node)
    kept = [json.loads(line) for line in written.read_text().splitlines()]
    assert len(kept) == 12 and depth(node, queue) == 18
    # what consume writes, publish --file reads back
    dynamiq("publish", queue, "--file", str(written), url=node)
    assert depth(node, queue) == 30


def test_consume_of_a_queue_that_does_not_exist_ends_with_status_1(node: str) -> None:
    done = dynamiq("consume", "no-such-queue", "--follow", url=node, check=1)
    assert "QUEUE_NOT_FOUND" in done.stderr


def test_topics_route_a_file_of_json_lines(node: str, tmp_path: Path) -> None:
    for name in ("created", "everything"):
        dynamiq("queues", "create", name, url=node)
    dynamiq("topics", "create", "orders", url=node)
    dynamiq("topics", "subscribe", "orders", "created", "--pattern", "orders.*.created", url=node)
    dynamiq("topics", "subscribe", "orders", "everything", url=node)
    shown = json.loads(dynamiq("topics", "show", "orders", "--json", url=node).stdout)
    assert [s["queue"] for s in shown["subscriptions"]] == ["created", "everything"]
    file = tmp_path / "events.jsonl"
    file.write_text(
        json.dumps({"body": "1", "routing_key": "orders.eu.created", "attributes": {"n": 1}})
        + "\n"
        + json.dumps({"body": "2", "routing_key": "orders.eu.paid"})
        + "\n"
    )
    dynamiq("publish", "--topic", "orders", "--file", str(file), url=node)
    got = [json.loads(x) for x in dynamiq("consume", "created", url=node).stdout.splitlines()]
    assert [(m["body"], m["attributes"]) for m in got] == [("1", {"n": 1})]
    assert depth(node, "everything") == 2
    dynamiq("topics", "unsubscribe", "orders", "created", url=node)
    dynamiq("topics", "delete", "orders", url=node)
    assert "orders" not in dynamiq("topics", "list", url=node).stdout


def test_status_and_stats(node: str, queue: str) -> None:
    status = json.loads(dynamiq("status", "--json", url=node).stdout)
    assert [m["name"] for m in status["members"]] == ["n1"]
    stats = json.loads(dynamiq("stats", "--json", url=node).stdout)
    assert queue in [q["queue"] for q in stats["queues"]]
    assert "n1" in dynamiq("status", url=node).stdout


def test_redrive_moves_the_dead_letters_back(node: str) -> None:
    dynamiq("queues", "create", "dlq", url=node)
    dynamiq("queues", "create", "src", "max_receives=1", 'dead_letter_queue="dlq"', url=node)
    dynamiq("publish", "src", *[f"d{i}" for i in range(20)], url=node)
    with Client(node) as client:
        assert len(client.receive("src", 20, visibility_timeout=0.2)) == 20
        # Their one lease lapses: each is moved, none delivered again
        until(lambda: depth(node, "dlq") == 20, what="20 dead letters")
        assert client.receive("src", 20, wait_seconds=1) == []
    task = json.loads(dynamiq("redrive", "dlq", "--json", url=node).stdout)
    assert (task["state"], task["moved"]) == ("done", 20)
    assert depth(node, "src") == 20 and depth(node, "dlq") == 0


def test_exit_codes(node: str) -> None:
    missing = dynamiq("queues", "show", "nope", url=node, check=1)
    assert "QUEUE_NOT_FOUND" in missing.stderr
    dynamiq("queues", "create", "x", "notapair", url=node, check=2)
    dynamiq("queues", "frobnicate", url=node, check=2)
    with refused() as (nobody,):
        down = dynamiq("queues", "list", url=f"http://{nobody}", check=3)
    assert "no node answered" in down.stderr


def test_a_spool_keeps_what_no_node_took_until_flushed(
    node: str,
    queue: str,
    tmp_path: Path,
    down_url: str,
) -> None:
    spool = str(tmp_path / "spool")
    kept = json.loads(
        dynamiq("publish", queue, "a", "b", "--spool", spool, "--json", url=down_url).stdout
    )
    assert kept["spooled"] == 2 and kept["published"] == 0
    shown = json.loads(dynamiq("spool", "show", spool, "--json").stdout)
    assert (shown["requests"], shown["messages"]) == (1, 2)
    sent = json.loads(dynamiq("spool", "flush", spool, "--json", url=node).stdout)
    assert sent["sent"] == 2 and sent["left"] is False
    assert depth(node, queue) == 2


def test_ctrl_c_stops_consume_cleanly(node: str, queue: str, tmp_path: Path) -> None:
    with Client(node) as client:
        for start in range(0, 3000, 100):
            client.publish(queue, [f"c{i}" for i in range(start, start + 100)])
    written = tmp_path / "out.jsonl"
    env = {**os.environ, "DYNAMIQ_HOSTS": node}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dynamiq",
            "consume",
            queue,
            "--follow",
            "--batch",
            "10",
            "--output",
            str(written),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    until(
        lambda: written.exists() and written.stat().st_size >= 2000,
        30,
        0.01,
        what="consume writing",
    )
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines = written.read_text().splitlines()
    assert 0 < len(lines) < 3000
    # every written message was deleted, nothing else was
    assert depth(node, queue) == 3000 - len(lines)


def test_completion_scripts() -> None:
    assert "complete" in dynamiq("completion", "bash").stdout
    assert "compdef" in dynamiq("completion", "zsh").stdout


def test_a_terminal_gets_a_progress_bar_and_drawn_tables(
    node: str, queue: str, tmp_path: Path
) -> None:
    file = tmp_path / "many.jsonl"
    file.write_text("".join(json.dumps({"body": f"p{i}"}) + "\n" for i in range(50_000)))
    env: Any = {**os.environ, "DYNAMIQ_HOSTS": node, "COLUMNS": "120", "TERM": "xterm"}
    term = pexpect.spawn(
        sys.executable,
        [
            "-m",
            "dynamiq",
            "publish",
            queue,
            "--file",
            str(file),
            "--batch",
            "100",
            "--concurrency",
            "1",
        ],
        env=env,
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 120),
    )
    term.expect(r"publish \S+ .*━.*\d+/50000.*/s")  # a bar, the count and the rate
    term.expect(pexpect.EOF)
    term.close()
    assert term.exitstatus == 0
    table = pexpect.spawn(
        sys.executable,
        ["-m", "dynamiq", "queues", "list"],
        env=env,
        encoding="utf-8",
        timeout=30,
        dimensions=(40, 160),
    )
    table.expect(pexpect.EOF)
    drawn = re.sub(r"\x1b\[[0-9;]*m", "", str(table.before))  # without the colours
    assert "┃ queue" in drawn and "│ 50,000" in drawn


ADMIN_KEY = "the-command-lines-admin-key-0123456789abcdef"


@pytest.fixture(scope="module")
def keyed_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {"DYNAMIQ_AUTH_ENABLED": "true", "DYNAMIQ_AUTH_ADMINKEY": ADMIN_KEY}
    cluster = LocalCluster(tmp_path_factory.mktemp("keyed"), 1, env=env)
    cluster.start()
    try:
        yield cluster.nodes["n1"].url
    finally:
        cluster.stop()


def test_keys_are_made_used_listed_and_revoked_from_the_command_line(
    keyed_node: str, tmp_path: Path
) -> None:
    admin = tmp_path / "admin.key"
    admin.write_text(ADMIN_KEY + "\n")
    made = dynamiq("keys", "create", "shop", "manage", "--key-file", str(admin), url=keyed_node)
    key = made.stdout.strip()
    assert re.fullmatch(r"dq[0-9a-f]{16}\.[A-Za-z0-9_-]{43}", key)
    assert "not shown again" in made.stderr
    own = tmp_path / "shop.key"
    own.write_text(key)
    dynamiq("queues", "create", "orders", "--key-file", str(own), url=keyed_node)
    listed = dynamiq("queues", "list", "--json", "--key-file", str(admin), url=keyed_node)
    assert [q["queue"] for q in json.loads(listed.stdout)] == ["shop:orders"]
    keys = json.loads(
        dynamiq("keys", "list", "--json", "--key-file", str(admin), url=keyed_node).stdout
    )
    assert [(k["application"], k["role"]) for k in keys] == [("shop", "manage")]
    assert key.split(".")[1] not in json.dumps(keys)
    dynamiq("keys", "revoke", keys[0]["key_id"], "--key-file", str(admin), url=keyed_node)
    refused = dynamiq("queues", "list", "--key-file", str(own), url=keyed_node, check=1)
    assert "UNAUTHORIZED" in refused.stderr
    assert "UNAUTHORIZED" in dynamiq("queues", "list", url=keyed_node, check=1).stderr
    secret = dynamiq("keys", "secret").stdout.strip()
    assert len(secret) == 43 and secret != dynamiq("keys", "secret").stdout.strip()


def test_a_key_with_an_aws_credential_is_made_shown_and_resealed_from_the_command_line(
    keyed_node: str, tmp_path: Path
) -> None:
    admin = tmp_path / "admin.key"
    admin.write_text(ADMIN_KEY + "\n")
    made = dynamiq(
        "keys", "create", "shop", "produce", "--aws", "--key-file", str(admin), url=keyed_node
    )
    lines = dict(line.split(" = ") for line in made.stdout.splitlines() if " = " in line)
    access, secret = lines["aws_access_key_id"], lines["aws_secret_access_key"]
    assert re.fullmatch(r"AKIA[A-Z2-7]{16}", access) and len(secret) == 40
    assert "account " in made.stderr
    for asked in (access, made.stdout.splitlines()[0].split(".")[0]):
        shown = dynamiq("keys", "show", asked, "--json", "--key-file", str(admin), url=keyed_node)
        assert json.loads(shown.stdout)["access_key_id"] == access
        assert secret not in shown.stdout
    listed = dynamiq("keys", "list", "--key-file", str(admin), url=keyed_node).stdout
    assert access in listed and secret not in listed
    resealed = dynamiq("keys", "rotate-sealing", "--json", "--key-file", str(admin), url=keyed_node)
    assert json.loads(resealed.stdout)["key_id"]
    missing = dynamiq(
        "keys", "show", "AKIANOSUCHKEY0000000", "--key-file", str(admin), url=keyed_node, check=1
    )
    assert "no key" in missing.stderr


def test_a_topic_pushes_to_an_endpoint_subscribed_with_the_cli(node: str) -> None:
    receiver = Receiver()
    try:
        dynamiq("topics", "create", "hooks", url=node)
        made = json.loads(
            dynamiq(
                "topics",
                "subscribe",
                "hooks",
                "--endpoint",
                receiver.url,
                "--raw",
                "--json",
                url=node,
            ).stdout
        )
        assert made["state"] == "pending" and made["raw"] is True
        asked = receiver.wait_for("SubscriptionConfirmation")[0].document()
        with urllib.request.urlopen(asked["SubscribeURL"], timeout=10):
            pass
        dynamiq("publish", "--topic", "hooks", "pushed", url=node)
        assert receiver.wait_for("Notification")[0].body == b"pushed"
        shown = json.loads(dynamiq("topics", "show", "hooks", "--json", url=node).stdout)
        [hook] = shown["webhooks"]
        assert (hook["id"], hook["url"], hook["state"]) == (made["id"], receiver.url, "confirmed")
        assert receiver.url in dynamiq("topics", "show", "hooks", url=node).stdout
        dynamiq("topics", "unsubscribe", "hooks", "--webhook", hook["id"], url=node)
        shown = json.loads(dynamiq("topics", "show", "hooks", "--json", url=node).stdout)
        assert shown["webhooks"] == []
        refused = dynamiq("topics", "subscribe", "hooks", url=node, check=1)
        assert "give a queue or --endpoint URL" in refused.stderr
    finally:
        receiver.close()
