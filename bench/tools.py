"""The neutral load generators: Kafka's own perf tools (and `moldau perf`), run and parsed.

The tools run with a server JIT and G1, unlike e2e's short-lived tool JVMs (C1 only), because
a load generator that runs for seconds must not be the slowest part of what it measures.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import procs
from e2e import kafka_dist

PERF_JVM_OPTS = ["-Xms512m", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                 "-Djava.awt.headless=true"]
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
END_TO_END = "org.apache.kafka.tools.EndToEndLatency"
MIB = 1024 * 1024


class ToolError(RuntimeError):
    pass


def run_java_tool(main: str, args: list[str], timeout: float) -> str:
    command = kafka_dist.java_command(main, *args, jvm_opts=PERF_JVM_OPTS)
    code, out, err = procs.run(command, timeout=timeout)
    if code != 0:
        raise ToolError(f"{main.rsplit('.', 1)[1]} exited {code}: {procs.tail(out + err)}")
    return out + "\n" + err


@dataclass
class ProduceResult:
    records: int
    records_per_s: float
    mib_per_s: float
    avg_ms: float
    p50_ms: float
    p99_ms: float
    p999_ms: float


# The summary line both ProducerPerformance and `moldau perf produce` print last.
_PRODUCE_SUMMARY = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th")


def parse_produce(output: str, record_size: int) -> ProduceResult:
    found = _PRODUCE_SUMMARY.findall(output)
    if not found:
        raise ToolError(f"no summary line in the producer's output: {procs.tail(output)}")
    count, rate, _mb, avg, _max, p50, _p95, p99, p999 = found[-1]
    # Computed from records/s rather than read from "MB/sec", so both tools agree on units.
    return ProduceResult(int(count), float(rate), float(rate) * record_size / MIB, float(avg),
                         float(p50), float(p99), float(p999))


def producer_perf(bootstrap: str, topic: str, records: int, size: int, props: dict[str, str],
                  timeout: float = 600, options: Sequence[str] = ()) -> ProduceResult:
    """ProducerPerformance; `options` are more of its flags (say --transactional-id)."""
    settings = {"bootstrap.servers": bootstrap, **props}
    output = run_java_tool(PRODUCER_PERF, [
        "--topic", topic, "--num-records", str(records), "--record-size", str(size),
        "--throughput", "-1", *options,
        "--producer-props", *(f"{k}={v}" for k, v in settings.items()),
    ], timeout)
    result = parse_produce(output, size)
    if result.records != records:
        raise ToolError(f"{result.records} of {records} records acknowledged")
    return result


def moldau_perf_available() -> bool:
    moldau = Path(sys.executable).with_name("moldau")
    try:
        proc = subprocess.run([str(moldau), "perf", "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


def moldau_perf(bootstrap: str, topic: str, records: int, size: int, props: dict[str, str],
                timeout: float = 600) -> ProduceResult:
    moldau = str(Path(sys.executable).with_name("moldau"))
    settings = {"bootstrap.servers": bootstrap, **props}
    code, out, err = procs.run([
        moldau, "perf", "produce", "--topic", topic, "--num-records", str(records),
        "--record-size", str(size), "--throughput", "-1",
        "--producer-props", *(f"{k}={v}" for k, v in settings.items()),
    ], timeout=timeout)
    if code != 0:
        raise ToolError(f"moldau perf exited {code}: {procs.tail(out + err)}")
    result = parse_produce(out, size)
    if result.records != records:
        raise ToolError(f"{result.records} of {records} records acknowledged")
    return result


@dataclass
class ConsumeResult:
    records: int
    mib_per_s: float
    records_per_s: float


def consumer_perf(bootstrap: str, topic: str, records: int, group: str,
                  timeout: float = 600, config: dict[str, str] | None = None) -> ConsumeResult:
    """ConsumerPerformance reading `records` from `topic`; `config` are consumer settings
    (through --consumer.config)."""
    with tempfile.TemporaryDirectory(prefix="moldau-bench-") as workdir:
        options = []
        if config:
            path = Path(workdir) / "consumer.properties"
            path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
            options = ["--consumer.config", str(path)]
        output = run_java_tool(CONSUMER_PERF, [
            "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records),
            "--group", group, "--timeout", "30000", *options,
        ], timeout)
    lines = [line for line in output.splitlines() if line.count(",") >= 9]
    header = next((line for line in lines if "fetch.MB.sec" in line), None)
    if header is None or lines[-1] is header:
        raise ToolError(f"no result line from ConsumerPerformance: {procs.tail(output)}")
    row = dict(zip([c.strip() for c in header.split(",")],
                   [c.strip() for c in lines[-1].split(",")], strict=False))
    consumed = int(row["data.consumed.in.nMsg"])
    if consumed < records:
        raise ToolError(f"consumed {consumed} of {records} records")
    # fetch.* leaves out the group join, which is not fetch throughput.
    return ConsumeResult(consumed, float(row["fetch.MB.sec"]), float(row["fetch.nMsg.sec"]))


@dataclass
class LatencyResult:
    p50_ms: float
    p99_ms: float
    p999_ms: float
    samples: int


def end_to_end_latency(bootstrap: str, topic: str, records: int, size: int,
                       timeout: float = 600) -> LatencyResult:
    output = run_java_tool(END_TO_END, [bootstrap, topic, str(records), "1", str(size)], timeout)
    found = re.search(r"Percentiles: 50th = ([\d.]+), 99th = ([\d.]+), 99\.9th = ([\d.]+)",
                      output)
    if not found:
        raise ToolError(f"no percentiles from EndToEndLatency: {procs.tail(output)}")
    return LatencyResult(float(found[1]), float(found[2]), float(found[3]), records)
