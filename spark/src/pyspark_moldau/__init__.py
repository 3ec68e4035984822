"""Moldau's Spark source and sink: `format("moldau")`, in pure Python.

Spark registers `DefaultSource` of every installed `pyspark_*` module under its name(), so
installing this distribution is all `spark.read.format("moldau")` needs.
"""

from pyspark_moldau.source import MoldauDataSource as DefaultSource

__all__ = ["DefaultSource"]
