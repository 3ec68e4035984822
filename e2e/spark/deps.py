"""What the Spark tests need on a fresh machine, checked and fetched once (`make spark-deps`,
run by `make test`):

- Java 17 or newer (Spark 4.2's minimum): otherwise one line says what is missing;
- Spark's Kafka connector and its dependencies, resolved by Spark itself (spark.jars.packages)
  into an Ivy cache outside the repository keyed by the connector's version
  (~/.cache/moldau/spark-ivy-<version>, $MOLDAU_SPARK_IVY), under a file lock so that two runs
  at once do not both write it. A stamp lists the jars of a complete resolution; while they
  are all there, nothing is started.

    .venv/bin/python -m e2e.spark.deps
"""

from __future__ import annotations

import contextlib
import fcntl
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from e2e.spark.session import CONNECTOR, SparkSetupError, check_java, ivy_cache, local_session

STAMP = ".moldau-complete"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing), waiting for it and saying so."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"spark-deps: waiting for {path} (another run is fetching)", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def complete(ivy: Path) -> bool:
    """Whether the stamp of a finished resolution is there with every jar it lists."""
    stamp = ivy / STAMP
    if not stamp.exists():
        return False
    jars = [line for line in stamp.read_text().splitlines() if line]
    return bool(jars) and all((ivy / "jars" / name).exists() for name in jars)


def fetch(ivy: Path) -> None:
    """Start a local Spark session with the connector (Spark resolves it into `ivy`), then
    write the stamp."""
    with tempfile.TemporaryDirectory(prefix="moldau-spark-deps-") as work:
        spark = local_session(Path(work), "moldau-spark-deps", cores=1)
        spark.stop()
    jars = sorted(p.name for p in (ivy / "jars").glob("*.jar"))
    if not any(name.startswith("org.apache.spark_spark-sql-kafka") for name in jars):
        raise SparkSetupError(f"Spark started but {CONNECTOR} is not in {ivy / 'jars'}")
    (ivy / STAMP).write_text("".join(f"{name}\n" for name in jars))


def main() -> int:
    try:
        check_java()
        ivy = ivy_cache()
        with locked(ivy.parent / f"{ivy.name}.lock"):
            if complete(ivy):
                print(f"spark-deps: {CONNECTOR} is in {ivy}")
                return 0
            started = time.monotonic()
            fetch(ivy)
            print(f"spark-deps: fetched {CONNECTOR} into {ivy} in "
                  f"{time.monotonic() - started:.0f} s")
            return 0
    except SparkSetupError as exc:
        print(f"spark-deps: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
