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

import os
import sys

from pyspark.sql import SparkSession

from dynamiq.spark.process import Processed, delete, process
from dynamiq.spark.source import DynamiqDataSource

__all__ = ["DynamiqDataSource", "Processed", "delete", "local_session", "process", "register"]


def register(spark: SparkSession) -> None:
    """Make ``format("dynamiq")`` known to ``spark``."""
    spark.dataSource.register(DynamiqDataSource)


def local_session(app: str, master: str = "local[2]") -> SparkSession:
    """Return a local Spark session on loopback with the data source registered.

    For trying things out, examples and tests: no web UI, the driver and its
    Python workers on 127.0.0.1 with this interpreter.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    register(spark)
    return spark
