"""A Spark pipeline on Dynamiq: read the ``events`` queue, total it per user, publish the totals.

    make run                                                 # a node on :8081 (another terminal)
    .venv/bin/python examples/spark_pipeline.py --seed 10000 # publish sample events, run the job
    curl -s -XPOST localhost:8081/v2/queues/results-log/receive -d '{"max_messages": 5}'

Events are JSON ``{"user": "u7", "amount": 12}``. The job leases every
event (``format("dynamiq")``), pins the rows, totals them per user, publishes
one message per user to the ``results`` topic, and only then deletes the
events it read: if it dies before, the events come back after their lease
and the next run counts them (at-least-once; key downstream effects by user
and run if that matters). ``results-log`` is subscribed to the topic so the
totals can be read back.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import dynamiq.spark
from dynamiq.client import Client
from dynamiq.errors import QueueExists, TopicExists


def prepare(url: str, seed: int) -> None:
    """Create the queues and the topic if needed; publish ``seed`` sample events."""
    with Client(url) as client:
        for create in (
            lambda: client.create_queue("events", visibility_timeout=600),
            lambda: client.create_queue("results-log"),
            lambda: client.create_topic("results"),
        ):
            with contextlib.suppress(QueueExists, TopicExists):
                create()
        client.subscribe("results", "results-log")
        rng = random.Random(7)
        for start in range(0, seed, 1000):
            client.publish(
                "events",
                [
                    json.dumps({"user": f"u{rng.randrange(20)}", "amount": rng.randrange(1, 100)})
                    for _ in range(min(1000, seed - start))
                ],
            )


def run(spark: SparkSession, url: str) -> int:
    """Total the events per user into the results topic; return how many events were counted."""
    events = (
        spark.read.format("dynamiq")
        .option("url", url)
        .option("queue", "events")
        .option("maxMessages", 1_000_000)
        .option("visibilityTimeout", 600)
        .load()
        .localCheckpoint()  # pin what was leased: evaluated again, it would lease other messages
    )
    parsed = events.select(F.from_json("text", "user STRING, amount LONG").alias("e")).select("e.*")
    totals = parsed.groupBy("user").agg(
        F.sum("amount").alias("total"), F.count(F.lit(1)).alias("events")
    )
    totals.select(F.to_json(F.struct("user", "total", "events")).alias("body")).write.format(
        "dynamiq"
    ).option("url", url).option("topic", "results").mode("append").save()
    return dynamiq.spark.delete(events, "events", url)  # the totals are durable: let go


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("DYNAMIQ_HOSTS", "http://127.0.0.1:8081"))
    parser.add_argument("--seed", type=int, default=0, help="publish this many sample events first")
    args = parser.parse_args()
    prepare(args.url, args.seed)
    spark = dynamiq.spark.local_session("dynamiq-example")
    try:
        counted = run(spark, args.url)
    finally:
        spark.stop()
    print(f"counted {counted} events; per-user totals published to the 'results' topic")
    return 0


if __name__ == "__main__":
    sys.exit(main())
