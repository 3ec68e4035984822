"""The broker's http.listener: Prometheus metrics under Strimzi's and kafka-exporter's names,
and the liveness and readiness probes, read over HTTP from real broker processes."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import TopicPartition
from kafka.admin import NewTopic
from prometheus_client.parser import text_string_to_metric_families

from e2e.conftest import FAST_FAILOVER, Broker, free_base_port, free_port, moldau_executable
from e2e.support import (
    ck_consumer,
    ck_produce_numbered,
    kp_admin,
    kp_create_topic,
    kp_produce,
    make_records,
    unique,
    wait_until,
)
from moldau.broker.metrics.health import LIVENESS_BOUND_S
from moldau.cluster.launcher import LocalCluster

OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def http_get(url: str, accept: str | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of a GET."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """Every sample of /metrics, keyed by (name, labels)."""
    status, _, body = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body) for sample in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_produce_counters_log_size_and_requests(broker: Broker) -> None:
    topic = unique("metrics")
    kp_create_topic(broker.bootstrap, topic)
    before = scrape(broker.http_port)
    records = make_records(50)
    kp_produce(broker.bootstrap, topic, records)
    after = scrape(broker.http_port)
    segment_bytes = sum(path.stat().st_size
                        for path in (broker.log_dir / f"{topic}-0").glob("*.log"))

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 50
    assert grew("kafka_server_brokertopicmetrics_messagesin_total") == 50
    # The batches are stored as received: the bytes in are the segment's bytes.
    assert grew("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == segment_bytes
    assert grew("kafka_server_brokertopicmetrics_bytesin_total") == segment_bytes
    assert value(after, "kafka_log_log_size", topic=topic, partition="0") == segment_bytes
    assert value(after, "kafka_log_log_logendoffset", topic=topic, partition="0") == 50
    assert value(after, "kafka_server_replicamanager_leadercount") >= 1
    assert value(after, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert grew("kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 1
    assert any(name == "kafka_network_requestmetrics_requests_total"
               and dict(labels)["request"] == "Metadata" for name, labels in after)
    assert value(after, "kafka_network_requestmetrics_totaltimems",
                 request="Produce", quantile="0.99") > 0
    assert value(after, "kafka_server_raftmetrics_current_state", current_state="leader") == 1
    # Moldau's own latencies are in seconds, Prometheus' base unit.
    commits = value(after, "moldau_raft_commit_latency_seconds_count")
    assert commits >= 1
    assert 0 < value(after, "moldau_raft_commit_latency_seconds_sum") / commits < 60
    assert 0 < value(after, "kafka_server_kafkarequesthandlerpool_requesthandleravgidle_percent"
                     ) <= 1

    consumer = ck_consumer(broker.bootstrap)
    consumer.assign([TopicPartition(topic, 0, 0)])
    read = 0
    for _ in range(60):
        read += sum(1 for m in consumer.consume(100, timeout=0.5) if m.error() is None)
        if read >= 50:
            break
    consumer.close()
    assert read == 50
    fetched = scrape(broker.http_port)
    assert value(fetched, "kafka_server_brokertopicmetrics_bytesout_total",
                 topic=topic) == segment_bytes
    # A consumer's fetches count under FetchConsumer as well as Fetch; a lone broker has no
    # followers.
    split = fetch_split(fetched)
    assert split["FetchConsumer"] >= 1
    assert split == {"Fetch": split["FetchConsumer"], "FetchConsumer": split["FetchConsumer"],
                     "FetchFollower": 0}
    assert any(name == "kafka_network_requestmetrics_requests_total"
               and dict(labels)["request"] == "FetchConsumer" for name, labels in fetched)


def fetch_split(samples: dict) -> dict[str, float]:
    """Fetch requests answered, in all and by who sent them."""
    return {request: value(samples, "kafka_network_requestmetrics_totaltimems_count",
                           request=request)
            for request in ("Fetch", "FetchConsumer", "FetchFollower")}


def test_a_deleted_topic_leaves_no_series(broker: Broker) -> None:
    topic = unique("deleted")
    kp_create_topic(broker.bootstrap, topic)
    kp_produce(broker.bootstrap, topic, make_records(3))

    def series_of_topic() -> list[str]:
        return [name for name, labels in scrape(broker.http_port)
                if dict(labels).get("topic") == topic]

    assert "kafka_server_brokertopicmetrics_messagesin_total" in series_of_topic()
    admin = kp_admin(broker.bootstrap)
    admin.delete_topics([topic])
    admin.close()
    wait_until(lambda: not series_of_topic(), 30, "the deleted topic's series gone")


def test_scrapes_during_start_up_all_succeed(broker: Broker) -> None:
    """Start-up loads logs and fills the partition table in threads; a scrape meanwhile
    must not read that table half-built (it used to fail with HTTP 500)."""
    admin = kp_admin(broker.bootstrap)
    admin.create_topics([NewTopic(unique("wide"), 400, 1)])
    admin.close()
    url = f"http://127.0.0.1:{broker.http_port}/metrics"
    wait_until(lambda: value(scrape(broker.http_port),
                             "kafka_server_replicamanager_partitioncount") >= 400,
               120, "400 partitions created")
    broker.stop()
    statuses: list[int] = []
    done = threading.Event()

    def scrape_until_started() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):  # not listening yet
                statuses.append(http_get(url)[0])

    scraper = threading.Thread(target=scrape_until_started)
    scraper.start()
    try:
        broker.start(timeout=120)
    finally:
        done.set()
        scraper.join(30)
    assert statuses and set(statuses) == {200}


def test_openmetrics_when_asked(broker: Broker) -> None:
    status, content_type, body = http_get(f"http://127.0.0.1:{broker.http_port}/metrics",
                                          accept="application/openmetrics-text")
    assert status == 200
    assert content_type == OPENMETRICS
    assert body.endswith("# EOF\n")
    status, content_type, _ = http_get(f"http://127.0.0.1:{broker.http_port}/metrics")
    assert content_type.startswith("text/plain; version=0.0.4")


def test_consumer_group_lag_from_the_coordinator(broker: Broker) -> None:
    topic, group = unique("lagged"), unique("lag-group")
    kp_create_topic(broker.bootstrap, topic, partitions=2)
    kp_produce(broker.bootstrap, topic, make_records(10, partitions=2))
    consumer = ck_consumer(broker.bootstrap, **{"group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 5)],
                    asynchronous=False)
    consumer.close()
    samples = scrape(broker.http_port)
    ends = {p: value(samples, "kafka_topic_partition_current_offset", topic=topic,
                     partition=str(p)) for p in (0, 1)}
    assert sum(ends.values()) == 10
    for partition, committed in ((0, 2), (1, 5)):
        labels = {"consumergroup": group, "topic": topic, "partition": str(partition)}
        assert value(samples, "kafka_consumergroup_current_offset", **labels) == committed
        assert value(samples, "kafka_consumergroup_lag", **labels) == ends[partition] - committed
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup=group,
                 topic=topic) == 10 - 7
    # A group that only commits has no members: Empty.
    assert value(samples, "moldau_group_coordinator_groups", state="Empty") >= 1


def group_samples(ports: dict[int, int], group: str) -> tuple[int, dict]:
    """(node id, samples) of the node exporting `group`'s committed offsets: its
    coordinator."""
    for node_id, port in ports.items():
        samples = scrape(port)
        if any(name == "kafka_consumergroup_current_offset"
               and dict(labels).get("consumergroup") == group for name, labels in samples):
            return node_id, samples
    raise AssertionError(f"no node exports group {group}")


def lags(samples: dict, group: str, topic: str) -> dict[int, float]:
    return {int(dict(labels)["partition"]): lag for (name, labels), lag in samples.items()
            if name == "kafka_consumergroup_lag"
            and dict(labels).get("consumergroup") == group
            and dict(labels).get("topic") == topic}


def test_lag_of_partitions_led_by_other_brokers(cluster: LocalCluster) -> None:
    """The coordinator asks the other leaders for their end offsets: it exports every
    committed partition's lag; a killed leader's partition goes offline and its lag with it."""
    check_lag_across_leaders(cluster)


def test_lag_of_an_unreachable_leader_is_absent_not_stale(tmp_path: Path) -> None:
    """A killed leader the controller has not fenced yet stays the partition's leader in the
    metadata: the coordinator cannot reach it, drops that partition's lag and says so once,
    without a traceback."""
    local = LocalCluster(tmp_path / "cluster", brokers=3, base_port=free_base_port(3),
                         overrides={**FAST_FAILOVER, "broker.session.timeout.ms": 120000})
    local.start(timeout=60)
    try:
        coordinator, victim = check_lag_across_leaders(local)
        log = local.node(coordinator).log_path.read_text()
    finally:
        local.stop(timeout=30)
    unreachable = [line for line in log.splitlines()
                   if f"No end offsets from broker {victim} " in line]
    assert len(unreachable) == 1 and " INFO " in unreachable[0]
    assert "Traceback" not in log


def check_lag_across_leaders(cluster: LocalCluster) -> tuple[int, int]:
    """Lag of a group's partitions led by three brokers, read from the coordinator, before
    and after one of the other leaders is killed; returns (coordinator, killed node)."""
    topic, group = unique("spread"), unique("spread-group")
    admin = kp_admin(cluster.bootstrap_servers)
    admin.create_topics([NewTopic(topic, -1, -1,
                                  replica_assignments={0: [1], 1: [2], 2: [3]})])
    admin.close()
    ports = {node.node_id: node.http_port for node in cluster.nodes}
    ck_produce_numbered(cluster.bootstrap_servers, topic, range(30), 3)  # 10 per partition
    committed = {0: 2, 1: 5, 2: 7}
    consumer = ck_consumer(cluster.bootstrap_servers, **{"group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()],
                    asynchronous=False)
    consumer.close()
    ck_produce_numbered(cluster.bootstrap_servers, topic, range(30, 45), 3)  # 15 each now
    coordinator = group_samples(ports, group)[0]
    port = ports[coordinator]
    expected = {p: 15 - offset for p, offset in committed.items()}
    wait_until(lambda: lags(scrape(port), group, topic) == expected, 60,
               f"lag of every partition on coordinator {coordinator}")
    samples = scrape(port)
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup=group,
                 topic=topic) == sum(expected.values())
    # Each partition's end offset is still exported by its leader alone.
    everyone = [scrape(p) for p in ports.values()]
    for partition in committed:
        reported = [value(s, "kafka_topic_partition_current_offset", topic=topic,
                          partition=str(partition)) for s in everyone
                    if ("kafka_topic_partition_current_offset",
                        frozenset({"topic": topic, "partition": str(partition)}.items())) in s]
        assert reported == [15]

    # Partition p is led by node p + 1: kill a leader that does not coordinate the group.
    victim = next(node_id for node_id in ports if node_id != coordinator)
    gone = victim - 1
    cluster.kill(victim)
    alive = [p for p in committed if p != gone]
    ck_produce_numbered(cluster.bootstrap_servers, topic,
                        [n for n in range(45, 60) if n % 3 != gone], 3)  # 20 in those
    expected = {p: 20 - committed[p] for p in alive}
    wait_until(lambda: lags(scrape(port), group, topic) == expected, 90,
               f"lag of partition {gone} dropped and the others' updated")
    samples = scrape(port)
    assert value(samples, "kafka_consumergroup_current_offset", consumergroup=group,
                 topic=topic, partition=str(gone)) == committed[gone]
    assert value(samples, "kafka_consumergroup_lag_sum", consumergroup=group,
                 topic=topic) == sum(expected.values())
    return coordinator, victim


def test_livez_and_readyz_follow_the_quorum(tmp_path: Path) -> None:
    controller_port = free_port()
    voters = f"1@127.0.0.1:{controller_port}"
    broker = Broker(tmp_path / "broker", {"node.id": 2, "process.roles": "broker",
                                          "controller.quorum.voters": voters})
    controller = Broker(tmp_path / "controller", {
        "node.id": 1, "process.roles": "controller", "controller.quorum.voters": voters,
        "listeners": f"CONTROLLER://127.0.0.1:{controller_port}"})
    starting = threading.Thread(target=broker.start, kwargs={"timeout": 120})
    starting.start()
    try:
        url = f"http://127.0.0.1:{broker.http_port}"

        def answers() -> tuple[int, str, str] | None:
            try:
                return http_get(f"{url}/readyz")
            except OSError:
                return None

        wait_until(answers, 30, "the http listener answering")
        status, _, body = http_get(f"{url}/readyz")
        assert status == 503
        assert body.startswith("not ready: ")
        assert len(body.strip().splitlines()) == 1
        assert http_get(f"{url}/livez")[0] == 200
        controller.start()
        starting.join(120)
        assert broker.alive
        assert http_get(f"{url}/readyz")[:3:2] == (200, "ok\n")
        assert http_get(f"http://127.0.0.1:{controller.http_port}/readyz")[0] == 200
    finally:
        starting.join(120)
        broker.close()
        controller.close()


def test_a_failed_broker_shows_as_under_replicated(cluster: LocalCluster) -> None:
    topic = unique("replicated")
    admin = kp_admin(cluster.bootstrap_servers)
    admin.create_topics([NewTopic(topic, 3, 3)])
    admin.close()
    ports = {node.node_id: node.http_port for node in cluster.nodes}
    wait_until(lambda: sum(value(scrape(port), "kafka_server_replicamanager_partitioncount")
                           for port in ports.values()) >= 9, 60, "replicas created")
    everyone = [scrape(port) for port in ports.values()]
    # kafka-exporter's cluster-wide series come from the active controller alone.
    assert sum(value(samples, "kafka_brokers") for samples in everyone) == 3
    assert sum(value(samples, "kafka_topic_partitions", topic=topic)
               for samples in everyone) == 3
    # Followers of the quorum fetch from its leader over the raft channel.
    assert sum(value(samples, "kafka_server_raftchannelmetrics_request_total")
               for samples in everyone) > 0
    # Replica fetchers' requests count as FetchFollower, and every Fetch as exactly one of
    # FetchConsumer and FetchFollower.
    wait_until(lambda: sum(fetch_split(scrape(port))["FetchFollower"]
                           for port in ports.values()) > 0, 60, "followers' fetches counted")
    splits = [fetch_split(scrape(port)) for port in ports.values()]
    assert [split["Fetch"] for split in splits] == [
        split["FetchConsumer"] + split["FetchFollower"] for split in splits]
    cluster.kill(3)
    survivors = [port for node_id, port in ports.items() if node_id != 3]

    def under_replicated() -> float:
        return sum(value(scrape(port), "kafka_server_replicamanager_underreplicatedpartitions")
                   for port in survivors)

    wait_until(lambda: under_replicated() > 0, 60, "under-replicated partitions reported")
    wait_until(lambda: sum(value(scrape(port),
                                 "kafka_controller_kafkacontroller_activecontrollercount")
                           for port in survivors) == 1, 60, "one active controller")


def test_empty_http_listener_disables_it(broker_factory) -> None:
    broker = broker_factory({"http.listener": ""})
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/metrics", timeout=5)
        raise AssertionError("the http listener still answers")
    except urllib.error.URLError:
        pass
    assert "metrics" not in Path(broker.stdout_path).read_text()


def test_bad_http_listener_is_a_one_line_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [moldau_executable(), "broker", "--override", "http.listener=localhost:9404",
         "--override", f"log.dirs={tmp_path}"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr == ("moldau broker: Invalid value localhost:9404 for configuration "
                             "http.listener: expected http://host:port, or empty to disable "
                             "it\n")


def test_the_broker_says_where_metrics_are_served(broker_factory) -> None:
    broker = broker_factory()
    wait_until(lambda: "metrics:" in broker.stdout_path.read_text(), 10, "the metrics line")
    lines = [line for line in broker.stdout_path.read_text().splitlines() if "metrics:" in line]
    assert lines == [f"moldau broker metrics: http://127.0.0.1:{broker.http_port}/metrics "
                     "(health: /livez, /readyz)"]


def test_livez_fails_after_the_event_loop_stalled(broker_factory) -> None:
    """A process stopped longer than the liveness bound (10 s) answers /livez with 503 once
    it runs again, and 200 once its loop has kept time for a while."""
    broker = broker_factory()
    url = f"http://127.0.0.1:{broker.http_port}/livez"
    assert http_get(url)[:3:2] == (200, "ok\n")
    broker.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(LIVENESS_BOUND_S + 1.5)
    finally:
        broker.proc.send_signal(signal.SIGCONT)
    status, _, body = http_get(url)
    assert status == 503, body
    assert body.startswith("not live: event loop "), body
    wait_until(lambda: http_get(url)[0] == 200, 10, "/livez answering 200 again")


def test_moldau_and_process_families(broker: Broker) -> None:
    samples = scrape(broker.http_port)
    disk = shutil.disk_usage(broker.log_dir)
    log_dir = str(broker.log_dir)
    assert value(samples, "moldau_log_dir_total_bytes", log_dir=log_dir) == disk.total
    usable = value(samples, "moldau_log_dir_usable_bytes", log_dir=log_dir)
    assert 0 < usable <= disk.total
    assert abs(usable - disk.free) < 0.05 * disk.total  # other writers share the disk
    assert 0 <= value(samples, "moldau_log_recovery_seconds") < 60
    assert value(samples, "moldau_io_pool_queue_size") >= 0
    assert value(samples, "moldau_request_queue_size") >= 0
    lag = value(samples, "moldau_event_loop_lag_seconds")
    assert 0 <= lag <= value(samples, "moldau_event_loop_lag_max_seconds")
    assert value(samples, "process_open_fds") > 0
    assert value(samples, "process_resident_memory_bytes") > 10 * 2**20
    assert value(samples, "process_cpu_seconds_total") > 0
