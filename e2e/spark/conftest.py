"""One local[2] Spark session for every Spark test (it takes 10-20 s to start)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.spark.session import SparkSetupError, local_session


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A local[2] SparkSession with Spark's Kafka connector; fails in one line naming what
    is missing (Java, the connector's jars)."""
    try:
        session = local_session(tmp_path_factory.mktemp("spark"))
    except SparkSetupError as exc:
        pytest.fail(str(exc), pytrace=False)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
