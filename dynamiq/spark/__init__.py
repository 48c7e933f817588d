"""Dynamiq for Spark: a ``dynamiq`` data source and receive-and-delete from executors.

``pip install 'dynamiq[spark]'`` (pyspark 4 with pyarrow). Python data
sources are registered per session::

    import dynamiq.spark
    dynamiq.spark.register(spark)
    df = spark.read.format("dynamiq").option("url", "http://127.0.0.1:8081") \\
        .option("queue", "events").load()

See ``source`` (batch read, write), ``stream`` (streaming read) and
``process`` (receive, run a function, delete what it handled).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from dynamiq.spark.process import Processed, delete, process
from dynamiq.spark.source import DynamiqDataSource

__all__ = ["DynamiqDataSource", "Processed", "delete", "process", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("dynamiq")`` known to ``spark``."""
    spark.dataSource.register(DynamiqDataSource)
