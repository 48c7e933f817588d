"""A streaming query from a Dynamiq queue into JSON files, run as its own process.

    python -m tests.spark.stream_job URL QUEUE OUT CHECKPOINT [--until-empty]

With ``--until-empty`` it stops once the queue holds nothing (every message
written and deleted); otherwise it runs until killed.
"""

from __future__ import annotations

import sys

import dynamiq.spark
from dynamiq.client import Client


def main() -> int:
    url, queue, out, checkpoint = sys.argv[1:5]
    until_empty = "--until-empty" in sys.argv
    spark = dynamiq.spark.local_session("dynamiq-stream-job")
    stream = (
        spark.readStream.format("dynamiq")
        .options(url=url, queue=queue, maxMessagesPerBatch=50, visibilityTimeout=5)
        .load()
    )
    query = (
        stream.selectExpr("id", "text")
        .writeStream.format("json")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    with Client(url) as client:
        # Until the query ends: stopped here once the queue is drained, or by its parent.
        while not query.awaitTermination(1):
            if until_empty and client.queue(queue)["stats"]["depth"] == 0:
                query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
