"""The Spark connector against a real node with a real local Spark session."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import NodeProcess
from tests.pki import Pki
from tests.servers import require_module

require_module("pyspark", "spark")

import dynamiq.spark  # noqa: E402  (only once pyspark is known to be there)
from dynamiq.client import Client  # noqa: E402
from dynamiq.models import Message  # noqa: E402
from tests.waiting import until  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_batch_read_leases_messages_across_partitions(spark: Any, node: NodeProcess) -> None:
    with Client(node.url) as client:
        client.create_queue("batch")
        bodies = [f"m{i}" for i in range(250)]
        published = dict(zip(client.publish("batch", bodies), range(250), strict=True))
        client.publish("batch", [b"\xff\xfe"])  # not UTF-8: text is null
    df = (
        spark.read.format("dynamiq")
        .options(
            url=node.url, queue="batch", maxMessages=1000, tasksPerNode=3, visibilityTimeout=600
        )
        .load()
    )
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert len(rows) == 251
    texts = {r.id: r.text for r in rows}
    assert all(texts[i] == f"m{n}" for i, n in published.items())
    odd = [r for r in rows if r.id not in published]
    assert odd[0].body == b"\xff\xfe" and odd[0].text is None and odd[0].queue == "batch"
    assert all(r.published_at.year >= 2026 for r in rows)
    with Client(node.url) as client:  # leased, not deleted
        assert client.receive("batch", 10) == []


def test_process_deletes_what_succeeded_and_a_retry_takes_the_failed_rest(
    spark: Any, node: NodeProcess, tmp_path: Path
) -> None:
    ids = _filled(node, "work", [f"w{i}" for i in range(300)])
    seen = tmp_path / "seen"
    seen.mkdir()
    flag = tmp_path / "failed-once"

    def handle(message: Message) -> None:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        # The first message any task handles fails its task, once. (Not "task 1's
        # first message": the other tasks may drain the queue before task 1 starts.)
        try:
            with flag.open("x") as first:
                first.write(str(message.id))
        except FileExistsError:
            pass
        else:
            raise RuntimeError("the first attempt of a task fails on its first message")
        (seen / f"{message.id}-{context.attemptNumber()}").touch()

    result = dynamiq.spark.process(
        spark, "work", handle, node.url, partitions=3, batch_size=20, visibility_timeout=3
    )
    handled = [int(p.name.split("-")[0]) for p in seen.iterdir()]
    assert set(handled) == ids  # everything, including the failed batch, in the end
    assert len(handled) == len(ids) == result.messages  # nothing handled twice
    failed = int(flag.read_text())
    assert failed in handled  # the message that failed came back and was handled
    with Client(node.url) as client:
        assert client.receive("work", 10) == []
    assert _depth(node, "work") == 0


def test_writer_publishes_a_dataframe_to_a_topic(spark: Any, node: NodeProcess) -> None:
    with Client(node.url) as client:
        for queue in ("left", "right"):
            client.create_queue(queue)
        client.create_topic("fanout")
        client.subscribe("fanout", "left")
        client.subscribe("fanout", "right")
    df = spark.createDataFrame([(f"row{i}",) for i in range(120)], "body STRING").repartition(3)
    df.write.format("dynamiq").option("url", node.url).option("topic", "fanout").mode(
        "append"
    ).save()
    for queue in ("left", "right"):
        with Client(node.url) as client:
            got: list[str] = []
            while batch := client.receive(queue, 100):
                got += [m.body.decode() for m in batch]
        assert sorted(got) == sorted(f"row{i}" for i in range(120))


def test_a_killed_streaming_query_restarts_from_its_checkpoint_and_loses_nothing(
    node: NodeProcess, tmp_path: Path
) -> None:
    with Client(node.url) as client:
        client.create_queue("stream")
        ids: set[int] = set()
        for start in range(0, 600, 100):
            ids |= set(client.publish("stream", [f"s{i}" for i in range(start, start + 100)]))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    job = [
        sys.executable,
        "-m",
        "tests.spark.stream_job",
        node.url,
        "stream",
        str(out),
        str(checkpoint),
    ]
    env = dict(os.environ)
    first = subprocess.Popen(job, cwd=ROOT, env=env, start_new_session=True)
    try:

        def some_batches_in() -> bool:  # a few micro-batches, while the driver runs
            assert first.poll() is None, "the streaming driver ended"
            return len(_written(out)) >= 150

        until(some_batches_in, 120, 0.2, what="150 rows written")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its JVM, mid-stream
        first.wait()
    assert len(_written(out)) < len(ids)
    second = subprocess.run([*job, "--until-empty"], cwd=ROOT, env=env, timeout=240)
    assert second.returncode == 0
    assert _written(out) >= ids  # at least once
    assert _depth(node, "stream") == 0


def _written(out: Path) -> set[int]:
    found: set[int] = set()
    for part in out.glob("part-*.json"):
        for line in part.read_text().splitlines():
            found.add(int(json.loads(line)["id"]))
    return found


def _filled(node: NodeProcess, queue: str, bodies: list[str]) -> set[int]:
    """Make ``queue`` on ``node`` and publish ``bodies`` to it; return their ids."""
    with Client(node.url) as client:
        client.create_queue(queue)
        return set(client.publish(queue, bodies))


def _depth(node: NodeProcess, queue: str, ca_file: str | None = None) -> int:
    with Client(node.url, ca_file=ca_file) as client:
        return int(client.queue(queue)["stats"]["depth"])


def test_the_example_pipeline_totals_events_into_the_results_topic(
    spark: Any, node: NodeProcess
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "pipeline", ROOT / "examples" / "spark_pipeline.py"
    )
    assert spec is not None and spec.loader is not None
    pipeline = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipeline)
    pipeline.prepare(node.url, 0)
    events: list[dict[str, Any]] = [{"user": f"u{i % 3}", "amount": i} for i in range(30)]
    with Client(node.url) as client:
        client.publish("events", [json.dumps(e) for e in events])
    assert pipeline.run(spark, node.url) == 30
    want = {
        f"u{k}": {
            "user": f"u{k}",
            "total": sum(e["amount"] for e in events if e["user"] == f"u{k}"),
            "events": 10,
        }
        for k in range(3)
    }
    with Client(node.url) as client:
        got = [json.loads(m.body) for m in client.receive("results-log", 10)]
        assert {r["user"]: r for r in got} == want
        assert client.receive("events", 10) == []
    assert _depth(node, "events") == 0


def test_a_read_without_a_queue_says_so(spark: Any, node: NodeProcess) -> None:
    with pytest.raises(Exception, match="set option 'queue'"):
        spark.read.format("dynamiq").option("url", node.url).load().collect()
    with pytest.raises(Exception, match="exactly one of options 'topic' and 'queue'"):
        spark.createDataFrame([("x",)], "body STRING").write.format("dynamiq").option(
            "url", node.url
        ).mode("append").save()


def test_a_batch_slower_than_the_lease_is_not_delivered_twice(
    spark: Any, node: NodeProcess, tmp_path: Path
) -> None:
    ids = _filled(node, "slow", [f"s{i}" for i in range(90)])
    seen: list[int] = []

    def slow_sink(batch: Any, _: int) -> None:
        rows = batch.select("id").collect()
        time.sleep(3.0)  # three times the lease: only the lease keeper holds them
        seen.extend(r.id for r in rows)

    query = (
        spark.readStream.format("dynamiq")
        .options(url=node.url, queue="slow", maxMessagesPerBatch=30, visibilityTimeout=1)
        .load()
        .writeStream.foreachBatch(slow_sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:

        def drained() -> bool:
            assert query.isActive, "the query ended"
            return _depth(node, "slow") == 0

        until(drained, 120, 0.5, what="the queue drained")
    finally:
        query.stop()
    assert sorted(seen) == sorted(ids)  # each once: no lease lapsed while its batch ran


def test_reads_writes_and_process_go_over_https_checked_against_the_given_authority(
    spark: Any, https_node: NodeProcess, pki: Pki
) -> None:
    url, ca_file = https_node.url, str(pki.ca_file)
    assert url.startswith("https://")
    with Client(url, ca_file=ca_file) as client:
        for queue in ("secure", "secure-work"):
            client.create_queue(queue)
        client.create_topic("secure-topic")
        client.subscribe("secure-topic", "secure")
    df = spark.createDataFrame([(f"tls{i}",) for i in range(60)], "body STRING").repartition(2)
    df.write.format("dynamiq").option("url", url).option("caFile", ca_file).option(
        "topic", "secure-topic"
    ).mode("append").save()
    read = (
        spark.read.format("dynamiq")
        .options(url=url, caFile=ca_file, queue="secure", maxMessages=1000, deleteOnRead="true")
        .load()
    )
    assert sorted(r.text for r in read.collect()) == sorted(f"tls{i}" for i in range(60))
    with Client(url, ca_file=ca_file) as client:
        ids = set(client.publish("secure-work", [f"w{i}" for i in range(40)]))
    handled = spark.sparkContext.accumulator(0)

    def handle(message: Message) -> None:
        handled.add(1)

    result = dynamiq.spark.process(spark, "secure-work", handle, url, partitions=2, ca_file=ca_file)
    assert result.messages == handled.value == len(ids)
    assert _depth(https_node, "secure", ca_file) == _depth(https_node, "secure-work", ca_file) == 0
    # Without the authority the executors refuse the node's certificate (Spark wraps the error).
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        spark.read.format("dynamiq").option("url", url).option("queue", "secure").load().collect()
